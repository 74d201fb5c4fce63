// GlooConnection: one rank's Gloo TCP device and context, connected to every peer through the
// job's own Store.
//
// Connecting (Note [Gloo connect] in gloo_connection.cc) is the one part of the Gloo backend that
// talks to the store: Gloo's full-mesh rendezvous runs over GlooStoreAdapter, then the ranks
// exchange the addresses Gloo's error messages name them by (Note [Gloo peer addresses]).
#ifndef PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_CONNECTION_H_
#define PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_CONNECTION_H_

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/collective/backends/gloo/gloo_error.h"
#include "paddle/collective/communicator.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace paddle {

struct GlooConnection {
  std::shared_ptr<gloo::transport::Device> device;
  // Its timeout is options.timeout: the default of operations that set none.
  std::shared_ptr<gloo::Context> context;
  // How Gloo's messages on this rank may name each peer (Note [Gloo peer addresses]).
  GlooPeerNames peer_names;
};

// Connects options.rank to the other options.world_size - 1 ranks within options.connect_timeout,
// listening on the address the native TCP transport would choose (PADDLE_SOCKET_IFNAME, else the
// host name's address, else loopback). Keys go under "<options.store_prefix>/gloo". Errors name
// this rank, the keys of the ranks that never published their address, the time waited and the
// setting to change.
absl::StatusOr<GlooConnection> ConnectGloo(const CommunicatorOptions& options);

// Note [Gloo and SIGPIPE]. Gloo writes to its sockets with plain write/writev, so a write to a
// peer that has died raises SIGPIPE, whose default action kills this process before Gloo can
// report the error (Python programs never see it: the interpreter ignores SIGPIPE). We change no
// process-wide disposition; instead SIGPIPE is blocked in every thread that writes through Gloo:
// the communicator's worker (BlockSigpipeInThisThread) and, around device creation and connect,
// the calling thread (ScopedSigpipeBlock), whose mask Gloo's own I/O thread inherits. A write to
// a dead peer then fails with EPIPE, which Gloo turns into an exception we report.
void BlockSigpipeInThisThread();

// Blocks SIGPIPE in this thread for its lifetime; on exit, discards a SIGPIPE raised meanwhile
// and restores the thread's previous mask.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t previous_;
};

// The listening address, as Gloo prints it, that `peer` published for its pair with `rank` in a
// group of `size`, from `value`: what Gloo's connectFullMesh stored under "<prefix>/gloo/<peer>"
// (Note [Gloo peer addresses]). kInternal naming the peer and the sizes when `value` is not laid
// out as expected.
absl::StatusOr<std::string> ListenAddressFromRendezvous(absl::string_view value, int rank, int size,
                                                        int peer);

// A timeout as Gloo takes it: whole milliseconds, rounded up, at least 1 ms and at most a year
// (Gloo computes deadlines as now + timeout; an infinite one would overflow).
std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_CONNECTION_H_
