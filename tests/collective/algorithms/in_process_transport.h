// A Transport between threads of one process, for the algorithm tests. All ranks' transports
// share one InProcessHub, which moves each message with one memcpy from the sender's buffer to the
// receiver's.
//
// Why the tests use it beside TCP: rendezvous semantics. A send completes only once a matching
// receive has taken its data, so an algorithm that waits for a send before posting the receive
// its peer is waiting on deadlocks here at once, while over TCP the socket buffers hide the bug
// until messages get large. The copy runs on whichever thread posts second, so TSan also sees the
// algorithms' buffers read and written from other threads (it synchronizes with std::mutex).
// Failure follows the Transport contract: Abort (or a size mismatch) fails every pending and
// later request of every rank of the hub with a cause that names the rank that failed.
#ifndef TESTS_COLLECTIVE_ALGORITHMS_IN_PROCESS_TRANSPORT_H_
#define TESTS_COLLECTIVE_ALGORITHMS_IN_PROCESS_TRANSPORT_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {
namespace testutil {

class InProcessHub : public std::enable_shared_from_this<InProcessHub> {
 public:
  static std::shared_ptr<InProcessHub> Create(int world_size);

  // The transport of `rank`; it keeps the hub alive.
  std::unique_ptr<Transport> Connect(int rank);

 private:
  friend class InProcessTransport;
  struct Op;
  class Request;
  // Messages from one rank to another: unmatched sends and receives, each in posting order.
  struct Link {
    std::deque<std::shared_ptr<Op>> sends;
    std::deque<std::shared_ptr<Op>> recvs;
  };

  explicit InProcessHub(int world_size);
  std::shared_ptr<Op> Post(int from, int to, bool is_send, void* data, size_t bytes, uint64_t tag);
  absl::Status Wait(Op& op, const Deadline& deadline);
  void Abort(int rank, const absl::Status& cause);
  // Fails every pending op with `cause_`. Requires mu_.
  void FailAllLocked();

  const int world_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  absl::Status cause_;       // guarded by mu_; OK while healthy
  std::vector<Link> links_;  // guarded by mu_; [from * world_size + to]
};

}  // namespace testutil
}  // namespace paddle

#endif  // TESTS_COLLECTIVE_ALGORITHMS_IN_PROCESS_TRANSPORT_H_
