// The project's multi-process job until the collective engine lands: N worker processes find
// each other through a rendezvous URL, then average a tensor through the key-value store.
//
// Each rank fills a tensor from its own Philox stream (seed, stream = rank), compresses it to
// bfloat16 (halving the bytes on the wire, as gradient compression will), publishes it under its
// rank's key, reads every other rank's tensor back, and averages them in fp32. Because any rank
// can regenerate any other rank's stream, every rank checks the full result element by element.
// It exercises everything that exists so far: rendezvous (env:// by default, as torchrun sets
// it), the TCP store across processes, store barriers, tensors, Philox streams and the fp16/bf16
// conversions.
//
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 store_allreduce &
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 store_allreduce
//
// Flags: --init=URL (default env://), --numel=N (default 1048576), --seed=S (default 1),
// --timeout_s=T (default: PADDLE_STORE_TIMEOUT_S or 300). Rank 0 prints one JSON line last.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "paddle/collective/rendezvous/rendezvous.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/core/deadline.h"
#include "paddle/core/half.h"
#include "paddle/core/logging.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace {

struct Flags {
  std::string init = "env://";
  int64_t numel = 1 << 20;
  uint64_t seed = 1;
  absl::Duration timeout = DefaultTimeout(TimeoutKind::kStore);
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    auto value = [&](absl::string_view name) -> absl::string_view {
      return absl::StartsWith(arg, name) ? arg.substr(name.size()) : absl::string_view();
    };
    double seconds = 0;
    if (!value("--init=").empty()) {
      flags.init = std::string(value("--init="));
    } else if (!value("--numel=").empty() && absl::SimpleAtoi(value("--numel="), &flags.numel) &&
               flags.numel >= 0) {
    } else if (!value("--seed=").empty() && absl::SimpleAtoi(value("--seed="), &flags.seed)) {
    } else if (!value("--timeout_s=").empty() &&
               absl::SimpleAtod(value("--timeout_s="), &seconds) && seconds > 0) {
      flags.timeout = absl::Seconds(seconds);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("bad argument '", arg,
                       "'; flags: --init=URL --numel=N (>= 0) --seed=S --timeout_s=T (> 0)"));
    }
  }
  return flags;
}

// Rank r's contribution: uniform values in [-1, 1) from Philox stream (seed, r), rounded to
// bfloat16 exactly as the sender compresses them.
void FillContribution(uint64_t seed, int rank, absl::Span<uint16_t> bf16) {
  Philox rng(seed, static_cast<uint64_t>(rank));
  std::vector<float> values(bf16.size());
  for (float& v : values) v = 2.0f * rng.NextFloat() - 1.0f;
  FloatToBFloat16(values.data(), bf16.data(), values.size());
}

absl::Status Run(const Flags& flags) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(RendezvousResult rdzv, Rendezvous(flags.init, flags.timeout));
  const int rank = rdzv.rank, world = rdzv.world_size;
  SetLogRank(rank, world);
  const double rendezvous_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Publish this rank's compressed contribution.
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({flags.numel}, DType::kBFloat16));
  auto* mine_bits = reinterpret_cast<uint16_t*>(mine.data<BFloat16>());
  FillContribution(flags.seed, rank, absl::MakeSpan(mine_bits, flags.numel));
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(
      rdzv.store->Set(absl::StrCat("allreduce/", rank),
                      absl::string_view(static_cast<const char*>(mine.data()), mine.nbytes())));

  // Gather and average in fp32.
  ASSIGN_OR_RETURN(Tensor sum, Tensor::Zeros({flags.numel}, DType::kFloat32));
  std::vector<float> scratch(flags.numel);
  for (int r = 0; r < world; ++r) {
    ASSIGN_OR_RETURN(std::string bytes, rdzv.store->Get(absl::StrCat("allreduce/", r)));
    if (bytes.size() != mine.nbytes()) {
      return ErrorContext()
          .Rank(rank, world)
          .Peer(r)
          .Op("store_allreduce")
          .Bytes(bytes.size())
          .Wrap(absl::InvalidArgumentError(
              absl::StrCat("contribution has ", bytes.size(), " bytes, expected ", mine.nbytes(),
                           "; start every rank with the same --numel")));
    }
    BFloat16ToFloat(reinterpret_cast<const uint16_t*>(bytes.data()), scratch.data(),
                    scratch.size());
    float* s = sum.data<float>();
    for (int64_t i = 0; i < flags.numel; ++i) s[i] += scratch[i];
  }
  float* avg = sum.data<float>();
  for (int64_t i = 0; i < flags.numel; ++i) avg[i] /= static_cast<float>(world);
  const double allreduce_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Verify every element against the streams regenerated locally, summed in the same order.
  std::vector<float> expected(flags.numel, 0.0f);
  std::vector<uint16_t> bits(flags.numel);
  for (int r = 0; r < world; ++r) {
    FillContribution(flags.seed, r, absl::MakeSpan(bits));
    for (int64_t i = 0; i < flags.numel; ++i) expected[i] += BFloat16ToFloat(bits[i]);
  }
  int64_t mismatches = 0;
  for (int64_t i = 0; i < flags.numel; ++i) {
    if (avg[i] != expected[i] / static_cast<float>(world)) ++mismatches;
  }
  if (mismatches > 0) {
    return ErrorContext()
        .Rank(rank, world)
        .Op("store_allreduce")
        .Wrap(absl::InternalError(
            absl::StrCat(mismatches, " of ", flags.numel, " averaged elements are wrong")));
  }
  // Nobody leaves (and rank 0 does not stop the store server) before everyone has read.
  RETURN_IF_ERROR(StoreBarrier(*rdzv.store, "store_allreduce/done", rank, world, flags.timeout));
  if (rank == 0) {
    const double mb = 2.0 * flags.numel * world / 1e6;
    std::printf(
        "{\"job\": \"store_allreduce\", \"world_size\": %d, \"numel\": %lld, "
        "\"rendezvous_s\": %.3f, \"allreduce_s\": %.3f, \"store_MB_read\": %.1f, "
        "\"verified\": true}\n",
        world, static_cast<long long>(flags.numel), rendezvous_s, allreduce_s, mb);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  absl::StatusOr<paddle::Flags> flags = paddle::ParseFlags(argc, argv);
  absl::Status status = flags.ok() ? paddle::Run(*flags) : flags.status();
  if (!status.ok()) {
    std::fprintf(stderr, "store_allreduce: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
