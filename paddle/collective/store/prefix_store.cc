// PrefixStore: every call forwards to the base store with the prefix prepended.
//
// Note [PrefixStore key count]
// NumKeys must count only this prefix's keys, but a Store cannot list keys. So each key "k" that
// exists has a marker "<prefix>#keys/k" in the base, and "<prefix>#count" holds the number of
// markers. A client that may have created "k" claims the marker with CompareSet(marker, "", token)
// using a token unique to the call; only the client that sees its own token back created the
// marker and increments the count. DeleteKey removes the marker; only the client whose
// DeleteKey(marker) returned true decrements. The count is exact except when a Set and a
// DeleteKey of the same key race each other; it is a diagnostic, nothing waits on it.
#include "paddle/collective/store/prefix_store.h"

#include <unistd.h>

#include <atomic>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

std::string UniqueToken() {
  static std::atomic<uint64_t> counter{0};
  absl::BitGen gen;
  return absl::StrCat(getpid(), ".", counter.fetch_add(1), ".",
                      absl::Hex(absl::Uniform<uint64_t>(gen)));
}

}  // namespace

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  set_timeout(base_->timeout());
}

std::string PrefixStore::Full(absl::string_view key) const {
  return absl::StrCat(prefix_, "/", key);
}

std::vector<std::string> PrefixStore::Full(absl::Span<const std::string> keys) const {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(Full(key));
  return full;
}

absl::Status PrefixStore::CountKey(absl::string_view key) {
  std::string token = UniqueToken();
  ASSIGN_OR_RETURN(std::string holder,
                   base_->CompareSet(absl::StrCat(prefix_, "#keys/", key), "", token));
  if (holder != token) return absl::OkStatus();  // the marker existed already
  return base_->Add(absl::StrCat(prefix_, "#count"), 1).status();
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  RETURN_IF_ERROR(base_->Set(Full(key), value));
  return CountKey(key);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key, absl::Duration timeout) {
  return base_->Get(Full(key), timeout);
}

absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  ASSIGN_OR_RETURN(int64_t value, base_->Add(Full(key), delta));
  RETURN_IF_ERROR(CountKey(key));
  return value;
}

absl::StatusOr<std::string> PrefixStore::CompareSet(absl::string_view key,
                                                    absl::string_view expected,
                                                    absl::string_view desired) {
  ASSIGN_OR_RETURN(std::string now, base_->CompareSet(Full(key), expected, desired));
  // Only a CompareSet that expected a missing key can have created one.
  if (expected.empty() && now == desired) RETURN_IF_ERROR(CountKey(key));
  return now;
}

absl::Status PrefixStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  return base_->Wait(Full(keys), timeout);
}

absl::StatusOr<bool> PrefixStore::Check(absl::Span<const std::string> keys) {
  return base_->Check(Full(keys));
}

absl::StatusOr<bool> PrefixStore::DeleteKey(absl::string_view key) {
  ASSIGN_OR_RETURN(bool existed, base_->DeleteKey(Full(key)));
  ASSIGN_OR_RETURN(bool marked, base_->DeleteKey(absl::StrCat(prefix_, "#keys/", key)));
  if (marked) RETURN_IF_ERROR(base_->Add(absl::StrCat(prefix_, "#count"), -1).status());
  return existed;
}

absl::StatusOr<int64_t> PrefixStore::NumKeys() {
  return base_->Add(absl::StrCat(prefix_, "#count"), 0);
}

std::string PrefixStore::Describe() const {
  return absl::StrCat(base_->Describe(), " (prefix \"", prefix_, "/\")");
}

}  // namespace paddle
