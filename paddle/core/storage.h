// The memory behind one or more tensors: a reference-counted block that views and slices share.
// It either owns memory from an Allocator or wraps memory owned elsewhere (a numpy array, a
// PyTorch tensor, a registered transport buffer) and runs the owner's release function when the
// last tensor lets go.
//
// Note [Version counters]: every storage counts the in-place writes made to it through the
// write APIs (Tensor::BumpVersion after Tensor::CopyFrom, optimizer steps, a module's state-dict
// load, the Python in-place operators). Views share the storage and so share the counter, as
// PyTorch's views share their base's version counter. Autograd records the version of each tensor
// an operation saves for backward and refuses to run that backward once the version moved
// (SavedTensor in paddle/core/autograd/node.h), instead of computing a gradient from values that
// are no longer those of the forward pass. Kernels writing a fresh output do not bump: nobody can
// have saved it yet.
#ifndef PADDLE_CORE_STORAGE_H_
#define PADDLE_CORE_STORAGE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "paddle/core/allocator.h"
#include "paddle/core/device.h"

namespace paddle {

class Storage {
 public:
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(size_t bytes, Allocator* allocator);
  // Wraps `data` (at least `bytes` long); `release` (may be empty) runs when the last user is gone.
  static std::shared_ptr<Storage> Wrap(void* data, size_t bytes, Device device,
                                       std::function<void(void*)> release);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Note [Version counters]. Relaxed: a write and the backward that checks it are ordered by
  // whatever hands the tensor from one thread to the other.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void BumpVersion() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Storage(void* data, size_t bytes, Device device, Allocator* allocator,
          std::function<void(void*)> release)
      : data_(data),
        bytes_(bytes),
        device_(device),
        allocator_(allocator),
        release_(std::move(release)) {}

  void* data_;
  size_t bytes_;
  Device device_;
  Allocator* allocator_;                // set when owned
  std::function<void(void*)> release_;  // set when wrapped
  std::atomic<uint64_t> version_{0};
};

}  // namespace paddle

#endif  // PADDLE_CORE_STORAGE_H_
