// Encoding and incremental decoding of TCPStore frames; see Note [TCPStore wire format].
#include "paddle/collective/store/tcp_store_protocol.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/collective/store/hmac_sha256.h"

namespace paddle {
namespace tcp_store {
namespace {

uint32_t LoadU32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | (uint32_t{u[1]} << 8) | (uint32_t{u[2]} << 16) | (uint32_t{u[3]} << 24);
}

// Which body fields each op carries, so encoding, sizing and decoding cannot drift apart.
struct OpFields {
  bool key = false;       // keys[0] as bytes
  bool key_list = false;  // keys as list
  bool expected = false;  // bytes
  bool value = false;     // bytes
  bool delta = false;     // i64
};

OpFields FieldsOf(Op op) {
  OpFields f;
  switch (op) {
    case Op::kAuth:
      f.expected = f.value = true;
      break;
    case Op::kSet:
      f.key = f.value = true;
      break;
    case Op::kGet:
    case Op::kDelete:
      f.key = true;
      break;
    case Op::kAdd:
      f.key = f.delta = true;
      break;
    case Op::kCompareSet:
      f.key = f.expected = f.value = true;
      break;
    case Op::kWait:
    case Op::kCheck:
      f.key_list = true;
      break;
    case Op::kNumKeys:
    case Op::kCancel:
      break;
  }
  return f;
}

}  // namespace

bool IsValidOp(uint8_t type) {
  return type >= static_cast<uint8_t>(Op::kAuth) && type <= static_cast<uint8_t>(Op::kCancel);
}

absl::string_view OpName(Op op) {
  switch (op) {
    case Op::kAuth:
      return "AUTH";
    case Op::kSet:
      return "SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kWait:
      return "WAIT";
    case Op::kCheck:
      return "CHECK";
    case Op::kDelete:
      return "DELETE";
    case Op::kNumKeys:
      return "NUM_KEYS";
    case Op::kCancel:
      return "CANCEL";
  }
  return "UNKNOWN";
}

bool IsValidReplyCode(uint8_t type) {
  return type <= static_cast<uint8_t>(ReplyCode::kProtocolError) ||
         type == static_cast<uint8_t>(ReplyCode::kHello);
}

bool Request::operator==(const Request& other) const {
  return op == other.op && keys == other.keys && value == other.value &&
         expected == other.expected && delta == other.delta;
}

void PutU8(uint8_t v, std::string* out) { out->push_back(static_cast<char>(v)); }

void PutU32(uint32_t v, std::string* out) {
  char b[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
               static_cast<char>(v >> 24)};
  out->append(b, 4);
}

void PutI64(int64_t v, std::string* out) {
  uint64_t u = static_cast<uint64_t>(v);
  PutU32(static_cast<uint32_t>(u), out);
  PutU32(static_cast<uint32_t>(u >> 32), out);
}

void PutBytes(absl::string_view v, std::string* out) {
  PutU32(static_cast<uint32_t>(v.size()), out);
  out->append(v.data(), v.size());
}

void PutList(const std::vector<std::string>& v, std::string* out) {
  PutU32(static_cast<uint32_t>(v.size()), out);
  for (const std::string& s : v) PutBytes(s, out);
}

void AppendFrame(uint8_t type, absl::string_view body, std::string* out) {
  PutU32(static_cast<uint32_t>(body.size() + 1), out);
  PutU8(type, out);
  out->append(body.data(), body.size());
}

size_t EncodedRequestBytes(const Request& request) {
  OpFields f = FieldsOf(request.op);
  size_t n = kFrameHeaderBytes;
  if (f.key) n += 4 + (request.keys.empty() ? 0 : request.keys[0].size());
  if (f.key_list) {
    n += 4;
    for (const std::string& k : request.keys) n += 4 + k.size();
  }
  if (f.expected) n += 4 + request.expected.size();
  if (f.value) n += 4 + request.value.size();
  if (f.delta) n += 8;
  return n;
}

void AppendRequest(const Request& request, std::string* out) {
  OpFields f = FieldsOf(request.op);
  size_t frame_start = out->size();
  PutU32(0, out);  // length, patched below
  PutU8(static_cast<uint8_t>(request.op), out);
  if (f.key) PutBytes(request.keys.empty() ? absl::string_view() : request.keys[0], out);
  if (f.key_list) PutList(request.keys, out);
  if (f.expected) PutBytes(request.expected, out);
  if (f.value) PutBytes(request.value, out);
  if (f.delta) PutI64(request.delta, out);
  std::string length;
  PutU32(static_cast<uint32_t>(out->size() - frame_start - 4), &length);
  std::memcpy(&(*out)[frame_start], length.data(), 4);
}

absl::Status FieldReader::Short(absl::string_view field, uint64_t wanted) const {
  return absl::InvalidArgumentError(absl::StrCat(frame_name_, " frame: field '", field, "' needs ",
                                                 wanted, " bytes but only ", rest_.size(),
                                                 " remain in the frame"));
}

absl::Status FieldReader::ReadU8(absl::string_view field, uint8_t* v) {
  if (rest_.size() < 1) return Short(field, 1);
  *v = static_cast<uint8_t>(rest_[0]);
  rest_.remove_prefix(1);
  return absl::OkStatus();
}

absl::Status FieldReader::ReadU32(absl::string_view field, uint32_t* v) {
  if (rest_.size() < 4) return Short(field, 4);
  *v = LoadU32(rest_.data());
  rest_.remove_prefix(4);
  return absl::OkStatus();
}

absl::Status FieldReader::ReadI64(absl::string_view field, int64_t* v) {
  if (rest_.size() < 8) return Short(field, 8);
  uint64_t u = uint64_t{LoadU32(rest_.data())} | (uint64_t{LoadU32(rest_.data() + 4)} << 32);
  *v = static_cast<int64_t>(u);
  rest_.remove_prefix(8);
  return absl::OkStatus();
}

absl::Status FieldReader::ReadBytes(absl::string_view field, std::string* v) {
  uint32_t n = 0;
  if (rest_.size() < 4) return Short(field, 4);
  n = LoadU32(rest_.data());
  if (n > rest_.size() - 4) {
    return absl::InvalidArgumentError(absl::StrCat(frame_name_, " frame: field '", field,
                                                   "' claims ", n, " bytes but only ",
                                                   rest_.size() - 4, " remain in the frame"));
  }
  v->assign(rest_.data() + 4, n);
  rest_.remove_prefix(4 + size_t{n});
  return absl::OkStatus();
}

absl::Status FieldReader::ReadList(absl::string_view field, std::vector<std::string>* v) {
  uint32_t count = 0;
  absl::Status s = ReadU32(field, &count);
  if (!s.ok()) return s;
  // Each entry takes at least its 4-byte length, so a count the body cannot hold is rejected
  // before anything is reserved for it.
  if (count > rest_.size() / 4) {
    return absl::InvalidArgumentError(absl::StrCat(frame_name_, " frame: list '", field,
                                                   "' claims ", count, " entries but only ",
                                                   rest_.size(), " bytes remain in the frame"));
  }
  v->clear();
  v->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    v->emplace_back();
    s = ReadBytes(field, &v->back());
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FieldReader::Finish() const {
  if (rest_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(frame_name_, " frame: ", rest_.size(), " trailing bytes after the last field"));
}

namespace {

std::string Proof(absl::string_view label, absl::string_view token, absl::string_view server_nonce,
                  absl::string_view client_nonce) {
  std::string message(label);
  PutBytes(server_nonce, &message);
  PutBytes(client_nonce, &message);
  return std::string(DigestBytes(HmacSha256(token, message)));
}

}  // namespace

std::string ClientProof(absl::string_view token, absl::string_view server_nonce,
                        absl::string_view client_nonce) {
  return Proof("paddle tcpstore: client", token, server_nonce, client_nonce);
}

std::string ServerProof(absl::string_view token, absl::string_view server_nonce,
                        absl::string_view client_nonce) {
  return Proof("paddle tcpstore: server", token, server_nonce, client_nonce);
}

absl::StatusOr<Request> DecodeRequest(Op op, absl::string_view body) {
  OpFields f = FieldsOf(op);
  Request r;
  r.op = op;
  FieldReader reader(OpName(op), body);
  if (f.key) {
    r.keys.emplace_back();
    absl::Status s = reader.ReadBytes("key", &r.keys[0]);
    if (!s.ok()) return s;
  }
  if (f.key_list) {
    absl::Status s = reader.ReadList("keys", &r.keys);
    if (!s.ok()) return s;
  }
  if (f.expected) {
    absl::Status s = reader.ReadBytes(op == Op::kAuth ? "client nonce" : "expected", &r.expected);
    if (!s.ok()) return s;
  }
  if (f.value) {
    absl::Status s = reader.ReadBytes(op == Op::kAuth ? "proof" : "value", &r.value);
    if (!s.ok()) return s;
  }
  if (f.delta) {
    absl::Status s = reader.ReadI64("delta", &r.delta);
    if (!s.ok()) return s;
  }
  absl::Status s = reader.Finish();
  if (!s.ok()) return s;
  return r;
}

FrameBuffer::FrameBuffer(size_t max_frame_bytes, bool (*valid_type)(uint8_t))
    : max_frame_bytes_(max_frame_bytes), valid_type_(valid_type) {}

void FrameBuffer::Append(absl::string_view bytes) {
  if (!error_.ok()) return;
  // Drop consumed bytes before growing, so the buffer holds at most the current partial frame
  // plus this append.
  if (start_ > 0) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  buffer_.append(bytes.data(), bytes.size());
}

absl::StatusOr<bool> FrameBuffer::Next(uint8_t* type, absl::string_view* body) {
  if (!error_.ok()) return error_;
  size_t avail = buffer_.size() - start_;
  const char* p = buffer_.data() + start_;
  if (avail < 4) return false;
  uint32_t length = LoadU32(p);
  if (length == 0) {
    error_ = absl::InvalidArgumentError("zero-length frame (a frame holds at least its type)");
    return error_;
  }
  if (length > max_frame_bytes_) {
    error_ = absl::InvalidArgumentError(
        absl::StrFormat("frame length %u exceeds the limit of %u bytes (max_frame_bytes)", length,
                        max_frame_bytes_));
    return error_;
  }
  if (avail < 5) return false;
  uint8_t t = static_cast<uint8_t>(p[4]);
  if (!valid_type_(t)) {
    error_ = absl::InvalidArgumentError(absl::StrFormat("unknown frame type 0x%02x", t));
    return error_;
  }
  if (avail - 4 < length) return false;
  *type = t;
  *body = absl::string_view(p + kFrameHeaderBytes, length - 1);
  // The bytes stay in place until the next Append, so `body` remains valid until then.
  start_ += 4 + size_t{length};
  return true;
}

absl::StatusOr<absl::optional<Request>> RequestParser::Next() {
  if (!error_.ok()) return error_;
  uint8_t type = 0;
  absl::string_view body;
  absl::StatusOr<bool> got = frames_.Next(&type, &body);
  if (!got.ok()) return error_ = got.status();
  if (!*got) return absl::optional<Request>();
  absl::StatusOr<Request> request = DecodeRequest(static_cast<Op>(type), body);
  if (!request.ok()) return error_ = request.status();
  return absl::optional<Request>(std::move(*request));
}

void AppendHello(const Hello& hello, std::string* out) {
  std::string body(kHelloMagic, 4);
  PutU8(kProtocolVersion, &body);
  PutU8(hello.token_required ? 1 : 0, &body);
  PutU32(hello.max_frame_bytes, &body);
  PutBytes(hello.nonce, &body);
  AppendFrame(static_cast<uint8_t>(ReplyCode::kHello), body, out);
}

absl::StatusOr<Hello> DecodeHello(absl::string_view body) {
  if (body.size() < 4 || body.substr(0, 4) != absl::string_view(kHelloMagic, 4)) {
    return absl::InvalidArgumentError(
        "the first frame is not a TCPStore HELLO (is something else listening on this port?)");
  }
  FieldReader reader("HELLO", body.substr(4));
  uint8_t version = 0, token_required = 0;
  Hello hello;
  absl::Status s = reader.ReadU8("version", &version);
  if (s.ok() && version != kProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the server speaks TCPStore protocol version ", version, ", this client ",
                     kProtocolVersion, "; use the same Paddle build on every rank"));
  }
  if (s.ok()) s = reader.ReadU8("token_required", &token_required);
  if (s.ok()) s = reader.ReadU32("max_frame_bytes", &hello.max_frame_bytes);
  if (s.ok()) s = reader.ReadBytes("nonce", &hello.nonce);
  if (s.ok()) s = reader.Finish();
  if (!s.ok()) return s;
  hello.token_required = token_required != 0;
  return hello;
}

std::string FormatHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace tcp_store
}  // namespace paddle
