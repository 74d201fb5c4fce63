// UcxChannel: tag sends and receives on the peer's own worker, completion callbacks, failure and
// teardown; see Note [One worker per peer] in ucx_channel.h.
#include "paddle/collective/transport/ucx/ucx_channel.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/store/hmac_sha256.h"
#include "paddle/collective/transport/link_error.h"
#include "paddle/collective/transport/ucx/ucx_error.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

// Active message ids of the control messages (Note [One worker per peer]).
constexpr unsigned kHelloAm = 1;
constexpr unsigned kAbortAm = 2;
// A tag receive matches all 64 bits.
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
// An abort message carries at most this much of the cause's text.
constexpr size_t kMaxAbortText = 2048;
// Note [UCX hello proof].
constexpr size_t kChallengeBytes = 16;
constexpr size_t kProofBytes = 32;
constexpr size_t kHelloBytes = 8 + kProofBytes;  // u32 rank, u32 world size, proof
constexpr size_t kMaxRejected = 4;

std::string HelloProof(const std::string& key, uint32_t from, uint32_t to,
                       const std::string& receiver_challenge, const std::string& sender_challenge) {
  std::string message = "paddle ucx hello";
  message.append(reinterpret_cast<const char*>(&from), sizeof(from));
  message.append(reinterpret_cast<const char*>(&to), sizeof(to));
  message += receiver_challenge;
  message += sender_challenge;
  return std::string(DigestBytes(HmacSha256(key, message)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxChannel>> UcxChannel::Create(ucp_context_h context,
                                                               std::shared_ptr<UcxLinkInfo> link,
                                                               Owner* owner) {
  std::unique_ptr<UcxChannel> ch(new UcxChannel(std::move(link), owner));
  ch->challenge_ = RandomBytes(kChallengeBytes);
  const std::string what = absl::StrCat("creating the UCP worker of rank ", ch->link_->rank,
                                        " for peer ", ch->link_->peer);
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // mu_ serializes every call
  UCX_RETURN_IF_ERROR(ucp_worker_create(context, &params, &ch->worker_), what);
  UCX_RETURN_IF_ERROR(ucp_worker_get_efd(ch->worker_, &ch->event_fd_), what);
  for (auto [id, cb] : {std::make_pair(kHelloAm, &UcxChannel::OnHello),
                        std::make_pair(kAbortAm, &UcxChannel::OnAbort)}) {
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = id;
    handler.cb = cb;
    handler.arg = ch.get();
    UCX_RETURN_IF_ERROR(ucp_worker_set_am_recv_handler(ch->worker_, &handler), what);
  }
  return ch;
}

UcxChannel::~UcxChannel() {
  if (worker_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (hello_request_ != nullptr) ucp_request_free(hello_request_);  // released when it ends
  if (close_request_ != nullptr) ucp_request_free(close_request_);
  // An endpoint still open means setup failed before teardown: close it without waiting.
  if (ep_ != nullptr) {
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t closing = ucp_ep_close_nbx(ep_, &params);
    if (UCS_PTR_IS_PTR(closing)) ucp_request_free(closing);
  }
  ucp_worker_destroy(worker_);
}

absl::StatusOr<std::string> UcxChannel::WorkerAddress() {
  std::lock_guard<std::mutex> lock(mu_);
  ucp_address_t* address = nullptr;
  size_t length = 0;
  UCX_RETURN_IF_ERROR(ucp_worker_get_address(worker_, &address, &length),
                      absl::StrCat("reading the UCP worker address for peer ", link_->peer));
  std::string bytes(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
  return bytes;
}

absl::Status UcxChannel::Connect(const std::string& address, const std::string& peer_label,
                                 const std::string& peer_challenge, const std::string& key) {
  link_->peer_address = peer_label;
  std::lock_guard<std::mutex> lock(mu_);
  peer_challenge_ = peer_challenge;
  key_ = key;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxChannel::OnEndpointError;
  params.err_handler.arg = this;
  const std::string what =
      absl::StrCat("rank ", link_->rank, "/", link_->world_size, " connecting to peer rank ",
                   link_->peer, " (", peer_label, ")");
  UCX_RETURN_IF_ERROR(ucp_ep_create(worker_, &params, &ep_), what);
  const uint32_t words[2] = {static_cast<uint32_t>(link_->rank),
                             static_cast<uint32_t>(link_->world_size)};
  hello_out_.assign(reinterpret_cast<const char*>(words), sizeof(words));
  hello_out_ +=
      HelloProof(key_, words[0], static_cast<uint32_t>(link_->peer), peer_challenge_, challenge_);
  ucp_request_param_t send{};
  ucs_status_ptr_t sent =
      ucp_am_send_nbx(ep_, kHelloAm, nullptr, 0, hello_out_.data(), hello_out_.size(), &send);
  if (UCS_PTR_IS_ERR(sent)) UCX_RETURN_IF_ERROR(UCS_PTR_STATUS(sent), what);
  // Still in flight: HelloSent() progresses it to completion during setup.
  if (UCS_PTR_IS_PTR(sent)) hello_request_ = sent;
  return absl::OkStatus();
}

bool UcxChannel::HelloSent() {
  std::lock_guard<std::mutex> lock(mu_);
  if (hello_request_ == nullptr) return true;
  if (ucp_request_check_status(hello_request_) == UCS_INPROGRESS) return false;
  // Done (a failure shows up as an endpoint error, which fails setup on its own).
  ucp_request_free(hello_request_);
  hello_request_ = nullptr;
  return true;
}

absl::Status UcxChannel::HelloStatus() {
  std::vector<std::string> arrived;
  {
    std::lock_guard<std::mutex> lock(mu_);
    arrived.swap(hellos_in_);
  }
  for (const std::string& hello : arrived) {
    if (hello_.load(std::memory_order_acquire) != 0) break;
    std::string rejected;
    uint32_t words[2] = {0, 0};
    if (hello.size() != kHelloBytes) {
      rejected = absl::StrCat("a ", hello.size(), "-byte hello, not ", kHelloBytes);
    } else {
      std::memcpy(words, hello.data(), sizeof(words));
      // The sender claims words[0]; a proof for any other rank pair or challenge fails.
      const std::string expected =
          HelloProof(key_, static_cast<uint32_t>(link_->peer), static_cast<uint32_t>(link_->rank),
                     challenge_, peer_challenge_);
      if (!ConstantTimeEquals(absl::string_view(hello).substr(8), expected)) {
        rejected =
            absl::StrCat("a hello claiming rank ", words[0],
                         " that does not prove membership of this job (another job, or another "
                         "PADDLE_STORE_TOKEN)");
      }
    }
    if (!rejected.empty()) {
      PADDLE_LOG(WARN, NET) << "rank " << link_->rank << "/" << link_->world_size << ": dropped "
                            << rejected << " on the worker published for peer rank " << link_->peer;
      std::lock_guard<std::mutex> lock(mu_);
      if (rejected_.size() < kMaxRejected) rejected_.push_back(std::move(rejected));
      continue;
    }
    if (words[0] != static_cast<uint32_t>(link_->peer) ||
        words[1] != static_cast<uint32_t>(link_->world_size)) {
      hello_error_ = absl::StrCat(
          "the worker published for peer rank ", link_->peer, " says it is rank ", words[0], " of ",
          words[1], ", but rank ", link_->rank, " has world size ", link_->world_size,
          ": start every rank with the same world size and a fresh store prefix");
    }
    hello_.store(hello_error_.empty() ? 1 : 2, std::memory_order_release);
  }
  if (hello_.load(std::memory_order_acquire) == 1) {
    absl::Status abort;
    {
      std::lock_guard<std::mutex> lock(mu_);
      abort.Update(pending_abort_);
      pending_abort_ = absl::OkStatus();
    }
    if (!abort.ok()) {
      owner_->Poison(abort);
      owner_->OpCompleted();
    }
  }
  switch (hello_.load(std::memory_order_acquire)) {
    case 0:
      return absl::UnavailableError("no hello yet");
    case 1:
      return absl::OkStatus();
    default:
      return absl::FailedPreconditionError(hello_error_);
  }
}

std::string UcxChannel::RejectedHellos() {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::StrJoin(rejected_, "; ");
}

// Runs inside a worker call made under mu_: only stashes the bytes (Note [UCX hello proof]).
ucs_status_t UcxChannel::OnHello(void* arg, const void* /*header*/, size_t /*header_length*/,
                                 void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* ch = static_cast<UcxChannel*>(arg);
  if (ch->hellos_in_.size() >= kMaxRejected) return UCS_OK;  // a flood: the rest are dropped
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    ch->hellos_in_.emplace_back();  // a rendezvous hello is no hello of ours: rejected as 0 bytes
  } else {
    ch->hellos_in_.emplace_back(static_cast<const char*>(data), length > 4096 ? 4096 : length);
  }
  return UCS_OK;
}

// ---- Sends and receives ------------------------------------------------------------------------

std::unique_ptr<TransportRequest> UcxChannel::MakeRequest(std::shared_ptr<UcxOp> op) {
  return std::make_unique<UcxRequest>(std::move(op), link_, owner_->WaiterHandle());
}

std::unique_ptr<TransportRequest> UcxChannel::Send(const void* data, size_t bytes, uint64_t tag) {
  std::shared_ptr<UcxOp> op;
  absl::Status cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op = std::make_shared<UcxOp>(UcxOp::Kind::kSend, data, bytes, tag, send_seq_++);
    op->channel = this;
    cause = owner_->PoisonCause();
    if (cause.ok() && ep_ == nullptr) cause = absl::FailedPreconditionError("the link is closed");
    if (cause.ok()) {
      pending_.emplace(op.get(), op);
      ucp_request_param_t params{};
      params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      params.cb.send = &UcxChannel::OnSendDone;
      params.user_data = op.get();
      Posted(*op, ucp_tag_send_nbx(ep_, data, bytes, tag, &params));
    }
  }
  if (!cause.ok()) op->Fail(cause, *link_);
  return MakeRequest(std::move(op));
}

std::unique_ptr<TransportRequest> UcxChannel::Recv(void* data, size_t bytes, uint64_t tag) {
  std::shared_ptr<UcxOp> op;
  absl::Status cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op = std::make_shared<UcxOp>(UcxOp::Kind::kRecv, data, bytes, tag, recv_seq_++);
    op->channel = this;
    cause = owner_->PoisonCause();
    if (cause.ok() && ep_ == nullptr) cause = absl::FailedPreconditionError("the link is closed");
    if (cause.ok()) {
      pending_.emplace(op.get(), op);
      // Always through the callback: UCX 1.13 leaves recv_info's length at 0 when a receive
      // completes inside the post, and the length is what catches a short message.
      ucp_request_param_t params{};
      params.op_attr_mask =
          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      params.cb.recv = &UcxChannel::OnRecvDone;
      params.user_data = op.get();
      Posted(*op, ucp_tag_recv_nbx(worker_, data, bytes, tag, kFullMask, &params));
    }
  }
  if (!cause.ok()) op->Fail(cause, *link_);
  return MakeRequest(std::move(op));
}

void UcxChannel::Posted(UcxOp& op, ucs_status_ptr_t posted) {
  if (posted == nullptr) {
    Finish(op, UCS_OK, nullptr, nullptr);
  } else if (UCS_PTR_IS_ERR(posted)) {
    Finish(op, UCS_PTR_STATUS(posted), nullptr, nullptr);
  } else if (op.IsCompleted()) {
    ucp_request_free(posted);  // its callback ran inside the post
  } else {
    op.ucx_request = posted;
  }
}

void UcxChannel::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<UcxOp*>(user_data);
  op->channel->Finish(*op, status, request, nullptr);
}

void UcxChannel::OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                            void* user_data) {
  auto* op = static_cast<UcxOp*>(user_data);
  op->channel->Finish(*op, status, request, info);
}

void UcxChannel::Finish(UcxOp& op, ucs_status_t status, void* request,
                        const ucp_tag_recv_info_t* info) {
  // Called with mu_ held: from a post, or from a callback inside progress, cancel or close.
  if (request != nullptr && op.ucx_request != nullptr) {
    ucp_request_free(request);
    op.ucx_request = nullptr;
  }
  absl::Status result;
  absl::Status poison;
  const size_t length = info != nullptr ? info->length : op.bytes;
  if (op.kind == UcxOp::Kind::kRecv && status == UCS_OK && length != op.bytes) {
    result = poison = LinkSizeMismatch(*link_, op.tag, op.seq, op.bytes, absl::StrCat(length));
  } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    // UCX reports the sender's size with the truncation, where it knows it.
    result = poison = LinkSizeMismatch(
        *link_, op.tag, op.seq, op.bytes,
        length > op.bytes ? absl::StrCat(length) : absl::StrCat("more than ", op.bytes));
  } else if (status != UCS_OK) {
    absl::Status cause = owner_->PoisonCause();
    if (cause.ok()) {
      cause = poison = LinkError(status, op.Describe(*link_));
      result = cause;
    } else {
      result = Annotate(cause, op.Describe(*link_));
    }
  }
  op.Complete(result);
  if (!poison.ok()) owner_->Poison(poison);
  owner_->OpCompleted();
  pending_.erase(&op);  // may free op: last
}

absl::Status UcxChannel::LinkError(ucs_status_t status, const std::string& what) const {
  return LinkContext(*link_)
      .Hint(absl::StrCat("rank ", link_->peer,
                         " may have exited, crashed or been killed, or the network failed; its "
                         "log says why"))
      .Wrap(UcxError(status,
                     absl::StrCat("connection to peer rank ", link_->peer, " (",
                                  link_->peer_address, ") failed"),
                     what));
}

// ---- Failure -----------------------------------------------------------------------------------

void UcxChannel::OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* ch = static_cast<UcxChannel*>(arg);
  ch->owner_->Poison(ch->LinkError(status, "endpoint error"));
  ch->owner_->OpCompleted();  // wake sleepers so one of them tears down
}

// Runs inside a worker call made under mu_.
ucs_status_t UcxChannel::OnAbort(void* arg, const void* /*header*/, size_t /*header_length*/,
                                 void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* ch = static_cast<UcxChannel*>(arg);
  int32_t code = static_cast<int32_t>(absl::StatusCode::kAborted);
  std::string text = "(cause not delivered)";
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0 && length >= sizeof(code)) {
    std::memcpy(&code, data, sizeof(code));
    text.assign(static_cast<const char*>(data) + sizeof(code), length - sizeof(code));
  }
  if (code <= 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    code = static_cast<int32_t>(absl::StatusCode::kAborted);
  }
  absl::Status cause = ErrorContext()
                           .Rank(ch->link_->rank, ch->link_->world_size)
                           .Peer(ch->link_->peer, ch->link_->peer_address)
                           .Wrap(absl::Status(static_cast<absl::StatusCode>(code),
                                              absl::StrCat("peer rank ", ch->link_->peer, " (",
                                                           ch->link_->peer_address,
                                                           ") aborted its transport: ", text)));
  // Note [UCX hello proof]: an abort counts only from a peer that proved itself; one that came
  // before the proof was checked waits for it (HelloStatus), one from a stranger never counts.
  if (ch->hello_.load(std::memory_order_acquire) != 1) {
    if (ch->pending_abort_.ok()) ch->pending_abort_ = std::move(cause);
    return UCS_OK;
  }
  ch->owner_->Poison(cause);
  ch->owner_->OpCompleted();
  return UCS_OK;
}

void UcxChannel::OnAbortSent(void* request, ucs_status_t /*status*/, void* user_data) {
  static_cast<UcxChannel*>(user_data)->abort_sent_.store(true);
  ucp_request_free(request);
}

void UcxChannel::StartClose(const absl::Status& cause) {
  std::vector<std::shared_ptr<UcxOp>> receives;
  std::lock_guard<std::mutex> lock(mu_);
  if (ep_ != nullptr) {
    const int32_t code = static_cast<int32_t>(cause.code());
    abort_out_.assign(reinterpret_cast<const char*>(&code), sizeof(code));
    abort_out_.append(std::string(cause.message().substr(0, kMaxAbortText)));
    ucp_request_param_t params{};
    params.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    params.cb.send = &UcxChannel::OnAbortSent;
    params.user_data = this;
    params.flags = UCP_AM_SEND_FLAG_EAGER;
    abort_sent_.store(false);
    ucs_status_ptr_t sent =
        ucp_am_send_nbx(ep_, kAbortAm, nullptr, 0, abort_out_.data(), abort_out_.size(), &params);
    if (!UCS_PTR_IS_PTR(sent)) abort_sent_.store(true);
  }
  for (auto& [raw, op] : pending_) {
    if (op->kind == UcxOp::Kind::kRecv && op->ucx_request != nullptr) receives.push_back(op);
  }
  for (auto& op : receives) {
    if (op->ucx_request != nullptr) ucp_request_cancel(worker_, op->ucx_request);
  }
}

bool UcxChannel::AbortSent() { return abort_sent_.load(); }

void UcxChannel::ForceClose() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ep_ == nullptr) return;
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t closing = ucp_ep_close_nbx(ep_, &params);
  ep_ = nullptr;
  if (UCS_PTR_IS_PTR(closing)) close_request_ = closing;
}

bool UcxChannel::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (close_request_ != nullptr && ucp_request_check_status(close_request_) != UCS_INPROGRESS) {
    ucp_request_free(close_request_);
    close_request_ = nullptr;
  }
  return close_request_ == nullptr && pending_.empty();
}

void UcxChannel::FailPending(const absl::Status& cause) {
  std::lock_guard<std::mutex> lock(mu_);
  // Ops UCX still holds stay listed, so a late callback finds them.
  for (auto& [raw, op] : pending_) op->Fail(cause, *link_);
}

// ---- Progress ----------------------------------------------------------------------------------

bool UcxChannel::Progress() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  return ucp_worker_progress(worker_) != 0;
}

bool UcxChannel::Arm() {
  std::lock_guard<std::mutex> lock(mu_);
  return ucp_worker_arm(worker_) == UCS_OK;
}

}  // namespace paddle
