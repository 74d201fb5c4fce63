// The memory behind one or more tensors: a reference-counted block that views and slices share.
// It either owns memory from an Allocator or wraps memory owned elsewhere (a numpy array, a
// PyTorch tensor, a registered transport buffer) and runs the owner's release function when the
// last tensor lets go.
#ifndef PADDLE_CORE_STORAGE_H_
#define PADDLE_CORE_STORAGE_H_

#include <cstddef>
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
};

}  // namespace paddle

#endif  // PADDLE_CORE_STORAGE_H_
