// Test support for the Communicator: groups of communicators with ranks as threads, and inputs
// whose every result element is known exactly.
//
// A CommGroup is `n` communicators in this process, created at once on n threads through one
// store: a HashStore, or a TcpStoreServer with one TcpStore client per rank (what real
// processes use; the ThreadSanitizer build uses it always, since TSan cannot see the absl::Mutex
// inside HashStore). Tests reuse a group across many cases; a case that poisons it makes a new
// one.
//
// Note [Exact communicator inputs]
// Element i of rank r's input is a small integer drawn from a hash of (seed, r, i), chosen so that
// every partial result of every algorithm is exact in every dtype for up to 8 ranks: sum, avg,
// min and max use [-8, 8] ([0, 16] for uint8), so partial sums stay within 64 in magnitude, which
// float16 and bfloat16 hold exactly; prod uses {-2, -1, 1, 2} ({1, 2} for uint8), so products are
// +-2^k with k <= 8 (uint8 wraps modulo 256, as the kernels do). The order in which ranks are
// combined then cannot change any bit, so every output element is compared exactly. avg is the
// exact sum divided once, as FinishAvg does it (float16/bfloat16 in float32, rounded once).
// Collectives that only move data get arbitrary bytes from (seed, rank, byte index).
#ifndef TESTS_COLLECTIVE_COMMUNICATOR_TESTING_H_
#define TESTS_COLLECTIVE_COMMUNICATOR_TESTING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace commtest {

// Success paths wait this long: far beyond what they need, so a loaded machine never flakes.
constexpr absl::Duration kGenerous = absl::Seconds(120);

enum class StoreKind { kDefault, kHash, kTcp };  // kDefault: kTcp under TSan, else kHash

struct GroupOptions {
  Backend backend = Backend::kNative;
  int world_size = 2;
  StoreKind store = StoreKind::kDefault;
  std::string algorithm;           // CommunicatorOptions.algorithm
  std::string transport = "auto";  // CommunicatorOptions.transport
  bool debug_checks = false;
  absl::Duration timeout = kGenerous;
  // Per-rank debug_checks override (for the settings-mismatch test); empty: all alike.
  std::vector<bool> debug_checks_per_rank;
};

class CommGroup {
 public:
  // All ranks' communicators, or the first rank's error.
  static absl::StatusOr<std::unique_ptr<CommGroup>> Create(const GroupOptions& options);
  // Every rank's own result of Communicator::Create, for tests of creation errors (the store
  // server, if any, is gone when this returns: Split would fail).
  static std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> CreateEach(
      const GroupOptions& options);
  ~CommGroup();

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& comm(int rank) { return *comms_[rank]; }
  // Drops the communicators (all of them at once, on one thread per rank).
  void Destroy();

  // Runs body(rank, communicator) on one thread per rank, joins them and returns each status.
  std::vector<absl::Status> Run(const std::function<absl::Status(int rank, Communicator&)>& body);

 private:
  CommGroup() = default;
  // Starts the store server in *server when the options ask for a TcpStore.
  static std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> CreateEach(
      const GroupOptions& options, std::unique_ptr<TcpStoreServer>* server);

  std::unique_ptr<TcpStoreServer> server_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// "OK", or one "rank i: <status>" line per failed rank.
std::string DescribeFailures(const std::vector<absl::Status>& statuses);
bool AllOk(const std::vector<absl::Status>& statuses);

// ---- Inputs and expected results (Note [Exact communicator inputs]) ----

// Element `index` of `rank`'s reduction input for `op`, as an integer.
int64_t InputValue(uint64_t seed, int rank, int64_t index, DType dtype, ReduceOp op);

// A new contiguous CPU tensor of `count` elements holding InputValue for `rank`.
Tensor MakeReductionInput(int64_t count, DType dtype, uint64_t seed, int rank, ReduceOp op);

// The reduction with `op` over ranks 0..world_size-1 of elements [first_index, first_index +
// count) of their inputs, as `dtype`.
Tensor ExpectedReduction(int64_t first_index, int64_t count, DType dtype, int world_size,
                         uint64_t seed, ReduceOp op);

// OK if `got` and `want` hold the same bits; else the number and the first few differing
// elements (numbered from `first_index`), decoded. `what` names the result.
absl::Status CompareElements(const Tensor& got, const Tensor& want, int64_t first_index,
                             const std::string& what);

// Fills bytes [0, t.nbytes()) of `t` with byte `offset + k` of (seed, rank)'s byte stream.
void FillBytes(const Tensor& t, uint64_t seed, int rank, int64_t offset = 0);
// Checks `bytes` bytes of `got` from byte `got_offset` on against (seed, rank)'s stream from
// `offset` on; `what` names the block in the message.
absl::Status CheckBytes(const Tensor& got, int64_t got_offset, int64_t bytes, uint64_t seed,
                        int rank, int64_t offset, const std::string& what);

// A contiguous CPU tensor of `count` elements (uninitialized).
Tensor NewTensor(int64_t count, DType dtype);

// The dtypes the tests sweep: float32, float64, float16, bfloat16, int32, int64, uint8.
const std::vector<DType>& SweepDTypes();
// Whether `op` applies to `dtype` (avg needs floating point).
bool OpApplies(DType dtype, ReduceOp op);

}  // namespace commtest
}  // namespace paddle

#endif  // TESTS_COLLECTIVE_COMMUNICATOR_TESTING_H_
