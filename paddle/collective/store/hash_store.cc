// HashStore: a flat_hash_map under one absl::Mutex. Waiters use Mutex::AwaitWithDeadline, so a
// Set wakes exactly the waiters whose keys are now all present.
#include "paddle/collective/store/hash_store.h"

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace paddle {

absl::StatusOr<int64_t> AddToStoredInteger(const Store& store, absl::string_view key,
                                           absl::string_view current, int64_t delta) {
  int64_t value = 0;
  if (!current.empty() && !absl::SimpleAtoi(current, &value)) {
    // Values may be binary and long; show a bounded, escaped excerpt.
    constexpr size_t kShown = 32;
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: Add(%s, %d): the key holds %d byte(s) that are not a decimal integer (\"%s%s\"); "
        "use a key only for Add or only for Set",
        store.Describe(), key, delta, current.size(), absl::CEscape(current.substr(0, kShown)),
        current.size() > kShown ? "..." : ""));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: Add(%s, %d) overflows int64 (current value %d)", store.Describe(), key, delta, value));
  }
  return sum;
}

absl::Status HashStore::Set(absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  map_[key] = std::string(value);
  return absl::OkStatus();
}

std::vector<std::string> HashStore::AwaitKeys(absl::Span<const std::string> keys,
                                              const Deadline& deadline) {
  auto all_present = [this, keys]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : keys) {
      if (!map_.contains(key)) return false;
    }
    return true;
  };
  // AwaitWithDeadline takes a wall-clock time; WallClockDeadline converts the monotonic one.
  mu_.AwaitWithDeadline(absl::Condition(&all_present), deadline.WallClockDeadline());
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!map_.contains(key)) missing.push_back(key);
  }
  return missing;
}

absl::StatusOr<std::string> HashStore::Get(absl::string_view key, absl::Duration timeout) {
  Deadline deadline = Deadline::After(timeout);
  std::string k(key);
  absl::MutexLock lock(&mu_);
  std::vector<std::string> missing = AwaitKeys(absl::MakeConstSpan(&k, 1), deadline);
  if (!missing.empty()) return StoreTimeoutError(*this, "Get", missing, 1, deadline);
  return map_.at(k);
}

absl::StatusOr<int64_t> HashStore::Add(absl::string_view key, int64_t delta) {
  absl::MutexLock lock(&mu_);
  auto it = map_.find(key);
  absl::string_view current = it == map_.end() ? absl::string_view() : it->second;
  absl::StatusOr<int64_t> sum = AddToStoredInteger(*this, key, current, delta);
  if (!sum.ok()) return sum;
  map_[key] = absl::StrCat(*sum);
  return sum;
}

absl::StatusOr<std::string> HashStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) {
  absl::MutexLock lock(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (!expected.empty()) return std::string();
    map_.emplace(key, desired);
    return std::string(desired);
  }
  if (it->second == expected) it->second = std::string(desired);
  return it->second;
}

absl::Status HashStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  Deadline deadline = Deadline::After(timeout);
  absl::MutexLock lock(&mu_);
  std::vector<std::string> missing = AwaitKeys(keys, deadline);
  if (!missing.empty()) return StoreTimeoutError(*this, "Wait", missing, keys.size(), deadline);
  return absl::OkStatus();
}

absl::StatusOr<bool> HashStore::Check(absl::Span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    if (!map_.contains(key)) return false;
  }
  return true;
}

absl::StatusOr<bool> HashStore::DeleteKey(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  return map_.erase(key) > 0;
}

absl::StatusOr<int64_t> HashStore::NumKeys() {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(map_.size());
}

std::string HashStore::Describe() const {
  return absl::StrFormat("HashStore %p (in-process)", static_cast<const void*>(this));
}

}  // namespace paddle
