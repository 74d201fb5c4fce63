// The bytes the TCP transport puts on the wire: the handshake that opens each link and the header
// in front of every message.
//
// Note [TCP transport wire format]. All integers are little-endian.
//
// Handshake, once per pair of ranks, right after the lower rank connects to the higher one:
//  1. The connector sends a Hello (32 bytes): u32 magic "PDTH", u32 version, u32 its rank, u32
//     world size, u32 the rank it means to reach, u32 zero, u64 the job nonce (a random number
//     every rank of one transport reads from the store, so links of two jobs sharing an address
//     space, or a stale address left in the store, never connect by mistake).
//  2. The acceptor checks the Hello (a foreign protocol, another job's nonce, another world size,
//     a connector that meant to reach another rank, a rank that is not lower than its own or has
//     already connected) and answers with its own Hello followed by a u32 length and that many
//     bytes of text: empty when it accepts, the reason when it rejects (then it closes).
//  3. The connector checks the acceptor's Hello the same way. From then on the link carries data.
//
// Data: each message is a 24-byte header, then exactly `bytes` bytes of payload:
//   u32 magic "PDTM", u32 flags, u64 tag, u64 bytes.
// The magic is not needed to frame a correct stream; it turns a corrupted or desynchronised one
// into an immediate, named protocol error instead of a receive of garbage sizes.
// Flags 0 is a message. Flags kAbortFlag is the last frame a poisoned transport sends before it
// closes a link (when the link is between messages): tag is the absl::StatusCode of its cause and
// the payload (at most kMaxAbortBytes) the cause's text, so the peer can report the rank that
// really failed instead of blaming the rank that merely passed the failure on.
// Flags kCloseFlag (no payload) is the first frame a healthy transport sends when it is destroyed
// with nothing pending: the peer keeps what has already arrived (receives may still take it)
// and fails only what it still expects from or sends to this rank, without poisoning its own
// transport (Note [Graceful close] in tcp_channel.cc).
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_WIRE_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace paddle {
namespace tcp_wire {

constexpr uint32_t kVersion = 1;

struct Hello {
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t peer = 0;  // the rank the sender means to reach
  uint64_t nonce = 0;
};
constexpr size_t kHelloBytes = 32;
// The longest rejection reason an acceptor sends (longer ones are cut).
constexpr size_t kMaxReasonBytes = 2048;

void EncodeHello(const Hello& hello, char* out);
// kInvalidArgument if the bytes are not a Hello of this protocol version.
absl::Status DecodeHello(const char* in, Hello* hello);

struct MessageHeader {
  uint64_t tag = 0;
  uint64_t bytes = 0;
  uint32_t flags = 0;
};
constexpr size_t kMessageHeaderBytes = 24;
constexpr uint32_t kAbortFlag = 1;
constexpr uint32_t kCloseFlag = 2;
constexpr uint64_t kMaxAbortBytes = 4096;
// Larger messages are taken for a corrupted header (no single buffer is 1 TiB).
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 40;

void EncodeMessageHeader(const MessageHeader& header, char* out);
// kDataLoss naming the bad field if the bytes are not a valid header.
absl::Status DecodeMessageHeader(const char* in, MessageHeader* header);

}  // namespace tcp_wire
}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_WIRE_H_
