// Transport micro-benchmark: two ranks over TCP on 127.0.0.1 (default) or shared memory, as two
// threads of this process or as two processes (this binary re-executed as rank 1).
//
//   bazel run -c opt //bench/micro:transport_bench -- [--transport=tcp|shm] [--processes]
//       [--seconds=2]
//
// Prints, per message size:
//   latency   8 B and 4 KiB ping-pong: one-way time (round trip / 2), mean, p50 and p99
//   bandwidth 1, 16 and 64 MiB: rank 0 streams to rank 1 with a window of 4 messages in flight
//             (GB/s = 1e9 bytes/s), then both ranks stream to each other at once (bidir, the
//             sum of both directions)
// Every message is checked (a stamp per message, the full payload of the last one), so a fast
// wrong transport cannot post a good figure. Tuning knobs are read from the environment (see
// paddle/collective/transport/tcp/tcp_transport.h and shm/shm_transport.h) and echoed in the
// header line.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/collective/transport/shm/shm_transport.h"
#include "paddle/collective/transport/tcp/tcp_transport.h"
#include "paddle/testing/child_processes.h"

namespace paddle {
namespace {

constexpr int kWindow = 4;
const absl::Duration kWait = absl::Seconds(120);

void Die(const std::string& what) {
  std::fprintf(stderr, "transport_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) Die(absl::StrCat(what, ": ", status.ToString()));
}

void WaitAll(std::vector<std::unique_ptr<TransportRequest>>& requests, const char* what) {
  for (auto& r : requests) Check(r->Wait(Deadline::After(kWait)), what);
  requests.clear();
}

// Fills with a byte pattern that depends on the size, so a message of another size is caught.
void Fill(std::vector<char>& buffer) {
  for (size_t i = 0; i < buffer.size(); ++i) {
    buffer[i] = static_cast<char>((i * 131 + buffer.size()) >> 3);
  }
}

void Stamp(std::vector<char>& buffer, uint64_t n) {
  if (buffer.size() >= 8) std::memcpy(buffer.data(), &n, 8);
}

void ExpectStamp(const std::vector<char>& buffer, uint64_t n) {
  uint64_t got = n;
  if (buffer.size() >= 8) std::memcpy(&got, buffer.data(), 8);
  if (got != n) Die(absl::StrCat("message ", n, " arrived as message ", got));
}

// Iterations that take about `seconds` at an assumed rate, at least `min`.
int64_t Iterations(double seconds, double per_second, int64_t min) {
  return std::max<int64_t>(min, static_cast<int64_t>(seconds * per_second));
}

// Ping-pong of `bytes`: returns one-way latencies in microseconds (rank 0 only).
std::vector<double> PingPong(Transport& t, size_t bytes, int64_t iterations) {
  Channel& ch = t.channel(1 - t.rank());
  std::vector<char> out(bytes), in(bytes);
  Fill(out);
  std::vector<double> one_way;
  const int64_t warmup = iterations / 10 + 10;
  for (int64_t i = 0; i < warmup + iterations; ++i) {
    absl::Time start = absl::Now();
    Stamp(out, i);
    if (t.rank() == 0) {
      Check(ch.Send(out.data(), bytes, 1)->Wait(Deadline::After(kWait)), "ping send");
      Check(ch.Recv(in.data(), bytes, 2)->Wait(Deadline::After(kWait)), "pong recv");
    } else {
      Check(ch.Recv(in.data(), bytes, 1)->Wait(Deadline::After(kWait)), "ping recv");
      Check(ch.Send(out.data(), bytes, 2)->Wait(Deadline::After(kWait)), "pong send");
    }
    ExpectStamp(in, i);
    if (i >= warmup) one_way.push_back(absl::ToDoubleMicroseconds(absl::Now() - start) / 2);
  }
  Stamp(out, warmup + iterations - 1);
  if (std::memcmp(in.data(), out.data(), bytes) != 0) Die("ping-pong payload corrupted");
  return one_way;
}

// Streams `iterations` messages of `bytes` with kWindow in flight: from rank 0 to rank 1, or
// both ways at once if `bidirectional`. Returns GB/s of payload (both directions summed).
double Stream(Transport& t, size_t bytes, int64_t iterations, bool bidirectional) {
  Channel& ch = t.channel(1 - t.rank());
  std::vector<std::vector<char>> out(kWindow, std::vector<char>(bytes));
  std::vector<std::vector<char>> in(kWindow, std::vector<char>(bytes));
  for (auto& b : out) Fill(b);
  const bool sends = t.rank() == 0 || bidirectional;
  const bool receives = t.rank() == 1 || bidirectional;
  std::vector<std::unique_ptr<TransportRequest>> requests;
  uint64_t ack = 0;
  // Start together: one small round trip.
  if (t.rank() == 0) {
    Check(ch.Send(&ack, 8, 9)->Wait(Deadline::After(kWait)), "sync");
    Check(ch.Recv(&ack, 8, 9)->Wait(Deadline::After(kWait)), "sync");
  } else {
    Check(ch.Recv(&ack, 8, 9)->Wait(Deadline::After(kWait)), "sync");
    Check(ch.Send(&ack, 8, 9)->Wait(Deadline::After(kWait)), "sync");
  }
  absl::Time start = absl::Now();
  for (int64_t i = 0; i < iterations; i += kWindow) {
    int64_t n = std::min<int64_t>(kWindow, iterations - i);
    if (receives) {
      for (int64_t w = 0; w < n; ++w) requests.push_back(ch.Recv(in[w].data(), bytes, 3));
    }
    if (sends) {
      for (int64_t w = 0; w < n; ++w) {
        Stamp(out[w], i + w);
        requests.push_back(ch.Send(out[w].data(), bytes, 3));
      }
    }
    WaitAll(requests, "stream");
    if (receives) {
      for (int64_t w = 0; w < n; ++w) ExpectStamp(in[w], i + w);
    }
  }
  // The clock stops when the receiver has everything: it answers with one small message.
  if (t.rank() == 1) {
    Check(ch.Send(&ack, 8, 4)->Wait(Deadline::After(kWait)), "ack");
  } else {
    Check(ch.Recv(&ack, 8, 4)->Wait(Deadline::After(kWait)), "ack");
  }
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (receives) {
    int64_t last = iterations - 1;
    Stamp(out[last % kWindow], last);
    if (std::memcmp(in[last % kWindow].data(), out[last % kWindow].data(), bytes) != 0) {
      Die("stream payload corrupted");
    }
  }
  return static_cast<double>(bytes) * iterations * (bidirectional ? 2 : 1) / seconds / 1e9;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

void RunRank(Transport& t, double seconds) {
  const bool report = t.rank() == 0;
  for (size_t bytes : {size_t{8}, size_t{4096}}) {
    std::vector<double> lat = PingPong(t, bytes, Iterations(seconds, 20000, 1000));
    if (report) {
      double mean = 0;
      for (double x : lat) mean += x;
      mean /= lat.size();
      std::printf(
          "latency   %8zu B   mean %7.2f us   p50 %7.2f us   p99 %7.2f us   (%zu round "
          "trips)\n",
          bytes, mean, Percentile(lat, 0.5), Percentile(lat, 0.99), lat.size());
    }
  }
  for (size_t mib : {1, 16, 64}) {
    size_t bytes = mib << 20;
    // Aim at ~2 GB/s to size the run; at least two windows.
    int64_t iterations = Iterations(seconds, 2e9 / bytes, 2 * kWindow);
    double uni = Stream(t, bytes, iterations, false);
    double bi = Stream(t, bytes, iterations, true);
    if (report) {
      std::printf("bandwidth %5zu MiB   %6.2f GB/s   bidir %6.2f GB/s   (%lld messages)\n", mib,
                  uni, bi, static_cast<long long>(iterations));
    }
  }
}

std::unique_ptr<Transport> MakeTransport(const std::string& kind, int rank,
                                         std::shared_ptr<Store> store) {
  TransportOptions options;
  options.rank = rank;
  options.world_size = 2;
  options.store = std::move(store);
  options.interface_name = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<Transport>> t =
      kind == "shm" ? CreateShmTransport(options) : CreateTcpTransport(options);
  Check(t.status(), "creating the transport");
  return std::move(*t);
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "default" : v;
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  using namespace paddle;  // NOLINT(build/namespaces): a benchmark's main
  double seconds = 2;
  bool processes = false;
  int child_port = -1;
  std::string transport = "tcp";
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--seconds=")) {
      if (!absl::SimpleAtod(arg, &seconds)) Die("bad --seconds");
    } else if (absl::ConsumePrefix(&arg, "--transport=")) {
      if (arg != "tcp" && arg != "shm") Die("--transport must be tcp or shm");
      transport = std::string(arg);
    } else if (arg == "--processes") {
      processes = true;
    } else if (absl::ConsumePrefix(&arg, "--child_port=")) {
      if (!absl::SimpleAtoi(arg, &child_port)) Die("bad --child_port");
    } else {
      Die(absl::StrCat("unknown flag ", arg));
    }
  }
  if (child_port >= 0) {  // rank 1 of --processes
    TcpStoreOptions options;
    options.host = "127.0.0.1";
    options.port = child_port;
    absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(options);
    Check(store.status(), "TcpStore::Connect");
    std::unique_ptr<Transport> t =
        MakeTransport(transport, 1, std::shared_ptr<Store>(std::move(*store)));
    RunRank(*t, seconds);
    return 0;
  }
  if (transport == "shm") {
    std::printf("transport_bench: shm, ranks as %s; PADDLE_SHM_CMA=%s PADDLE_SHM_SPIN_US=%s\n",
                processes ? "processes" : "threads", Env("PADDLE_SHM_CMA"),
                Env("PADDLE_SHM_SPIN_US"));
  } else {
    std::printf(
        "transport_bench: tcp over 127.0.0.1, ranks as %s; PADDLE_TCP_WAIT_SPIN_US=%s "
        "PADDLE_TCP_BUSY_POLL_US=%s PADDLE_SOCKET_BUFFER_BYTES=%s\n",
        processes ? "processes" : "threads", Env("PADDLE_TCP_WAIT_SPIN_US"),
        Env("PADDLE_TCP_BUSY_POLL_US"), Env("PADDLE_SOCKET_BUFFER_BYTES"));
  }
  std::fflush(stdout);
  if (!processes) {
    auto store = std::make_shared<HashStore>();
    std::unique_ptr<Transport> t1;
    std::thread rank1([&] {
      t1 = MakeTransport(transport, 1, store);
      RunRank(*t1, seconds);
    });
    std::unique_ptr<Transport> t0 = MakeTransport(transport, 0, store);
    RunRank(*t0, seconds);
    rank1.join();
    return 0;
  }
  TcpStoreServerOptions server_options;
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(server_options);
  Check(server.status(), "TcpStoreServer::Start");
  std::string port = absl::StrCat("--child_port=", (*server)->port());
  std::string secs = absl::StrCat("--seconds=", seconds);
  std::string kind = absl::StrCat("--transport=", transport);
  std::vector<ChildProcess> rank1 = StartChildren({ChildSpec{{SelfPath(), port, secs, kind}}});
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = (*server)->port();
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(options);
  Check(store.status(), "TcpStore::Connect");
  std::unique_ptr<Transport> t =
      MakeTransport(transport, 0, std::shared_ptr<Store>(std::move(*store)));
  RunRank(*t, seconds);
  WaitForChildren(rank1, absl::Seconds(seconds) + absl::Minutes(2));
  if (rank1[0].exit_code != 0) {
    std::fprintf(stderr, "rank 1 (pid %d) failed with exit code %d:\n%s\n", rank1[0].pid,
                 rank1[0].exit_code, rank1[0].Output().c_str());
    return 1;
  }
  return 0;
}
