// The cross-rank check of Note [Collective debug checks].
#include "paddle/collective/backends/common/debug_checks.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr uint32_t kMagic = 0x4b434450;  // "PDCK"
constexpr uint8_t kNone = 0xff;          // no dtype / no reduce op
constexpr uint8_t kInvalidFlag = 1;
constexpr uint8_t kAgree = 0;
constexpr uint8_t kDisagree = 1;
constexpr size_t kFingerprintBytes = 56;
// How long a request may take to fail after the transport was aborted (Abort fails every
// pending request at once, so this only bounds a broken transport).
constexpr absl::Duration kDrainTimeout = absl::Seconds(30);

using Wire = std::array<uint8_t, kFingerprintBytes>;

// One rank's call as one peer sees it.
struct Fingerprint {
  uint8_t kind = 0;
  uint8_t dtype = kNone;
  uint8_t op = kNone;
  uint8_t flags = 0;
  int32_t root = -1;
  uint64_t seq = 0;
  int64_t count = 0;
  int64_t to_peer = 0;    // alltoallv: elements the sender sends the receiver
  int64_t from_peer = 0;  // alltoallv: elements the sender expects from the receiver
  uint64_t counts_hash = 0;

  // Everything but the pair fields: ranks with equal keys called the same thing.
  std::string Key() const;
};

// Little-endian, field by field: the same bytes on every host.
class Writer {
 public:
  explicit Writer(Wire* wire) : wire_(wire) {}
  void Put(uint64_t value, int bytes) {
    for (int b = 0; b < bytes; ++b) (*wire_)[pos_++] = static_cast<uint8_t>(value >> (8 * b));
  }

 private:
  Wire* wire_;
  size_t pos_ = 0;
};

class Reader {
 public:
  explicit Reader(const Wire& wire) : wire_(wire) {}
  uint64_t Get(int bytes) {
    uint64_t value = 0;
    for (int b = 0; b < bytes; ++b) value |= static_cast<uint64_t>(wire_[pos_++]) << (8 * b);
    return value;
  }

 private:
  const Wire& wire_;
  size_t pos_ = 0;
};

Wire Encode(const Fingerprint& f) {
  Wire wire{};
  Writer w(&wire);
  w.Put(kMagic, 4);
  w.Put(f.kind, 1);
  w.Put(f.dtype, 1);
  w.Put(f.op, 1);
  w.Put(f.flags, 1);
  w.Put(static_cast<uint32_t>(f.root), 4);
  w.Put(0, 4);  // reserved
  w.Put(f.seq, 8);
  w.Put(static_cast<uint64_t>(f.count), 8);
  w.Put(static_cast<uint64_t>(f.to_peer), 8);
  w.Put(static_cast<uint64_t>(f.from_peer), 8);
  w.Put(f.counts_hash, 8);
  return wire;
}

bool Decode(const Wire& wire, Fingerprint* f) {
  Reader r(wire);
  if (r.Get(4) != kMagic) return false;
  f->kind = static_cast<uint8_t>(r.Get(1));
  f->dtype = static_cast<uint8_t>(r.Get(1));
  f->op = static_cast<uint8_t>(r.Get(1));
  f->flags = static_cast<uint8_t>(r.Get(1));
  f->root = static_cast<int32_t>(static_cast<uint32_t>(r.Get(4)));
  r.Get(4);
  f->seq = r.Get(8);
  f->count = static_cast<int64_t>(r.Get(8));
  f->to_peer = static_cast<int64_t>(r.Get(8));
  f->from_peer = static_cast<int64_t>(r.Get(8));
  f->counts_hash = r.Get(8);
  return true;
}

// The fingerprint of `call` as sent to `peer`.
Fingerprint Make(const CollectiveCall& call, uint64_t seq, bool call_valid, int peer) {
  Fingerprint f;
  f.kind = static_cast<uint8_t>(call.kind);
  if (call.has_dtype) f.dtype = static_cast<uint8_t>(call.dtype);
  if (call.has_op) f.op = static_cast<uint8_t>(call.op);
  f.flags = call_valid ? 0 : kInvalidFlag;
  f.root = call.root;
  f.seq = seq;
  switch (call.kind) {
    case OpKind::kAlltoallv: {
      // Totals differ between ranks; only the pair counts must match up.
      const size_t p = static_cast<size_t>(peer);
      if (p < call.counts.size()) f.to_peer = call.counts[p];
      if (p < call.recv_counts.size()) f.from_peer = call.recv_counts[p];
      break;
    }
    case OpKind::kAllgatherv:
    case OpKind::kSplit:
      f.count = call.count;
      f.counts_hash = HashCounts(call.counts);
      break;
    default:
      f.count = call.count;
  }
  return f;
}

std::string Fingerprint::Key() const {
  const OpKind k = static_cast<OpKind>(kind);
  // "float32 x 12", then the other details: "allreduce #5 (float32 x 12, sum)".
  std::string shape(dtype != kNone ? DTypeName(static_cast<DType>(dtype)) : "");
  std::vector<std::string> details;
  switch (k) {
    case OpKind::kAllgatherv:
      details.push_back(
          absl::StrFormat("%d elements in all, counts hash %016x", count, counts_hash));
      break;
    case OpKind::kSplit:
      details.push_back(absl::StrFormat("%d ranks, rank list hash %016x", count, counts_hash));
      break;
    case OpKind::kAlltoallv:
    case OpKind::kBarrier:
      break;
    case OpKind::kAllgather:
    case OpKind::kReduceScatter:
      absl::StrAppend(&shape, " x ", count, " per rank");
      break;
    case OpKind::kAlltoall:
      absl::StrAppend(&shape, " x ", count, " per block");
      break;
    default:
      absl::StrAppend(&shape, " x ", count);
  }
  if (!shape.empty()) details.insert(details.begin(), shape);
  if (op != kNone) details.emplace_back(ReduceOpName(static_cast<ReduceOp>(op)));
  if (k == OpKind::kBroadcast || k == OpKind::kReduce) {
    details.push_back(absl::StrCat("root ", root));
  }
  if (flags & kInvalidFlag) details.emplace_back("arguments rejected by its own checks");
  return absl::StrCat(OpKindName(k), " #", seq,
                      details.empty() ? "" : absl::StrCat(" (", absl::StrJoin(details, ", "), ")"));
}

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

// Step 3: what this rank finds wrong with the fingerprints; empty if they agree.
std::string FindDisagreement(const std::vector<Fingerprint>& fingerprints,
                             const CollectiveCall& call, bool call_valid, int me) {
  const int n = static_cast<int>(fingerprints.size());
  std::map<std::string, std::vector<int>> groups;  // call -> ranks that made it
  for (int r = 0; r < n; ++r) groups[fingerprints[r].Key()].push_back(r);
  if (groups.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [key, ranks] : groups) {
      parts.push_back(absl::StrCat(RankList(ranks), " called ", key));
    }
    return absl::StrCat("the ranks did not make the same call: ", absl::StrJoin(parts, "; "));
  }
  if (call.kind != OpKind::kAlltoallv || !call_valid) return "";
  std::vector<std::string> parts;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const Fingerprint& f = fingerprints[p];
    if (f.to_peer != call.recv_counts[p]) {
      parts.push_back(absl::StrCat("rank ", p, " sends ", f.to_peer, " elements to rank ", me,
                                   ", which expects ", call.recv_counts[p], " (its recv_counts[", p,
                                   "])"));
    }
    if (f.from_peer != call.counts[p]) {
      parts.push_back(absl::StrCat("rank ", me, " sends ", call.counts[p], " elements to rank ", p,
                                   ", which expects ", f.from_peer, " (its recv_counts[", me,
                                   "])"));
    }
  }
  if (parts.empty()) return "";
  return absl::StrCat("send and receive counts do not match up: ", absl::StrJoin(parts, "; "));
}

// Waits for `request`, bounded by `deadline`; an error gets the context of this exchange.
absl::Status WaitFor(TransportRequest& request, Transport& transport, int peer, bool is_send,
                     const char* what, size_t bytes, const CollectiveCall& call, uint64_t seq,
                     const Deadline& deadline) {
  absl::Status s = request.Wait(deadline);
  if (s.ok()) return s;
  const std::string op(OpKindName(call.kind));
  std::string hint;
  if (absl::IsDeadlineExceeded(s)) {
    hint = absl::StrCat("rank ", peer, " did not reach ", op, " #", seq,
                        " in time: it may be slow or stuck, may have called fewer collectives, or "
                        "may run without debug checks (PADDLE_DEBUG_CHECKS must be set alike on "
                        "every rank); ",
                        TimeoutHint(TimeoutKind::kCollective));
  } else {
    hint =
        absl::StrCat("rank ", peer, " failed or left first; its own log names the original error");
  }
  return ErrorContext()
      .Rank(transport.rank(), transport.world_size())
      .Peer(peer, transport.channel(peer).peer_address())
      .Op(op, static_cast<int64_t>(seq))
      .Bytes(static_cast<int64_t>(bytes))
      .Waited(deadline.Elapsed(), deadline.timeout())
      .Hint(hint)
      .Wrap(
          Annotate(s, absl::StrCat("collective debug check: ", is_send ? "sending " : "receiving ",
                                   what, is_send ? " to" : " from", " rank ", peer)));
}

}  // namespace

absl::Status TransportExchange::ExchangeWithAll(int round, const char* what, size_t bytes,
                                                const std::vector<std::vector<uint8_t>>& out,
                                                std::vector<std::vector<uint8_t>>* in,
                                                const CollectiveCall& call, uint64_t seq,
                                                const Deadline& deadline) {
  Transport& transport = transport_;
  const uint64_t tag = tag_ + static_cast<uint64_t>(round);
  const int n = transport.world_size();
  const int me = transport.rank();
  std::vector<std::unique_ptr<TransportRequest>> recvs(n);
  std::vector<std::unique_ptr<TransportRequest>> sends(n);
  for (int p = 0; p < n; ++p) {
    if (p != me) recvs[p] = transport.channel(p).Recv((*in)[p].data(), bytes, tag);
  }
  for (int p = 0; p < n; ++p) {
    if (p != me) sends[p] = transport.channel(p).Send(out[p].data(), bytes, tag);
  }
  absl::Status error;
  for (int p = 0; p < n && error.ok(); ++p) {
    if (p == me) continue;
    error = WaitFor(*recvs[p], transport, p, /*is_send=*/false, what, bytes, call, seq, deadline);
    if (error.ok()) {
      error = WaitFor(*sends[p], transport, p, /*is_send=*/true, what, bytes, call, seq, deadline);
    }
  }
  if (error.ok()) return error;
  // kInvalidArgument means a disagreement to the caller; a transport's (a message of another
  // size) is a broken exchange.
  if (absl::IsInvalidArgument(error)) error = absl::DataLossError(error.message());
  // The caller's buffers must not be freed while the transport may still touch them: abort it
  // (the first cause wins), which fails every pending request at once, and wait for them.
  transport.Abort(error);
  for (auto* list : {&recvs, &sends}) {
    for (auto& request : *list) {
      if (request == nullptr || request->IsCompleted()) continue;
      const absl::Status s = request->Wait(Deadline::After(kDrainTimeout));
      PADDLE_CHECK(request->IsCompleted())
          << "the " << transport.name() << " transport left a request pending "
          << absl::FormatDuration(kDrainTimeout) << " after Abort (" << s << ")";
    }
  }
  return error;
}

absl::Status CheckCallAcrossRanks(PeerExchange& exchange, const CollectiveCall& call, uint64_t seq,
                                  bool call_valid, const Deadline& deadline) {
  const int n = exchange.world_size();
  const int me = exchange.rank();
  if (n == 1) return absl::OkStatus();

  // Steps 1 and 2: fingerprints.
  std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(kFingerprintBytes));
  std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(kFingerprintBytes));
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const Wire wire = Encode(Make(call, seq, call_valid, p));
    std::copy(wire.begin(), wire.end(), out[p].begin());
  }
  RETURN_IF_ERROR(exchange.ExchangeWithAll(0, "the call's fingerprint", kFingerprintBytes, out, &in,
                                           call, seq, deadline));

  // Step 3: compare.
  std::vector<Fingerprint> fingerprints(n);
  fingerprints[me] = Make(call, seq, call_valid, me);
  std::string disagreement;
  for (int p = 0; p < n && disagreement.empty(); ++p) {
    Wire wire;
    std::copy(in[p].begin(), in[p].end(), wire.begin());
    if (p != me && !Decode(wire, &fingerprints[p])) {
      disagreement = absl::StrCat("rank ", p, " sent a fingerprint without the right magic");
    }
  }
  if (disagreement.empty()) disagreement = FindDisagreement(fingerprints, call, call_valid, me);

  // Step 4: verdicts, so that every rank fails when any rank found a disagreement (for alltoallv
  // only the ranks of a mismatched pair see it), and so that no rank leaves the check, and
  // possibly fails, before every rank has finished reading the fingerprints.
  const std::vector<std::vector<uint8_t>> verdict(n, {disagreement.empty() ? kAgree : kDisagree});
  std::vector<std::vector<uint8_t>> verdicts(n, std::vector<uint8_t>(1));
  RETURN_IF_ERROR(exchange.ExchangeWithAll(1, "the check's verdict", 1, verdict, &verdicts, call,
                                           seq, deadline));
  if (disagreement.empty()) {
    std::vector<int> objecting;
    for (int p = 0; p < n; ++p) {
      if (p != me && verdicts[p][0] != kAgree) objecting.push_back(p);
    }
    if (objecting.empty()) return absl::OkStatus();
    disagreement = absl::StrCat(RankList(objecting),
                                " found that the ranks' calls do not match (their own errors say "
                                "how); this rank's view agrees");
  }
  absl::Status error = MarkRanksDisagree(
      ErrorContext()
          .Rank(me, n)
          .Op(OpKindName(call.kind), static_cast<int64_t>(seq))
          .Waited(deadline.Elapsed(), deadline.timeout())
          .Hint("every rank must make the same collective calls in the same order, with the "
                "same dtype, counts, root and reduce op (found by PADDLE_DEBUG_CHECKS)")
          .Wrap(absl::InvalidArgumentError(absl::StrCat("collective debug check before ",
                                                        call.Describe(seq), ": ", disagreement))));
  PADDLE_LOG(ERROR, COLL) << error;
  return error;
}

}  // namespace paddle
