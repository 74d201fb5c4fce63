// InProcessHub and its transports; see in_process_transport.h.
#include "tests/collective/algorithms/in_process_transport.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace paddle {
namespace testutil {

struct InProcessHub::Op {
  bool is_send;
  int from;
  int to;
  void* data;
  size_t bytes;
  uint64_t tag;
  bool done = false;    // guarded by the hub's mu_
  absl::Status status;  // guarded by the hub's mu_
};

class InProcessHub::Request : public TransportRequest {
 public:
  Request(std::shared_ptr<InProcessHub> hub, std::shared_ptr<Op> op)
      : hub_(std::move(hub)), op_(std::move(op)) {}
  absl::Status Wait(const Deadline& deadline) override { return hub_->Wait(*op_, deadline); }
  bool IsCompleted() const override {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    return op_->done;
  }

 private:
  std::shared_ptr<InProcessHub> hub_;
  std::shared_ptr<Op> op_;
};

class InProcessTransport : public Transport {
 public:
  InProcessTransport(std::shared_ptr<InProcessHub> hub, int rank)
      : hub_(std::move(hub)), rank_(rank) {
    for (int peer = 0; peer < hub_->world_size_; ++peer) {
      channels_.push_back(std::make_unique<PeerChannel>(this, peer));
    }
  }

  int rank() const override { return rank_; }
  int world_size() const override { return hub_->world_size_; }
  std::string name() const override { return "in-process"; }
  Channel& channel(int peer) override { return *channels_[peer]; }
  void Abort(const absl::Status& cause) override { hub_->Abort(rank_, cause); }

 private:
  class PeerChannel : public Channel {
   public:
    PeerChannel(InProcessTransport* owner, int peer)
        : owner_(owner), peer_(peer), address_(absl::StrCat("in-process:", peer)) {}
    int peer() const override { return peer_; }
    const std::string& peer_address() const override { return address_; }
    std::unique_ptr<TransportRequest> Send(const void* data, size_t bytes, uint64_t tag) override {
      return owner_->Post(peer_, true, const_cast<void*>(data), bytes, tag);
    }
    std::unique_ptr<TransportRequest> Recv(void* data, size_t bytes, uint64_t tag) override {
      return owner_->Post(peer_, false, data, bytes, tag);
    }

   private:
    InProcessTransport* owner_;
    int peer_;
    std::string address_;
  };

  std::unique_ptr<TransportRequest> Post(int peer, bool is_send, void* data, size_t bytes,
                                         uint64_t tag) {
    std::shared_ptr<InProcessHub::Op> op = is_send
                                               ? hub_->Post(rank_, peer, true, data, bytes, tag)
                                               : hub_->Post(peer, rank_, false, data, bytes, tag);
    return std::make_unique<InProcessHub::Request>(hub_, std::move(op));
  }

  std::shared_ptr<InProcessHub> hub_;
  int rank_;
  std::vector<std::unique_ptr<PeerChannel>> channels_;
};

std::shared_ptr<InProcessHub> InProcessHub::Create(int world_size) {
  return std::shared_ptr<InProcessHub>(new InProcessHub(world_size));
}

InProcessHub::InProcessHub(int world_size)
    : world_size_(world_size), links_(static_cast<size_t>(world_size) * world_size) {}

std::unique_ptr<Transport> InProcessHub::Connect(int rank) {
  return std::make_unique<InProcessTransport>(shared_from_this(), rank);
}

std::shared_ptr<InProcessHub::Op> InProcessHub::Post(int from, int to, bool is_send, void* data,
                                                     size_t bytes, uint64_t tag) {
  auto op = std::make_shared<Op>();
  op->is_send = is_send;
  op->from = from;
  op->to = to;
  op->data = data;
  op->bytes = bytes;
  op->tag = tag;
  std::lock_guard<std::mutex> lock(mu_);
  if (!cause_.ok()) {
    op->done = true;
    op->status = cause_;
    return op;
  }
  Link& link = links_[static_cast<size_t>(from) * world_size_ + to];
  std::deque<std::shared_ptr<Op>>& others = is_send ? link.recvs : link.sends;
  auto match = std::find_if(others.begin(), others.end(),
                            [tag](const std::shared_ptr<Op>& o) { return o->tag == tag; });
  if (match == others.end()) {
    (is_send ? link.sends : link.recvs).push_back(op);
    return op;
  }
  std::shared_ptr<Op> other = *match;
  others.erase(match);
  Op& send = is_send ? *op : *other;
  Op& recv = is_send ? *other : *op;
  if (send.bytes != recv.bytes) {
    cause_ = absl::InvalidArgumentError(absl::StrCat("rank ", from, " sent ", send.bytes,
                                                     " bytes with tag ", tag, " to rank ", to,
                                                     ", which expected ", recv.bytes));
    op->done = other->done = true;
    op->status = other->status = cause_;
    FailAllLocked();
    return op;
  }
  if (send.bytes > 0) std::memcpy(recv.data, send.data, send.bytes);
  op->done = other->done = true;
  cv_.notify_all();
  return op;
}

absl::Status InProcessHub::Wait(Op& op, const Deadline& deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::nanoseconds(
                         absl::ToInt64Nanoseconds(std::min(deadline.Remaining(), absl::Hours(24))));
  if (!cv_.wait_until(lock, until, [&] { return op.done; })) {
    return deadline.TimeoutError(
        absl::StrCat(op.is_send ? "in-process send to rank " : "in-process receive from rank ",
                     op.is_send ? op.to : op.from, " of ", op.bytes, " bytes"));
  }
  return op.status;
}

void InProcessHub::Abort(int rank, const absl::Status& cause) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cause_.ok()) return;
  cause_ = absl::Status(cause.ok() ? absl::StatusCode::kAborted : cause.code(),
                        absl::StrCat("rank ", rank, " aborted its transport: ", cause.message()));
  FailAllLocked();
}

void InProcessHub::FailAllLocked() {
  for (Link& link : links_) {
    for (auto* queue : {&link.sends, &link.recvs}) {
      for (const std::shared_ptr<Op>& op : *queue) {
        op->done = true;
        op->status = cause_;
      }
      queue->clear();
    }
  }
  cv_.notify_all();
}

}  // namespace testutil
}  // namespace paddle
