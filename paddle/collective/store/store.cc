#include "paddle/collective/store/store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paddle {

absl::Status StoreTimeoutError(const Store& store, absl::string_view op,
                               absl::Span<const std::string> missing, size_t wanted,
                               const Deadline& deadline) {
  // Long key lists are cut: the first few name the culprits well enough.
  constexpr size_t kMaxListed = 16;
  std::vector<std::string> listed(missing.begin(),
                                  missing.begin() + std::min(missing.size(), kMaxListed));
  std::string keys = absl::StrJoin(listed, ", ");
  if (missing.size() > kMaxListed) absl::StrAppend(&keys, ", ...");
  absl::Status timeout = deadline.TimeoutError(absl::StrCat(store.Describe(), ": ", op));
  return absl::DeadlineExceededError(
      absl::StrCat(timeout.message(), " for ", missing.size(), " of ", wanted, " key(s): [", keys,
                   "]; ", TimeoutHint(TimeoutKind::kStore, deadline.timeout())));
}

}  // namespace paddle
