// EtcdStore over etcd's v3 JSON gateway. Two small pieces live here because nothing else in the
// project needs them: a minimal JSON reader for the gateway's replies, and `Http`, a pool of
// libcurl handles that posts one request with the deadline, retry and error-text rules below.
//
// Note [Lease lifetime]: every key this client writes carries its lease. The keep-alive thread
// refreshes it every third of its TTL; when the process dies the refreshes stop and etcd deletes
// the keys one TTL later. Closing a client does not revoke the lease, because the last thing a
// rank writes (an address, a "done" flag) is often read by others after it has gone. If etcd ever
// reports the lease gone (the process stalled for longer than the TTL), the first caller to notice
// grants a new one; keys written under the old lease are lost, and that is logged as an error.
//
// Note [Retries]: a request is retried only when the connection could not be made (nothing was
// sent), for up to `connect_timeout`. A request that may have reached etcd is never resent: a
// resent Add could count twice.
#include "paddle/collective/store/etcd_store.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// etcd's default --max-txn-ops.
constexpr size_t kMaxTxnOps = 128;
// Each request gets at least this long, so a zero timeout still makes one attempt.
constexpr absl::Duration kMinRequestTime = absl::Milliseconds(100);
// Note [Waiting]: Get and Wait read their keys and, while one is missing, watch it from the
// revision after that read, so a write in between still wakes them. A watch lasts at most
// kWatchSlice before the keys are read again, so even a gateway that never delivers events only
// costs latency. A watch that fails outright falls back to polling with backoff.
constexpr absl::Duration kWatchSlice = absl::Seconds(2);
constexpr absl::Duration kFirstPollPause = absl::Milliseconds(1);
constexpr absl::Duration kMaxPollPause = absl::Milliseconds(50);

// The gateway carries keys and values as standard base64.
std::string Base64Encode(absl::string_view in) { return absl::Base64Escape(in); }

absl::StatusOr<std::string> Base64Decode(absl::string_view in) {
  std::string out;
  if (!absl::Base64Unescape(in, &out)) {
    return absl::InternalError(absl::StrCat("etcd sent invalid base64: ", in.substr(0, 64)));
  }
  return out;
}

std::string Seconds(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "no limit";
  return absl::StrFormat("%.3gs", absl::ToDoubleSeconds(d));
}

std::string Quote(absl::string_view key) { return absl::StrCat("\"", absl::CHexEscape(key), "\""); }

// The exclusive end of the key range that starts with `prefix` (etcd's range_end convention).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (uint8_t(prefix.back()) != 0xff) {
      prefix.back() = char(uint8_t(prefix.back()) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // "\0" means "to the end of the keyspace"
}

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// The one place a CURLcode becomes a Status, with curl's own text for it and for this transfer.
absl::Status CurlStatus(CURLcode rc, const char* error_buffer) {
  if (rc == CURLE_OK) return absl::OkStatus();
  std::string text = absl::StrCat("curl error ", int(rc), " (", curl_easy_strerror(rc), ")");
  if (error_buffer != nullptr && error_buffer[0] != '\0')
    absl::StrAppend(&text, ": ", error_buffer);
  switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(text);
    case CURLE_ABORTED_BY_CALLBACK:
      return absl::CancelledError(text);
    case CURLE_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(text);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return absl::InvalidArgumentError(text);
    default:
      return absl::UnavailableError(text);
  }
}

}  // namespace

// The gateway's JSON: a recursive-descent reader of one value (etcd_store.h has the contract).
struct EtcdJson::Parser {
  absl::string_view in;
  size_t pos = 0;

  absl::Status Error(absl::string_view what) const {
    return absl::InternalError(absl::StrCat("bad JSON from etcd (", what, " at byte ", pos,
                                            "): ", absl::CHexEscape(in.substr(0, 200))));
  }
  void SkipSpace() {
    while (pos < in.size() && strchr(" \t\r\n", in[pos]) != nullptr) ++pos;
  }
  bool Consume(absl::string_view word) {
    if (!absl::StartsWith(in.substr(pos), word)) return false;
    pos += word.size();
    return true;
  }
  absl::Status ParseValue(EtcdJson& out, int depth) {
    if (depth > 64) return Error("nested too deeply");
    SkipSpace();
    if (pos >= in.size()) return Error("unexpected end");
    char c = in[pos];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out.kind_ = Kind::kString;
      return ParseString(out.text_);
    }
    for (absl::string_view word : {"true", "false"}) {
      if (Consume(word)) {
        out.kind_ = Kind::kBool;
        out.text_ = std::string(word);
        return absl::OkStatus();
      }
    }
    if (Consume("null")) return absl::OkStatus();
    size_t start = pos;
    while (pos < in.size() && strchr("+-0123456789.eE", in[pos]) != nullptr) ++pos;
    if (pos == start) return Error("unexpected character");
    out.kind_ = Kind::kNumber;
    out.text_ = std::string(in.substr(start, pos - start));
    return absl::OkStatus();
  }
  absl::Status ParseObject(EtcdJson& out, int depth) {
    out.kind_ = Kind::kObject;
    ++pos;  // '{'
    SkipSpace();
    if (Consume("}")) return absl::OkStatus();
    while (true) {
      SkipSpace();
      std::string name;
      if (pos >= in.size() || in[pos] != '"') return Error("expected a field name");
      RETURN_IF_ERROR(ParseString(name));
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      out.fields_.emplace_back(std::move(name), EtcdJson());
      RETURN_IF_ERROR(ParseValue(out.fields_.back().second, depth + 1));
      SkipSpace();
      if (Consume("}")) return absl::OkStatus();
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }
  absl::Status ParseArray(EtcdJson& out, int depth) {
    out.kind_ = Kind::kArray;
    ++pos;  // '['
    SkipSpace();
    if (Consume("]")) return absl::OkStatus();
    while (true) {
      out.items_.emplace_back();
      RETURN_IF_ERROR(ParseValue(out.items_.back(), depth + 1));
      SkipSpace();
      if (Consume("]")) return absl::OkStatus();
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }
  absl::Status ParseString(std::string& out) {
    const size_t start = ++pos;  // past '"'
    while (pos < in.size() && in[pos] != '"') pos += in[pos] == '\\' ? 2 : 1;
    if (pos >= in.size()) return Error("unterminated string");
    // Go's encoder, which etcd uses, writes only escapes that C has too (\" \\ \n \r \t and
    // \uXXXX for the rest), so CUnescape decodes them.
    if (!absl::CUnescape(in.substr(start, pos++ - start), &out)) return Error("bad escape");
    return absl::OkStatus();
  }
};

absl::StatusOr<EtcdJson> EtcdJson::Parse(absl::string_view text) {
  Parser parser{text};
  EtcdJson value;
  absl::Status status = parser.ParseValue(value, 0);
  if (status.ok()) {
    parser.SkipSpace();
    if (parser.pos != text.size()) status = parser.Error("trailing characters");
  }
  if (!status.ok()) return status;
  return value;
}

const EtcdJson& EtcdJson::operator[](absl::string_view name) const {
  for (const auto& field : fields_) {
    if (field.first == name) return field.second;
  }
  return Null();
}

const EtcdJson& EtcdJson::operator[](size_t i) const {
  return i < items_.size() ? items_[i] : Null();
}

int64_t EtcdJson::AsInt() const {
  int64_t v = 0;
  if (kind_ == Kind::kString || kind_ == Kind::kNumber) (void)absl::SimpleAtoi(text_, &v);
  return v;
}

absl::StatusOr<std::string> EtcdJson::AsBytes() const {
  return kind_ == Kind::kString ? Base64Decode(text_) : std::string();
}

const EtcdJson& EtcdJson::Null() {
  static const EtcdJson* const kNull = new EtcdJson();
  return *kNull;
}

// Posts JSON bodies to the gateway. Handles (each with its own connection cache) are pooled so
// concurrent calls from many threads neither share one nor reconnect each time.
class EtcdStore::Http {
 public:
  Http(std::string endpoint, std::string describe)
      : endpoint_(std::move(endpoint)),
        base_url_(absl::StrCat("http://", endpoint_)),
        describe_(std::move(describe)) {
    headers_ = curl_slist_append(headers_, "Content-Type: application/json");
    // Without this curl sends "Expect: 100-continue" for bodies over 1 KiB and may wait for it.
    headers_ = curl_slist_append(headers_, "Expect:");
  }
  ~Http() {
    for (CURL* handle : idle_) curl_easy_cleanup(handle);
    curl_slist_free_all(headers_);
  }
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;

  // Posts `body` to `path` and returns the parsed reply. `what` ("set key \"a\"") heads every
  // error; the request ends by `deadline`; refused connections are retried for `connect_timeout`
  // (Note [Retries]); `abort` (optional) cancels the request when it turns true.
  absl::StatusOr<EtcdJson> Post(absl::string_view path, const std::string& body,
                                absl::string_view what, const Deadline& deadline,
                                absl::Duration connect_timeout,
                                const std::atomic<bool>* abort = nullptr) {
    const std::string url = absl::StrCat(base_url_, path);
    const Deadline connect_deadline = Deadline::After(connect_timeout);
    absl::Duration backoff = absl::Milliseconds(20);
    for (int attempt = 1;; ++attempt) {
      Transfer transfer;
      Perform(url, body, deadline, connect_deadline, abort, transfer);
      if (transfer.rc == CURLE_OK) return ParseReply(url, what, transfer);
      const bool refused = transfer.rc == CURLE_COULDNT_CONNECT;
      if (refused && !connect_deadline.Expired() && !deadline.Expired()) {
        const Deadline pause = Deadline::After(
            std::min({backoff, connect_deadline.Remaining(), deadline.Remaining()}));
        // Short slices, so a closing store is not held up by a retry pause.
        while (!pause.Expired() && !(abort != nullptr && abort->load())) {
          absl::SleepFor(std::min(pause.Remaining(), absl::Milliseconds(10)));
        }
        if (!(abort != nullptr && abort->load())) {
          backoff = std::min(backoff * 2, absl::Seconds(1));
          continue;
        }
      }
      return Explain(CurlStatus(transfer.rc, transfer.error), refused, url, what, attempt,
                     connect_deadline, deadline);
    }
  }

  // Opens a watch (`body` is its create_request) and returns true as soon as etcd reports
  // anything on it: an event, or the watch cancelled (e.g. its start revision was compacted).
  // False when `deadline` passed or the request failed; the caller's next read reports failures.
  bool Watch(const std::string& body, const Deadline& deadline) {
    Transfer transfer;
    transfer.watch = true;
    Perform(base_url_ + "/v3/watch", body, deadline, deadline, nullptr, transfer);
    return transfer.rc == CURLE_WRITE_ERROR && transfer.watch_fired;
  }

 private:
  struct Transfer {
    bool watch = false;        // a stream of messages, one per line
    bool watch_fired = false;  // a message after "created" began, so the stream was cut
    CURLcode rc = CURLE_OK;
    char error[CURL_ERROR_SIZE] = {0};  // curl's text for this transfer (CURLOPT_ERRORBUFFER)
    long http_code = 0;
    std::string reply;
  };

  static size_t OnData(char* data, size_t size, size_t n, void* out) {
    Transfer& transfer = *static_cast<Transfer*>(out);
    transfer.reply.append(data, size * n);
    const size_t newline = transfer.watch ? transfer.reply.find('\n') : std::string::npos;
    if (newline != std::string::npos) {
      // The first line confirms the watch and anything after it means something happened. A
      // first line without "created" is an error: not fired, so the caller polls instead of
      // spinning on a watch that cannot work.
      transfer.watch_fired = absl::StrContains(absl::string_view(transfer.reply).substr(0, newline),
                                               "\"created\":true");
      if (!transfer.watch_fired || newline + 1 < transfer.reply.size()) {
        return 0;  // ends the transfer with CURLE_WRITE_ERROR
      }
      transfer.watch_fired = false;
    }
    return size * n;
  }
  static int OnProgress(void* abort, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<const std::atomic<bool>*>(abort)->load() ? 1 : 0;
  }

  void Perform(const std::string& url, const std::string& body, const Deadline& deadline,
               const Deadline& connect_deadline, const std::atomic<bool>* abort,
               Transfer& transfer) {
    CURL* handle = Acquire();
    if (handle == nullptr) {
      transfer.rc = CURLE_OUT_OF_MEMORY;
      return;
    }
    curl_easy_reset(handle);  // keeps the handle's live connections
    curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(handle, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.size()));
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, &Http::OnData);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, transfer.error);
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
    const long request_ms = RequestMillis(deadline);
    const long connect_ms = RequestMillis(connect_deadline);
    curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, request_ms);
    curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS,  // 0 is "no limit" to both
                     request_ms == 0 || connect_ms == 0 ? std::max(request_ms, connect_ms)
                                                        : std::min(request_ms, connect_ms));
    if (abort != nullptr) {
      curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, &Http::OnProgress);
      curl_easy_setopt(handle, CURLOPT_XFERINFODATA, abort);
    }
    transfer.rc = curl_easy_perform(handle);
    if (transfer.rc == CURLE_OK) {
      curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &transfer.http_code);
    }
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, nullptr);  // `transfer` dies before the handle
    Release(handle);
  }

  // Milliseconds for CURLOPT_*TIMEOUT_MS: 0 (none) only for a deadline that never expires.
  static long RequestMillis(const Deadline& deadline) {
    if (deadline.IsNever()) return 0;
    return std::max<long>(deadline.PollTimeoutMillis(), absl::ToInt64Milliseconds(kMinRequestTime));
  }

  absl::StatusOr<EtcdJson> ParseReply(const std::string& url, absl::string_view what,
                                      const Transfer& transfer) {
    const std::string& reply = transfer.reply;
    absl::StatusOr<EtcdJson> json = EtcdJson::Parse(reply);
    if (transfer.http_code == 200) {
      if (!json.ok()) return Annotate(json.status(), absl::StrCat(describe_, ": ", what));
      return json;
    }
    // The gateway reports etcd's gRPC status as {"error": ..., "message": ..., "code": N}; gRPC
    // and absl share their code numbers.
    std::string message = absl::CHexEscape(reply.substr(0, 300));
    absl::StatusCode code = absl::StatusCode::kInternal;
    if (json.ok() && !(*json)["message"].IsNull()) {
      message = (*json)["message"].text();
      int64_t grpc_code = (*json)["code"].AsInt();
      if (grpc_code > 0 && grpc_code <= 16) code = static_cast<absl::StatusCode>(grpc_code);
    }
    return absl::Status(code, absl::StrCat(describe_, ": ", what, ": etcd at ", url,
                                           " answered HTTP ", transfer.http_code, ": ", message));
  }

  absl::Status Explain(const absl::Status& cause, bool refused, const std::string& url,
                       absl::string_view what, int attempts, const Deadline& connect_deadline,
                       const Deadline& deadline) {
    std::string head = absl::StrCat(describe_, ": ", what, ": ");
    if (refused) {
      return absl::UnavailableError(absl::StrCat(
          head, "cannot reach etcd at ", url, " (", attempts, " attempt(s) over ",
          Seconds(connect_deadline.Elapsed()), ", connect_timeout ",
          Seconds(connect_deadline.timeout()), "): ", cause.message(),
          "; check that etcd serves plain http on ", endpoint_,
          ", or raise EtcdStoreOptions.connect_timeout (default from PADDLE_CONNECT_TIMEOUT_S) if "
          "it is still starting"));
    }
    if (cause.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(
          absl::StrCat(head, "no reply from etcd at ", url, " after ", Seconds(deadline.Elapsed()),
                       " (timeout ", Seconds(deadline.timeout()), "): ", cause.message(), "; ",
                       TimeoutHint(TimeoutKind::kStore), " if etcd is merely slow"));
    }
    return absl::Status(
        cause.code(), absl::StrCat(head, "request to etcd at ", url, " failed: ", cause.message()));
  }

  CURL* Acquire() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        CURL* handle = idle_.back();
        idle_.pop_back();
        return handle;
      }
    }
    return curl_easy_init();
  }
  void Release(CURL* handle) {
    absl::MutexLock lock(&mu_);
    idle_.push_back(handle);
  }

  const std::string endpoint_;
  const std::string base_url_;
  const std::string describe_;
  curl_slist* headers_ = nullptr;
  absl::Mutex mu_;
  std::vector<CURL*> idle_ ABSL_GUARDED_BY(mu_);
};

struct EtcdStore::KeyState {
  bool exists = false;
  int64_t mod_revision = 0;  // 0 for a missing key, as etcd compares it
  std::string value;
  int64_t store_revision = 0;  // etcd's revision when this was read (set by ReadKey)

  static absl::StatusOr<KeyState> FromRange(const EtcdJson& range) {
    KeyState state;
    const EtcdJson& kv = range["kvs"][0];
    if (kv.IsNull()) return state;
    state.exists = true;
    state.mod_revision = kv["mod_revision"].AsInt();
    ASSIGN_OR_RETURN(state.value, kv["value"].AsBytes());
    return state;
  }
};

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Connect(const EtcdStoreOptions& options) {
  if (options.endpoint.empty() || absl::StrContains(options.endpoint, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EtcdStore: endpoint \"", options.endpoint,
        "\" must be host:port of an etcd client URL (plain http), e.g. 127.0.0.1:2379"));
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EtcdStore ", options.endpoint,
                     ": prefix is empty; set EtcdStoreOptions.prefix to the "
                     "job id so jobs sharing this etcd do not see each other's keys"));
  }
  if (options.lease_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("EtcdStore ", options.endpoint, ": lease_ttl ", Seconds(options.lease_ttl),
                     " is under etcd's 1 s granularity; use at least 1s"));
  }
  InitCurlOnce();
  std::unique_ptr<EtcdStore> store(new EtcdStore(options));
  RETURN_IF_ERROR(store->RenewLease(0, Deadline::After(options.timeout)));
  store->keep_alive_ = std::thread([s = store.get()] { s->KeepAliveLoop(); });
  PADDLE_LOG(INFO, STORE) << store->Describe() << ": connected, lease " << store->lease_id()
                          << " (ttl " << Seconds(store->lease_ttl_) << ")";
  return store;
}

EtcdStore::EtcdStore(const EtcdStoreOptions& options)
    : options_(options),
      key_prefix_(absl::StrCat("/paddle/", options.prefix, "/")),
      http_(std::make_unique<Http>(options.endpoint, Describe())),
      lease_ttl_(options.lease_ttl) {
  set_timeout(options.timeout);
}

EtcdStore::~EtcdStore() {
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  stopping_.store(true);
  if (keep_alive_.joinable()) keep_alive_.join();
}

std::string EtcdStore::Describe() const {
  return absl::StrCat("EtcdStore ", options_.endpoint, " ", key_prefix_);
}

absl::Status EtcdStore::RenewLease(int64_t stale, const Deadline& deadline) {
  absl::MutexLock lock(&lease_mu_);
  if (lease_id_.load() != stale) return absl::OkStatus();  // another caller renewed it
  const int64_t ttl_s = absl::ToInt64Seconds(absl::Ceil(options_.lease_ttl, absl::Seconds(1)));
  ASSIGN_OR_RETURN(EtcdJson reply,
                   http_->Post("/v3/lease/grant", absl::StrCat("{\"TTL\":\"", ttl_s, "\"}"),
                               absl::StrCat("grant lease (ttl ", ttl_s, "s)"), deadline,
                               options_.connect_timeout));
  const int64_t id = reply["ID"].AsInt();
  if (id == 0) {
    return absl::UnavailableError(
        absl::StrCat(Describe(), ": grant lease: etcd refused: ", reply["error"].text()));
  }
  // Renewals ask for the same TTL, so only the first grant (before the keep-alive thread starts)
  // records what etcd made of it.
  if (stale == 0) lease_ttl_ = absl::Seconds(std::max<int64_t>(reply["TTL"].AsInt(), 1));
  lease_id_.store(id);
  if (stale != 0) {
    PADDLE_LOG(ERROR, STORE) << Describe() << ": lease " << stale << " expired (the process "
                             << "stalled or lost etcd for over " << Seconds(lease_ttl_)
                             << "); keys written under it are gone; now using lease " << id;
  }
  return absl::OkStatus();
}

void EtcdStore::KeepAliveLoop() {
  // A third of the TTL leaves two more tries before etcd expires the lease.
  const absl::Duration period = std::max(lease_ttl_ / 3, absl::Milliseconds(200));
  absl::Duration wait = period;
  while (true) {
    {
      absl::MutexLock lock(&stop_mu_);
      if (stop_mu_.AwaitWithTimeout(absl::Condition(&stop_), wait)) return;
    }
    const int64_t id = lease_id_.load();
    absl::StatusOr<EtcdJson> reply = http_->Post(
        "/v3/lease/keepalive", absl::StrCat("{\"ID\":\"", id, "\"}"),
        absl::StrCat("keep lease ", id, " alive"), Deadline::After(period), period, &stopping_);
    if (stopping_.load()) return;
    absl::Status status = reply.status();
    // A lease etcd no longer knows comes back with no TTL.
    if (status.ok() && (*reply)["result"]["TTL"].AsInt() <= 0) {
      status = RenewLease(id, Deadline::After(period));
    }
    if (!status.ok()) {
      PADDLE_LOG(WARN, STORE) << status << " (retrying; this client's keys expire if this lasts "
                              << Seconds(lease_ttl_) << ")";
    }
    wait = status.ok() ? period : std::min(period, absl::Milliseconds(500));
  }
}

absl::StatusOr<EtcdJson> EtcdStore::WriteRequest(absl::string_view path, absl::string_view what,
                                                 absl::FunctionRef<std::string(int64_t)> body,
                                                 const Deadline& deadline) {
  const int64_t lease = lease_id_.load();
  absl::StatusOr<EtcdJson> reply =
      http_->Post(path, body(lease), what, deadline, options_.connect_timeout);
  if (reply.ok() || !absl::StrContains(reply.status().message(), "requested lease not found")) {
    return reply;
  }
  // Nothing was written: etcd checks the lease before applying (Note [Lease lifetime]).
  RETURN_IF_ERROR(RenewLease(lease, deadline));
  return http_->Post(path, body(lease_id_.load()), what, deadline, options_.connect_timeout);
}

absl::Status EtcdStore::Set(absl::string_view key, absl::string_view value) {
  const std::string full = Base64Encode(absl::StrCat(key_prefix_, key));
  const std::string data = Base64Encode(value);
  return WriteRequest(
             "/v3/kv/put", absl::StrCat("set key ", Quote(key), " (", value.size(), " bytes)"),
             [&](int64_t lease) {
               return absl::StrCat("{\"key\":\"", full, "\",\"value\":\"", data, "\",\"lease\":\"",
                                   lease, "\"}");
             },
             Deadline::After(timeout()))
      .status();
}

absl::StatusOr<EtcdStore::KeyState> EtcdStore::ReadKey(absl::string_view key,
                                                       const Deadline& deadline) {
  ASSIGN_OR_RETURN(
      EtcdJson reply,
      http_->Post("/v3/kv/range",
                  absl::StrCat("{\"key\":\"", Base64Encode(absl::StrCat(key_prefix_, key)), "\"}"),
                  absl::StrCat("get key ", Quote(key)), deadline, options_.connect_timeout));
  ASSIGN_OR_RETURN(KeyState state, KeyState::FromRange(reply));
  state.store_revision = reply["header"]["revision"].AsInt();
  return state;
}

void EtcdStore::AwaitChange(absl::string_view key, int64_t revision, const Deadline& deadline,
                            absl::Duration& poll_pause) {
  const Deadline slice = Deadline::After(std::min(deadline.Remaining(), kWatchSlice));
  const std::string body =
      absl::StrCat("{\"create_request\":{\"key\":\"", Base64Encode(absl::StrCat(key_prefix_, key)),
                   "\",\"start_revision\":\"", revision + 1, "\",\"filters\":[\"NODELETE\"]}}");
  if (http_->Watch(body, slice)) {
    poll_pause = kFirstPollPause;
  } else if (!slice.Expired()) {  // the watch failed at once: poll (Note [Waiting])
    absl::SleepFor(std::min(poll_pause, deadline.Remaining()));
    poll_pause = std::min(poll_pause * 2, kMaxPollPause);
  }
}

absl::StatusOr<std::string> EtcdStore::Get(absl::string_view key, absl::Duration timeout) {
  const Deadline deadline = Deadline::After(timeout);
  absl::Duration poll_pause = kFirstPollPause;
  while (true) {
    absl::StatusOr<KeyState> state = ReadKey(key, deadline);
    if (state.ok() && state->exists) return std::move(state->value);
    if (deadline.Expired()) {
      absl::Status timed_out = StoreTimeoutError(*this, "Get", {std::string(key)}, 1, deadline);
      if (state.ok()) return timed_out;
      return absl::DeadlineExceededError(
          absl::StrCat(timed_out.message(), "; last error: ", state.status().message()));
    }
    if (!state.ok()) return state.status();
    AwaitChange(key, state->store_revision, deadline, poll_pause);
  }
}

absl::StatusOr<bool> EtcdStore::PutIfUnchanged(absl::string_view key, absl::string_view value,
                                               KeyState& state, const Deadline& deadline) {
  const std::string full = Base64Encode(absl::StrCat(key_prefix_, key));
  const std::string data = Base64Encode(value);
  const int64_t revision = state.mod_revision;
  ASSIGN_OR_RETURN(
      EtcdJson reply,
      WriteRequest(
          "/v3/kv/txn", absl::StrCat("update key ", Quote(key), " if at revision ", revision),
          [&](int64_t lease) {
            return absl::StrCat(
                "{\"compare\":[{\"target\":\"MOD\",\"key\":\"", full, "\",\"mod_revision\":\"",
                revision, "\"}],\"success\":[{\"request_put\":{\"key\":\"", full, "\",\"value\":\"",
                data, "\",\"lease\":\"", lease, "\"}}],\"failure\":[{\"request_range\":{\"key\":\"",
                full, "\"}}]}");
          },
          deadline));
  if (reply["succeeded"].AsBool()) return true;
  ASSIGN_OR_RETURN(state, KeyState::FromRange(reply["responses"][0]["response_range"]));
  return false;
}

absl::StatusOr<int64_t> EtcdStore::Add(absl::string_view key, int64_t delta) {
  const Deadline deadline = Deadline::After(timeout());
  // Read first: a read costs etcd far less than a transaction that fails its compare (that still
  // goes through raft and the WAL), and counters are usually there already.
  ASSIGN_OR_RETURN(KeyState state, ReadKey(key, deadline));
  for (int attempt = 1;; ++attempt) {
    int64_t current = 0;
    if (state.exists && !absl::SimpleAtoi(state.value, &current)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(), ": add ", delta, " to key ", Quote(key), ": its value \"",
                       absl::CHexEscape(state.value.substr(0, 64)), "\" is not an integer"));
    }
    int64_t next = 0;
    if (__builtin_add_overflow(current, delta, &next)) {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe(), ": add ", delta, " to key ", Quote(key), " holding ", current, " overflows"));
    }
    ASSIGN_OR_RETURN(bool done, PutIfUnchanged(key, absl::StrCat(next), state, deadline));
    if (done) return next;
    if (deadline.Expired()) {
      return absl::DeadlineExceededError(
          absl::StrCat(Describe(), ": add ", delta, " to key ", Quote(key), ": gave up after ",
                       attempt, " attempts in ", Seconds(deadline.Elapsed()), " (timeout ",
                       Seconds(deadline.timeout()), "); other clients changed the key every time"));
    }
  }
}

absl::StatusOr<std::string> EtcdStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) {
  const Deadline deadline = Deadline::After(timeout());
  KeyState state;  // with nothing expected, guess the key is missing and try to create it
  if (!expected.empty()) {
    ASSIGN_OR_RETURN(state, ReadKey(key, deadline));
  }
  while (true) {
    const bool matches = state.exists ? state.value == expected : expected.empty();
    if (!matches) return std::move(state.value);  // "" for a missing key
    ASSIGN_OR_RETURN(bool done, PutIfUnchanged(key, desired, state, deadline));
    if (done) return std::string(desired);
    if (deadline.Expired()) {
      return absl::DeadlineExceededError(absl::StrCat(Describe(), ": compare_set key ", Quote(key),
                                                      ": other clients changed the key on "
                                                      "every attempt for ",
                                                      Seconds(deadline.Elapsed())));
    }
  }
}

absl::StatusOr<std::vector<std::string>> EtcdStore::MissingKeys(absl::Span<const std::string> keys,
                                                                const Deadline& deadline,
                                                                int64_t* revision) {
  std::vector<std::string> missing;
  for (size_t begin = 0; begin < keys.size(); begin += kMaxTxnOps) {
    absl::Span<const std::string> chunk = keys.subspan(begin, kMaxTxnOps);
    std::string body = "{\"success\":[";
    for (size_t i = 0; i < chunk.size(); ++i) {
      absl::StrAppend(&body, i ? "," : "", "{\"request_range\":{\"key\":\"",
                      Base64Encode(absl::StrCat(key_prefix_, chunk[i])),
                      "\",\"count_only\":true}}");
    }
    body += "]}";
    ASSIGN_OR_RETURN(EtcdJson reply, http_->Post("/v3/kv/txn", body,
                                                 absl::StrCat("check ", chunk.size(),
                                                              " key(s) from ", Quote(chunk[0])),
                                                 deadline, options_.connect_timeout));
    // The first chunk's revision is the oldest: watching from it misses nothing.
    if (begin == 0 && revision != nullptr) *revision = reply["header"]["revision"].AsInt();
    for (size_t i = 0; i < chunk.size(); ++i) {
      if (reply["responses"][i]["response_range"]["count"].AsInt() == 0) {
        missing.push_back(chunk[i]);
      }
    }
  }
  return missing;
}

absl::Status EtcdStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  const Deadline deadline = Deadline::After(timeout);
  std::vector<std::string> missing(keys.begin(), keys.end());
  absl::Duration poll_pause = kFirstPollPause;
  while (true) {
    int64_t revision = 0;
    absl::StatusOr<std::vector<std::string>> still = MissingKeys(missing, deadline, &revision);
    if (still.ok()) {
      // Only keys seen missing need asking again: Wait asks that each key has appeared.
      missing = std::move(*still);
      if (missing.empty()) return absl::OkStatus();
    }
    if (deadline.Expired()) {
      absl::Status timed_out = StoreTimeoutError(*this, "Wait", missing, keys.size(), deadline);
      if (still.ok()) return timed_out;
      return absl::DeadlineExceededError(
          absl::StrCat(timed_out.message(), "; last error: ", still.status().message()));
    }
    if (!still.ok()) return still.status();
    // All keys are needed, so waiting for the first missing one first wastes nothing.
    AwaitChange(missing[0], revision, deadline, poll_pause);
  }
}

absl::StatusOr<bool> EtcdStore::Check(absl::Span<const std::string> keys) {
  ASSIGN_OR_RETURN(std::vector<std::string> missing,
                   MissingKeys(keys, Deadline::After(timeout()), nullptr));
  return missing.empty();
}

absl::StatusOr<bool> EtcdStore::DeleteKey(absl::string_view key) {
  ASSIGN_OR_RETURN(
      EtcdJson reply,
      http_->Post("/v3/kv/deleterange",
                  absl::StrCat("{\"key\":\"", Base64Encode(absl::StrCat(key_prefix_, key)), "\"}"),
                  absl::StrCat("delete key ", Quote(key)), Deadline::After(timeout()),
                  options_.connect_timeout));
  return reply["deleted"].AsInt() > 0;
}

absl::StatusOr<int64_t> EtcdStore::NumKeys() {
  ASSIGN_OR_RETURN(
      EtcdJson reply,
      http_->Post("/v3/kv/range",
                  absl::StrCat("{\"key\":\"", Base64Encode(key_prefix_), "\",\"range_end\":\"",
                               Base64Encode(PrefixEnd(key_prefix_)), "\",\"count_only\":true}"),
                  "count keys", Deadline::After(timeout()), options_.connect_timeout));
  return reply["count"].AsInt();
}

}  // namespace paddle
