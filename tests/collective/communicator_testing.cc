// CommGroup and the exact inputs of the communicator tests; see communicator_testing.h.
#include "tests/collective/communicator_testing.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/core/half.h"
#include "paddle/core/logging.h"

// Note [TSan and uninstrumented Abseil]
// Debian's Abseil is not built for ThreadSanitizer, so TSan sees the memory accesses that its
// interceptors catch inside those libraries (memcpy, new, pthread_mutex_lock) but not Abseil's
// own locks and once-flags between them, and reports races that are not there. Two such libraries
// are reached from several rank threads at once here: the random pool behind absl::BitGen
// (seeded by TcpStore::Connect and PrefixStore) and the time-zone loader behind
// absl::LocalTimeZone() (the first log line of each thread, when TZ is unset). Accesses made
// inside those two libraries are ignored; everything else, the communicator, transport, store
// and logging code included, stays checked.
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libabsl_random_internal_pool_urbg.so\n"
         "called_from_lib:libabsl_time_zone.so\n";
}
#endif

namespace paddle {
namespace commtest {
namespace {

StoreKind Resolve(StoreKind kind) {
  if (kind != StoreKind::kDefault) return kind;
#if defined(__SANITIZE_THREAD__)
  return StoreKind::kTcp;
#else
  return StoreKind::kHash;
#endif
}

// A well-mixed 64-bit hash of (seed, stream, index): splitmix64's finalizer over a combination
// of the three. Inlined here, in an -O2 library, because the 64 MiB cases draw hundreds of
// millions of values (Philox in paddle/core, built without optimisation in test builds, made them
// take minutes).
inline uint64_t Mix(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + stream * 0xbf58476d1ce4e5b9ull + index;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Byte streams and value streams are different streams of one seed.
constexpr uint64_t kByteStreamBase = uint64_t{1} << 32;

// Fills values[0..count) with the integer inputs of (seed, rank) from element `first` on.
void Values(uint64_t seed, int rank, int64_t first, int64_t count, DType dtype, ReduceOp op,
            int64_t* values) {
  const bool prod = op == ReduceOp::kProd;
  const bool unsigned_type = dtype == DType::kUInt8;
  static constexpr int64_t kSigns[4] = {-2, -1, 1, 2};
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t w = Mix(seed, static_cast<uint64_t>(rank), static_cast<uint64_t>(first + i));
    if (prod) {
      values[i] = unsigned_type ? 1 + (w & 1) : kSigns[w & 3];
    } else {
      values[i] = unsigned_type ? static_cast<int64_t>(w % 17) : static_cast<int64_t>(w % 17) - 8;
    }
  }
}

// Writes `value` (an exact integer, or for kAvg the sum to divide by `avg_divisor`) as one
// element of `dtype`.
void StoreElement(DType dtype, int64_t value, int avg_divisor, void* dst) {
  const bool avg = avg_divisor > 0;
  switch (dtype) {
    case DType::kFloat32: {
      float v = avg ? static_cast<float>(value) / static_cast<float>(avg_divisor)
                    : static_cast<float>(value);
      std::memcpy(dst, &v, 4);
      break;
    }
    case DType::kFloat64: {
      double v = avg ? static_cast<double>(value) / avg_divisor : static_cast<double>(value);
      std::memcpy(dst, &v, 8);
      break;
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      const float f = avg ? static_cast<float>(value) / static_cast<float>(avg_divisor)
                          : static_cast<float>(value);
      const uint16_t bits = dtype == DType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f);
      std::memcpy(dst, &bits, 2);
      break;
    }
    case DType::kInt32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(dst, &v, 4);
      break;
    }
    case DType::kInt64:
      std::memcpy(dst, &value, 8);
      break;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool: {
      const uint8_t v = static_cast<uint8_t>(value & 0xff);
      std::memcpy(dst, &v, 1);
      break;
    }
  }
}

std::string Decode(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return absl::StrCat(v);
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return absl::StrCat(v);
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return absl::StrCat(dtype == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits));
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return absl::StrCat(v);
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return absl::StrCat(v);
    }
    default:
      return absl::StrCat(static_cast<int>(*p));
  }
}

// Byte k of (seed, rank)'s byte stream: eight bytes per hash.
inline uint8_t StreamByte(uint64_t seed, int rank, uint64_t k) {
  return static_cast<uint8_t>(Mix(seed, kByteStreamBase + static_cast<uint64_t>(rank), k / 8) >>
                              (8 * (k % 8)));
}

}  // namespace

// ---- CommGroup ----

std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> CommGroup::CreateEach(
    const GroupOptions& options) {
  std::unique_ptr<TcpStoreServer> server;
  return CreateEach(options, &server);
}

std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> CommGroup::CreateEach(
    const GroupOptions& options, std::unique_ptr<TcpStoreServer>* server_out) {
  const int n = options.world_size;
  std::unique_ptr<TcpStoreServer>& server = *server_out;
  std::shared_ptr<Store> hash_store;
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> results;
  for (int rank = 0; rank < n; ++rank) results.emplace_back(absl::UnknownError("not created"));
  if (Resolve(options.store) == StoreKind::kTcp) {
    TcpStoreServerOptions server_options;
    server_options.host = "127.0.0.1";
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> started = TcpStoreServer::Start(server_options);
    if (!started.ok()) {
      for (auto& r : results) r = started.status();
      return results;
    }
    server = std::move(*started);
  } else {
    hash_store = std::make_shared<HashStore>();
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      ScopedLogRank log_rank(rank, n);
      std::shared_ptr<Store> store = hash_store;
      if (server != nullptr) {
        TcpStoreOptions store_options;
        store_options.host = "127.0.0.1";
        store_options.port = server->port();
        absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::Connect(store_options);
        if (!client.ok()) {
          results[rank] = client.status();
          return;
        }
        store = std::move(*client);
      }
      CommunicatorOptions comm_options;
      comm_options.backend = options.backend;
      comm_options.store = store;
      comm_options.rank = rank;
      comm_options.world_size = n;
      comm_options.timeout = options.timeout;
      comm_options.connect_timeout = kGenerous;
      comm_options.algorithm = options.algorithm;
      comm_options.transport = options.transport;
      comm_options.debug_checks = options.debug_checks_per_rank.empty()
                                      ? options.debug_checks
                                      : options.debug_checks_per_rank[rank];
      results[rank] = Communicator::Create(comm_options);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

absl::StatusOr<std::unique_ptr<CommGroup>> CommGroup::Create(const GroupOptions& options) {
  std::unique_ptr<CommGroup> group(new CommGroup());
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> results =
      CreateEach(options, &group->server_);
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    group->comms_.push_back(std::move(*r));
  }
  return group;
}

CommGroup::~CommGroup() { Destroy(); }

void CommGroup::Destroy() {
  std::vector<std::thread> threads;
  for (auto& comm : comms_) {
    threads.emplace_back([&comm] { comm.reset(); });
  }
  for (std::thread& t : threads) t.join();
  comms_.clear();
  server_.reset();  // after its clients, which Split uses
}

std::vector<absl::Status> CommGroup::Run(
    const std::function<absl::Status(int rank, Communicator&)>& body) {
  std::vector<absl::Status> statuses(size());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size(); ++rank) {
    threads.emplace_back([&, rank] {
      ScopedLogRank log_rank(rank, size());
      statuses[rank] = body(rank, *comms_[rank]);
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

std::string DescribeFailures(const std::vector<absl::Status>& statuses) {
  std::string out;
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    if (!statuses[rank].ok()) {
      absl::StrAppend(&out, "\n  rank ", rank, ": ", statuses[rank].ToString());
    }
  }
  return out.empty() ? "OK" : out;
}

bool AllOk(const std::vector<absl::Status>& statuses) {
  return std::all_of(statuses.begin(), statuses.end(),
                     [](const absl::Status& s) { return s.ok(); });
}

// ---- Inputs ----

int64_t InputValue(uint64_t seed, int rank, int64_t index, DType dtype, ReduceOp op) {
  int64_t v = 0;
  Values(seed, rank, index, 1, dtype, op, &v);
  return v;
}

Tensor NewTensor(int64_t count, DType dtype) {
  absl::StatusOr<Tensor> t = Tensor::Empty({count}, dtype);
  PADDLE_CHECK_OK(t.status());
  return *std::move(t);
}

Tensor MakeReductionInput(int64_t count, DType dtype, uint64_t seed, int rank, ReduceOp op) {
  Tensor t = NewTensor(count, dtype);
  constexpr int64_t kChunk = 4096;
  std::vector<int64_t> values(kChunk);
  uint8_t* out = static_cast<uint8_t*>(t.data());
  const size_t size = DTypeSize(dtype);
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    const int64_t m = std::min(kChunk, count - begin);
    Values(seed, rank, begin, m, dtype, op, values.data());
    for (int64_t i = 0; i < m; ++i) StoreElement(dtype, values[i], 0, out + (begin + i) * size);
  }
  return t;
}

Tensor ExpectedReduction(int64_t first_index, int64_t count, DType dtype, int world_size,
                         uint64_t seed, ReduceOp op) {
  Tensor want = NewTensor(count, dtype);
  const size_t size = DTypeSize(dtype);
  constexpr int64_t kChunk = 4096;
  std::vector<int64_t> acc(kChunk);
  std::vector<int64_t> values(kChunk);
  uint8_t* out = static_cast<uint8_t*>(want.data());
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    const int64_t m = std::min(kChunk, count - begin);
    Values(seed, 0, first_index + begin, m, dtype, op, acc.data());
    for (int r = 1; r < world_size; ++r) {
      Values(seed, r, first_index + begin, m, dtype, op, values.data());
      for (int64_t i = 0; i < m; ++i) {
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg:
            acc[i] += values[i];
            break;
          case ReduceOp::kProd:
            acc[i] *= values[i];
            break;
          case ReduceOp::kMin:
            acc[i] = std::min(acc[i], values[i]);
            break;
          case ReduceOp::kMax:
            acc[i] = std::max(acc[i], values[i]);
            break;
        }
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      StoreElement(dtype, acc[i], op == ReduceOp::kAvg ? world_size : 0, out + (begin + i) * size);
    }
  }
  return want;
}

absl::Status CompareElements(const Tensor& got, const Tensor& want, int64_t first_index,
                             const std::string& what) {
  if (got.dtype() != want.dtype() || got.numel() != want.numel()) {
    return absl::InternalError(
        absl::StrCat(what, ": got ", got.ToString(), ", want ", want.ToString()));
  }
  if (got.nbytes() == 0 || std::memcmp(got.data(), want.data(), got.nbytes()) == 0) {
    return absl::OkStatus();
  }
  const DType dtype = got.dtype();
  const size_t size = DTypeSize(dtype);
  const uint8_t* g = static_cast<const uint8_t*>(got.data());
  const uint8_t* w = static_cast<const uint8_t*>(want.data());
  std::string errors;
  int64_t bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(g + i * size, w + i * size, size) == 0) continue;
    if (++bad <= 5) {
      absl::StrAppend(&errors, " [", first_index + i, "] got ", Decode(dtype, g + i * size),
                      " want ", Decode(dtype, w + i * size), ";");
    }
  }
  return absl::InternalError(absl::StrCat(what, ": ", bad, " of ", got.numel(), " ",
                                          DTypeName(dtype), " elements differ:", errors));
}

void FillBytes(const Tensor& t, uint64_t seed, int rank, int64_t offset) {
  uint8_t* out = static_cast<uint8_t*>(t.data());
  const size_t bytes = t.nbytes();
  for (size_t k = 0; k < bytes; ++k) {
    out[k] = StreamByte(seed, rank, static_cast<uint64_t>(offset) + k);
  }
}

absl::Status CheckBytes(const Tensor& got, int64_t got_offset, int64_t bytes, uint64_t seed,
                        int rank, int64_t offset, const std::string& what) {
  const uint8_t* data = static_cast<const uint8_t*>(got.data()) + got_offset;
  for (int64_t k = 0; k < bytes; ++k) {
    const uint8_t want = StreamByte(seed, rank, static_cast<uint64_t>(offset + k));
    if (data[k] != want) {
      return absl::InternalError(absl::StrCat(
          what, ": byte ", k, " of ", bytes, " is ", static_cast<int>(data[k]), ", want ",
          static_cast<int>(want), " (rank ", rank, "'s data from byte ", offset, ")"));
    }
  }
  return absl::OkStatus();
}

const std::vector<DType>& SweepDTypes() {
  static const std::vector<DType> kDTypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                             DType::kBFloat16, DType::kInt32,   DType::kInt64,
                                             DType::kUInt8};
  return kDTypes;
}

bool OpApplies(DType dtype, ReduceOp op) { return op != ReduceOp::kAvg || IsFloatingPoint(dtype); }

}  // namespace commtest
}  // namespace paddle
