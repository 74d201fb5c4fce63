// Rendezvous: how the processes of a job find each other before anything else.
//
// Every process calls Rendezvous with the same URL (see url.h for the schemes) apart from its
// rank. It makes or connects to the store the URL names (rank 0 hosts the TcpStoreServer for
// env:// and tcp://), then joins: it claims its rank, checks that every rank agrees on the world
// size, and waits at a barrier until all ranks have joined (Note [Rendezvous join] in
// rendezvous.cc). Misconfigurations are errors that say what to fix, never hangs: a rank claimed
// twice, ranks that disagree on the world size, a rank out of range, a missing or garbled
// variable, a store that cannot be reached or hosted, and ranks that never arrive.
#ifndef PADDLE_COLLECTIVE_RENDEZVOUS_RENDEZVOUS_H_
#define PADDLE_COLLECTIVE_RENDEZVOUS_RENDEZVOUS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/store/tcp_store_server.h"

namespace paddle {

struct RendezvousResult {
  RendezvousResult() = default;
  RendezvousResult(RendezvousResult&&) = default;
  RendezvousResult& operator=(RendezvousResult&&) = default;
  // Note [Store teardown]: on the rank hosting the store, waits until the other ranks have closed
  // their store connections (at most PADDLE_CONNECT_TIMEOUT_S) before stopping the server, so a
  // host that finishes first never resets connections its peers are still reading from.
  ~RendezvousResult();

  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = 0;
  // Set on the rank that hosts the store server; keep it alive as long as any rank uses `store`.
  std::unique_ptr<TcpStoreServer> server;
  // Set by a program that exits on an error: the destructor then stops the server without
  // waiting for the other ranks, which fail anyway once it is gone; waiting would keep this
  // process, and so the launcher's verdict, up to PADDLE_CONNECT_TIMEOUT_S behind the error.
  bool failed = false;
};

// Meets the other ranks through `url` within `timeout` (which also bounds connecting to the
// store; PADDLE_CONNECT_TIMEOUT_S caps the connect part further).
absl::StatusOr<RendezvousResult> Rendezvous(absl::string_view url, absl::Duration timeout);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_RENDEZVOUS_RENDEZVOUS_H_
