// The errors every transport builds about one link, written once.
//
// An error about a link names this rank of its group and the peer, rank and address:
// `LinkContext` starts one. A receive that meets a message of another size (transport.h: "an
// error naming both sizes, the tag and the peer") reads the same over TCP, shared memory and UCX:
// `LinkSizeMismatch`. Templates over the transport's own link info (TcpLinkInfo, ShmLinkInfo,
// UcxLinkInfo: anything with rank, world_size, peer and peer_address), and header-only, so that
// the channel fuzzers, which compile a channel's sources by hand, have nothing more to link.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_LINK_ERROR_H_
#define PADDLE_COLLECTIVE_TRANSPORT_LINK_ERROR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "paddle/core/status.h"

namespace paddle {

// "rank 1/4, peer 2 (address)": the context of an error on `link`, for the caller to add the
// operation, bytes and hint to.
template <typename Link>
ErrorContext LinkContext(const Link& link) {
  ErrorContext context;
  context.Rank(link.rank, link.world_size).Peer(link.peer, link.peer_address);
  return context;
}

// kInvalidArgument: receive #`seq` of `expected_bytes` on `tag` met a message of `sent_bytes`
// (a number, or "more than N" where the transport only knows the message was larger).
template <typename Link>
absl::Status LinkSizeMismatch(const Link& link, uint64_t tag, int64_t seq, size_t expected_bytes,
                              absl::string_view sent_bytes) {
  return LinkContext(link)
      .Op("recv", seq)
      .Bytes(static_cast<int64_t>(expected_bytes))
      .Hint(
          "every rank must post matching sends and receives: do all ranks run the same "
          "collectives in the same order with the same sizes?")
      .Wrap(absl::InvalidArgumentError(
          absl::StrCat("message size mismatch on tag ", tag, ": recv #", seq, " expects ",
                       expected_bytes, " bytes but peer ", link.peer, " (", link.peer_address,
                       ") sent ", sent_bytes, " bytes")));
}

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_LINK_ERROR_H_
