// One allreduce size, timed, in a job started by the launcher (env://): the multi-node figure.
//
//   paddlerun --nnodes=2 --nproc=2 ... //bench/micro:allreduce_env_bench --bytes=64M
//
// bench/collectives sweeps sizes with all its ranks on this host; this binary instead joins
// whatever group the launcher (or mpirun) made, so it runs across network namespaces or
// machines. Every rank's input is (rank + 1) in every element, so the float32 sum is exactly
// n (n + 1) / 2 everywhere; every rank checks every element after every iteration. Rank 0
// prints one JSON line: bytes, ranks, hosts (as the communicator saw them), median and best
// time, algbw and busbw (busbw = algbw x 2 (n - 1) / n), and the PADDLE_ALGO/PADDLE_TRANSPORT
// in effect. Flags: --bytes=N[K|M] (default 64M), --iters=N (5), --warmup=N (1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/rendezvous/rendezvous.h"
#include "paddle/core/deadline.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace {

bool ParseBytes(absl::string_view text, int64_t* bytes) {
  int64_t scale = 1;
  if (absl::ConsumeSuffix(&text, "K")) scale = 1 << 10;
  if (absl::ConsumeSuffix(&text, "M")) scale = 1 << 20;
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n <= 0) return false;
  *bytes = n * scale;
  return true;
}

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

absl::Status Run(int argc, char** argv) {
  int64_t bytes = int64_t{64} << 20;
  int iters = 5;
  int warmup = 1;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    bool ok = true;
    if (absl::ConsumePrefix(&arg, "--bytes=")) {
      ok = ParseBytes(arg, &bytes);
    } else if (absl::ConsumePrefix(&arg, "--iters=")) {
      ok = absl::SimpleAtoi(arg, &iters) && iters > 0;
    } else if (absl::ConsumePrefix(&arg, "--warmup=")) {
      ok = absl::SimpleAtoi(arg, &warmup) && warmup >= 0;
    } else {
      ok = false;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad argument \"", argv[i], "\"; flags: --bytes=N[K|M] --iters=N --warmup=N"));
    }
  }
  ASSIGN_OR_RETURN(RendezvousResult group,
                   Rendezvous("env://", DefaultTimeout(TimeoutKind::kStore)));
  CommunicatorOptions options;
  options.store = group.store;
  options.rank = group.rank;
  options.world_size = group.world_size;
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(options));
  const int n = group.world_size;
  const int64_t count = bytes / 4;
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({count}, DType::kFloat32));
  float* data = t.data<float>();
  const float want = static_cast<float>(n) * (n + 1) / 2;
  std::vector<double> seconds;
  for (int it = 0; it < warmup + iters; ++it) {
    std::fill(data, data + count, static_cast<float>(group.rank + 1));
    RETURN_IF_ERROR(comm->Barrier()->Wait());
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(comm->Allreduce(t, ReduceOp::kSum)->Wait());
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int64_t i = 0; i < count; ++i) {
      if (data[i] != want) {
        return absl::DataLossError(absl::StrCat("rank ", group.rank, ": element ", i, " is ",
                                                data[i], ", expected ", want));
      }
    }
    if (it >= warmup) seconds.push_back(s);
  }
  // Every rank's time is its own; the slowest rank is the operation's time.
  ASSIGN_OR_RETURN(Tensor slowest, Tensor::Empty({iters}, DType::kFloat64));
  std::copy(seconds.begin(), seconds.end(), slowest.data<double>());
  RETURN_IF_ERROR(comm->Allreduce(slowest, ReduceOp::kMax)->Wait());
  std::vector<double> times(slowest.data<double>(), slowest.data<double>() + iters);
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  const double algbw = static_cast<double>(bytes) / median / 1e9;
  if (group.rank == 0) {
    std::printf(
        "{\"bytes\": %lld, \"ranks\": %d, \"algo\": \"%s\", \"transport\": \"%s\", "
        "\"median_s\": %.6f, \"best_s\": %.6f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f}\n",
        static_cast<long long>(bytes), n, EnvOr("PADDLE_ALGO", "auto").c_str(),
        EnvOr("PADDLE_TRANSPORT", "auto").c_str(), median, times.front(), algbw,
        algbw * 2.0 * (n - 1) / n);
  }
  return comm->Barrier()->Wait();
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  const absl::Status s = paddle::Run(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "allreduce_env_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
