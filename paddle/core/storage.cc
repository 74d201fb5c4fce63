#include "paddle/core/storage.h"

namespace paddle {

absl::StatusOr<std::shared_ptr<Storage>> Storage::Allocate(size_t bytes, Allocator* allocator) {
  absl::StatusOr<void*> data = allocator->Allocate(bytes);
  if (!data.ok()) return data.status();
  return std::shared_ptr<Storage>(new Storage(*data, bytes, allocator->device(), allocator, {}));
}

std::shared_ptr<Storage> Storage::Wrap(void* data, size_t bytes, Device device,
                                       std::function<void(void*)> release) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, device, nullptr, std::move(release)));
}

Storage::~Storage() {
  if (allocator_ != nullptr) {
    allocator_->Deallocate(data_, bytes_);
  } else if (release_) {
    release_(data_);
  }
}

}  // namespace paddle
