// HashStore: a Store held in this process's memory.
//
// Threads-as-ranks tests and single-process jobs rendezvous through it; it is also the reference
// the other stores are checked against in the contract suite (tests/collective/store). It cannot
// be shared between processes: use FileStore, TcpStore or EtcdStore for that.
#ifndef PADDLE_COLLECTIVE_STORE_HASH_STORE_H_
#define PADDLE_COLLECTIVE_STORE_HASH_STORE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "paddle/collective/store/store.h"

namespace paddle {

class HashStore : public Store {
 public:
  HashStore() = default;

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

 private:
  // Waits on mu_ (held) until all `keys` exist or `deadline` passes; returns the missing ones.
  std::vector<std::string> AwaitKeys(absl::Span<const std::string> keys, const Deadline& deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
};

// Adds `delta` to the decimal integer `current` (empty counts as 0) as every store's Add does:
// kInvalidArgument naming `store` and `key` if `current` is not an integer or the sum overflows.
absl::StatusOr<int64_t> AddToStoredInteger(const Store& store, absl::string_view key,
                                           absl::string_view current, int64_t delta);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_HASH_STORE_H_
