// paddle_store_server: the job's TCP store (paddle/collective/store/tcp_store_server.h) in a
// process of its own, so that it outlives every worker. paddlerun starts it for elastic jobs
// (tools/paddlerun/elastic.py): with the store hosted by rank 0, losing rank 0 would lose the
// rendezvous the survivors need to regroup.
//
//   paddle_store_server --host=127.0.0.1 --port=0
// prints "port N" on stdout once it listens, then serves until its stdin closes (its launcher
// exited or died) or it gets SIGTERM/SIGINT; with --until-signal stdin is not watched (a store
// run on a machine of its own, as //tools:k8s's store Deployment does, has no launcher and may have
// no stdin). The job token comes from $PADDLE_STORE_TOKEN.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "paddle/collective/store/tcp_store_server.h"

namespace {

constexpr char kUsage[] = "usage: paddle_store_server [--host=ADDR] [--port=N] [--until-signal]\n";

constexpr char kHelp[] =
    "The job's TCP store in a process of its own (paddlerun starts it for elastic jobs).\n"
    "  --host=ADDR      the address to listen on (default 127.0.0.1)\n"
    "  --port=N         the port, 0..65535; 0 picks a free one (default 0)\n"
    "  --until-signal   serve until SIGTERM/SIGINT only; by default it also stops when its\n"
    "                   stdin closes (its launcher exited or died)\n"
    "Prints \"port N\" on stdout once it listens. The job token comes from $PADDLE_STORE_TOKEN.\n"
    "exit status: 0 when stopped, 1 if it cannot listen, 2 for a bad command line.\n";

}  // namespace

int main(int argc, char** argv) {
  paddle::TcpStoreServerOptions options;
  bool watch_stdin = true;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s%s", kUsage, kHelp);
      return 0;
    } else if (arg == "--until-signal") {
      watch_stdin = false;
    } else if (arg.rfind("--host=", 0) == 0) {
      options.host = arg.substr(7);
    } else if (arg.rfind("--port=", 0) == 0) {
      if (!absl::SimpleAtoi(arg.substr(7), &options.port) || options.port < 0 ||
          options.port > 65535) {
        std::fprintf(stderr, "paddle_store_server: --port is '%s'; a port is 0..65535\n%s",
                     arg.substr(7).c_str(), kUsage);
        return 2;
      }
    } else {
      std::fprintf(stderr, "paddle_store_server: unknown argument '%s' (--help lists them)\n%s",
                   arg.c_str(), kUsage);
      return 2;
    }
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, nullptr);  // before the loop thread starts: it inherits the mask
  auto server = paddle::TcpStoreServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "paddle_store_server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("port %d\n", (*server)->port());
  std::fflush(stdout);
  // Until stdin reaches EOF (unless --until-signal) or a stop signal arrives.
  timespec tick = {0, 200 * 1000 * 1000};
  while (true) {
    pollfd p = {STDIN_FILENO, POLLIN, 0};
    if (watch_stdin && poll(&p, 1, 0) > 0) {
      char buf[256];
      if (read(STDIN_FILENO, buf, sizeof(buf)) <= 0) break;
    }
    if (sigtimedwait(&stop, nullptr, &tick) > 0) break;
  }
  return 0;
}
