// The TCPStore wire protocol: length-prefixed binary frames, and an incremental parser that turns
// bytes as they arrive into whole requests.
//
// The parser is the part of the server that untrusted bytes reach first, so it is written to be
// fed anything: it never crashes, never buffers more than one frame of at most `max_frame_bytes`
// (plus the bytes of the latest Append), never trusts a length field before checking it against
// the bytes that can follow, and says in its Status exactly why a frame was rejected. It depends
// only on Abseil so the fuzzer (tests/collective/store/tcp_store_frame_fuzz_test.sh) can build it
// with clang alone.
//
// Note [TCPStore wire format]. All integers are little-endian.
//   frame := u32 length | u8 type | body          length = 1 + |body|, 1 <= length <= max
//   bytes := u32 n | n bytes                      list := u32 count | count x bytes
// 1. On accept the server sends HELLO: magic "PDTS" | u8 version | u8 token_required |
//    u32 max_frame_bytes | nonce:bytes (32 random bytes).
// 2. The client's first frame must be AUTH client_nonce:bytes proof:bytes. With a token, the
//    client nonce is 32 fresh random bytes and proof = ClientProof(token, server nonce, client
//    nonce); without one both are empty. Until AUTH succeeds the server takes frames of at most
//    kMaxHandshakeFrameBytes. It answers OK server_proof:bytes, where server_proof =
//    ServerProof(token, server nonce, client nonce) (empty without a token), or UNAUTHENTICATED /
//    PERMISSION_DENIED and closes. A client that holds a token checks the server's proof, and
//    refuses a server that asks for no token: the proof works both ways, so neither end can be
//    impersonated without the token, and the token itself never crosses the wire.
// 3. Then requests (type = Op), each answered by exactly one reply, in order:
//      SET key value        -> OK                    GET key       -> OK value (parks, see 4)
//      ADD key delta:i64    -> OK i64 | INVALID      WAIT list     -> OK (parks, see 4)
//      COMPARE_SET key expected desired -> OK value  CHECK list    -> OK u8
//      DELETE key           -> OK u8                 NUM_KEYS      -> OK i64
//    An error reply carries message:bytes.
// 4. GET and WAIT park on the server until their keys exist; the client enforces its own
//    deadline. While a request is parked the only frame the client may send is CANCEL: the
//    parked request is then answered CANCELLED (WAIT's reply lists the keys still missing) unless
//    it had already completed, and the CANCEL itself is answered CANCELLED. So after sending
//    CANCEL a client reads exactly two replies and the connection is clean again.
#ifndef PADDLE_COLLECTIVE_STORE_TCP_STORE_PROTOCOL_H_
#define PADDLE_COLLECTIVE_STORE_TCP_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace paddle {
namespace tcp_store {

constexpr size_t kFrameHeaderBytes = 5;  // u32 length + u8 type
constexpr char kHelloMagic[] = "PDTS";
constexpr uint8_t kProtocolVersion = 2;
constexpr size_t kNonceBytes = 32;
// The largest frame a connection may send before it has authenticated (an AUTH is ~80 bytes).
constexpr size_t kMaxHandshakeFrameBytes = 256;

// Request types, client -> server.
enum class Op : uint8_t {
  kAuth = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kWait = 6,
  kCheck = 7,
  kDelete = 8,
  kNumKeys = 9,
  kCancel = 10,
};
bool IsValidOp(uint8_t type);
absl::string_view OpName(Op op);  // "SET", "GET", ...

// Reply types, server -> client.
enum class ReplyCode : uint8_t {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 2,
  kUnauthenticated = 3,   // the server needs a token and the client sent none
  kPermissionDenied = 4,  // the token was wrong
  kProtocolError = 5,     // sent just before the server drops a misbehaving connection
  kHello = 0x48,
};
bool IsValidReplyCode(uint8_t type);

// One decoded request. Which fields are used depends on `op` (see the wire format note):
// keys[0] is the key of single-key ops; `value` is SET's value, COMPARE_SET's desired value and
// AUTH's proof; `expected` is COMPARE_SET's expected value and AUTH's client nonce; `delta` is
// ADD's.
struct Request {
  Op op = Op::kNumKeys;
  std::vector<std::string> keys;
  std::string value;
  std::string expected;
  int64_t delta = 0;

  bool operator==(const Request& other) const;
};

// Appends the encoded frame of `request` to `out`.
void AppendRequest(const Request& request, std::string* out);
// Bytes AppendRequest would add, to check against the server's frame limit before sending.
size_t EncodedRequestBytes(const Request& request);
// Decodes a request body of frame type `op`; kInvalidArgument naming the field that is wrong.
absl::StatusOr<Request> DecodeRequest(Op op, absl::string_view body);

// Appends one frame of `type` with `body` to `out`.
void AppendFrame(uint8_t type, absl::string_view body, std::string* out);

// Builders for frame bodies.
void PutU8(uint8_t v, std::string* out);
void PutU32(uint32_t v, std::string* out);
void PutI64(int64_t v, std::string* out);
void PutBytes(absl::string_view v, std::string* out);
void PutList(const std::vector<std::string>& v, std::string* out);

// Reads the fields of one frame body in order; every read checks the bytes left first, so a
// hostile length can never make it read past the body or allocate more than the body holds.
class FieldReader {
 public:
  FieldReader(absl::string_view frame_name, absl::string_view body)
      : frame_name_(frame_name), rest_(body) {}
  absl::Status ReadU8(absl::string_view field, uint8_t* v);
  absl::Status ReadU32(absl::string_view field, uint32_t* v);
  absl::Status ReadI64(absl::string_view field, int64_t* v);
  absl::Status ReadBytes(absl::string_view field, std::string* v);
  absl::Status ReadList(absl::string_view field, std::vector<std::string>* v);
  // Error if bytes are left over after the last field.
  absl::Status Finish() const;

 private:
  absl::Status Short(absl::string_view field, uint64_t wanted) const;

  absl::string_view frame_name_;
  absl::string_view rest_;
};

// Splits a byte stream into frames. Append() bytes as they arrive, then call Next() until it
// returns false (needs more bytes). Rejections are sticky: after an error the stream has lost
// framing, so Next() keeps returning it and Append() drops its input.
class FrameBuffer {
 public:
  // `valid_type` rejects a frame as soon as its type byte arrives, before its body is buffered.
  FrameBuffer(size_t max_frame_bytes, bool (*valid_type)(uint8_t));

  void Append(absl::string_view bytes);
  // True and the next frame's type and body (valid until the next Append or Next), false if the
  // next frame is not complete yet, or the reason the stream is malformed.
  absl::StatusOr<bool> Next(uint8_t* type, absl::string_view* body);

  // Whether bytes of an incomplete frame are buffered (for the server's slow-frame bound).
  bool HasPartialFrame() const { return buffer_.size() > start_; }
  size_t buffered_bytes() const { return buffer_.size() - start_; }
  size_t max_frame_bytes() const { return max_frame_bytes_; }
  // The client learns the server's limit from HELLO and raises its own to match.
  void set_max_frame_bytes(size_t max_frame_bytes) { max_frame_bytes_ = max_frame_bytes; }

 private:
  size_t max_frame_bytes_;
  bool (*valid_type_)(uint8_t);
  std::string buffer_;
  size_t start_ = 0;  // first byte not yet returned by Next()
  absl::Status error_;
};

// The server's view: bytes in, whole decoded requests out. Like FrameBuffer, a rejection (of the
// framing or of a frame's fields) is sticky.
class RequestParser {
 public:
  explicit RequestParser(size_t max_frame_bytes) : frames_(max_frame_bytes, IsValidOp) {}
  void Append(absl::string_view bytes) { frames_.Append(bytes); }
  // The next whole request, nullopt if more bytes are needed, or why the stream is malformed.
  absl::StatusOr<absl::optional<Request>> Next();
  bool HasPartialFrame() const { return frames_.HasPartialFrame(); }
  size_t buffered_bytes() const { return frames_.buffered_bytes(); }
  // The server raises the limit once a connection has authenticated.
  void set_max_frame_bytes(size_t max_frame_bytes) { frames_.set_max_frame_bytes(max_frame_bytes); }

 private:
  FrameBuffer frames_;
  absl::Status error_;
};

// The HELLO frame's fields.
struct Hello {
  bool token_required = false;
  uint32_t max_frame_bytes = 0;
  std::string nonce;
};
void AppendHello(const Hello& hello, std::string* out);
absl::StatusOr<Hello> DecodeHello(absl::string_view body);

// The handshake's proofs (step 2 of the wire format note): HMAC-SHA256 under the token over a
// label and both nonces, the label telling the client's proof from the server's so that neither
// can be replayed as the other.
std::string ClientProof(absl::string_view token, absl::string_view server_nonce,
                        absl::string_view client_nonce);
std::string ServerProof(absl::string_view token, absl::string_view server_nonce,
                        absl::string_view client_nonce);

// "host:port", with brackets around an IPv6 literal ("[::1]:29500"), for messages.
std::string FormatHostPort(absl::string_view host, int port);

}  // namespace tcp_store
}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_TCP_STORE_PROTOCOL_H_
