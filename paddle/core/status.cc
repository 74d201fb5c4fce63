#include "paddle/core/status.h"

#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace paddle {
namespace {

constexpr absl::string_view kRanksDisagreeUrl = "type.paddle/RanksDisagree";

std::string FormatSeconds(absl::Duration d) {
  return absl::StrFormat("%.3gs", absl::ToDoubleSeconds(d));
}

// `status` with the code and payloads of `from` and the message `message`.
absl::Status Remessage(const absl::Status& from, absl::string_view message) {
  absl::Status out(from.code(), message);
  from.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace

ErrorContext& ErrorContext::Rank(int rank, int world_size) {
  rank_ = rank;
  world_size_ = world_size;
  return *this;
}

ErrorContext& ErrorContext::Peer(int peer_rank, absl::string_view address) {
  peer_ = peer_rank;
  peer_address_ = std::string(address);
  return *this;
}

ErrorContext& ErrorContext::Op(absl::string_view op, int64_t seq) {
  op_ = std::string(op);
  seq_ = seq;
  return *this;
}

ErrorContext& ErrorContext::Bytes(int64_t bytes) {
  bytes_ = bytes;
  return *this;
}

ErrorContext& ErrorContext::Waited(absl::Duration waited, absl::Duration timeout) {
  waited_ = waited;
  timeout_ = timeout;
  return *this;
}

ErrorContext& ErrorContext::Hint(absl::string_view hint) {
  hint_ = std::string(hint);
  return *this;
}

std::string ErrorContext::Describe() const {
  std::vector<std::string> parts;
  if (rank_ >= 0) parts.push_back(absl::StrCat("rank ", rank_, "/", world_size_));
  if (peer_ >= 0 || !peer_address_.empty()) {
    std::string peer = peer_ >= 0 ? absl::StrCat("peer ", peer_) : "peer";
    if (!peer_address_.empty()) absl::StrAppend(&peer, " (", peer_address_, ")");
    parts.push_back(std::move(peer));
  }
  if (!op_.empty()) {
    parts.push_back(seq_ >= 0 ? absl::StrCat("op ", op_, " #", seq_) : absl::StrCat("op ", op_));
  }
  if (bytes_ >= 0) parts.push_back(absl::StrCat(bytes_, " bytes"));
  if (waited_.has_value()) {
    parts.push_back(absl::StrCat(
        "waited ", FormatSeconds(*waited_), " of ",
        timeout_ == absl::InfiniteDuration() ? std::string("no limit") : FormatSeconds(timeout_)));
  }
  return absl::StrJoin(parts, ", ");
}

absl::Status ErrorContext::Wrap(const absl::Status& status) const {
  if (status.ok()) return status;
  std::string message(status.message());
  const std::string where = Describe();
  if (!where.empty()) absl::StrAppend(&message, " [", where, "]");
  if (!hint_.empty()) absl::StrAppend(&message, "; ", hint_);
  return Remessage(status, message);
}

absl::Status Annotate(const absl::Status& status, absl::string_view what) {
  if (status.ok()) return status;
  return Remessage(status, absl::StrCat(what, ": ", status.message()));
}

absl::Status MarkRanksDisagree(absl::Status status) {
  if (!status.ok()) status.SetPayload(kRanksDisagreeUrl, absl::Cord("1"));
  return status;
}

bool RanksDisagree(const absl::Status& status) {
  return status.GetPayload(kRanksDisagreeUrl).has_value();
}

}  // namespace paddle
