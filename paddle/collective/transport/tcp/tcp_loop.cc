// TcpLoop: the epoll thread; see tcp_loop.h.
#include "paddle/collective/transport/tcp/tcp_loop.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/logging.h"

namespace paddle {

namespace {
constexpr int kMaxEvents = 64;
}  // namespace

absl::StatusOr<std::unique_ptr<TcpLoop>> TcpLoop::Start(absl::Duration busy_poll) {
  std::unique_ptr<TcpLoop> loop(new TcpLoop(busy_poll));
  loop->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (loop->epoll_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll_create1: ", std::strerror(errno)));
  }
  loop->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (loop->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up eventfd is the one registration without a handler
  if (epoll_ctl(loop->epoll_fd_, EPOLL_CTL_ADD, loop->wake_fd_, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl(eventfd): ", std::strerror(errno)));
  }
  loop->thread_ = std::thread([raw = loop.get()] { raw->Run(); });
  return loop;
}

TcpLoop::~TcpLoop() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

absl::Status TcpLoop::Add(int fd, Handler* handler) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = handler;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl(ADD): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void TcpLoop::Watch(int fd, Handler* handler, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  (void)epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
}

void TcpLoop::Remove(int fd) {
  PADDLE_CHECK(InLoopThread() || joined_) << "TcpLoop::Remove off the loop thread";
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void TcpLoop::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  // A full eventfd counter still wakes the loop, so a failed write needs no handling.
  (void)!write(wake_fd_, &one, sizeof(one));
}

void TcpLoop::PostAfter(absl::Duration delay, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    timers_.emplace(std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(delay),
                    std::move(fn));
  }
  if (InLoopThread()) return;  // the loop recomputes its timeout before it sleeps again
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

int TcpLoop::RunTimers() {
  using Clock = std::chrono::steady_clock;
  std::vector<std::function<void()>> due;
  int timeout = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (timers_.empty()) return -1;
    const Clock::time_point now = Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      due.push_back(std::move(timers_.begin()->second));
      timers_.erase(timers_.begin());
    }
    if (due.empty()) {
      // Rounded up, so the loop never wakes just before the time and spins.
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(timers_.begin()->first - now);
      timeout = static_cast<int>(std::min<int64_t>(wait.count(), 1000));
    }
  }
  for (auto& fn : due) fn();
  // What just ran may have added timers: look again on the next turn, without sleeping.
  return due.empty() ? timeout : 0;
}

void TcpLoop::Stop() {
  if (joined_ || !thread_.joinable()) return;
  PADDLE_CHECK(!InLoopThread()) << "TcpLoop::Stop from its own thread would deadlock";
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  joined_ = true;
}

bool TcpLoop::RunPosted() {
  std::vector<std::function<void()>> work;
  bool stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work.swap(posted_);
    stop = stop_;
  }
  for (auto& fn : work) fn();
  // Work posted by the work just run is picked up next turn; stop only once none is left.
  if (!stop) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return posted_.empty();
}

void TcpLoop::Run() {
  thread_id_.store(std::this_thread::get_id());
  pthread_setname_np(pthread_self(), "paddle-tcp-io");  // how it shows in top and gdb
  using Clock = std::chrono::steady_clock;
  const auto busy_poll = absl::ToChronoNanoseconds(busy_poll_);
  Clock::time_point last_event = Clock::now();
  std::vector<Handler*> again;
  std::vector<Handler*> next_again;
  epoll_event events[kMaxEvents];
  while (true) {
    // Sleep only when no handler has work left and the busy-poll window has closed.
    int timeout = RunTimers();
    if (!again.empty()) {
      timeout = 0;
    } else if (busy_poll.count() > 0 && Clock::now() - last_event < busy_poll) {
      timeout = 0;
    }
    int n = epoll_wait(epoll_fd_, events, kMaxEvents, timeout);
    // Only a bad descriptor or argument makes epoll_wait fail: a broken invariant.
    PADDLE_CHECK(n >= 0 || errno == EINTR) << "epoll_wait failed: " << std::strerror(errno);
    bool woken = false;
    for (int i = 0; i < n; ++i) {
      auto* handler = static_cast<Handler*>(events[i].data.ptr);
      if (handler == nullptr) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof(count));
        woken = true;
        continue;
      }
      if (handler->OnEvents(events[i].events)) next_again.push_back(handler);
    }
    for (Handler* handler : again) {
      if (handler->OnEvents(0)) next_again.push_back(handler);
    }
    again.swap(next_again);
    next_again.clear();
    if (n > 0 || !again.empty()) last_event = Clock::now();
    if (woken && RunPosted()) break;
  }
}

}  // namespace paddle
