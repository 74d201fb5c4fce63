// libFuzzer target over the TCP transport's wire decoders (built with clang by
// tcp_wire_fuzz_test.sh): the Hello and Reply of the handshake and the header in front of every
// message, all read from bytes a peer (or anyone who can connect) controls. Properties checked
// beyond "no crash, no sanitizer report":
//   - a decoded Hello re-encodes to the same bytes (but the reserved zero field);
//   - a decoded Reply never announces more than kMaxReasonBytes;
//   - a decoded message header has known flags, an abort payload within kMaxAbortBytes, no close
//     payload, at most kMaxMessageBytes, and re-encodes to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "paddle/collective/transport/tcp/tcp_wire.h"

namespace {

namespace wire = paddle::tcp_wire;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* in = reinterpret_cast<const char*>(data);
  if (size >= wire::kHelloBytes) {
    wire::Hello hello;
    if (wire::DecodeHello(in, &hello).ok()) {
      char again[wire::kHelloBytes];
      wire::EncodeHello(hello, again);
      Require(std::memcmp(again, in, 20) == 0 && std::memcmp(again + 24, in + 24, 24) == 0,
              "a decoded Hello re-encodes to the same bytes");
    }
  }
  if (size >= wire::kReplyBytes) {
    absl::StatusOr<uint32_t> length = wire::DecodeReply(in);
    if (length.ok()) Require(*length <= wire::kMaxReasonBytes, "a Reply's length is bounded");
  }
  if (size >= wire::kMessageHeaderBytes) {
    wire::MessageHeader header;
    if (wire::DecodeMessageHeader(in, &header).ok()) {
      Require(header.bytes <= wire::kMaxMessageBytes, "message bytes bounded");
      Require(
          header.flags == 0 || header.flags == wire::kAbortFlag || header.flags == wire::kCloseFlag,
          "known flags");
      Require(header.flags != wire::kAbortFlag || header.bytes <= wire::kMaxAbortBytes,
              "abort payload bounded");
      Require(header.flags != wire::kCloseFlag || header.bytes == 0, "close has no payload");
      char again[wire::kMessageHeaderBytes];
      wire::EncodeMessageHeader(header, again);
      Require(std::memcmp(again, in, wire::kMessageHeaderBytes) == 0,
              "a decoded header re-encodes to the same bytes");
    }
  }
  return 0;
}
