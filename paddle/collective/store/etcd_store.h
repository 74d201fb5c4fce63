// EtcdStore: the Store interface on a real etcd v3 cluster, for jobs that already run etcd (or
// want a store that outlives any one rank). It speaks etcd's v3 JSON gateway on the client port
// over libcurl, so it needs no gRPC: keys and values travel base64-encoded in small JSON bodies.
//
// Layout and lifetime. Every key lives under /paddle/<prefix>/, so jobs sharing one etcd are
// isolated by their prefix (the job id). Connect grants a lease of `lease_ttl`; every key this
// client writes is attached to it and a keep-alive thread refreshes it, so when a worker dies its
// keys vanish `lease_ttl` later instead of confusing the next job. A client that is destroyed does
// not revoke its lease: its keys stay readable for `lease_ttl` after it is gone, long enough for
// the others to read what it published last (see Note [Lease lifetime] in etcd_store.cc).
//
// Atomicity. Add and CompareSet are optimistic transactions: read the key, then write only if its
// mod_revision is still the one read, retrying on conflict. Get and Wait read, then watch a
// missing key until it is written or their timeout ends. Every HTTP call is bounded by the
// operation's deadline.
#ifndef PADDLE_COLLECTIVE_STORE_ETCD_STORE_H_
#define PADDLE_COLLECTIVE_STORE_ETCD_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/deadline.h"

namespace paddle {

// One JSON value from etcd's gateway, parsed: just enough of JSON for its replies. Numbers keep
// their text (etcd sends int64 fields as strings anyway); a missing field or index reads as null,
// so lookups chain: reply["kvs"][0]["value"]. Public so that the parser can be fuzzed on its own.
class EtcdJson {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  // Exactly one value, surrounded by whitespace at most. kInternal naming the byte offset (and
  // quoting the start of `text`) for anything else, including nesting deeper than 64 levels.
  static absl::StatusOr<EtcdJson> Parse(absl::string_view text);

  // The field `name` of an object; null if this is not an object or has no such field.
  const EtcdJson& operator[](absl::string_view name) const;
  // Item `i` of an array; null if this is not an array or is shorter.
  const EtcdJson& operator[](size_t i) const;

  Kind kind() const { return kind_; }
  bool IsNull() const { return kind_ == Kind::kNull; }
  // A string's decoded text, a number's or bool's own text; empty otherwise.
  const std::string& text() const { return text_; }
  bool AsBool() const { return kind_ == Kind::kBool && text_ == "true"; }
  // int64 fields come as "123" or 123; anything else, missing ones included, is proto3's 0.
  int64_t AsInt() const;
  // A base64 bytes field, decoded (kInternal if it is not base64); a missing one is "".
  absl::StatusOr<std::string> AsBytes() const;
  // An array's items, an object's fields in document order (duplicates kept; lookups take the
  // first); empty for other kinds.
  const std::vector<EtcdJson>& items() const { return items_; }
  const std::vector<std::pair<std::string, EtcdJson>>& fields() const { return fields_; }

 private:
  struct Parser;
  static const EtcdJson& Null();

  Kind kind_ = Kind::kNull;
  std::string text_;
  std::vector<EtcdJson> items_;
  std::vector<std::pair<std::string, EtcdJson>> fields_;
};

struct EtcdStoreOptions {
  std::string endpoint;  // "host:port" of an etcd client URL (plain http)
  std::string prefix;    // the job id; keys live under /paddle/<prefix>/
  // How long this client's keys outlive it; etcd rounds values under ~2 s up to its minimum.
  absl::Duration lease_ttl = absl::Seconds(30);
  // Default for Get/Wait and the bound on every other operation.
  absl::Duration timeout = DefaultTimeout(TimeoutKind::kStore);
  // How long to keep retrying while etcd refuses connections (at Connect and on every call).
  absl::Duration connect_timeout = DefaultTimeout(TimeoutKind::kConnect);
};

class EtcdStore : public Store {
 public:
  // Grants the lease (retrying until `connect_timeout` while etcd is unreachable) and starts the
  // keep-alive thread. kUnavailable naming the endpoint if etcd never answers.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Connect(const EtcdStoreOptions& options);
  // Stops and joins the keep-alive thread; the lease is left to expire (see the file comment).
  ~EtcdStore() override;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  std::string Describe() const override;

  using Store::Get;
  using Store::Wait;

  // The lease every key this client writes is attached to (changes if etcd expired it).
  int64_t lease_id() const { return lease_id_.load(); }

 private:
  struct KeyState;
  class Http;

  explicit EtcdStore(const EtcdStoreOptions& options);

  // Grants a new lease if `stale` is still the current one (writers and the keep-alive thread
  // both call it when etcd reports the lease gone; only the first grants).
  absl::Status RenewLease(int64_t stale, const Deadline& deadline);
  // Posts a request that writes with the current lease, renewing the lease once if etcd lost it.
  // `body` turns a lease id into the JSON body.
  absl::StatusOr<EtcdJson> WriteRequest(absl::string_view path, absl::string_view what,
                                        absl::FunctionRef<std::string(int64_t)> body,
                                        const Deadline& deadline);
  absl::StatusOr<KeyState> ReadKey(absl::string_view key, const Deadline& deadline);
  // Returns once `key` may have been written after `revision`, or by `deadline` (Note [Waiting]
  // in etcd_store.cc); `poll_pause` carries the polling backoff between calls.
  void AwaitChange(absl::string_view key, int64_t revision, const Deadline& deadline,
                   absl::Duration& poll_pause);
  // Puts `value` if `key`'s mod_revision is still `state.mod_revision` (0: the key is missing).
  // Returns true on success, else false with `state` refreshed from the same transaction.
  absl::StatusOr<bool> PutIfUnchanged(absl::string_view key, absl::string_view value,
                                      KeyState& state, const Deadline& deadline);
  // The subset of `keys` that do not exist now (one read-only transaction per 128 keys), and
  // optionally etcd's revision at the time.
  absl::StatusOr<std::vector<std::string>> MissingKeys(absl::Span<const std::string> keys,
                                                       const Deadline& deadline, int64_t* revision);
  void KeepAliveLoop();

  const EtcdStoreOptions options_;
  const std::string key_prefix_;  // "/paddle/<prefix>/"
  std::unique_ptr<Http> http_;
  std::atomic<int64_t> lease_id_{0};
  absl::Duration lease_ttl_;  // as granted by etcd (it raises short ones to its minimum)
  absl::Mutex lease_mu_;      // serializes RenewLease

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::atomic<bool> stopping_{false};  // read by the keep-alive request to abort promptly
  std::thread keep_alive_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_ETCD_STORE_H_
