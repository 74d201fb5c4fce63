// Note [Gloo connect]. Every rank, with the group's store:
//  1. creates a Gloo TCP device on the listen address (SelectListenAddress);
//  2. runs Gloo's connectFullMesh over GlooStoreAdapter: each rank publishes the addresses of its
//     pairs under "<prefix>/gloo/<rank>" and connects to every peer's, every store wait bounded
//     by options.connect_timeout;
//  3. runs a one-byte alltoall (tag 0; operations count from 1) over every pair, which cannot
//     finish before every connection is up on both ends;
//  4. publishes its pairs' final addresses, reads its peers' and the listening addresses they
//     published in step 2 (Note [Gloo peer addresses]);
//  5. sets the context's timeout to options.timeout for the operations to come.
#include "paddle/collective/backends/gloo/gloo_connection.h"

#include <gloo/alltoall.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "paddle/collective/backends/gloo/gloo_error.h"
#include "paddle/collective/backends/gloo/gloo_store_adapter.h"
#include "paddle/collective/net/socket_address.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Note [Gloo peer addresses]. Gloo's errors name a peer by the address its pair holds for the
// far end ("Read error [127.0.0.1]:1956"), and which address that is depends on which end of
// the connection connected. Each pair of Gloo (Debian's 2022 build) listens on a port of its own
// and publishes it in connectFullMesh; of two peers, the one with the larger address connects
// and the other accepts. When the connection is up both ends reset their own address from
// getsockname(), but the far end's address is left as the accepting end knew it:
//  - r connected to p: r names p by p's listening port, which is also p's address after the
//    reset (an accepted socket has its listener's port);
//  - p connected to r: r names p by the port p *published*, its listening port, while p's own
//    address became its ephemeral one.
// So rank r keeps two names for each peer p: the address p's end of their connection has once
// connected (each rank publishes its pairs' addresses after step 3 of Note [Gloo connect], when
// every connection is up on both ends, since the reset runs on the I/O thread, possibly after
// connectFullMesh returned), and the listening address p published to r for Gloo's rendezvous
// (read back from the store; Gloo's value under "<prefix>/gloo/<p>" is p's pair addresses for
// every other rank in rank order, each Address::bytes() long). Until both were kept, one message
// in three or so named the peer by an address we did not know (seen with 3 ranks when one
// aborts). Gloo prints ports in network byte order; the texts match all the same.
absl::StatusOr<GlooPeerNames> ExchangePairAddresses(Store& store, const std::string& gloo_prefix,
                                                    gloo::Context& context,
                                                    absl::Duration timeout) {
  const std::string prefix = absl::StrCat(gloo_prefix, "/pair_addresses/");
  const int rank = context.rank;
  const int size = context.size;
  std::vector<std::string> mine(size);
  for (int p = 0; p < size; ++p) {
    if (p != rank) mine[p] = context.getPair(p)->address().str();
  }
  RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, rank), absl::StrJoin(mine, "\n")));
  GlooPeerNames peers(size);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    ASSIGN_OR_RETURN(std::string value, store.Get(absl::StrCat(prefix, p), timeout));
    std::vector<std::string> theirs = absl::StrSplit(value, '\n');
    if (static_cast<int>(theirs.size()) != size) {
      return absl::InternalError(absl::StrCat("rank ", p, " published ", theirs.size(),
                                              " pair addresses for a group of ", size));
    }
    peers[p].push_back(theirs[rank]);
    // Only a second name for error messages: a value Gloo laid out otherwise costs the name,
    // not the connection.
    absl::StatusOr<std::string> rendezvous = store.Get(absl::StrCat(gloo_prefix, "/", p), timeout);
    absl::StatusOr<std::string> listening =
        rendezvous.ok() ? ListenAddressFromRendezvous(*rendezvous, rank, size, p)
                        : rendezvous.status();
    if (!listening.ok()) {
      PADDLE_LOG(WARN, INIT) << "rank " << rank << "/" << size << ": Gloo errors may name rank "
                             << p << " by an address only: " << listening.status();
    } else if (*listening != theirs[rank]) {
      peers[p].push_back(*std::move(listening));
    }
  }
  return peers;
}

sigset_t SigpipeSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  return set;
}

}  // namespace

void BlockSigpipeInThisThread() {
  const sigset_t set = SigpipeSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  const sigset_t set = SigpipeSet();
  pthread_sigmask(SIG_BLOCK, &set, &previous_);
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (sigismember(&previous_, SIGPIPE) == 1) return;  // it was blocked before us: leave it so
  const sigset_t set = SigpipeSet();
  const struct timespec zero = {0, 0};
  // A SIGPIPE raised while blocked stays pending; consume it so unblocking does not deliver it.
  while (sigtimedwait(&set, nullptr, &zero) == SIGPIPE) {
  }
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

absl::StatusOr<std::string> ListenAddressFromRendezvous(absl::string_view value, int rank, int size,
                                                        int peer) {
  const size_t each = gloo::transport::tcp::Address().bytes().size();
  const size_t peers = size > 1 ? static_cast<size_t>(size - 1) : 0;
  if (rank < 0 || rank >= size || peer < 0 || peer >= size || peer == rank ||
      value.size() != peers * each) {
    return absl::InternalError(absl::StrCat("rank ", peer, " published ", value.size(),
                                            " bytes of Gloo pair addresses for ", peers, " peers (",
                                            each, " each expected); rank ", rank, " of ", size,
                                            " cannot read its listening address"));
  }
  const size_t index = static_cast<size_t>(rank < peer ? rank : rank - 1);
  const std::vector<char> bytes(value.begin() + index * each, value.begin() + (index + 1) * each);
  return gloo::transport::tcp::Address(bytes).str();
}

std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout) {
  const absl::Duration capped =
      std::min(std::max(timeout, absl::Milliseconds(1)), absl::Hours(24 * 365));
  return std::chrono::milliseconds(
      absl::ToInt64Milliseconds(absl::Ceil(capped, absl::Milliseconds(1))));
}

absl::StatusOr<GlooConnection> ConnectGloo(const CommunicatorOptions& options) {
  const int rank = options.rank;
  const int size = options.world_size;
  ASSIGN_OR_RETURN(SocketAddress listen, SelectListenAddress(""));
  const std::string prefix = absl::StrCat(options.store_prefix, "/gloo");
  GlooCallInfo call;
  call.rank = rank;
  call.world_size = size;
  call.op = absl::StrCat("connect (Gloo TCP on ", listen.Host(), ", store ",
                         options.store->Describe(), " under '", prefix, "')");
  call.timeout = options.connect_timeout;
  call.timeout_kind = TimeoutKind::kConnect;
  GlooConnection connection;
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  GlooStoreAdapter adapter(options.store, prefix, options.connect_timeout);
  ScopedSigpipeBlock no_sigpipe;  // Note [Gloo and SIGPIPE]; Gloo's I/O thread inherits the mask
  RETURN_IF_ERROR(CallGloo(call, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = listen.Host();
    connection.device = gloo::transport::tcp::CreateDevice(attr);
    context->setTimeout(ToGlooTimeout(options.connect_timeout));
    context->connectFullMesh(adapter, connection.device);
    std::vector<uint8_t> out(size, static_cast<uint8_t>(rank)), in(size);
    gloo::AlltoallOptions opts(context);
    opts.setInput(out.data(), out.size());
    opts.setOutput(in.data(), in.size());
    opts.setTag(0);
    opts.setTimeout(ToGlooTimeout(options.connect_timeout));
    gloo::alltoall(opts);
  }));
  absl::StatusOr<GlooPeerNames> peer_names =
      ExchangePairAddresses(*options.store, prefix, *context, options.connect_timeout);
  if (!peer_names.ok()) {
    return ErrorContext()
        .Rank(rank, size)
        .Op("connect")
        .Hint(TimeoutHint(TimeoutKind::kConnect))
        .Wrap(Annotate(peer_names.status(), "exchanging Gloo pair addresses"));
  }
  context->setTimeout(ToGlooTimeout(options.timeout));
  connection.context = std::move(context);
  connection.peer_names = *std::move(peer_names);
  return connection;
}

}  // namespace paddle
