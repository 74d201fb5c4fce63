// Work: the handle of one asynchronous collective operation.
//
// Every Communicator call returns at once with a Work; the operation runs on the communicator's
// own thread, in the order the calls were made (the same order on every rank, which is what
// makes collectives match up). Wait() blocks the caller, never longer than its timeout.
#ifndef PADDLE_COLLECTIVE_WORK_H_
#define PADDLE_COLLECTIVE_WORK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace paddle {

class Work {
 public:
  virtual ~Work() = default;

  // Waits until the operation has finished and returns its status. If `timeout` passes first,
  // returns kDeadlineExceeded naming the operation and what it waits for; the operation itself
  // goes on and fails by its own collective timeout. InfiniteDuration() waits for the operation's
  // own end, which its collective timeout bounds.
  virtual absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) = 0;
  virtual bool IsCompleted() const = 0;
  // The final status once completed; kUnavailable("still running") before.
  virtual absl::Status status() const = 0;

  // "allreduce #17 (float32 x 1048576, sum)", for errors and logs.
  virtual std::string Describe() const = 0;
  // The operation's sequence number in its communicator (the same on every rank).
  virtual uint64_t seq() const = 0;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_WORK_H_
