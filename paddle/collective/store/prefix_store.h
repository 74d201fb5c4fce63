// PrefixStore: one Store scoped under a key prefix, so that independent users of one backing
// store (two process groups, successive rendezvous rounds) cannot see each other's keys.
//
// Key "k" of PrefixStore("pg1", base) lives at "pg1/k" in `base`. NumKeys counts this prefix's
// keys only; since the Store interface cannot list keys, the prefix keeps its own count (see
// Note [PrefixStore key count]). Prefixes should not contain '#', which marks that bookkeeping.
#ifndef PADDLE_COLLECTIVE_STORE_PREFIX_STORE_H_
#define PADDLE_COLLECTIVE_STORE_PREFIX_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paddle/collective/store/store.h"

namespace paddle {

class PrefixStore : public Store {
 public:
  // `base` is shared: several PrefixStores may sit on one connection.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

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

  const std::string& prefix() const { return prefix_; }
  Store& base() const { return *base_; }

 private:
  std::string Full(absl::string_view key) const;
  std::vector<std::string> Full(absl::Span<const std::string> keys) const;
  // Records that `key` exists, counting it once however many clients create it at once.
  absl::Status CountKey(absl::string_view key);

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_PREFIX_STORE_H_
