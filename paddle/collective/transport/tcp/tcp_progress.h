// TcpProgress: the TCP transport's progress engine, run by the threads that wait.
//
// Note [Waiter drives]. A thread that waits for one of the transport's sends or receives takes
// the transport's driver role, if it is free, and moves the data of every channel itself, the
// way an MPI progress engine does: it reads whatever has arrived, writes whatever is queued,
// and, when nothing can move, sleeps in one poll() over all the sockets (or polls without
// sleeping for PADDLE_TCP_WAIT_SPIN_US first). While a driver is at work the I/O thread keeps
// away: each socket is "parked", its epoll watch set to no events (hang-ups and errors still
// reach the loop), so each arrival wakes one thread, not the waiter and the idle loop both.
//
// Parking outlives the wait. Channels are parked when a driver first comes and stay so after
// it leaves; the loop takes them back (re-arming the watch, which reports what is ready by
// then) only once no thread has driven for kUnparkAfter. Back-to-back collectives therefore
// pay no epoll_ctl, and between their waits (while the calling thread reduces a piece, say)
// no other thread reads the sockets: a message arriving then waits in the kernel and is read by
// the next wait straight into its posted buffer. What a parked transport leaves for later is
// only what nobody waits for: a send queued without a Wait goes out when the loop takes the
// channel back (so within kUnparkAfter), and a peer's close is seen then or by the next wait.
//
// Why: with the loop thread reading large messages and the caller reducing them, every piece
// crossed threads (a futex wake-up and a context switch each way), and with few cores the loop
// threads of the ranks competed with their callers for them. Waiters driving their sockets made
// 1-4 MiB allreduces over TCP about 1.6x faster; without parking, a loop that read between
// waits made alternating readers copy messages twice (docs/performance-notes.md, "Waiter
// drives").
//
// Rules:
//  - One driver per transport at a time (`role_`, taken with try_lock). A waiter that cannot
//    take it sleeps on its own op for at most kRetry and tries again: the driver completes that
//    op too if its data comes, and leaves when its own op is done.
//  - The driver holds the reader role of every channel (TcpReaderHook::mu) while it drives,
//    taking them after parking: the loop may still be inside an event it got before, and takes
//    no lock a driver holds while it waits for one, so the driver may block on it briefly.
//  - Parking and unparking happen under `role_`: the loop's unpark check (a PostAfter timer)
//    only try_locks it and, finding a driver, checks again later.
//  - TcpChannel::Fail marks the channel failed and wakes a driver asleep in poll() (Wake: the
//    socket is only shut for writing, Note [Lingering close]) before it takes the reader role.
//    The driver then lets go of every role
//    and, unless the whole transport is poisoned, its waiter sleeps for kRetry and drives again
//    without the failed channel: a peer that left gracefully (Note [Graceful close]) fails that
//    channel alone, and the others must go on.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_PROGRESS_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_PROGRESS_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "paddle/core/deadline.h"

namespace paddle {

class TcpChannel;
class TcpLoop;
class TcpOp;

class TcpProgress : public std::enable_shared_from_this<TcpProgress> {
 public:
  // The loop takes parked channels back after this long without a driver.
  static constexpr absl::Duration kUnparkAfter = absl::Milliseconds(10);
  // A waiter that finds another thread driving sleeps at most this long before trying again.
  static constexpr absl::Duration kRetry = absl::Milliseconds(1);

  // `spin`: how long a driver polls without sleeping once nothing moves.
  TcpProgress(TcpLoop* loop, absl::Duration spin);
  ~TcpProgress();
  TcpProgress(const TcpProgress&) = delete;
  TcpProgress& operator=(const TcpProgress&) = delete;

  // The transport's channels, once started (null entries skipped). Before any Drive.
  void Attach(const std::vector<TcpChannel*>& channels);
  // Forgets the channels: later Drives return at once. The transport, after its channels have
  // failed and its loop has stopped, before it destroys them.
  void Detach();

  // If the driver role is free: moves every channel's data until `op` completes, `deadline`
  // passes or the transport fails, and returns true. Returns false at once if another thread
  // drives (the caller sleeps on its op and tries again).
  bool Drive(const TcpOp& op, const Deadline& deadline);

  // Ends the poll() of a sleeping driver (the next one's, if none sleeps). TcpChannel::Fail, any
  // thread.
  void Wake();

 private:
  // Under role_: hands parked channels back to the loop if nobody drove for kUnparkAfter, else
  // checks again later. On the loop thread.
  void MaybeUnpark();
  void ScheduleUnparkCheck(absl::Duration delay);

  TcpLoop* const loop_;
  const absl::Duration spin_;
  const int wake_fd_;  // an eventfd the driver polls too; -1 if none could be made

  std::mutex role_;
  std::vector<TcpChannel*> channels_ ABSL_GUARDED_BY(role_);
  bool parked_ ABSL_GUARDED_BY(role_) = false;
  std::chrono::steady_clock::time_point last_drive_ ABSL_GUARDED_BY(role_);
  bool check_pending_ ABSL_GUARDED_BY(role_) = false;  // an unpark check is scheduled
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_PROGRESS_H_
