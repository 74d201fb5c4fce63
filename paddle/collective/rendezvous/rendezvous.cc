// Rendezvous: store creation per scheme, then the join protocol.
//
// Note [Rendezvous join]
// After the store is up, each rank, under keys "rdzv/...":
//  a) claims its rank: CompareSet("rdzv/rank/<r>", "", <host:pid:nonce>). Seeing another
//     process's id back means two processes were given rank r.
//  b) checks the world size: rank 0 sets "rdzv/world_size"; every other rank waits for it and
//     compares. Rank 0 is the reference because with env:// and tcp:// it hosts the store: were
//     it the one to detect a mismatch and exit, the others would lose the store before reading
//     why. A mismatch names both values and both ranks.
//  c) waits at StoreBarrier "rdzv/join" until all world_size ranks have passed a) and b).
// A rank that fails a) or b) aborts the barrier with its message (AbortStoreBarrier), so the
// others stop waiting and report the real cause instead of a timeout.
#include "paddle/collective/rendezvous/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/collective/rendezvous/url.h"
#include "paddle/collective/store/etcd_store.h"
#include "paddle/collective/store/file_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/core/deadline.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kJoinBarrier[] = "rdzv/join";
constexpr char kWorldSizeKey[] = "rdzv/world_size";

// "host:pid", identifying this process in duplicate-rank errors.
std::string ProcessName() {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, ":", getpid());
}

// Connect timeout: the rendezvous's remaining time, capped by PADDLE_CONNECT_TIMEOUT_S.
absl::Duration ConnectTimeout(const Deadline& deadline) {
  return std::min(deadline.Remaining(), DefaultTimeout(TimeoutKind::kConnect));
}

absl::StatusOr<std::shared_ptr<Store>> MakeTcpStore(const RendezvousUrl& url,
                                                    const Deadline& deadline,
                                                    RendezvousResult* result) {
  const std::string address = absl::StrCat(url.host, ":", url.port);
  if (url.rank == 0) {
    TcpStoreServerOptions options;
    options.host = url.host;
    options.port = url.port;
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
    if (!server.ok()) {
      return Annotate(server.status(),
                      absl::StrFormat("rank 0 of %d hosts the rendezvous store for %s on %s; "
                                      "choose a free port (or stop what holds port %d), and make "
                                      "sure %s is an address of rank 0's host",
                                      url.world_size, url.source, address, url.port, url.host));
    }
    result->server = std::move(server).value();
  }
  TcpStoreOptions options;
  options.host = url.host;
  options.port = url.port;
  options.connect_timeout = ConnectTimeout(deadline);
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(options);
  if (!store.ok()) {
    // TcpStore's own message names the address, the attempts and the timeout setting.
    return Annotate(store.status(),
                    absl::StrFormat("rank %d of %d: connecting to the rendezvous store hosted by "
                                    "rank 0 (from %s)",
                                    url.rank, url.world_size, url.source));
  }
  return std::shared_ptr<Store>(std::move(store).value());
}

absl::StatusOr<std::shared_ptr<Store>> MakeStore(const RendezvousUrl& url, const Deadline& deadline,
                                                 RendezvousResult* result) {
  switch (url.scheme) {
    case RendezvousScheme::kEnv:
    case RendezvousScheme::kTcp:
      return MakeTcpStore(url, deadline, result);
    case RendezvousScheme::kFile: {
      absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(url.path, url.world_size);
      if (!store.ok()) {
        return Annotate(store.status(), absl::StrFormat("rank %d of %d: rendezvous through %s",
                                                        url.rank, url.world_size, url.source));
      }
      return std::shared_ptr<Store>(std::move(store).value());
    }
    case RendezvousScheme::kEtcd: {
      EtcdStoreOptions options;
      options.endpoint = absl::StrCat(url.host, ":", url.port);
      options.prefix = url.path;
      options.connect_timeout = ConnectTimeout(deadline);
      absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Connect(options);
      if (!store.ok()) {
        return Annotate(store.status(),
                        absl::StrFormat("rank %d of %d: connecting to etcd at %s (from %s)",
                                        url.rank, url.world_size, options.endpoint, url.source));
      }
      return std::shared_ptr<Store>(std::move(store).value());
    }
  }
  return absl::InternalError("unknown rendezvous scheme");
}

// Steps a) and b) of Note [Rendezvous join]; an error here is this rank's to report.
absl::Status ClaimRankAndWorldSize(Store& store, const RendezvousUrl& url,
                                   const Deadline& deadline) {
  absl::BitGen gen;
  const std::string me = absl::StrCat(ProcessName(), ":", absl::Hex(absl::Uniform<uint64_t>(gen)));
  const std::string rank_key = absl::StrCat("rdzv/rank/", url.rank);
  ASSIGN_OR_RETURN(std::string holder, store.CompareSet(rank_key, "", me));
  if (holder != me) {
    std::vector<std::string> parts = absl::StrSplit(holder, ':');
    std::string other = parts.size() >= 2 ? absl::StrCat(parts[0], ":", parts[1]) : holder;
    return absl::AlreadyExistsError(absl::StrFormat(
        "rank %d is claimed by two processes: %s (first) and %s (second, which gave up) in %s; "
        "give every process its own rank (RANK or ?rank=), from 0 to %d%s",
        url.rank, other, ProcessName(), url.source, url.world_size - 1,
        url.scheme == RendezvousScheme::kFile
            ? absl::StrCat("; if ", url.path, " is left over from an earlier job, remove it")
            : ""));
  }
  const std::string mine = absl::StrCat(url.world_size);
  if (url.rank == 0) return store.Set(kWorldSizeKey, mine);
  absl::StatusOr<std::string> recorded = store.Get(kWorldSizeKey, deadline.Remaining());
  // Rank 0 never arrived: the join barrier below times out at once and names it.
  if (absl::IsDeadlineExceeded(recorded.status())) return absl::OkStatus();
  if (!recorded.ok()) return recorded.status();
  if (*recorded != mine) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ranks disagree on the world size: rank 0 says world_size=%s but rank %d says "
        "world_size=%d (%s); give every rank the same WORLD_SIZE or ?world_size=",
        *recorded, url.rank, url.world_size, url.source));
  }
  return absl::OkStatus();
}

}  // namespace

RendezvousResult::~RendezvousResult() {
  if (server == nullptr) return;
  // Our own client's connections must go first; if someone else still holds the store, they
  // would keep the server waiting, so then there is nothing to wait for.
  std::weak_ptr<Store> ours = store;
  store.reset();
  if (!ours.expired() || failed) return;
  absl::Status s = server->WaitForClientsToLeave(/*keep=*/0, DefaultTimeout(TimeoutKind::kConnect));
  if (!s.ok()) {
    PADDLE_LOG(WARN, STORE) << "stopping the rendezvous store anyway: " << s.message();
  }
}

absl::StatusOr<RendezvousResult> Rendezvous(absl::string_view url, absl::Duration timeout) {
  Deadline deadline = Deadline::After(timeout);
  // The option defaults below read these; a malformed one is the user's error, not an abort.
  RETURN_IF_ERROR(CheckTimeoutEnvironment());
  ASSIGN_OR_RETURN(RendezvousUrl parsed, ParseRendezvousUrl(url));
  RendezvousResult result;
  result.rank = parsed.rank;
  result.world_size = parsed.world_size;
  ASSIGN_OR_RETURN(result.store, MakeStore(parsed, deadline, &result));
  Store& store = *result.store;
  PADDLE_LOG(INFO, INIT) << "rank " << parsed.rank << " of " << parsed.world_size
                         << ": joining the rendezvous on " << store.Describe();

  absl::Status claimed = ClaimRankAndWorldSize(store, parsed, deadline);
  if (!claimed.ok()) {
    absl::Status aborted = AbortStoreBarrier(store, kJoinBarrier, parsed.rank, claimed.message());
    if (!aborted.ok()) {
      PADDLE_LOG(WARN, INIT) << "could not tell the other ranks about the failed join: " << aborted;
    }
    return Annotate(claimed, absl::StrCat("rendezvous on ", store.Describe()));
  }
  absl::Status joined =
      StoreBarrier(store, kJoinBarrier, parsed.rank, parsed.world_size, deadline.Remaining());
  if (!joined.ok()) return Annotate(joined, absl::StrCat("rendezvous through ", parsed.source));
  PADDLE_LOG(INFO, INIT) << "rank " << parsed.rank << " of " << parsed.world_size
                         << ": rendezvous complete after " << deadline.Elapsed();
  return result;
}

}  // namespace paddle
