// libFuzzer target over the TCPStore frame parser (built with clang by
// tcp_store_frame_fuzz_test.sh; the Bazel toolchain is gcc).
//
// The first input byte picks how the rest is chopped into Append() calls, so frames split at
// every kind of boundary. Properties checked beyond "no crash, no sanitizer report":
//   - a rejection is sticky (the stream has lost framing);
//   - the parser never holds more than one partial frame of at most kMaxFrame bytes;
//   - every accepted request re-encodes to a frame that parses back to the same request, and
//     EncodedRequestBytes() matches the encoding's size.
// The same bytes also go through the reply-side FrameBuffer and DecodeHello.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "paddle/collective/store/tcp_store_protocol.h"

namespace {

using paddle::tcp_store::Request;
using paddle::tcp_store::RequestParser;

constexpr size_t kMaxFrame = 4096;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

void CheckRoundTrip(const Request& r) {
  std::string encoded;
  paddle::tcp_store::AppendRequest(r, &encoded);
  Require(encoded.size() == paddle::tcp_store::EncodedRequestBytes(r), "EncodedRequestBytes");
  RequestParser again(kMaxFrame);
  again.Append(encoded);
  absl::StatusOr<absl::optional<Request>> back = again.Next();
  Require(back.ok() && back->has_value() && **back == r, "re-encoded request parses back");
  Require(!again.HasPartialFrame(), "nothing left after a re-encoded request");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t chunk = size_t{data[0]} % 17 + 1;
  absl::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

  RequestParser parser(kMaxFrame);
  bool failed = false;
  for (size_t pos = 0; pos < input.size() && !failed; pos += chunk) {
    parser.Append(input.substr(pos, chunk));
    while (true) {
      absl::StatusOr<absl::optional<Request>> next = parser.Next();
      if (!next.ok()) {
        Require(!next.status().message().empty(), "a rejection says why");
        Require(!parser.Next().ok(), "rejection is sticky");
        failed = true;
        break;
      }
      if (!next->has_value()) break;
      CheckRoundTrip(**next);
    }
    if (!failed) {
      Require(parser.buffered_bytes() < 4 + kMaxFrame, "buffers at most one partial frame");
    }
  }

  paddle::tcp_store::FrameBuffer replies(kMaxFrame, paddle::tcp_store::IsValidReplyCode);
  replies.Append(input);
  uint8_t type = 0;
  absl::string_view body;
  while (replies.Next(&type, &body).value_or(false)) {
    (void)paddle::tcp_store::DecodeHello(body);
  }
  return 0;
}
