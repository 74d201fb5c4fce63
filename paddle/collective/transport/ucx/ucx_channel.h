// UcxChannel: the link to one peer over its own UCP worker and endpoint.
//
// Note [One worker per peer]. Our tags use all 64 bits (Note [Message tags] in
// paddle/collective/algorithms/algorithm_context.h; the native backend's control tags set bits 63
// and 62), but UCX matches tags per worker, not per endpoint, so one worker shared by all peers
// could not tell a tag-7 message from peer 1 from one from peer 2 without stealing tag bits for
// the source rank. Each channel therefore owns a worker that talks to exactly one peer: UCX's own
// tag matching, with the full 64-bit tag and a full mask, is then exactly our rule (oldest
// unmatched message with that tag from that peer; one tag's messages in order), and large
// messages keep UCX's zero-copy rendezvous. The alternatives cost more: active messages with our
// own matching re-implement unexpected-message buffering and rendezvous; reserving tag bits
// breaks the algorithms' tag layout. The price is world_size - 1 workers per rank (each with its
// own transport resources, e.g. a TCP listener per device) and a waiter progressing all of them
// (Note [Waiting] in ucx_transport.cc); both are fine at the world sizes one host runs.
//
// Control messages (setup hello, abort with its cause) travel as UCP active messages on the same
// worker, so they never collide with a user tag.
//
// Note [UCX hello proof]. A worker accepts an endpoint from anyone who has its address, so the
// hello proves that its sender belongs to the job, as the TCP transport's handshake does (Note
// [Transport secret] in tcp/tcp_mesh.cc): the ranks share a key (a random secret in the store
// under <prefix>/ucx/secret, mixed with PADDLE_STORE_TOKEN when set), each worker publishes a
// fresh 16-byte challenge beside its address, and the hello carries
// HMAC-SHA256(key, "paddle ucx hello" || sender rank || receiver rank || the receiver's challenge
// || the sender's challenge). The receiver checks it once it knows both challenges (in
// HelloStatus, never in the callback); a hello that proves nothing is logged and dropped and the
// wait goes on, so a stranger cannot fail the job's setup, only show up in the timeout error.
// Limit: the proof guards setup; UCX gives no hook to refuse a later endpoint to the worker.
//
// Locking: `mu_` serializes every call on the worker (the worker is UCS_THREAD_MODE_SERIALIZED),
// and UCX runs completion callbacks inside those calls, so the pending list and the endpoint are
// guarded by it too. Callbacks never take another channel's lock or call back into UCX beyond
// freeing their request; they report failures to the Owner, whose Poison takes only its own lock.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_CHANNEL_H_
#define PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_CHANNEL_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/collective/transport/transport.h"
#include "paddle/collective/transport/ucx/ucx_request.h"

namespace paddle {

class UcxChannel final : public Channel {
 public:
  // What a channel needs from its transport.
  class Owner : public UcxWaiter {
   public:
    // Poisons the transport (the first cause wins). Never calls into a channel.
    virtual void Poison(const absl::Status& cause) = 0;
    // The poison cause, or OK while the transport is healthy.
    virtual absl::Status PoisonCause() const = 0;
    // An op completed: wake waiters asleep in the transport.
    virtual void OpCompleted() = 0;
    // What requests wait through (UcxWaiterHandle).
    virtual std::shared_ptr<UcxWaiterHandle> WaiterHandle() = 0;

   protected:
    ~Owner() = default;
  };

  // Creates the worker for the link described by `link` (peer_address is filled in by Connect).
  static absl::StatusOr<std::unique_ptr<UcxChannel>> Create(ucp_context_h context,
                                                            std::shared_ptr<UcxLinkInfo> link,
                                                            Owner* owner);
  // The transport tears the channel down first (StartClose, ForceClose, FailPending).
  ~UcxChannel() override;
  UcxChannel(const UcxChannel&) = delete;
  UcxChannel& operator=(const UcxChannel&) = delete;

  // This worker's address, to publish for the peer.
  absl::StatusOr<std::string> WorkerAddress();
  // The fresh challenge this worker publishes beside its address (Note [UCX hello proof]).
  const std::string& challenge() const { return challenge_; }
  // Connects to the peer's worker (`address` from WorkerAddress() there) and sends the hello,
  // proven with `key` over the peer's published `peer_challenge` (Note [UCX hello proof]).
  absl::Status Connect(const std::string& address, const std::string& peer_label,
                       const std::string& peer_challenge, const std::string& key);
  // OK once the peer's proven hello arrived; kUnavailable while it has not; another error if it
  // is not the peer this link expects. Checks the hellos that arrived since the last call.
  absl::Status HelloStatus();
  // Why hellos that arrived were dropped (the last few), for the timeout error; "" if none.
  std::string RejectedHellos();
  // Whether this side's hello has left (its send completed). A rank must not return from setup
  // before it has: the send may still need this worker's progress, and a rank that then does
  // something else for a while (waits in a barrier, say) would leave the peer waiting for the
  // hello until its connect timeout.
  bool HelloSent();

  int peer() const override { return link_->peer; }
  const std::string& peer_address() const override { return link_->peer_address; }
  std::unique_ptr<TransportRequest> Send(const void* data, size_t bytes, uint64_t tag) override;
  std::unique_ptr<TransportRequest> Recv(void* data, size_t bytes, uint64_t tag) override;

  // Progress and sleep (Note [Waiting] in ucx_transport.cc). Progress returns whether anything
  // happened (false too if another thread is progressing this worker right now); Arm returns
  // false if events are pending, so the caller must progress again before sleeping.
  bool Progress();
  bool Arm();
  int event_fd() const { return event_fd_; }

  // Teardown, in this order, never from inside a UCX callback: tell the peer why (best effort)
  // and cancel the receives UCX has not matched yet; once AbortSent() or time is up, close the
  // endpoint forcibly (failing the UCX requests still on it); once Idle() or time is up, fail
  // whatever is left with `cause`.
  void StartClose(const absl::Status& cause);
  bool AbortSent();
  void ForceClose();
  bool Idle();
  void FailPending(const absl::Status& cause);

 private:
  UcxChannel(std::shared_ptr<UcxLinkInfo> link, Owner* owner)
      : link_(std::move(link)), owner_(owner) {}

  std::unique_ptr<TransportRequest> MakeRequest(std::shared_ptr<UcxOp> op);
  // After a post returned `posted`: completes `op` (already pending) at once, or remembers its
  // UCX request.
  void Posted(UcxOp& op, ucs_status_ptr_t posted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completion of a UCX request (or of a post that completed at once, request null).
  void Finish(UcxOp& op, ucs_status_t status, void* request, const ucp_tag_recv_info_t* info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LinkError(ucs_status_t status, const std::string& what) const;

  // UCX calls these inside calls made under mu_.
  static void OnSendDone(void* request, ucs_status_t status,
                         void* user_data) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  static void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                         void* user_data) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnAbortSent(void* request, ucs_status_t status, void* user_data);
  static ucs_status_t OnHello(void* arg, const void* header, size_t header_length, void* data,
                              size_t length,
                              const ucp_am_recv_param_t* param) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  static ucs_status_t OnAbort(void* arg, const void* header, size_t header_length, void* data,
                              size_t length,
                              const ucp_am_recv_param_t* param) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  const std::shared_ptr<UcxLinkInfo> link_;
  Owner* const owner_;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;

  std::mutex mu_;
  ucp_ep_h ep_ ABSL_GUARDED_BY(mu_) = nullptr;
  void* close_request_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Ops UCX still holds (their callbacks find them through user_data).
  std::unordered_map<UcxOp*, std::shared_ptr<UcxOp>> pending_ ABSL_GUARDED_BY(mu_);
  int64_t send_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t recv_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // The hello's bytes (rank, world size, proof): sent from here, so they outlive the send.
  std::string hello_out_;
  void* hello_request_ = nullptr;  // the hello's send while it is in flight (guarded by mu_)
  // Note [UCX hello proof]: set before the first progress of the worker.
  std::string challenge_;
  std::string peer_challenge_;
  std::string key_;
  std::vector<std::string> hellos_in_ ABSL_GUARDED_BY(mu_);  // arrived, not yet checked
  std::vector<std::string> rejected_ ABSL_GUARDED_BY(mu_);   // why hellos were dropped
  absl::Status pending_abort_ ABSL_GUARDED_BY(mu_);          // an abort that came before the proof
  std::string abort_out_;                                    // likewise
  std::atomic<bool> abort_sent_{true};
  // 0: no proven hello yet; 1: hello from the expected peer; 2: hello_error_ says what was wrong.
  std::atomic<int> hello_{0};
  std::string hello_error_;  // written before hello_ becomes 2
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_CHANNEL_H_
