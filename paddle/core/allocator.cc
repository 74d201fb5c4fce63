#include "paddle/core/allocator.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace paddle {
namespace {

class HostAllocator final : public Allocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* ptr = nullptr;
    // posix_memalign(0) may return nullptr; one byte keeps pointers unique and non-null.
    if (posix_memalign(&ptr, kTensorAlignment, bytes == 0 ? 1 : bytes) != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
    }
    return ptr;
  }
  void Deallocate(void* ptr, size_t /*bytes*/) override { std::free(ptr); }
  Device device() const override { return Device::Cpu(); }
};

}  // namespace

Allocator* CpuAllocator() {
  static HostAllocator* allocator = new HostAllocator();
  return allocator;
}

}  // namespace paddle
