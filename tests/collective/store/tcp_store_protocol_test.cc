// The TCPStore frame parser: round trips at every split point, and each kind of malformed frame
// rejected with a reason and without buffering what its length field claims.
#include "paddle/collective/store/tcp_store_protocol.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace paddle {
namespace tcp_store {
namespace {

constexpr size_t kMax = 1024;

std::vector<Request> SampleRequests() {
  std::vector<Request> out;
  Request r;
  r.op = Op::kAuth;
  r.value = std::string(32, '\x7f');
  out.push_back(r);
  r = Request();
  r.op = Op::kSet;
  r.keys = {std::string("k\0ey", 4)};
  r.value = std::string("v\0\xff", 3);
  out.push_back(r);
  r = Request();
  r.op = Op::kSet;
  r.keys = {""};
  r.value = "";
  out.push_back(r);
  r = Request();
  r.op = Op::kGet;
  r.keys = {"rank/0/addr"};
  out.push_back(r);
  r = Request();
  r.op = Op::kAdd;
  r.keys = {"counter"};
  r.delta = -1234567890123LL;
  out.push_back(r);
  r = Request();
  r.op = Op::kCompareSet;
  r.keys = {"winner"};
  r.expected = "";
  r.value = "3";
  out.push_back(r);
  r = Request();
  r.op = Op::kWait;
  r.keys = {"a", "bb", ""};
  out.push_back(r);
  r = Request();
  r.op = Op::kCheck;
  r.keys = {};
  out.push_back(r);
  r = Request();
  r.op = Op::kDelete;
  r.keys = {"gone"};
  out.push_back(r);
  r = Request();
  r.op = Op::kNumKeys;
  out.push_back(r);
  r = Request();
  r.op = Op::kCancel;
  out.push_back(r);
  return out;
}

std::string Frame(uint32_t length, uint8_t type, absl::string_view body) {
  std::string out;
  PutU32(length, &out);
  PutU8(type, &out);
  out.append(body.data(), body.size());
  return out;
}

// Feeds `bytes` and returns the parser's first non-empty result or error.
absl::StatusOr<absl::optional<Request>> ParseOne(absl::string_view bytes) {
  RequestParser parser(kMax);
  parser.Append(bytes);
  return parser.Next();
}

TEST(TcpStoreProtocolTest, EveryOpRoundTripsAtEverySplitPoint) {
  for (const Request& r : SampleRequests()) {
    std::string bytes;
    AppendRequest(r, &bytes);
    EXPECT_EQ(bytes.size(), EncodedRequestBytes(r)) << OpName(r.op);
    for (size_t split = 0; split <= bytes.size(); ++split) {
      RequestParser parser(kMax);
      parser.Append(absl::string_view(bytes).substr(0, split));
      absl::StatusOr<absl::optional<Request>> first = parser.Next();
      ASSERT_TRUE(first.ok()) << first.status();
      if (split < bytes.size()) {
        EXPECT_FALSE(first->has_value()) << OpName(r.op) << " split " << split;
        EXPECT_EQ(parser.HasPartialFrame(), split > 0);
        parser.Append(absl::string_view(bytes).substr(split));
        first = parser.Next();
        ASSERT_TRUE(first.ok()) << first.status();
      }
      ASSERT_TRUE(first->has_value()) << OpName(r.op) << " split " << split;
      EXPECT_TRUE(**first == r) << OpName(r.op) << " split " << split;
      EXPECT_FALSE(parser.HasPartialFrame());
    }
  }
}

TEST(TcpStoreProtocolTest, ManyFramesInOneAppendAndOneByteAtATime) {
  std::vector<Request> requests = SampleRequests();
  std::string stream;
  for (const Request& r : requests) AppendRequest(r, &stream);

  RequestParser whole(kMax);
  whole.Append(stream);
  for (const Request& r : requests) {
    absl::StatusOr<absl::optional<Request>> got = whole.Next();
    ASSERT_TRUE(got.ok() && got->has_value()) << OpName(r.op);
    EXPECT_TRUE(**got == r);
  }
  EXPECT_FALSE(whole.Next()->has_value());

  RequestParser trickle(kMax);
  size_t decoded = 0;
  for (char c : stream) {
    trickle.Append(absl::string_view(&c, 1));
    absl::StatusOr<absl::optional<Request>> got = trickle.Next();
    ASSERT_TRUE(got.ok()) << got.status();
    if (got->has_value()) {
      EXPECT_TRUE(**got == requests[decoded]) << OpName(requests[decoded].op);
      ++decoded;
    }
  }
  EXPECT_EQ(decoded, requests.size());
}

TEST(TcpStoreProtocolTest, UnknownOpcodeIsRejectedBeforeItsBodyArrives) {
  for (uint8_t type : {0, 11, 0x48, 0xff}) {
    // Only the header: the claimed 500-byte body never needs to arrive.
    absl::StatusOr<absl::optional<Request>> got = ParseOne(Frame(500, type, ""));
    ASSERT_FALSE(got.ok()) << int{type};
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find("unknown frame type"), absl::string_view::npos)
        << got.status();
  }
}

TEST(TcpStoreProtocolTest, OversizedLengthIsRejectedFromTheLengthFieldAlone) {
  std::string header;
  PutU32(kMax + 1, &header);
  absl::StatusOr<absl::optional<Request>> got = ParseOne(header);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("frame length 1025 exceeds the limit of 1024"),
            absl::string_view::npos)
      << got.status();

  header.clear();
  PutU32(0xffffffffu, &header);
  EXPECT_FALSE(ParseOne(header).ok());
  // Exactly at the limit is fine: a SET whose frame is kMax bytes.
  Request r;
  r.op = Op::kSet;
  r.keys = {"k"};
  r.value = std::string(kMax - 1 - 4 - 1 - 4, 'x');
  std::string bytes;
  AppendRequest(r, &bytes);
  ASSERT_EQ(bytes.size(), kMax + 4);
  got = ParseOne(bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->has_value());
}

TEST(TcpStoreProtocolTest, ZeroLengthFrameIsRejected) {
  absl::StatusOr<absl::optional<Request>> got = ParseOne(std::string(4, '\0'));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("zero-length"), absl::string_view::npos);
}

TEST(TcpStoreProtocolTest, InconsistentFieldLengthsAreRejectedWithTheField) {
  // SET whose key claims 100 bytes inside a 10-byte frame.
  std::string body;
  PutU32(100, &body);
  body += "abcde";
  absl::StatusOr<absl::optional<Request>> got =
      ParseOne(Frame(1 + body.size(), static_cast<uint8_t>(Op::kSet), body));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("SET frame: field 'key' claims 100 bytes but only 5"),
            absl::string_view::npos)
      << got.status();

  // A value field cut short: key fine, then only 2 bytes where a 4-byte length belongs.
  body.clear();
  PutBytes("k", &body);
  body += "xy";
  got = ParseOne(Frame(1 + body.size(), static_cast<uint8_t>(Op::kSet), body));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("field 'value' needs 4 bytes"), absl::string_view::npos)
      << got.status();

  // Trailing bytes after a complete GET.
  body.clear();
  PutBytes("k", &body);
  body += "junk";
  got = ParseOne(Frame(1 + body.size(), static_cast<uint8_t>(Op::kGet), body));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("4 trailing bytes"), absl::string_view::npos)
      << got.status();

  // ADD without its delta.
  body.clear();
  PutBytes("k", &body);
  got = ParseOne(Frame(1 + body.size(), static_cast<uint8_t>(Op::kAdd), body));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("'delta'"), absl::string_view::npos) << got.status();
}

TEST(TcpStoreProtocolTest, HugeListCountIsRejectedWithoutReservingForIt) {
  std::string body;
  PutU32(0x7fffffff, &body);  // 2 billion keys claimed in an 8-byte body
  PutU32(0, &body);
  absl::StatusOr<absl::optional<Request>> got =
      ParseOne(Frame(1 + body.size(), static_cast<uint8_t>(Op::kWait), body));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("claims 2147483647 entries"), absl::string_view::npos)
      << got.status();
}

TEST(TcpStoreProtocolTest, RejectionIsStickyAndLaterBytesAreDropped) {
  RequestParser parser(kMax);
  parser.Append(Frame(3, 0x99, "ab"));
  EXPECT_FALSE(parser.Next().ok());
  Request r;
  r.op = Op::kNumKeys;
  std::string good;
  AppendRequest(r, &good);
  parser.Append(good);
  EXPECT_FALSE(parser.Next().ok());
  EXPECT_FALSE(parser.Next().ok());
}

TEST(TcpStoreProtocolTest, ABadFieldIsStickyToo) {
  // A DELETE without its key (framing fine, fields not), then a valid NUM_KEYS.
  RequestParser parser(kMax);
  parser.Append(Frame(1, static_cast<uint8_t>(Op::kDelete), ""));
  Request r;
  r.op = Op::kNumKeys;
  std::string good;
  AppendRequest(r, &good);
  parser.Append(good);
  absl::StatusOr<absl::optional<Request>> got = parser.Next();
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("DELETE frame: field 'key'"), absl::string_view::npos)
      << got.status();
  EXPECT_FALSE(parser.Next().ok());
}

TEST(TcpStoreProtocolTest, BuffersOnlyWhatArrivedNotWhatTheLengthClaims) {
  RequestParser parser(64 << 20);
  parser.Append(Frame(60 << 20, static_cast<uint8_t>(Op::kSet), "abc"));
  ASSERT_TRUE(parser.Next().ok());
  EXPECT_EQ(parser.buffered_bytes(), 8u);
  EXPECT_TRUE(parser.HasPartialFrame());
}

TEST(TcpStoreProtocolTest, HelloRoundTripAndForeignFirstFrame) {
  Hello hello;
  hello.token_required = true;
  hello.max_frame_bytes = 12345;
  hello.nonce = std::string(kNonceBytes, '\x01');
  std::string bytes;
  AppendHello(hello, &bytes);
  FrameBuffer frames(kMax, IsValidReplyCode);
  frames.Append(bytes);
  uint8_t type = 0;
  absl::string_view body;
  absl::StatusOr<bool> got = frames.Next(&type, &body);
  ASSERT_TRUE(got.ok() && *got);
  EXPECT_EQ(type, static_cast<uint8_t>(ReplyCode::kHello));
  absl::StatusOr<Hello> decoded = DecodeHello(body);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->token_required);
  EXPECT_EQ(decoded->max_frame_bytes, 12345u);
  EXPECT_EQ(decoded->nonce, hello.nonce);

  EXPECT_FALSE(DecodeHello("HTTP/1.1 400 Bad Request").ok());
  std::string wrong_version = std::string(kHelloMagic, 4) + "\x09";
  absl::StatusOr<Hello> v = DecodeHello(wrong_version);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("version 9"), absl::string_view::npos) << v.status();
}

TEST(TcpStoreProtocolTest, FormatHostPortBracketsIpv6) {
  EXPECT_EQ(FormatHostPort("127.0.0.1", 29500), "127.0.0.1:29500");
  EXPECT_EQ(FormatHostPort("::1", 80), "[::1]:80");
}

}  // namespace
}  // namespace tcp_store
}  // namespace paddle
