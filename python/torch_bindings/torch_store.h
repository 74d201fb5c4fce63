// TorchStore: torch's c10d::Store seen through our Store interface (paddle/collective/store).
//
// torch.distributed hands a backend the store it rendezvoused on (TCPStore, FileStore or
// HashStore, wrapped in a PrefixStore per process group). Our native communicator exchanges its
// addresses and settings through whatever Store it is given, so wrapping that store is all it takes
// for env://, tcp://, file:// and torchrun to work unchanged.
//
// Mapping (Note [c10d store semantics]):
// - c10d::Store::get waits with the store's own timeout, so Get(key, timeout) first waits for the
//   key with `timeout`, then reads it.
// - c10d's compareSet on a missing key with a non-empty `expected` answers `expected`; ours
//   answers "" (store.h), so that one answer is translated.
// - c10d reports every failure as an exception (RuntimeError "Socket Timeout" for a wait that
//   ran out); each becomes a Status naming this store, the operation and the keys:
//   kDeadlineExceeded for waits, kUnavailable for the rest.
// c10d's stores are thread-safe (TCPStore serializes its client socket): this class adds no
// lock.
#ifndef PYTHON_TORCH_BINDINGS_TORCH_STORE_H_
#define PYTHON_TORCH_BINDINGS_TORCH_STORE_H_

#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "paddle/collective/store/store.h"

namespace paddle::torch_ext {

class TorchStore : public Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store);

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

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace paddle::torch_ext

#endif  // PYTHON_TORCH_BINDINGS_TORCH_STORE_H_
