// TorchStore: our Store interface over torch's c10d::Store (Note [c10d store semantics]).
#include "python/torch_bindings/torch_store.h"

#include <c10/util/Type.h>

#include <chrono>
#include <exception>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paddle::torch_ext {
namespace {

std::vector<uint8_t> Bytes(absl::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string Text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

std::chrono::milliseconds Millis(absl::Duration d) {
  // c10d treats 0 ms as "no timeout"; a positive timeout below 1 ms must stay bounded.
  const int64_t ms = absl::ToInt64Milliseconds(d);
  return std::chrono::milliseconds(ms < 1 ? 1 : ms);
}

// Runs `fn`, turning a c10d exception into a Status naming the store, the operation and the keys.
template <typename Fn>
absl::Status Guard(const TorchStore& store, absl::string_view op, absl::string_view keys,
                   absl::StatusCode code, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::Status(
        code, absl::StrCat(store.Describe(), ": ", op, " [", keys, "] failed: ", e.what()));
  }
}

}  // namespace

TorchStore::TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  set_timeout(absl::Milliseconds(store_->getTimeout().count()));
}

absl::Status TorchStore::Set(absl::string_view key, absl::string_view value) {
  return Guard(*this, "set", key, absl::StatusCode::kUnavailable,
               [&] { store_->set(std::string(key), Bytes(value)); });
}

absl::StatusOr<std::string> TorchStore::Get(absl::string_view key, absl::Duration timeout) {
  const std::string k(key);
  absl::Status waited = Wait({k}, timeout);
  if (!waited.ok()) return waited;
  std::string value;
  absl::Status s = Guard(*this, "get", key, absl::StatusCode::kUnavailable,
                         [&] { value = Text(store_->get(k)); });
  if (!s.ok()) return s;
  return value;
}

absl::StatusOr<int64_t> TorchStore::Add(absl::string_view key, int64_t delta) {
  int64_t value = 0;
  absl::Status s = Guard(*this, "add", key, absl::StatusCode::kUnavailable,
                         [&] { value = store_->add(std::string(key), delta); });
  if (!s.ok()) return s;
  return value;
}

absl::StatusOr<std::string> TorchStore::CompareSet(absl::string_view key,
                                                   absl::string_view expected,
                                                   absl::string_view desired) {
  std::string value;
  absl::Status s = Guard(*this, "compare_set", key, absl::StatusCode::kUnavailable, [&] {
    value = Text(store_->compareSet(std::string(key), Bytes(expected), Bytes(desired)));
  });
  if (!s.ok()) return s;
  // c10d answers `expected` for a missing key; a present key holding `expected` would have been
  // swapped to `desired` instead, so this answer can only mean "missing".
  if (!expected.empty() && expected != desired && value == expected) return std::string();
  return value;
}

absl::Status TorchStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  const std::vector<std::string> list(keys.begin(), keys.end());
  return Guard(*this, absl::StrCat("wait (timeout ", absl::FormatDuration(timeout), ")"),
               absl::StrJoin(keys, ", "), absl::StatusCode::kDeadlineExceeded,
               [&] { store_->wait(list, Millis(timeout)); });
}

absl::StatusOr<bool> TorchStore::Check(absl::Span<const std::string> keys) {
  const std::vector<std::string> list(keys.begin(), keys.end());
  bool present = false;
  absl::Status s = Guard(*this, "check", absl::StrJoin(keys, ", "), absl::StatusCode::kUnavailable,
                         [&] { present = store_->check(list); });
  if (!s.ok()) return s;
  return present;
}

absl::StatusOr<bool> TorchStore::DeleteKey(absl::string_view key) {
  bool existed = false;
  absl::Status s = Guard(*this, "delete_key", key, absl::StatusCode::kUnavailable,
                         [&] { existed = store_->deleteKey(std::string(key)); });
  if (!s.ok()) return s;
  return existed;
}

absl::StatusOr<int64_t> TorchStore::NumKeys() {
  int64_t n = 0;
  absl::Status s = Guard(*this, "num_keys", "", absl::StatusCode::kUnavailable,
                         [&] { n = store_->getNumKeys(); });
  if (!s.ok()) return s;
  return n;
}

std::string TorchStore::Describe() const {
  return absl::StrCat("torch c10d store (", c10::demangle(typeid(*store_).name()), ")");
}

}  // namespace paddle::torch_ext
