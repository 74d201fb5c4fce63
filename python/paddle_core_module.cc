// The pybind11 extension `paddle._C`: the C++ core as seen from Python. This file holds the module
// definition and the dtype conversions and Philox streams; each other area binds itself from its
// own file under python/bindings/ (bindings.h lists them), with errors translated in one place
// (Note [Status to exception] in python/bindings/common.h).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "paddle/core/dtype.h"
#include "paddle/core/half.h"
#include "paddle/core/logging.h"
#include "paddle/core/philox.h"
#include "python/bindings/bindings.h"
#include "python/bindings/common.h"

namespace py = pybind11;

namespace paddle {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Bits16Array = py::array_t<uint16_t, py::array::c_style | py::array::forcecast>;

template <void (*Convert)(const float*, uint16_t*, size_t, ConvertPath)>
Bits16Array FromFloat(const FloatArray& in) {
  Bits16Array out(std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
  {
    py::gil_scoped_release release;
    Convert(in.data(), out.mutable_data(), static_cast<size_t>(in.size()), ConvertPath::kAuto);
  }
  return out;
}

template <void (*Convert)(const uint16_t*, float*, size_t, ConvertPath)>
FloatArray ToFloat(const Bits16Array& in) {
  FloatArray out(std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
  {
    py::gil_scoped_release release;
    Convert(in.data(), out.mutable_data(), static_cast<size_t>(in.size()), ConvertPath::kAuto);
  }
  return out;
}

py::array_t<float> PhiloxUniform(uint64_t seed, uint64_t stream, py::ssize_t n) {
  if (n < 0) throw py::value_error("philox_uniform: n must be >= 0, got " + std::to_string(n));
  py::array_t<float> out(n);
  Philox rng(seed, stream);
  float* p = out.mutable_data();
  for (py::ssize_t i = 0; i < n; ++i) p[i] = rng.NextFloat();
  return out;
}

}  // namespace
}  // namespace paddle

PYBIND11_MODULE(_C, m) {
  using namespace paddle;
  m.doc() = "Paddle Collective's C++ core";
  python::RegisterExceptions(m);
  python::BindTensor(m);
  python::BindNn(m);
  python::BindOptim(m);
  python::BindData(m);
  python::BindDistributed(m);
  python::BindParallel(m);
  python::BindTelemetry(m);
  m.def("float_to_half", &FromFloat<&FloatToHalf>,
        "float32 array -> uint16 array of IEEE half bits (round to nearest even)");
  m.def("half_to_float", &ToFloat<&HalfToFloat>, "uint16 array of half bits -> float32 array");
  m.def("float_to_bfloat16", &FromFloat<&FloatToBFloat16>,
        "float32 array -> uint16 array of bfloat16 bits (round to nearest even)");
  m.def("bfloat16_to_float", &ToFloat<&BFloat16ToFloat>,
        "uint16 array of bfloat16 bits -> float32 array");
  // A malformed PADDLE_LOG_LEVEL or PADDLE_LOG_SUBSYS would end the process at the first log
  // line (logging.h); `import paddle` calls this first, so it raises a ValueError instead.
  m.def(
      "check_log_settings",
      [] {
        absl::StatusOr<LogConfig> config = LogConfigFromEnv();
        if (!config.ok()) throw py::value_error(std::string(config.status().message()));
      },
      "raises ValueError naming PADDLE_LOG_LEVEL or PADDLE_LOG_SUBSYS when one is malformed");
  m.def(
      "convert_path", [] { return std::string(ConvertPathName(AutoConvertPath())); },
      "the fp16/bf16 conversion path this CPU uses");
  m.def("dtype_size", [](const std::string& name) {
    absl::StatusOr<DType> dtype = ParseDType(name);
    if (!dtype.ok()) throw py::value_error(std::string(dtype.status().message()));
    return DTypeSize(*dtype);
  });
  m.def("philox_uniform", &PhiloxUniform, py::arg("seed"), py::arg("stream"), py::arg("n"),
        "n uniform floats in [0, 1) from Philox stream (seed, stream)");
}
