// Where a tensor's memory lives: the host (CPU) or one CUDA device.
#ifndef PADDLE_CORE_DEVICE_H_
#define PADDLE_CORE_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static Device Cpu() { return Device{DeviceType::kCpu, 0}; }
  static Device Cuda(int index) { return Device{DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }

  // "cpu", "cuda:1"
  std::string ToString() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// Parses "cpu", "cuda" (device 0) and "cuda:N"; the error names the text and the valid forms.
absl::StatusOr<Device> ParseDevice(absl::string_view text);

}  // namespace paddle

#endif  // PADDLE_CORE_DEVICE_H_
