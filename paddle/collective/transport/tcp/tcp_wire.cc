// Encoding of the TCP transport's handshake and message headers; see tcp_wire.h.
#include "paddle/collective/transport/tcp/tcp_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace paddle {
namespace tcp_wire {

// Every machine we build for is little-endian, so fields are copied as they are in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tcp_wire assumes a little-endian host");

namespace {

constexpr uint32_t kHelloMagic = 0x48544450;    // "PDTH"
constexpr uint32_t kMessageMagic = 0x4d544450;  // "PDTM"
constexpr uint32_t kReplyMagic = 0x52544450;    // "PDTR"

template <typename T>
void Put(char* out, size_t offset, T value) {
  std::memcpy(out + offset, &value, sizeof(T));
}

template <typename T>
T Get(const char* in, size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof(T));
  return value;
}

}  // namespace

void EncodeHello(const Hello& hello, char* out) {
  Put<uint32_t>(out, 0, kHelloMagic);
  Put<uint32_t>(out, 4, kVersion);
  Put<uint32_t>(out, 8, hello.rank);
  Put<uint32_t>(out, 12, hello.world_size);
  Put<uint32_t>(out, 16, hello.peer);
  Put<uint32_t>(out, 20, 0);
  Put<uint64_t>(out, 24, hello.job_id);
  std::memcpy(out + 32, hello.challenge.data(), kChallengeBytes);
}

absl::Status DecodeHello(const char* in, Hello* hello) {
  uint32_t magic = Get<uint32_t>(in, 0);
  if (magic != kHelloMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "not a Paddle TCP transport handshake (first bytes 0x%08x, expected 0x%08x)", magic,
        kHelloMagic));
  }
  uint32_t version = Get<uint32_t>(in, 4);
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("TCP transport protocol version ", version,
                                                   " where this build speaks ", kVersion,
                                                   "; run the same Paddle build on every rank"));
  }
  hello->rank = Get<uint32_t>(in, 8);
  hello->world_size = Get<uint32_t>(in, 12);
  hello->peer = Get<uint32_t>(in, 16);
  hello->job_id = Get<uint64_t>(in, 24);
  std::memcpy(hello->challenge.data(), in + 32, kChallengeBytes);
  return absl::OkStatus();
}

void EncodeReply(uint32_t reason_bytes, char* out) {
  Put<uint32_t>(out, 0, kReplyMagic);
  Put<uint32_t>(out, 4, reason_bytes);
}

absl::StatusOr<uint32_t> DecodeReply(const char* in) {
  uint32_t magic = Get<uint32_t>(in, 0);
  if (magic != kReplyMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "not a Paddle TCP transport handshake reply (first bytes 0x%08x, expected 0x%08x)", magic,
        kReplyMagic));
  }
  uint32_t length = Get<uint32_t>(in, 4);
  if (length > kMaxReasonBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a handshake reply announces ", length,
                                                   " bytes of text; at most ", kMaxReasonBytes,
                                                   " are allowed"));
  }
  return length;
}

void EncodeMessageHeader(const MessageHeader& header, char* out) {
  Put<uint32_t>(out, 0, kMessageMagic);
  Put<uint32_t>(out, 4, header.flags);
  Put<uint64_t>(out, 8, header.tag);
  Put<uint64_t>(out, 16, header.bytes);
}

absl::Status DecodeMessageHeader(const char* in, MessageHeader* header) {
  uint32_t magic = Get<uint32_t>(in, 0);
  uint32_t flags = Get<uint32_t>(in, 4);
  header->flags = flags;
  header->tag = Get<uint64_t>(in, 8);
  header->bytes = Get<uint64_t>(in, 16);
  bool bad_flags = flags != 0 && (flags != kAbortFlag || header->bytes > kMaxAbortBytes) &&
                   (flags != kCloseFlag || header->bytes != 0);
  if (magic != kMessageMagic || bad_flags || header->bytes > kMaxMessageBytes) {
    return absl::DataLossError(absl::StrFormat(
        "protocol error: bad message header (magic 0x%08x, expected 0x%08x; flags %u; tag %u; "
        "%u bytes): the stream is corrupted or the peer runs another protocol",
        magic, kMessageMagic, flags, header->tag, header->bytes));
  }
  return absl::OkStatus();
}

}  // namespace tcp_wire
}  // namespace paddle
