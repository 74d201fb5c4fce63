// RankGroup and the exact inputs of the algorithm tests; see rank_group.h.
#include "tests/collective/algorithms/rank_group.h"

#include <cmath>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/transport/tcp/tcp_transport.h"
#include "paddle/core/half.h"
#include "paddle/core/logging.h"
#include "tests/collective/algorithms/in_process_transport.h"

#if defined(__SANITIZE_THREAD__)
// Debian's Abseil is not built for TSan, so TSan cannot see its locks and lazily initialised
// statics: HashStore (absl::Mutex) looks racy while the TCP transports exchange addresses through
// it, and so do the random pool the mesh setup draws jitter from and the time zone that
// absl::FormatDuration loads on first use. The transports and algorithms themselves lock with
// std::mutex, which TSan sees; these suppressions name only HashStore and those libraries.
extern "C" const char* __tsan_default_suppressions() {
  return "race:paddle::HashStore::\n"
         "called_from_lib:libabsl_random_internal_pool_urbg.so\n"
         "called_from_lib:libabsl_time_zone.so\n";
}
#endif

namespace paddle {
namespace testutil {

const char* TransportKindName(TransportKind kind) {
  return kind == TransportKind::kTcp ? "tcp" : "inproc";
}

absl::StatusOr<std::unique_ptr<RankGroup>> RankGroup::Create(int world_size, TransportKind kind) {
  auto group = std::make_unique<RankGroup>();
  group->transports_.resize(world_size);
  if (kind == TransportKind::kInProcess) {
    std::shared_ptr<InProcessHub> hub = InProcessHub::Create(world_size);
    for (int rank = 0; rank < world_size; ++rank) group->transports_[rank] = hub->Connect(rank);
    return group;
  }
  auto store = std::make_shared<HashStore>();
  std::vector<absl::Status> statuses(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      TransportOptions options;
      options.rank = rank;
      options.world_size = world_size;
      options.store = store;
      options.store_prefix = absl::StrCat("algorithms_test/", world_size);
      options.connect_timeout = kGenerousTimeout;
      absl::StatusOr<std::unique_ptr<Transport>> transport = CreateTcpTransport(options);
      if (transport.ok()) {
        group->transports_[rank] = std::move(*transport);
      } else {
        statuses[rank] = transport.status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return group;
}

std::vector<absl::Status> RankGroup::Run(const std::function<absl::Status(int rank)>& body) {
  std::vector<absl::Status> statuses(size());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size(); ++rank) {
    threads.emplace_back([&, rank] {
      ScopedLogRank log_rank(rank, size());
      statuses[rank] = body(rank);
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

AlgorithmContext RankGroup::Context(int rank, const std::string& op, uint64_t seq) {
  return AlgorithmContext(transport(rank), op, seq, Deadline::After(kGenerousTimeout));
}

RankGroup& RankGroups::Get(TransportKind kind, int world_size) {
  std::unique_ptr<RankGroup>& group = groups_[{kind, world_size}];
  if (group == nullptr) {
    absl::StatusOr<std::unique_ptr<RankGroup>> created = RankGroup::Create(world_size, kind);
    PADDLE_CHECK_OK(created.status());
    group = std::move(*created);
  }
  return *group;
}

std::string DescribeFailures(const std::vector<absl::Status>& statuses) {
  std::string out;
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    if (!statuses[rank].ok())
      absl::StrAppend(&out, "\n  rank ", rank, ": ", statuses[rank].ToString());
  }
  return out.empty() ? "OK" : out;
}

bool AllOk(const std::vector<absl::Status>& statuses) {
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return false;
  }
  return true;
}

// ---- Inputs and expected results ----

uint64_t Mix(uint64_t seed, int rank, int64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(rank) + 1) +
               0xd1b54a32d192ed03ull * static_cast<uint64_t>(index);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t ExactInput(uint64_t seed, int rank, int64_t index, DType dtype, ReduceOp op) {
  const uint64_t h = Mix(seed, rank, index);
  const bool is_unsigned = dtype == DType::kUInt8;
  if (op == ReduceOp::kProd) {
    if (is_unsigned) return 1 + static_cast<int64_t>(h % 2);
    static constexpr int64_t kFactors[] = {-2, -1, 1, 2};
    return kFactors[h % 4];
  }
  return is_unsigned ? static_cast<int64_t>(h % 17) : static_cast<int64_t>(h % 17) - 8;
}

void StoreElement(DType dtype, double value, void* dst) {
  switch (dtype) {
    case DType::kFloat32: {
      const float f = static_cast<float>(value);
      std::memcpy(dst, &f, sizeof(f));
      return;
    }
    case DType::kFloat64:
      std::memcpy(dst, &value, sizeof(value));
      return;
    case DType::kFloat16: {
      // Through float: double rounding is exact here (float has more than 2*11+2 bits).
      const uint16_t h = FloatToHalf(static_cast<float>(value));
      std::memcpy(dst, &h, sizeof(h));
      return;
    }
    case DType::kBFloat16: {
      const uint16_t b = FloatToBFloat16(static_cast<float>(value));
      std::memcpy(dst, &b, sizeof(b));
      return;
    }
    case DType::kInt8: {
      const int8_t v = static_cast<int8_t>(static_cast<int64_t>(value));
      std::memcpy(dst, &v, sizeof(v));
      return;
    }
    case DType::kUInt8: {
      const uint8_t v = static_cast<uint8_t>(static_cast<int64_t>(value));
      std::memcpy(dst, &v, sizeof(v));
      return;
    }
    case DType::kInt32: {
      const int32_t v = static_cast<int32_t>(static_cast<int64_t>(value));
      std::memcpy(dst, &v, sizeof(v));
      return;
    }
    case DType::kInt64: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(dst, &v, sizeof(v));
      return;
    }
    case DType::kBool:
      break;
  }
  PADDLE_CHECK(false) << "StoreElement: unsupported dtype " << DTypeName(dtype);
}

std::vector<uint8_t> MakeReductionInput(uint64_t seed, int rank, int64_t count, DType dtype,
                                        ReduceOp op) {
  const size_t esize = DTypeSize(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(count) * esize);
  for (int64_t i = 0; i < count; ++i) {
    StoreElement(dtype, static_cast<double>(ExactInput(seed, rank, i, dtype, op)),
                 out.data() + i * esize);
  }
  return out;
}

std::vector<uint8_t> ExpectedReduction(uint64_t seed, int world_size, int64_t count, DType dtype,
                                       ReduceOp op) {
  const size_t esize = DTypeSize(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(count) * esize);
  for (int64_t i = 0; i < count; ++i) {
    // Exact in int64: |sum| <= 64 * world_size / 8, |product| <= 2^world_size.
    int64_t acc = ExactInput(seed, 0, i, dtype, op);
    for (int rank = 1; rank < world_size; ++rank) {
      const int64_t x = ExactInput(seed, rank, i, dtype, op);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc += x;
          break;
        case ReduceOp::kProd:
          acc *= x;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, x);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, x);
          break;
      }
    }
    const double value =
        op == ReduceOp::kAvg ? static_cast<double>(acc) / world_size : static_cast<double>(acc);
    StoreElement(dtype, value, out.data() + i * esize);
  }
  return out;
}

std::vector<uint8_t> MakeBytes(uint64_t seed, int rank, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t h = Mix(seed, rank, static_cast<int64_t>(i / 8));
    std::memcpy(out.data() + i, &h, std::min<size_t>(8, bytes - i));
  }
  return out;
}

namespace {

std::string DecodeElement(const uint8_t* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, sizeof(f));
      return absl::StrCat(f);
    }
    case DType::kFloat64: {
      double d;
      std::memcpy(&d, p, sizeof(d));
      return absl::StrCat(d);
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      uint16_t bits;
      std::memcpy(&bits, p, sizeof(bits));
      return absl::StrCat(dtype == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits));
    }
    case DType::kInt8:
      return absl::StrCat(static_cast<int8_t>(*p));
    case DType::kUInt8:
    case DType::kBool:
      return absl::StrCat(*p);
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, sizeof(v));
      return absl::StrCat(v);
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, sizeof(v));
      return absl::StrCat(v);
    }
  }
  return "?";
}

}  // namespace

std::string CompareElements(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                            DType dtype) {
  if (got.size() != want.size()) {
    return absl::StrCat("size ", got.size(), " bytes, want ", want.size());
  }
  if (got == want) return "";
  const size_t esize = DTypeSize(dtype);
  std::string out;
  int shown = 0;
  size_t differing = 0;
  for (size_t i = 0; i < got.size() / esize; ++i) {
    if (std::memcmp(got.data() + i * esize, want.data() + i * esize, esize) == 0) continue;
    ++differing;
    if (shown++ < 5) {
      absl::StrAppend(&out, " [", i, "] got ", DecodeElement(got.data() + i * esize, dtype),
                      " want ", DecodeElement(want.data() + i * esize, dtype), ";");
    }
  }
  return absl::StrCat(differing, " of ", got.size() / esize, " elements differ:", out);
}

}  // namespace testutil
}  // namespace paddle
