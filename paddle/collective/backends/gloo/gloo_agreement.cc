// The Gloo backend's agreement check: Note [Agreement check] (call_stamp.h), done in one round
// of stamps before the call is handed to Gloo.
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/backends/gloo/gloo_communicator.h"
#include "paddle/collective/backends/gloo/gloo_connection.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// The slot of the agreement stamps, above the send/recv slots (0x40) and every prefix Gloo's
// collectives use. One slot for all operations: the k-th stamp from a peer meets the k-th this
// rank expects, so drifted sequence numbers are reported, not waited on.
constexpr uint8_t kStampSlotPrefix = 0x41;

}  // namespace

// Note [Agreement check] for Gloo: Gloo's messages cannot carry a stamp, and a size mismatch
// inside Gloo aborts the process, so the stamps travel in one round of their own before the call:
// every rank sends its stamp to, and receives one from, every other rank. Every rank then sees
// every stamp (except the pair counts of alltoallv, which only the pair compares), so all fail
// alike and none is left with a message to consume.
absl::Status GlooCommunicator::ExchangeStamps(const OpInfo& info, const GlooCallInfo& call,
                                              bool* poison) {
  *poison = false;
  if (size_ == 1) return absl::OkStatus();
  CallStamp stamp;
  stamp.seq = static_cast<uint64_t>(call.seq);
  const absl::optional<OpKind> kind = OpKindFromName(info.name);
  PADDLE_CHECK(kind.has_value()) << "no OpKind named " << info.name;
  stamp.kind = static_cast<uint8_t>(*kind);
  if (*kind != OpKind::kBarrier) stamp.dtype = static_cast<uint8_t>(info.dtype);
  if (info.reduce_op >= 0) stamp.op = static_cast<uint8_t>(info.reduce_op);
  stamp.root = info.root;
  if (*kind == OpKind::kAllgatherv) {
    stamp.counts_hash = info.extra;  // each rank's input differs; the counts must not
  } else if (*kind != OpKind::kAlltoallv) {
    stamp.count = info.count;
  }
  std::vector<CallStamp> out(static_cast<size_t>(size_), stamp);
  std::vector<CallStamp> in(static_cast<size_t>(size_));
  for (int r = 0; r < size_ && !info.send_counts.empty(); ++r) {
    out[r].send_count = info.send_counts[r];
    out[r].recv_count = info.recv_counts[r];
  }
  GlooCallInfo exchange = call;
  exchange.op = absl::StrCat(call.op, " agreement stamps");
  RETURN_IF_ERROR(CallGloo(exchange, [&] {
    const size_t n = sizeof(CallStamp);
    auto sent = context_->createUnboundBuffer(out.data(), out.size() * n);
    auto received = context_->createUnboundBuffer(in.data(), in.size() * n);
    const uint64_t slot = gloo::Slot::build(kStampSlotPrefix, 0);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      received->recv(r, slot, r * n, n);
      sent->send(r, slot, r * n, n);
    }
    const auto timeout = ToGlooTimeout(call.timeout);
    for (int r = 1; r < size_; ++r) received->waitRecv(timeout);
    for (int r = 1; r < size_; ++r) sent->waitSend(timeout);
  }));
  absl::Status mismatch;
  std::vector<std::string> others;
  bool everyone_sees = false;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || StampsAgree(out[r], in[r])) continue;
    CallStamp theirs = in[r];
    theirs.send_count = out[r].recv_count;  // equal pair counts: was the rest different?
    theirs.recv_count = out[r].send_count;
    everyone_sees |= !StampsAgree(out[r], theirs);
    if (mismatch.ok()) {
      mismatch = StampMismatchError(rank_, size_, r, "", out[r], in[r], "Gloo backend");
    } else {
      others.push_back(absl::StrCat("rank ", r, ": ", DescribeStamp(in[r])));
    }
  }
  if (mismatch.ok()) return mismatch;
  *poison = !everyone_sees;
  if (others.empty()) return mismatch;
  return absl::InvalidArgumentError(
      absl::StrCat(mismatch.message(), "; other ranks that differ: ", absl::StrJoin(others, "; ")));
}

}  // namespace paddle
