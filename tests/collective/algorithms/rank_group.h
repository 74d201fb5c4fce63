// Threads as ranks for the algorithm tests: a RankGroup is `n` transports in this process, either
// TCP on loopback (connected through one HashStore) or the in-process test transport
// (in_process_transport.h), created once per (transport, world size) and reused by every case of a
// test binary (connecting is the slow part). Each case runs one function per rank on its own
// thread with a fresh sequence number, so cases never see each other's messages.
//
// Note [Exact inputs]
// Reduction inputs are small integers made from (seed, rank, index), chosen so that every partial
// result of every algorithm is exact in every dtype: sums of 8 values in [-8, 8] (uint8: [0, 16])
// stay within +-64, which float16 and bfloat16 (8 significant bits) hold exactly; products use
// values in {-2, -1, 1, 2} ({1, 2} for uint8), so they are +-2^k with k <= 8. The order in which
// an algorithm combines the ranks then cannot change the result, and every output element can be
// compared bit for bit with one expected buffer (uint8 products wrap modulo 256, as the kernels
// do). kAvg: the exact sum divided by n, rounded once, which is what FinishAvg computes.
#ifndef TESTS_COLLECTIVE_ALGORITHMS_RANK_GROUP_H_
#define TESTS_COLLECTIVE_ALGORITHMS_RANK_GROUP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/reduction.h"
#include "paddle/collective/transport/transport.h"
#include "paddle/core/dtype.h"

namespace paddle {
namespace testutil {

// Success paths wait this long: far beyond what they need, so a loaded machine never flakes.
constexpr absl::Duration kGenerousTimeout = absl::Seconds(120);

enum class TransportKind { kTcp, kInProcess };

// "tcp", "inproc": for test names.
const char* TransportKindName(TransportKind kind);

class RankGroup {
 public:
  // Connects `world_size` transports of `kind` (TCP: one thread per rank while connecting).
  static absl::StatusOr<std::unique_ptr<RankGroup>> Create(
      int world_size, TransportKind kind = TransportKind::kTcp);

  int size() const { return static_cast<int>(transports_.size()); }
  Transport& transport(int rank) { return *transports_[rank]; }
  // A fresh sequence number for the next operation (the same for every rank of it).
  uint64_t NextSeq() { return next_seq_++; }

  // Runs `body(rank)` on one thread per rank, joins them and returns each rank's status.
  std::vector<absl::Status> Run(const std::function<absl::Status(int rank)>& body);

  // A context for `rank` of the operation `seq`, deadline kGenerousTimeout.
  AlgorithmContext Context(int rank, const std::string& op, uint64_t seq);

 private:
  std::vector<std::unique_ptr<Transport>> transports_;
  uint64_t next_seq_ = 1;
};

// Groups by (transport, world size), created on first use. A case that fails calls Discard so the
// next case gets a fresh group instead of a poisoned transport.
class RankGroups {
 public:
  RankGroup& Get(TransportKind kind, int world_size);
  void Discard(TransportKind kind, int world_size) { groups_.erase({kind, world_size}); }

 private:
  std::map<std::pair<TransportKind, int>, std::unique_ptr<RankGroup>> groups_;
};

// "OK" if every status is OK, else "rank i: <status>" lines for the failed ones.
std::string DescribeFailures(const std::vector<absl::Status>& statuses);
bool AllOk(const std::vector<absl::Status>& statuses);

// ---- Inputs and expected results ----

// A well-mixed 64-bit hash of (seed, rank, index) (splitmix64's finalizer).
uint64_t Mix(uint64_t seed, int rank, int64_t index);

// Element `index` of `rank`'s input for a reduction with `op` (Note [Exact inputs]).
int64_t ExactInput(uint64_t seed, int rank, int64_t index, DType dtype, ReduceOp op);

// Writes `value` as one element of `dtype` (integers wrap; floats round once).
void StoreElement(DType dtype, double value, void* dst);

// `count` elements of ExactInput for `rank`.
std::vector<uint8_t> MakeReductionInput(uint64_t seed, int rank, int64_t count, DType dtype,
                                        ReduceOp op);
// The reduction over ranks 0..world_size-1 of ExactInput, element by element.
std::vector<uint8_t> ExpectedReduction(uint64_t seed, int world_size, int64_t count, DType dtype,
                                       ReduceOp op);

// Arbitrary bytes from (seed, rank, index), for collectives that only move data.
std::vector<uint8_t> MakeBytes(uint64_t seed, int rank, size_t bytes);

// Empty if `got` equals `want`; else the first few differing elements of `dtype`, decoded.
std::string CompareElements(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                            DType dtype);

}  // namespace testutil
}  // namespace paddle

#endif  // TESTS_COLLECTIVE_ALGORITHMS_RANK_GROUP_H_
