// CallGloo: the one place where Gloo's exceptions become Status.
#include "paddle/collective/backends/gloo/gloo_error.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>

#include <exception>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/backends/gloo/gloo_store_adapter.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Note [Gloo errors]. What Gloo throws, and the code it becomes:
//  - GlooStoreError (thrown by our GlooStoreAdapter into Gloo's rendezvous): the store's own
//    Status, code kept (kDeadlineExceeded listing the keys of the ranks that never published).
//  - gloo::IoException whose text mentions a timeout ("Timed out waiting 5000ms ...", "Connect
//    timeout", "Read timeout"): kDeadlineExceeded. Some peer did not take part in time.
//  - any other gloo::IoException ("Connection reset by peer", "Connection closed by peer"):
//    kUnavailable, the code for a lost peer. The peer is named when Gloo's text holds its address.
//  - gloo::EnforceNotMet and other gloo::Exception: kInternal; Gloo refused the call, usually
//    because ranks passed different sizes.
//  - anything else: kInternal with its what().
bool MentionsTimeout(absl::string_view text) {
  std::string lower = absl::AsciiStrToLower(text);
  return absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout");
}

// Whether `address` appears in `text` as a whole: "[127.0.0.1]:1956" must not match
// "[127.0.0.1]:19560".
bool NamesAddress(absl::string_view text, absl::string_view address) {
  if (address.empty()) return false;
  for (size_t at = text.find(address); at != absl::string_view::npos;
       at = text.find(address, at + 1)) {
    const size_t end = at + address.size();
    if (end == text.size() || !absl::ascii_isdigit(text[end])) return true;
  }
  return false;
}

// The first peer one of whose addresses appears in `text`, or -1; *address is the one that did.
int PeerNamedIn(absl::string_view text, const GlooPeerNames* names, std::string* address) {
  if (names == nullptr) return -1;
  for (size_t r = 0; r < names->size(); ++r) {
    for (const std::string& candidate : (*names)[r]) {
      if (!NamesAddress(text, candidate)) continue;
      *address = candidate;
      return static_cast<int>(r);
    }
  }
  return -1;
}

// "; peers by the address Gloo names them: rank 0 [127.0.0.1]:5000 or [127.0.0.1]:4711, ..."
// when the peer could not be told from Gloo's text, so that the reader can.
std::string PeerAddressList(const GlooPeerNames* names) {
  if (names == nullptr) return "";
  std::string out;
  for (size_t r = 0; r < names->size(); ++r) {
    if ((*names)[r].empty()) continue;
    absl::StrAppend(&out, out.empty() ? "; peers by the address Gloo names them: " : ", ", "rank ",
                    r, " ", absl::StrJoin((*names)[r], " or "));
  }
  return out;
}

absl::Status Describe(const GlooCallInfo& info, absl::Duration waited, const absl::Status& status) {
  ErrorContext context;
  context.Rank(info.rank, info.world_size).Op(info.op, info.seq).Waited(waited, info.timeout);
  if (info.bytes >= 0) context.Bytes(info.bytes);
  std::string address;
  int peer = info.peer;
  if (peer < 0) {
    peer = PeerNamedIn(status.message(), info.peer_names, &address);
  } else if (info.peer_names != nullptr && peer < static_cast<int>(info.peer_names->size()) &&
             !(*info.peer_names)[peer].empty()) {
    address = (*info.peer_names)[peer].front();
  }
  if (peer >= 0) context.Peer(peer, address);
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      context.Hint(absl::StrCat(
          TimeoutHint(info.timeout_kind),
          "; otherwise some rank stopped or called a different operation (PADDLE_DEBUG_CHECKS=1 "
          "compares the operations of all ranks)"));
      break;
    case absl::StatusCode::kUnavailable:
      context.Hint(peer >= 0 ? absl::StrCat("rank ", peer,
                                            " closed its connection: it has probably failed or "
                                            "aborted; its own log says why")
                             : absl::StrCat("a peer closed its connection: it has probably failed "
                                            "or aborted; its own log says why",
                                            PeerAddressList(info.peer_names)));
      break;
    default:
      context.Hint(
          "Gloo refused the call; check that every rank passes the same sizes "
          "(PADDLE_DEBUG_CHECKS=1 compares them)");
      break;
  }
  return context.Wrap(status);
}

}  // namespace

absl::Status CallGloo(const GlooCallInfo& info, absl::FunctionRef<void()> call) {
  const Deadline clock = Deadline::After(info.timeout);
  absl::Status status;
  try {
    call();
    return absl::OkStatus();
  } catch (const GlooStoreError& e) {
    status = e.status();
  } catch (const gloo::IoException& e) {
    const std::string text = absl::StrCat("Gloo: ", e.what());
    status = MentionsTimeout(e.what()) ? absl::DeadlineExceededError(text)
                                       : absl::UnavailableError(text);
  } catch (const gloo::EnforceNotMet& e) {
    status = absl::InternalError(absl::StrCat("Gloo: ", e.what()));
  } catch (const std::exception& e) {
    // gloo::Exception and anything else: a timeout can surface as a plain gloo::Exception too.
    const std::string text = absl::StrCat("Gloo: ", e.what());
    status =
        MentionsTimeout(e.what()) ? absl::DeadlineExceededError(text) : absl::InternalError(text);
  }
  return Describe(info, clock.Elapsed(), status);
}

}  // namespace paddle
