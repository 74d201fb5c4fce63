// InterceptingTransport; see intercepting_transport.h.
#include "tests/collective/algorithms/intercepting_transport.h"

namespace paddle {
namespace testutil {

class InterceptingTransport::InterceptingChannel : public Channel {
 public:
  InterceptingChannel(InterceptingTransport* owner, Channel& inner)
      : owner_(owner), inner_(inner) {}

  int peer() const override { return inner_.peer(); }
  const std::string& peer_address() const override { return inner_.peer_address(); }
  std::unique_ptr<TransportRequest> Send(const void* data, size_t bytes, uint64_t tag) override {
    owner_->OnSend(inner_.peer(), bytes);  // after an abort the inner send fails at once
    return inner_.Send(data, bytes, tag);
  }
  std::unique_ptr<TransportRequest> Recv(void* data, size_t bytes, uint64_t tag) override {
    return inner_.Recv(data, bytes, tag);
  }

 private:
  InterceptingTransport* owner_;
  Channel& inner_;
};

InterceptingTransport::InterceptingTransport(Transport& inner) : inner_(inner) {
  channels_.resize(inner.world_size());
  for (int peer = 0; peer < inner.world_size(); ++peer) {
    if (peer != inner.rank()) {
      channels_[peer] = std::make_unique<InterceptingChannel>(this, inner.channel(peer));
    }
  }
}

InterceptingTransport::~InterceptingTransport() = default;

void InterceptingTransport::AbortAtSend(int64_t index, absl::Status cause) {
  absl::MutexLock lock(&mu_);
  abort_at_ = index;
  abort_cause_ = std::move(cause);
}

std::vector<InterceptingTransport::SentMessage> InterceptingTransport::sends() const {
  absl::MutexLock lock(&mu_);
  return sends_;
}

Channel& InterceptingTransport::channel(int peer) { return *channels_[peer]; }

bool InterceptingTransport::OnSend(int peer, size_t bytes) {
  absl::Status cause;
  {
    absl::MutexLock lock(&mu_);
    const bool abort = static_cast<int64_t>(sends_.size()) == abort_at_;
    sends_.push_back({peer, bytes});
    if (!abort) return false;
    cause = abort_cause_;
  }
  inner_.Abort(cause);
  return true;
}

}  // namespace testutil
}  // namespace paddle
