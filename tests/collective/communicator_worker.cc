// One rank of communicator_process_test: a real process that joins a native communicator through
// the TcpStoreServer the test hosts, then runs one scenario.
//
//   communicator_worker PORT RANK WORLD MODE
//
// MODE "collectives": every collective once or more, checked element by element (Note [Exact
//   communicator inputs]), Split included; prints WORKER_OK and exits 0, or WORKER_ERROR and
//   exits 1.
// MODE "until_failure": 64 MiB float32 allreduces in a loop; after the second one sets the store
//   key ready/RANK; on the first failure prints "WORKER_FAILED <status>" and exits 3. The test
//   kills one rank in the middle of the loop.
// MODE "mismatch_count", "mismatch_dtype", "mismatch_op", "mismatch_root": one agreeing
//   allreduce, then a call in which one rank differs (101 float32 against 100; int32
//   against float32; allreduce against broadcast; broadcast root 1 against root 0), then a
//   barrier; prints "WORKER_MISMATCH <status>" with the first failure and exits 4, or
//   WORKER_UNNOTICED and exits 0 (Note [Agreement check]).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using commtest::CompareElements;
using commtest::ExpectedReduction;
using commtest::MakeReductionInput;
using commtest::NewTensor;

constexpr absl::Duration kLong = absl::Seconds(120);

absl::Status CheckedAllreduce(Communicator& comm, int64_t count, DType dtype, ReduceOp op,
                              uint64_t seed) {
  Tensor t = MakeReductionInput(count, dtype, seed, comm.rank(), op);
  std::shared_ptr<Work> work = comm.Allreduce(t, op);
  RETURN_IF_ERROR(work->Wait());
  return CompareElements(t, ExpectedReduction(0, count, dtype, comm.world_size(), seed, op), 0,
                         work->Describe());
}

absl::Status RunCollectives(Communicator& comm) {
  const int n = comm.world_size();
  const int rank = comm.rank();
  uint64_t seed = 1;
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n + 1}, int64_t{100003}}) {
    RETURN_IF_ERROR(CheckedAllreduce(comm, count, DType::kFloat32, ReduceOp::kSum, seed++));
    RETURN_IF_ERROR(CheckedAllreduce(comm, count, DType::kBFloat16, ReduceOp::kAvg, seed++));
    RETURN_IF_ERROR(CheckedAllreduce(comm, count, DType::kInt64, ReduceOp::kProd, seed++));
  }
  // Broadcast from the last rank.
  Tensor b = NewTensor(12345, DType::kFloat64);
  commtest::FillBytes(b, 20, rank);
  RETURN_IF_ERROR(comm.Broadcast(b, n - 1)->Wait());
  RETURN_IF_ERROR(commtest::CheckBytes(b, 0, b.nbytes(), 20, n - 1, 0, "broadcast"));
  // Allgatherv with an empty block.
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    counts.push_back(r == 1 ? 0 : 1000 + r);
    total += counts.back();
  }
  Tensor in = NewTensor(counts[rank], DType::kUInt8);
  Tensor out = NewTensor(total, DType::kUInt8);
  commtest::FillBytes(in, 21, rank);
  RETURN_IF_ERROR(comm.Allgatherv(in, out, counts)->Wait());
  int64_t offset = 0;
  for (int r = 0; r < n; ++r) {
    RETURN_IF_ERROR(commtest::CheckBytes(out, offset, counts[r], 21, r, 0, "allgatherv"));
    offset += counts[r];
  }
  // Reduce-scatter.
  constexpr int64_t kBlock = 777;
  Tensor rs_in = MakeReductionInput(n * kBlock, DType::kFloat16, 22, rank, ReduceOp::kSum);
  Tensor rs_out = NewTensor(kBlock, DType::kFloat16);
  RETURN_IF_ERROR(comm.ReduceScatter(rs_in, rs_out, ReduceOp::kSum)->Wait());
  RETURN_IF_ERROR(CompareElements(
      rs_out, ExpectedReduction(rank * kBlock, kBlock, DType::kFloat16, n, 22, ReduceOp::kSum),
      rank * kBlock, "reduce_scatter"));
  // Alltoall.
  Tensor a_in = NewTensor(n * kBlock, DType::kInt32);
  Tensor a_out = NewTensor(n * kBlock, DType::kInt32);
  commtest::FillBytes(a_in, 23, rank);
  RETURN_IF_ERROR(comm.Alltoall(a_in, a_out)->Wait());
  for (int j = 0; j < n; ++j) {
    RETURN_IF_ERROR(commtest::CheckBytes(a_out, j * kBlock * 4, kBlock * 4, 23, j,
                                         rank * kBlock * 4, "alltoall"));
  }
  // Send/recv around the ring.
  Tensor to_right = NewTensor(4097, DType::kUInt8);
  Tensor from_left = NewTensor(4097, DType::kUInt8);
  commtest::FillBytes(to_right, 24, rank);
  std::shared_ptr<Work> sent = comm.Send(to_right, (rank + 1) % n, 5);
  std::shared_ptr<Work> received = comm.Recv(from_left, (rank + n - 1) % n, 5);
  RETURN_IF_ERROR(received->Wait());
  RETURN_IF_ERROR(sent->Wait());
  RETURN_IF_ERROR(commtest::CheckBytes(from_left, 0, 4097, 24, (rank + n - 1) % n, 0, "recv"));
  // Split off all ranks but the last.
  std::vector<int> members;
  for (int r = 0; r + 1 < n; ++r) members.push_back(r);
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split(members));
  if ((sub != nullptr) != (rank + 1 < n)) return absl::InternalError("Split membership");
  if (sub != nullptr) {
    RETURN_IF_ERROR(CheckedAllreduce(*sub, 5000, DType::kFloat32, ReduceOp::kMax, 25));
  }
  return comm.Barrier()->Wait();
}

int Run(int port, int rank, int world, const std::string& mode) {
  SetLogRank(rank, world);
  TcpStoreOptions store_options;
  store_options.host = "127.0.0.1";
  store_options.port = port;
  absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::Connect(store_options);
  if (!client.ok()) {
    std::printf("WORKER_ERROR store: %s\n", client.status().ToString().c_str());
    return 2;
  }
  std::shared_ptr<Store> store(std::move(*client));
  CommunicatorOptions options;
  options.store = store;
  options.rank = rank;
  options.world_size = world;
  options.timeout = mode == "collectives" ? kLong : absl::Seconds(30);
  options.connect_timeout = kLong;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  if (!comm.ok()) {
    std::printf("WORKER_ERROR create: %s\n", comm.status().ToString().c_str());
    return 2;
  }
  if (mode == "collectives") {
    const absl::Status s = RunCollectives(**comm);
    if (!s.ok()) {
      std::printf("WORKER_ERROR %s\n", s.ToString().c_str());
      return 1;
    }
    // Nobody tears its links down while another rank may still read from them.
    const absl::Status done = StoreBarrier(*store, "done", rank, world, kLong);
    std::printf("WORKER_OK rank=%d %s\n", rank, done.ToString().c_str());
    return done.ok() ? 0 : 1;
  }
  if (absl::StartsWith(mode, "mismatch_")) {
    absl::Status s = CheckedAllreduce(**comm, 10, DType::kFloat32, ReduceOp::kSum, 1);
    if (!s.ok()) {
      std::printf("WORKER_ERROR %s\n", s.ToString().c_str());
      return 1;
    }
    // The odd rank: the last one; for mismatch_op rank 0, the broadcast's root (with the last
    // rank broadcasting, three ranks over TCP can wait on each other in a cycle that carries no
    // stamp: the limit of Note [Agreement check]).
    const bool odd = rank == (mode == "mismatch_op" ? 0 : world - 1);
    Tensor t = NewTensor(odd && mode == "mismatch_count" ? 101 : 100,
                         odd && mode == "mismatch_dtype" ? DType::kInt32 : DType::kFloat32);
    if (mode == "mismatch_op") {
      s = (odd ? (*comm)->Broadcast(t, 0) : (*comm)->Allreduce(t, ReduceOp::kSum))->Wait();
    } else if (mode == "mismatch_root") {
      s = (*comm)->Broadcast(t, odd ? 1 : 0)->Wait();
    } else {
      s = (*comm)->Allreduce(t, ReduceOp::kSum)->Wait();
    }
    if (s.ok()) s = (*comm)->Barrier()->Wait();
    if (s.ok()) {
      std::printf("WORKER_UNNOTICED rank=%d\n", rank);
      return 0;
    }
    std::printf("WORKER_MISMATCH %s\n", s.ToString().c_str());
    // Exiting at once could close this rank's links before a peer read the poison's cause.
    (void)StoreBarrier(*store, "mismatch_done", rank, world, absl::Seconds(30));
    return 4;
  }
  if (mode == "until_failure") {
    absl::StatusOr<Tensor> t = Tensor::Zeros({int64_t{16} << 20}, DType::kFloat32);  // 64 MiB
    if (!t.ok()) return 2;
    for (int i = 0;; ++i) {
      const absl::Status s = (*comm)->Allreduce(*t, ReduceOp::kSum)->Wait();
      if (!s.ok()) {
        std::printf("WORKER_FAILED iteration=%d: %s\n", i, s.ToString().c_str());
        return 3;
      }
      if (i == 1) {
        const absl::Status ready = store->Set(absl::StrCat("ready/", rank), "1");
        if (!ready.ok()) return 2;
      }
    }
  }
  std::printf("WORKER_ERROR unknown mode %s\n", mode.c_str());
  return 2;
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  int port = 0;
  int rank = 0;
  int world = 0;
  if (argc != 5 || !absl::SimpleAtoi(argv[1], &port) || !absl::SimpleAtoi(argv[2], &rank) ||
      !absl::SimpleAtoi(argv[3], &world)) {
    std::fprintf(stderr, "usage: %s PORT RANK WORLD MODE\n", argv[0]);
    return 2;
  }
  const int code = paddle::Run(port, rank, world, argv[4]);
  std::fflush(stdout);
  return code;
}
