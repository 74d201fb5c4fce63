// The Gloo backend's cross-rank check: the always-on stamps of Note [Agreement check]
// (call_stamp.h), done in one round before the call is handed to Gloo, over GlooExchange (a
// PeerExchange, backends/common/debug_checks.h, over unbound Gloo buffers).
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/backends/common/debug_checks.h"
#include "paddle/collective/backends/gloo/gloo_communicator.h"
#include "paddle/collective/backends/gloo/gloo_connection.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Slot of the stamps, above the send/recv slots (0x40) and every prefix Gloo's collectives use.
// One slot for all operations: the k-th message from a peer meets the k-th this rank expects, so
// drifted sequence numbers are reported, not waited on.
constexpr uint8_t kStampSlotPrefix = 0x41;

// A PeerExchange over unbound Gloo buffers, round r on slot (prefix, r).
class GlooExchange final : public PeerExchange {
 public:
  GlooExchange(gloo::Context& context, const GlooCallInfo& info, uint8_t slot_prefix)
      : context_(context), info_(info), slot_prefix_(slot_prefix) {}
  int rank() const override { return info_.rank; }
  int world_size() const override { return info_.world_size; }

  absl::Status ExchangeWithAll(int round, const char* what, size_t bytes,
                               const std::vector<std::vector<uint8_t>>& out,
                               std::vector<std::vector<uint8_t>>* in, const CollectiveCall& call,
                               uint64_t seq, const Deadline& deadline) override {
    GlooCallInfo exchange = info_;
    exchange.op = absl::StrCat(info_.op, " ", what);
    exchange.timeout = deadline.Remaining();
    const int n = world_size();
    absl::Status s = CallGloo(exchange, [&] {
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sent(n), received(n);
      const uint64_t slot = gloo::Slot::build(slot_prefix_, static_cast<uint32_t>(round));
      for (int p = 0; p < n; ++p) {
        if (p == rank()) continue;
        received[p] = context_.createUnboundBuffer((*in)[p].data(), bytes);
        sent[p] = context_.createUnboundBuffer(const_cast<uint8_t*>(out[p].data()), bytes);
        received[p]->recv(p, slot);
        sent[p]->send(p, slot);
      }
      const auto timeout = ToGlooTimeout(exchange.timeout);
      for (int p = 0; p < n; ++p) {
        if (p == rank()) continue;
        received[p]->waitRecv(timeout);
        sent[p]->waitSend(timeout);
      }
    });
    // kInvalidArgument means a disagreement to the caller, never a broken exchange.
    if (absl::IsInvalidArgument(s)) s = absl::DataLossError(s.message());
    return s;
  }

 private:
  gloo::Context& context_;
  const GlooCallInfo& info_;
  const uint8_t slot_prefix_;
};

}  // namespace

// Note [Agreement check] for Gloo: Gloo's messages cannot carry a stamp, and a size mismatch
// inside Gloo aborts the process, so the stamps travel in one round of their own before the call:
// every rank sends its stamp to, and receives one from, every other rank. Every rank then sees
// every stamp (except the pair counts of alltoallv, which only the pair compares), so all fail
// alike and none is left with a message to consume.
absl::Status GlooCommunicator::ExchangeStamps(const CollectiveCall& call, const GlooCallInfo& info,
                                              bool* poison) {
  *poison = false;
  if (size_ == 1) return absl::OkStatus();
  const CallStamp stamp = call.Stamp(static_cast<uint64_t>(info.seq));
  constexpr size_t kBytes = sizeof(CallStamp);
  std::vector<std::vector<uint8_t>> out(size_, std::vector<uint8_t>(kBytes));
  std::vector<std::vector<uint8_t>> in(size_, std::vector<uint8_t>(kBytes));
  std::vector<CallStamp> mine(static_cast<size_t>(size_), stamp);
  for (int r = 0; r < size_; ++r) {
    if (call.kind == OpKind::kAlltoallv) {
      mine[r].send_count = call.counts[r];
      mine[r].recv_count = call.recv_counts[r];
    }
    std::memcpy(out[r].data(), &mine[r], kBytes);
  }
  GlooExchange exchange(*context_, info, kStampSlotPrefix);
  RETURN_IF_ERROR(exchange.ExchangeWithAll(0, "agreement stamps", kBytes, out, &in, call,
                                           static_cast<uint64_t>(info.seq),
                                           Deadline::After(info.timeout)));
  absl::Status mismatch;
  std::vector<std::string> others;
  bool everyone_sees = false;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    CallStamp theirs;
    std::memcpy(&theirs, in[r].data(), kBytes);
    if (StampsAgree(mine[r], theirs)) continue;
    CallStamp crossed = theirs;
    crossed.send_count = mine[r].recv_count;  // equal pair counts: was the rest different?
    crossed.recv_count = mine[r].send_count;
    everyone_sees |= !StampsAgree(mine[r], crossed);
    if (mismatch.ok()) {
      mismatch = StampMismatchError(rank_, size_, r, "", mine[r], theirs, "Gloo backend");
    } else {
      others.push_back(absl::StrCat("rank ", r, ": ", DescribeStamp(theirs)));
    }
  }
  if (mismatch.ok()) return mismatch;
  *poison = !everyone_sees;
  if (others.empty()) return mismatch;
  return MarkRanksDisagree(absl::InvalidArgumentError(absl::StrCat(
      mismatch.message(), "; other ranks that differ: ", absl::StrJoin(others, "; "))));
}

}  // namespace paddle
