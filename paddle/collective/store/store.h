// The key-value store through which workers find each other.
//
// Rendezvous, address exchange, barriers and the NCCL unique id all travel through a `Store`.
// It is the first thing every job touches and the first thing that hangs when something is
// wrong, so every blocking call here is bounded: `Get` and `Wait` take a timeout (the store's
// default when omitted, see Note [Default timeouts] in paddle/core/deadline.h), and a timeout
// error lists the keys still missing, the time waited and the setting to change.
//
// Implementations: HashStore (in-process), FileStore (one host or a shared filesystem),
// TcpStore (a server hosted by one rank), EtcdStore (a real etcd v3 cluster); PrefixStore scopes
// any of them under a key prefix. All are safe to call from many threads at once.
#ifndef PADDLE_COLLECTIVE_STORE_STORE_H_
#define PADDLE_COLLECTIVE_STORE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "paddle/core/deadline.h"

namespace paddle {

class Store {
 public:
  Store() : timeout_(DefaultTimeout(TimeoutKind::kStore)) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Sets `key` to `value` (any bytes), replacing an earlier value, and wakes its waiters.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // The value of `key`, waiting until it exists; kDeadlineExceeded after `timeout`.
  virtual absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) = 0;
  absl::StatusOr<std::string> Get(absl::string_view key) { return Get(key, timeout_); }

  // Atomically adds `delta` to the integer in `key` (a missing key counts as 0; the value is
  // stored as decimal text) and returns the new value. kInvalidArgument if the value is not an
  // integer.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // Atomically: if `key` is missing and `expected` is empty, or `key` holds `expected`, set it to
  // `desired`. Returns the value `key` holds afterwards (so the caller won iff it equals
  // `desired`); a missing key that was not created reads as "".
  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // Waits until every key in `keys` exists; kDeadlineExceeded naming the missing keys.
  virtual absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) = 0;
  absl::Status Wait(absl::Span<const std::string> keys) { return Wait(keys, timeout_); }

  // Whether every key in `keys` exists now (no waiting).
  virtual absl::StatusOr<bool> Check(absl::Span<const std::string> keys) = 0;

  // Deletes `key`; returns whether it existed.
  virtual absl::StatusOr<bool> DeleteKey(absl::string_view key) = 0;

  // The number of keys in the store (in this store's prefix, for stores that have one).
  virtual absl::StatusOr<int64_t> NumKeys() = 0;

  // "TCPStore 127.0.0.1:29500", "FileStore /tmp/job/store": for error messages.
  virtual std::string Describe() const = 0;

  // The timeout used when a call names none.
  absl::Duration timeout() const { return timeout_; }
  void set_timeout(absl::Duration timeout) { timeout_ = timeout; }

 private:
  absl::Duration timeout_;
};

// The kDeadlineExceeded error every store returns when Get/Wait times out:
// "<store>: Wait timed out after 30s (timeout 30s) for 2 of 4 key(s): [a, b]; raise
// PADDLE_STORE_TIMEOUT_S (now 300s) or pass a longer timeout if the job is merely slow".
absl::Status StoreTimeoutError(const Store& store, absl::string_view op,
                               absl::Span<const std::string> missing, size_t wanted,
                               const Deadline& deadline);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_STORE_H_
