// The bytes the TCP transport puts on the wire: the handshake that opens each link and the header
// in front of every message.
//
// Note [TCP transport wire format]. All integers are little-endian.
//
// Handshake, once per pair of ranks, right after the lower rank (the connector, C) connects to the
// higher one (the acceptor, A). Every rank of one transport reads a random 32-byte job secret from
// the store (mixed with the job token when one is set, see Note [Transport secret] in
// tcp_mesh.cc); the secret itself never crosses the wire.
//  1. C sends its Hello (48 bytes): u32 magic "PDTH", u32 version, u32 its rank, u32 world size,
//     u32 the rank it means to reach, u32 zero, u64 job id (a hash of the secret: it tells two
//     jobs apart, proves nothing and reveals nothing), 16 bytes of fresh random challenge.
//  2. A answers with a Reply header (8 bytes: u32 magic "PDTR", u32 length) and, if the length is
//     not zero, that many bytes of rejection text (then it closes): a foreign protocol or another
//     job's id gets only this, never A's rank, world size or job id. Otherwise A sends its own
//     Hello (with its own challenge) and a 32-byte proof, HMAC-SHA256(secret, "accept" || C's
//     Hello || A's Hello).
//  3. C checks A's Hello and proof, then sends its proof, HMAC-SHA256(secret, "connect" || C's
//     Hello || A's Hello). The labels keep one side's proof from ever serving as the other's.
//  4. A checks C's proof, then C's rank (lower than A's, not yet connected) and world size, and
//     sends a final Reply: length 0 accepts, otherwise the text says why it rejects. From then on
//     the link carries data. Misconfiguration of one job (another world size, a rank connected
//     twice) is only ever judged after the proof, so a stranger cannot fail a job by posing as
//     one of its ranks.
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
// transport (Note [Graceful close] in tcp_channel_close.cc).
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_WIRE_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paddle {
namespace tcp_wire {

constexpr uint32_t kVersion = 2;

constexpr size_t kChallengeBytes = 16;
constexpr size_t kProofBytes = 32;  // an HMAC-SHA256

struct Hello {
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t peer = 0;  // the rank the sender means to reach
  uint64_t job_id = 0;
  std::array<uint8_t, kChallengeBytes> challenge{};
};
constexpr size_t kHelloBytes = 48;
// The longest rejection reason an acceptor sends (longer ones are cut).
constexpr size_t kMaxReasonBytes = 2048;

void EncodeHello(const Hello& hello, char* out);
// kInvalidArgument if the bytes are not a Hello of this protocol version.
absl::Status DecodeHello(const char* in, Hello* hello);

constexpr size_t kReplyBytes = 8;
void EncodeReply(uint32_t reason_bytes, char* out);
// The length of the reason text that follows (0: go on). kInvalidArgument if the bytes are not a
// Reply or announce more than kMaxReasonBytes.
absl::StatusOr<uint32_t> DecodeReply(const char* in);

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
