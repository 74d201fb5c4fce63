// TcpProgress: waiters drive the transport; see Note [Waiter drives] in tcp_progress.h.
#include "paddle/collective/transport/tcp/tcp_progress.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "paddle/collective/transport/tcp/tcp_channel.h"
#include "paddle/collective/transport/tcp/tcp_loop.h"
#include "paddle/collective/transport/tcp/tcp_request.h"

namespace paddle {

namespace {
// A sleeping driver wakes at least this often, so a missed wake-up costs at most this long.
constexpr int kMaxSleepMillis = 100;
}  // namespace

TcpProgress::TcpProgress(TcpLoop* loop, absl::Duration spin)
    : loop_(loop), spin_(spin), wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

TcpProgress::~TcpProgress() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

void TcpProgress::Wake() {
  if (wake_fd_ < 0) return;  // a sleeping driver then wakes within kMaxSleepMillis
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void TcpProgress::Attach(const std::vector<TcpChannel*>& channels) {
  std::lock_guard<std::mutex> role(role_);
  channels_.clear();
  for (TcpChannel* channel : channels) {
    if (channel != nullptr) channels_.push_back(channel);
  }
}

void TcpProgress::Detach() {
  std::lock_guard<std::mutex> role(role_);
  channels_.clear();
}

bool TcpProgress::Drive(const TcpOp& op, const Deadline& deadline) {
  std::unique_lock<std::mutex> role(role_, std::try_to_lock);
  if (!role.owns_lock()) return false;
  if (channels_.empty()) return true;  // detached: every op has been completed
  if (!parked_) {
    for (TcpChannel* channel : channels_) channel->Park();
    parked_ = true;
  }
  // Failed channels are left to the loop thread, which is failing them (Note [Waiter drives]).
  std::vector<TcpChannel*> channels;
  std::vector<std::unique_lock<std::mutex>> readers;
  channels.reserve(channels_.size());
  readers.reserve(channels_.size());
  for (TcpChannel* channel : channels_) {
    if (channel->failed_.load()) continue;
    readers.emplace_back(channel->reader_->mu);
    channels.push_back(channel);
  }
  const size_t count = channels.size();
  if (count == 0) return false;  // all failing: the caller sleeps on its op, which fails too
  TcpChannel::Owner& owner = *channels_.front()->owner_;
  absl::Status error;
  int error_peer = -1;
  bool failing = false;  // a channel began to fail: let go of its reader role
  // Channels to serve on the next pass without asking poll(): all of them at first (data may
  // have come while nobody watched), then those poll() reported and those whose read budget ran
  // out with data left.
  std::vector<char> serve(count, 1);
  std::vector<pollfd> fds(count + 1);  // and the wake-up's last
  const size_t polled = wake_fd_ >= 0 ? count + 1 : count;
  fds[count] = {wake_fd_, POLLIN, 0};
  const auto spin_until = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(spin_);
  while (!op.IsCompleted() && owner.PoisonCause().ok()) {
    bool more = false;
    for (size_t i = 0; i < count && error.ok(); ++i) {
      TcpChannel& channel = *channels[i];
      if (channel.failed_.load()) failing = true;
      if (!serve[i] || failing) continue;
      serve[i] = 0;
      channel.reader_->missed.store(false);  // whatever the loop skipped, this read covers
      if (channel.ReadAvailable(&error, &op)) serve[i] = more = true;
      if (error.ok() && channel.send_pending_.load()) {
        error = channel.TryWrite();
        // Note [Read before blaming] in tcp_channel_close.cc (this thread holds the reader role).
        if (!error.ok()) error = channel.ExplainSendError(error);
      }
      if (!error.ok()) error_peer = channel.peer();
    }
    if (failing || !error.ok() || op.IsCompleted() || deadline.Expired()) break;
    int millis = 0;
    if (!more && std::chrono::steady_clock::now() >= spin_until) {
      millis = deadline.IsNever() ? kMaxSleepMillis
                                  : std::min(deadline.PollTimeoutMillis(), kMaxSleepMillis);
    }
    for (size_t i = 0; i < count; ++i) {
      const TcpChannel& channel = *channels[i];
      fds[i] = {
          channel.socket_.fd(),
          static_cast<short>(POLLIN | POLLRDHUP | (channel.send_pending_.load() ? POLLOUT : 0)), 0};
    }
    // TcpChannel::Fail wakes this sleep before it waits for the reader role, and the next pass
    // sees the channel failing.
    if (poll(fds.data(), polled, millis) > 0) {
      for (size_t i = 0; i < count; ++i) {
        if (fds[i].revents != 0) serve[i] = 1;
      }
      if (polled > count && fds[count].revents != 0) {
        uint64_t wakes = 0;
        (void)!read(wake_fd_, &wakes, sizeof(wakes));
      }
    }
  }
  readers.clear();
  // Poisoning only posts work to the loop thread (this is not it), so it is safe here; the loop
  // then fails the channels, taking their reader roles now that they are free.
  if (!error.ok()) owner.Poison(error, error_peer);
  // The loop sees only hang-ups and errors of parked sockets; one it had to skip is read now.
  for (TcpChannel* channel : channels) TcpChannel::ReadMissed(*channel->reader_);
  last_drive_ = std::chrono::steady_clock::now();
  if (!check_pending_) {
    check_pending_ = true;
    ScheduleUnparkCheck(kUnparkAfter);
  }
  // A failing channel: the caller waits a little (the loop fails its ops meanwhile) and drives
  // the others again.
  return !failing;
}

void TcpProgress::ScheduleUnparkCheck(absl::Duration delay) {
  loop_->PostAfter(delay, [self = shared_from_this()] { self->MaybeUnpark(); });
}

void TcpProgress::MaybeUnpark() {
  std::unique_lock<std::mutex> role(role_, std::try_to_lock);
  if (!role.owns_lock()) {
    // A driver is at work; check_pending_ stays set, as this check is rescheduled.
    ScheduleUnparkCheck(kUnparkAfter);
    return;
  }
  check_pending_ = false;
  if (!parked_ || channels_.empty()) return;
  const auto idle = std::chrono::steady_clock::now() - last_drive_;
  const auto grace = absl::ToChronoNanoseconds(kUnparkAfter);
  if (idle < grace) {
    check_pending_ = true;
    ScheduleUnparkCheck(absl::FromChrono(grace - idle));
    return;
  }
  for (TcpChannel* channel : channels_) channel->Unpark();
  parked_ = false;
  for (TcpChannel* channel : channels_) channel->ReadHeld();
}

}  // namespace paddle
