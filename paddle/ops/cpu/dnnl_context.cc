// The process-wide oneDNN engine, stream and primitive cache.
#include "paddle/ops/cpu/dnnl_context.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace internal {

dnnl::engine& DnnlEngine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& DnnlStream() {
  static auto* stream = new dnnl::stream(DnnlEngine());
  return *stream;
}

absl::StatusOr<std::shared_ptr<DnnlCached>> DnnlCacheLookup(
    const std::string& key, const std::function<std::shared_ptr<DnnlCached>()>& make) {
  static auto* mu = new std::mutex;
  static auto* cache = new std::unordered_map<std::string, std::shared_ptr<DnnlCached>>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  std::shared_ptr<DnnlCached> entry;
  try {
    entry = make();
  } catch (const dnnl::error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("oneDNN could not create a primitive for ", key, ": ", e.what()));
  }
  (*cache)[key] = entry;
  return entry;
}

dnnl::memory::desc DescOf(const Tensor& t) {
  dnnl::memory::dims dims(t.shape().begin(), t.shape().end());
  dnnl::memory::dims strides(t.strides().begin(), t.strides().end());
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

dnnl::memory MemoryOf(const Tensor& t) { return dnnl::memory(DescOf(t), DnnlEngine(), t.data()); }

std::string LayoutKey(const Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.shape(), ","), "]:[", absl::StrJoin(t.strides(), ","),
                      "]");
}

absl::Status DnnlCall(const char* op, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat(op, ": oneDNN failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
