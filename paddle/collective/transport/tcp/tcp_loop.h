// TcpLoop: the one I/O thread of a TCP transport (its "device"), an epoll loop over the sockets of
// all of the transport's channels.
//
// Sockets are registered edge-triggered for input and output once, for their whole life, so the
// data path never calls epoll_ctl: a handler reads until the kernel says EAGAIN (or until its
// per-turn budget, then asks to be called again so one busy peer cannot starve the others), and
// a writer that leaves data queued has always just met EAGAIN, which guarantees a later EPOLLOUT
// edge. Other threads hand the loop work with Post(), which wakes it through an eventfd.
//
// Optionally the loop busy-polls (epoll_wait with a zero timeout) for a while after its last
// event instead of sleeping, trading a core for the wake-up latency of small messages; see
// Note [Busy polling] in tcp_tuning.h for when that pays.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_LOOP_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paddle {

class TcpLoop {
 public:
  class Handler {
   public:
    // Runs on the loop thread with the socket's epoll events (0 when called again on request).
    // Returns true if it stopped with work left, to be called again after the other handlers.
    virtual bool OnEvents(uint32_t events) = 0;

   protected:
    ~Handler() = default;
  };

  // Starts the loop thread. `busy_poll`: how long to keep polling without sleeping after the
  // last event (zero: always sleep in epoll_wait).
  static absl::StatusOr<std::unique_ptr<TcpLoop>> Start(absl::Duration busy_poll);
  // Stop()s the loop.
  ~TcpLoop();
  TcpLoop(const TcpLoop&) = delete;
  TcpLoop& operator=(const TcpLoop&) = delete;

  // Watches `fd` (edge-triggered input, output, hang-up and error) for `handler`, which must
  // stay alive until the loop has stopped. Any thread.
  absl::Status Add(int fd, Handler* handler);
  // Changes the events watched on `fd` (an Add()ed one); ignored once it is Remove()d. Any thread.
  void Watch(int fd, Handler* handler, uint32_t events);
  // Stops watching `fd`. Loop thread only.
  void Remove(int fd);

  // Runs `fn` on the loop thread, after the events of the current turn; posts run in order.
  void Post(std::function<void()> fn);
  // Runs `fn` on the loop thread once `delay` has passed (or never, if the loop stops first).
  // Any thread, the loop's own included.
  void PostAfter(absl::Duration delay, std::function<void()> fn);

  // Runs the work already posted, then ends the loop thread and joins it. Idempotent. Not from
  // the loop thread.
  void Stop();

  bool InLoopThread() const { return std::this_thread::get_id() == thread_id_.load(); }

 private:
  explicit TcpLoop(absl::Duration busy_poll) : busy_poll_(busy_poll) {}
  void Run();
  // Runs and drops the posted work; returns whether Stop() was requested.
  bool RunPosted();
  // Runs the PostAfter work that is due; returns the epoll_wait timeout (ms) until the next one
  // (-1: none pending).
  int RunTimers();

  const absl::Duration busy_poll_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};

  std::mutex mu_;
  std::vector<std::function<void()>> posted_ ABSL_GUARDED_BY(mu_);
  // PostAfter's work, by due time (a handful at most: the transport keeps one pending).
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> timers_
      ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool joined_ = false;  // touched only by the thread that owns the loop
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_LOOP_H_
