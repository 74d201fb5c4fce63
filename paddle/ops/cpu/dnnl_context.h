// The oneDNN engine, stream and primitive cache shared by the CPU kernels that run on oneDNN
// (conv2d, pool2d).
//
// Creating a oneDNN primitive JIT-compiles code and costs milliseconds, far more than running it
// on a small layer, so primitives are built once per shape key and reused. One CPU engine and one
// in-order stream serve the whole process: oneDNN's CPU stream is a handle, not a queue, so
// sharing it costs nothing, and primitives are safe to execute from several threads.
#ifndef PADDLE_OPS_CPU_DNNL_CONTEXT_H_
#define PADDLE_OPS_CPU_DNNL_CONTEXT_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace internal {

dnnl::engine& DnnlEngine();
dnnl::stream& DnnlStream();

// Base of anything cached: a primitive with the descriptors needed to bind memory to it.
struct DnnlCached {
  virtual ~DnnlCached() = default;
};

// Returns the entry cached under `key`, building it with `make` on first use. `make` may throw
// dnnl::error; that becomes an InvalidArgument naming `key`.
absl::StatusOr<std::shared_ptr<DnnlCached>> DnnlCacheLookup(
    const std::string& key, const std::function<std::shared_ptr<DnnlCached>()>& make);

// The memory descriptor of a dense fp32 tensor, using its actual strides.
dnnl::memory::desc DescOf(const Tensor& t);
// A dnnl::memory over the tensor's data (no copy).
dnnl::memory MemoryOf(const Tensor& t);
// "[1, 2, 3]:[6, 3, 1]": shape and strides, for cache keys.
std::string LayoutKey(const Tensor& t);

// Runs `fn`, turning a dnnl::error into an Internal error that names `op`.
absl::Status DnnlCall(const char* op, const std::function<void()>& fn);

}  // namespace internal
}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_DNNL_CONTEXT_H_
