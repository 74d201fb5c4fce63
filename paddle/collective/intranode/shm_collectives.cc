// Intra-node collectives over the node workspace; see shm_collectives.h.
//
// Note [Workspace progress]
// Every collective here is a sequence of rounds, and every local rank runs the same rounds (the
// counts are derived from arguments all ranks share). Round R (the workspace's round counter,
// equal on all local ranks) uses slot buffer R % 2 of each rank, and a rank's progress counter
// moves through three values per round:
//   3R + 1  its slot holds this round's input
//   3R + 2  its slot also holds its reduced block (allreduce only)
//   3R + 3  it has finished reading the other ranks' slots of this round
// A rank may write its slot buffer R % 2 only when every peer has reached 3(R - 2) + 3, i.e. has
// finished reading that buffer two rounds ago; with two buffers a rank can fill the next round's
// slot while slower peers still read the previous one. A phase a collective does not need is
// skipped: counters only move forward and waits are for "at least", so a rank that posts 3R + 3
// also satisfies anyone waiting for 3R + 1 or 3R + 2 of it (only a rank that has really written
// its slot posts 3R + 1, so nobody reads a slot before it is filled).
//
// Allreduce of n elements over L local ranks, large messages (steps of one round; block l is
// the l-th of L near-equal blocks of the buffer, and a round moves piece k of every block):
//   1. wait until the slot buffer is free; copy piece k of every other rank's block into the
//      own slot; post 3R + 1
//   2. for each peer j: wait for 3R + 1, then reduce the own block's piece of j's slot into the
//      own piece where it lies in the user buffer; for kAvg divide; copy the result into the own
//      slot's part for the own block; post 3R + 2
//   3. for each peer l: wait for 3R + 2, copy block l's reduced piece from l's slot into the
//      user buffer; post 3R + 3
// Each rank reads and writes its user buffer about once and the slots, which stay in the cache.
// Reducing the own piece in place rather than in a copy in the slot saves one block copy per
// round (copy in, reduce there, copy back out would be two). Reduce-scatter, whose result goes
// to a separate output, copies its own block in as well and reduces in the slot. Small messages
// take one synchronisation: every rank copies its whole message into its slot, then reduces all
// slots in rank order into its buffer.
#include "paddle/collective/intranode/shm_collectives.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/collective/algorithms/partition.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/collective/transport/subset_transport.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

uint32_t Phase(uint64_t round, uint32_t phase) { return static_cast<uint32_t>(3 * round + phase); }

// Fails the operation: the local peers are told (the workspace abort flag) and the transport is
// poisoned with the error and the operation's context (AlgorithmContext::Fail).
absl::Status Failed(const AlgorithmContext& ctx, NodeWorkspace& ws, const absl::Status& s) {
  absl::Status error = ctx.Fail(Annotate(s, "node workspace"));
  ws.Abort(error);
  return error;
}

#define WS_RETURN_IF_ERROR(ctx, ws, expr)                         \
  do {                                                            \
    const absl::Status ws_status_ = (expr);                       \
    if (!ws_status_.ok()) return Failed((ctx), (ws), ws_status_); \
  } while (0)

// Note [Agreement check]: this rank's stamp beside its slot buffer of `round`, published by its
// next Post. Only after ReserveSlot: a peer may still read the stamp of round - 2.
void WriteStamp(const AlgorithmContext& ctx, NodeWorkspace& ws, uint64_t round) {
  if (const CallStamp* stamp = ctx.stamp(); stamp != nullptr) {
    std::memcpy(ws.round_stamp(ws.local_rank(), static_cast<int>(round & 1)), stamp,
                sizeof(CallStamp));
  }
}

// Step 1's end: this rank's slot holds its input of `round`, and its stamp is beside it.
void PostInput(const AlgorithmContext& ctx, NodeWorkspace& ws, uint64_t round) {
  WriteStamp(ctx, ws, round);
  ws.Post(Phase(round, 1));
}

// Waits until local rank `local` posted its input of `round`, and checks that it is the input of
// the same call (Note [Agreement check]) before anybody reads it.
absl::Status WaitInput(const AlgorithmContext& ctx, NodeWorkspace& ws, int local, uint64_t round) {
  RETURN_IF_ERROR(ws.WaitFor(local, Phase(round, 1), ctx.deadline()));
  const CallStamp* mine = ctx.stamp();
  if (mine == nullptr) return absl::OkStatus();
  const uint8_t* theirs = ws.round_stamp(local, static_cast<int>(round & 1));
  if (std::memcmp(theirs, mine, sizeof(CallStamp)) == 0) return absl::OkStatus();
  CallStamp other;
  std::memcpy(&other, theirs, sizeof(CallStamp));
  return StampMismatchError(ws.global_rank(ws.local_rank()), ctx.size(), ws.global_rank(local), "",
                            *mine, other, "node workspace");
}

// Step 1's first half: the slot buffer of round R is free once every peer read it in R - 2.
absl::Status ReserveSlot(const AlgorithmContext& ctx, NodeWorkspace& ws, uint64_t round) {
  if (round < 2) return absl::OkStatus();
  return ws.WaitForPeers(Phase(round - 2, 3), ctx.deadline());
}

// Note [Agreement check]: the round of an empty call, in which the ranks only compare stamps, so
// that a rank with an empty tensor among ranks with data fails like any other mismatch (it reads
// their stamps, they read its stamp in their first round), and an all-empty call agrees.
absl::Status StampRound(const AlgorithmContext& ctx, NodeWorkspace& ws) {
  const int n = ws.local_size();
  if (n == 1) return absl::OkStatus();
  const uint64_t round = ws.round();
  WS_RETURN_IF_ERROR(ctx, ws, ReserveSlot(ctx, ws, round));
  PostInput(ctx, ws, round);
  for (int i = 1; i < n; ++i) {
    WS_RETURN_IF_ERROR(ctx, ws, WaitInput(ctx, ws, (ws.local_rank() + i) % n, round));
  }
  ws.Post(Phase(round, 3));
  ++ws.round();
  return absl::OkStatus();
}

// Piece k of `block` when blocks are cut into pieces of `piece` elements.
ElementRange PieceOf(const ElementRange& block, int64_t k, int64_t piece) {
  const int64_t start = std::min(block.count, k * piece);
  const int64_t end = std::min(block.count, (k + 1) * piece);
  return {block.offset + start, end - start};
}

int64_t Rounds(const std::vector<ElementRange>& blocks, int64_t piece) {
  int64_t largest = 0;
  for (const ElementRange& b : blocks) largest = std::max(largest, b.count);
  return (largest + piece - 1) / piece;
}

std::vector<ElementRange> EvenBlocks(int64_t count, int parts) {
  std::vector<ElementRange> blocks(static_cast<size_t>(parts));
  for (int l = 0; l < parts; ++l) blocks[static_cast<size_t>(l)] = EvenPart(count, parts, l);
  return blocks;
}

// Steps 1-2 (and 3 when `allgather` is set) of Note [Workspace progress] over `blocks` of
// `input`. The reduced pieces of this rank's block go to `output` (indexed like `input`'s block,
// i.e. output + (piece.offset - block.offset)); with `allgather`, every block's reduced piece goes
// to `gather_into` at its offset. `avg_divisor` > 0 divides the reduced pieces (kAvg).
absl::Status BlockRounds(const AlgorithmContext& ctx, NodeWorkspace& ws, const uint8_t* input,
                         const std::vector<ElementRange>& blocks, uint8_t* output,
                         uint8_t* gather_into, DType dtype, ReduceOp op, int avg_divisor) {
  const size_t es = DTypeSize(dtype);
  const int n = ws.local_size();
  const int me = ws.local_rank();
  const int64_t piece = std::max<int64_t>(1, static_cast<int64_t>(ws.slot_bytes() / n / es));
  const size_t sub_bytes = static_cast<size_t>(piece) * es;  // one block's part of a slot
  const int64_t rounds = Rounds(blocks, piece);
  const ElementRange& mine = blocks[static_cast<size_t>(me)];
  // The allreduce of Note [Workspace progress] reduces the own piece in the user buffer.
  const bool in_place = gather_into != nullptr && gather_into == input && output == nullptr;
  for (int64_t k = 0; k < rounds; ++k) {
    const uint64_t round = ws.round();
    const int buffer = static_cast<int>(round & 1);
    WS_RETURN_IF_ERROR(ctx, ws, ReserveSlot(ctx, ws, round));
    uint8_t* own = ws.slot(me, buffer);
    for (int l = 0; l < n; ++l) {
      const ElementRange p = PieceOf(blocks[static_cast<size_t>(l)], k, piece);
      if (p.count > 0 && !(in_place && l == me)) {
        std::memcpy(own + l * sub_bytes, input + ByteOffset(p.offset, dtype), p.count * es);
      }
    }
    PostInput(ctx, ws, round);

    const ElementRange p = PieceOf(mine, k, piece);
    uint8_t* acc = in_place ? gather_into + ByteOffset(p.offset, dtype) : own + me * sub_bytes;
    for (int i = 1; i < n; ++i) {
      const int j = (me + i) % n;
      WS_RETURN_IF_ERROR(ctx, ws, WaitInput(ctx, ws, j, round));
      WS_RETURN_IF_ERROR(ctx, ws,
                         Reduce(acc, ws.slot(j, buffer) + me * sub_bytes, p.count, dtype, op));
    }
    if (avg_divisor > 0) {
      WS_RETURN_IF_ERROR(ctx, ws, FinishAvg(acc, p.count, dtype, avg_divisor));
    }
    if (in_place && p.count > 0) std::memcpy(own + me * sub_bytes, acc, p.count * es);
    if (output != nullptr && p.count > 0) {
      std::memcpy(output + ByteOffset(p.offset - mine.offset, dtype), acc, p.count * es);
    }
    if (gather_into == nullptr) {
      ws.Post(Phase(round, 3));
      ++ws.round();
      continue;
    }
    ws.Post(Phase(round, 2));
    for (int i = 0; i < n; ++i) {
      const int l = (me + i) % n;
      const ElementRange q = PieceOf(blocks[static_cast<size_t>(l)], k, piece);
      if (l != me) WS_RETURN_IF_ERROR(ctx, ws, ws.WaitFor(l, Phase(round, 2), ctx.deadline()));
      if (q.count > 0 && !(in_place && l == me)) {
        std::memcpy(gather_into + ByteOffset(q.offset, dtype), ws.slot(l, buffer) + l * sub_bytes,
                    q.count * es);
      }
    }
    ws.Post(Phase(round, 3));
    ++ws.round();
  }
  return absl::OkStatus();
}

// Every rank contributes `blocks[me]` (read from `src`, which holds that block's elements) and
// receives every block into `output` at its offset.
absl::Status GatherRounds(const AlgorithmContext& ctx, NodeWorkspace& ws, const uint8_t* src,
                          const std::vector<ElementRange>& blocks, uint8_t* output, DType dtype) {
  const size_t es = DTypeSize(dtype);
  const int n = ws.local_size();
  const int me = ws.local_rank();
  const int64_t piece = std::max<int64_t>(1, static_cast<int64_t>(ws.slot_bytes() / es));
  const int64_t rounds = Rounds(blocks, piece);
  const ElementRange& mine = blocks[static_cast<size_t>(me)];
  const bool in_place = src == output + ByteOffset(mine.offset, dtype);
  for (int64_t k = 0; k < rounds; ++k) {
    const uint64_t round = ws.round();
    const int buffer = static_cast<int>(round & 1);
    WS_RETURN_IF_ERROR(ctx, ws, ReserveSlot(ctx, ws, round));
    const ElementRange p = PieceOf(mine, k, piece);
    if (p.count > 0) {
      std::memcpy(ws.slot(me, buffer), src + ByteOffset(p.offset - mine.offset, dtype),
                  p.count * es);
      if (!in_place) {
        std::memcpy(output + ByteOffset(p.offset, dtype),
                    src + ByteOffset(p.offset - mine.offset, dtype), p.count * es);
      }
    }
    PostInput(ctx, ws, round);
    for (int i = 1; i < n; ++i) {
      const int j = (me + i) % n;
      const ElementRange q = PieceOf(blocks[static_cast<size_t>(j)], k, piece);
      WS_RETURN_IF_ERROR(ctx, ws, WaitInput(ctx, ws, j, round));
      if (q.count > 0) {
        std::memcpy(output + ByteOffset(q.offset, dtype), ws.slot(j, buffer), q.count * es);
      }
    }
    ws.Post(Phase(round, 3));
    ++ws.round();
  }
  return absl::OkStatus();
}

// One synchronisation: everybody reduces everything, in rank order (so all get the same bits).
absl::Status SmallAllreduce(const AlgorithmContext& ctx, NodeWorkspace& ws, uint8_t* data,
                            int64_t count, DType dtype, ReduceOp op) {
  const size_t bytes = ByteOffset(count, dtype);
  const int n = ws.local_size();
  const int me = ws.local_rank();
  const uint64_t round = ws.round();
  const int buffer = static_cast<int>(round & 1);
  WS_RETURN_IF_ERROR(ctx, ws, ReserveSlot(ctx, ws, round));
  std::memcpy(ws.slot(me, buffer), data, bytes);
  PostInput(ctx, ws, round);
  WS_RETURN_IF_ERROR(ctx, ws, WaitInput(ctx, ws, 0, round));
  if (me != 0) std::memcpy(data, ws.slot(0, buffer), bytes);
  for (int j = 1; j < n; ++j) {
    if (j != me) WS_RETURN_IF_ERROR(ctx, ws, WaitInput(ctx, ws, j, round));
    WS_RETURN_IF_ERROR(ctx, ws, Reduce(data, ws.slot(j, buffer), count, dtype, op));
  }
  if (op == ReduceOp::kAvg) WS_RETURN_IF_ERROR(ctx, ws, FinishAvg(data, count, dtype, n));
  ws.Post(Phase(round, 3));
  ++ws.round();
  return absl::OkStatus();
}

}  // namespace

absl::Status ShmAllreduce(const AlgorithmContext& ctx, NodeWorkspace& ws, void* data, int64_t count,
                          DType dtype, ReduceOp op) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return ctx.InvalidArgument(s.message());
  if (count == 0) return StampRound(ctx, ws);
  if (ws.local_size() == 1) {
    if (op == ReduceOp::kAvg) return FinishAvg(data, count, dtype, 1);
    return absl::OkStatus();
  }
  auto* bytes = static_cast<uint8_t*>(data);
  const size_t size = ByteOffset(count, dtype);
  if (size <= std::min(kShmSmallMessageBytes, ws.slot_bytes())) {
    return SmallAllreduce(ctx, ws, bytes, count, dtype, op);
  }
  const std::vector<ElementRange> blocks = EvenBlocks(count, ws.local_size());
  const int divisor = op == ReduceOp::kAvg ? ws.local_size() : 0;
  return BlockRounds(ctx, ws, bytes, blocks, /*output=*/nullptr, /*gather_into=*/bytes, dtype, op,
                     divisor);
}

absl::Status ShmReduceScatter(const AlgorithmContext& ctx, NodeWorkspace& ws, const void* input,
                              void* output, int64_t block_count, DType dtype, ReduceOp op) {
  const int n = ws.local_size();
  RETURN_IF_ERROR(ctx.CheckBuffer(input, block_count * n, dtype));
  RETURN_IF_ERROR(ctx.CheckBuffer(output, block_count, dtype));
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return ctx.InvalidArgument(s.message());
  std::vector<ElementRange> blocks(static_cast<size_t>(n));
  for (int l = 0; l < n; ++l) blocks[static_cast<size_t>(l)] = {l * block_count, block_count};
  if (block_count == 0) return StampRound(ctx, ws);
  if (n == 1) {
    if (input != output) std::memcpy(output, input, ByteOffset(block_count, dtype));
    return op == ReduceOp::kAvg ? FinishAvg(output, block_count, dtype, 1) : absl::OkStatus();
  }
  return BlockRounds(ctx, ws, static_cast<const uint8_t*>(input), blocks,
                     static_cast<uint8_t*>(output), /*gather_into=*/nullptr, dtype, op,
                     op == ReduceOp::kAvg ? n : 0);
}

absl::Status ShmAllgather(const AlgorithmContext& ctx, NodeWorkspace& ws, const void* input,
                          void* output, int64_t count, DType dtype) {
  const int n = ws.local_size();
  RETURN_IF_ERROR(ctx.CheckBuffer(input, count, dtype));
  RETURN_IF_ERROR(ctx.CheckBuffer(output, count * n, dtype));
  std::vector<ElementRange> blocks(static_cast<size_t>(n));
  for (int l = 0; l < n; ++l) blocks[static_cast<size_t>(l)] = {l * count, count};
  if (count == 0) return StampRound(ctx, ws);
  return GatherRounds(ctx, ws, static_cast<const uint8_t*>(input), blocks,
                      static_cast<uint8_t*>(output), dtype);
}

absl::Status ShmBroadcast(const AlgorithmContext& ctx, NodeWorkspace& ws, void* data, int64_t count,
                          DType dtype, int root) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  if (root < 0 || root >= ws.local_size()) {
    return ctx.InvalidArgument(
        absl::StrCat("root ", root, " is not a local rank (0..", ws.local_size() - 1, ")"));
  }
  if (count == 0) return StampRound(ctx, ws);
  if (ws.local_size() == 1) return absl::OkStatus();
  const size_t es = DTypeSize(dtype);
  const int me = ws.local_rank();
  auto* bytes = static_cast<uint8_t*>(data);
  const int64_t piece = std::max<int64_t>(1, static_cast<int64_t>(ws.slot_bytes() / es));
  const ElementRange all{0, count};
  for (int64_t k = 0; k < (count + piece - 1) / piece; ++k) {
    const uint64_t round = ws.round();
    const int buffer = static_cast<int>(round & 1);
    const ElementRange p = PieceOf(all, k, piece);
    WS_RETURN_IF_ERROR(ctx, ws, ReserveSlot(ctx, ws, round));
    if (me == root) {
      std::memcpy(ws.slot(root, buffer), bytes + ByteOffset(p.offset, dtype), p.count * es);
      PostInput(ctx, ws, round);
    } else {
      // Nobody reads a non-root's slot, but a rank that takes it for the root (another root
      // argument) reads its stamp, which then names this rank's call.
      WriteStamp(ctx, ws, round);
      WS_RETURN_IF_ERROR(ctx, ws, WaitInput(ctx, ws, root, round));
      std::memcpy(bytes + ByteOffset(p.offset, dtype), ws.slot(root, buffer), p.count * es);
    }
    ws.Post(Phase(round, 3));
    ++ws.round();
  }
  return absl::OkStatus();
}

// Note [Workspace alltoall]
// Each round moves piece k of every block (blocks cut into pieces of slot_bytes / L elements, so
// that one piece for each of the L local ranks fits a slot side by side):
//   1. wait until the slot buffer is free; copy piece k of the block for local rank l into part
//      l of the own slot, for every l but this rank; post 3R + 1
//   2. for each peer j: wait for 3R + 1, copy part (this rank) of j's slot into piece k of
//      output block j; post 3R + 3
// A byte is copied once into shared memory and once out, and every rank reads and writes only its
// own user buffers, in n - 1 reads that run side by side instead of n - 1 message steps. The own
// block is copied directly, once. In place (output == input) works because step 1 has copied
// piece k of every block before step 2 writes piece k of any: a round writes only what it read.
absl::Status ShmAlltoall(const AlgorithmContext& ctx, NodeWorkspace& ws, const void* input,
                         void* output, int64_t count, DType dtype) {
  const int n = ws.local_size();
  if (count < 0) return ctx.InvalidArgument(absl::StrCat("negative element count ", count));
  RETURN_IF_ERROR(ctx.CheckBuffer(input, count * n, dtype));
  RETURN_IF_ERROR(ctx.CheckBuffer(output, count * n, dtype));
  if (count == 0) return StampRound(ctx, ws);
  const size_t es = DTypeSize(dtype);
  const int me = ws.local_rank();
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(output);
  const size_t block_bytes = ByteOffset(count, dtype);
  if (in != out) std::memcpy(out + me * block_bytes, in + me * block_bytes, block_bytes);
  if (n == 1) return absl::OkStatus();
  const int64_t piece = std::max<int64_t>(1, static_cast<int64_t>(ws.slot_bytes() / n / es));
  const size_t sub_bytes = static_cast<size_t>(piece) * es;  // one destination's part of a slot
  const int64_t rounds = (count + piece - 1) / piece;
  for (int64_t k = 0; k < rounds; ++k) {
    const uint64_t round = ws.round();
    const int buffer = static_cast<int>(round & 1);
    const size_t offset = static_cast<size_t>(k) * sub_bytes;  // of piece k within a block
    const size_t bytes = std::min(sub_bytes, block_bytes - offset);
    WS_RETURN_IF_ERROR(ctx, ws, ReserveSlot(ctx, ws, round));
    uint8_t* own = ws.slot(me, buffer);
    for (int l = 0; l < n; ++l) {
      if (l != me) std::memcpy(own + l * sub_bytes, in + l * block_bytes + offset, bytes);
    }
    PostInput(ctx, ws, round);
    for (int i = 1; i < n; ++i) {
      const int j = (me + i) % n;
      WS_RETURN_IF_ERROR(ctx, ws, WaitInput(ctx, ws, j, round));
      std::memcpy(out + j * block_bytes + offset, ws.slot(j, buffer) + me * sub_bytes, bytes);
    }
    ws.Post(Phase(round, 3));
    ++ws.round();
  }
  return absl::OkStatus();
}

// Note [Pipelined hierarchical allreduce]
// Large buffers go through the three steps of Note [Hierarchical allreduce] chunk by chunk, so
// that the network step of one chunk overlaps the shared-memory steps of its neighbours: this
// thread runs, for chunk k, the intra-host reduce-scatter, hands the chunk to a helper thread that
// allreduces this rank's block of it across hosts, and then runs the intra-host allgather of
// chunk k - 1 once the helper has finished it. The shared-memory steps run on this thread only,
// in the same order on every local rank, so the workspace rounds stay in step; the transport is
// used by the helper only, one chunk after another, each chunk's messages tagged
// kHierarchicalChunkSteps steps after the previous chunk's (AfterSteps), so chunks cannot take
// each other's messages. Any failure aborts the transport and the workspace (which ends the
// other side's waits) and the helper is joined before returning.
namespace {

constexpr uint32_t kHierarchicalChunkSteps = 4096;  // more than any algorithm's steps

class CrossHostWorker {
 public:
  using Job = std::function<absl::Status()>;
  CrossHostWorker() : thread_([this] { Loop(); }) {}
  ~CrossHostWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Add(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  // The status of job `index` (0-based, in the order added), once it finished.
  absl::Status WaitFor(size_t index) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return results_.size() > index; });
    return results_[index];
  }

 private:
  void Loop() {
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || next_ < jobs_.size(); });
        if (next_ >= jobs_.size()) return;  // stopping with nothing left
        job = jobs_[next_++];
      }
      // After a failure the remaining jobs fail at once (the transport is aborted).
      absl::Status s = failed_ ? absl::AbortedError("an earlier chunk failed") : job();
      if (!s.ok()) failed_ = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        results_.push_back(std::move(s));
      }
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Job> jobs_;
  std::vector<absl::Status> results_;
  size_t next_ = 0;
  bool stop_ = false;
  bool failed_ = false;  // the worker thread only
  std::thread thread_;
};

}  // namespace

absl::Status PipelinedHierarchicalAllreduce(const AlgorithmContext& ctx, NodeWorkspace& ws,
                                            const std::vector<int>& cross_ranks,
                                            const AlgorithmSelector& selector, uint8_t* data,
                                            int64_t count, DType dtype, ReduceOp op) {
  const ReduceOp partial_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const int64_t chunk =
      std::max<int64_t>(static_cast<int64_t>(kHierarchicalChunkBytes / DTypeSize(dtype)),
                        (count + kMaxHierarchicalChunks - 1) / kMaxHierarchicalChunks);
  const int64_t chunks = (count + chunk - 1) / chunk;
  SubsetTransport cross(ctx.transport(), cross_ranks);
  const AlgorithmContext cross_ctx = ctx.OnSubset(cross);
  // Chunk k: its elements, its blocks, this rank's block.
  auto range = [&](int64_t k) {
    return ElementRange{k * chunk, std::min(chunk, count - k * chunk)};
  };
  absl::Status status;
  {
    CrossHostWorker worker;
    auto gather = [&](int64_t k) -> absl::Status {
      absl::Status cross_status = worker.WaitFor(static_cast<size_t>(k));
      if (!cross_status.ok()) {
        ws.Abort(cross_status);
        return cross_status;
      }
      const ElementRange r = range(k);
      uint8_t* base = data + ByteOffset(r.offset, dtype);
      const std::vector<ElementRange> blocks = EvenBlocks(r.count, ws.local_size());
      const ElementRange& mine = blocks[static_cast<size_t>(ws.local_rank())];
      uint8_t* my_block = base + ByteOffset(mine.offset, dtype);
      if (op == ReduceOp::kAvg) {
        WS_RETURN_IF_ERROR(ctx, ws, FinishAvg(my_block, mine.count, dtype, ctx.size()));
      }
      return GatherRounds(ctx, ws, my_block, blocks, base, dtype);
    };
    for (int64_t k = 0; k < chunks && status.ok(); ++k) {
      const ElementRange r = range(k);
      uint8_t* base = data + ByteOffset(r.offset, dtype);
      const std::vector<ElementRange> blocks = EvenBlocks(r.count, ws.local_size());
      const ElementRange mine = blocks[static_cast<size_t>(ws.local_rank())];
      uint8_t* my_block = base + ByteOffset(mine.offset, dtype);
      status = BlockRounds(ctx, ws, base, blocks, my_block, /*gather_into=*/nullptr, dtype,
                           partial_op, /*avg_divisor=*/0);
      if (!status.ok()) break;
      const AlgorithmContext chunk_ctx =
          cross_ctx.AfterSteps(static_cast<uint32_t>(k) * kHierarchicalChunkSteps);
      worker.Add([&selector, chunk_ctx, my_block, mine, dtype, partial_op] {
        return selector.Allreduce(chunk_ctx, my_block, mine.count, dtype, partial_op);
      });
      if (k > 0) status = gather(k - 1);
    }
    if (status.ok()) status = gather(chunks - 1);
    if (!status.ok()) {
      // Unblock the helper (its messages fail once the transport is aborted), then join it.
      ctx.transport().Abort(status);
      ws.Abort(status);
    }
  }
  return status;
}

// Note [Hierarchical allreduce]
// Hosts h = 0..H-1 with L ranks each; block l is the l-th of L near-equal blocks of the buffer.
//   1. within each host, ShmReduceScatter: local rank l holds block l summed over its host
//   2. across hosts, the ranks with local rank l allreduce block l (H ranks, over the
//      transport, algorithm from the table): block l summed over everybody
//   3. within each host, the blocks are gathered through the slots: everybody has everything
// Only step 2 crosses the network, and each rank sends about 2 (H-1)/H x n/L elements there
// instead of a flat ring's 2 (N-1)/N x n: the inter-host links carry the same total, but all L
// ranks of a host drive them at once and nothing intra-host touches a socket. kAvg reduces as
// kSum throughout and divides once, by the world size, at the end of step 2.
absl::Status HierarchicalAllreduce(const AlgorithmContext& ctx, NodeWorkspace& ws,
                                   const std::vector<int>& cross_ranks,
                                   const AlgorithmSelector& selector, void* data, int64_t count,
                                   DType dtype, ReduceOp op) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return ctx.InvalidArgument(s.message());
  // An empty call is compared within each host only: an empty rank among full ones fails there,
  // and its abort reaches the other hosts through the transport.
  if (count == 0) return StampRound(ctx, ws);
  if (ws.local_size() > 1 && cross_ranks.size() > 1 &&
      ByteOffset(count, dtype) >= 2 * kHierarchicalChunkBytes) {
    return PipelinedHierarchicalAllreduce(ctx, ws, cross_ranks, selector,
                                          static_cast<uint8_t*>(data), count, dtype, op);
  }
  auto* bytes = static_cast<uint8_t*>(data);
  const ReduceOp partial_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const std::vector<ElementRange> blocks = EvenBlocks(count, ws.local_size());
  const ElementRange& mine = blocks[static_cast<size_t>(ws.local_rank())];
  uint8_t* my_block = bytes + ByteOffset(mine.offset, dtype);
  if (ws.local_size() > 1) {
    RETURN_IF_ERROR(BlockRounds(ctx, ws, bytes, blocks, my_block, /*gather_into=*/nullptr, dtype,
                                partial_op, /*avg_divisor=*/0));
  }
  if (cross_ranks.size() > 1) {
    SubsetTransport cross(ctx.transport(), cross_ranks);
    const AlgorithmContext cross_ctx = ctx.OnSubset(cross);
    absl::Status s = selector.Allreduce(cross_ctx, my_block, mine.count, dtype, partial_op);
    if (!s.ok()) {
      ws.Abort(s);
      return s;
    }
  }
  if (op == ReduceOp::kAvg) {
    WS_RETURN_IF_ERROR(ctx, ws, FinishAvg(my_block, mine.count, dtype, ctx.size()));
  }
  if (ws.local_size() == 1) return absl::OkStatus();
  return GatherRounds(ctx, ws, my_block, blocks, bytes, dtype);
}

}  // namespace paddle
