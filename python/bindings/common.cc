// Status -> exception translation and the numpy bridge; see common.h.
#include "python/bindings/common.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle::python {
namespace {

// The exception classes, created once by RegisterExceptions and owned by the module.
struct ExceptionTypes {
  PyObject* dist = nullptr;
  PyObject* store = nullptr;
  PyObject* timeout = nullptr;
  PyObject* store_timeout = nullptr;
  PyObject* network = nullptr;
  PyObject* peer = nullptr;
};

ExceptionTypes& Types() {
  static ExceptionTypes types;
  return types;
}

PyObject* NewException(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = absl::StrCat("paddle._C.", name);
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // the module keeps the reference
  return type;
}

}  // namespace

void RegisterExceptions(py::module_& m) {
  ExceptionTypes& t = Types();
  t.dist = NewException(m, "DistError", PyExc_RuntimeError,
                        "A collective, store or rendezvous operation failed.");
  t.store = NewException(m, "DistStoreError", t.dist, "The rendezvous store failed.");
  t.timeout = NewException(m, "DistTimeoutError", t.dist,
                           "An operation did not finish within its timeout.");
  py::tuple both = py::make_tuple(py::handle(t.store), py::handle(t.timeout));
  t.store_timeout = NewException(m, "DistStoreTimeoutError", both.ptr(),
                                 "A store get/wait or the rendezvous timed out.");
  t.network =
      NewException(m, "DistNetworkError", t.dist, "A connection to a peer failed or was closed.");
  t.peer = NewException(m, "DistPeerError", t.network, "A peer rank was lost.");
}

void ThrowStatus(const absl::Status& status, ErrorArea area) {
  const ExceptionTypes& t = Types();
  std::string message(status.message());
  PyObject* type = PyExc_RuntimeError;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      type = RanksDisagree(status) ? t.dist : PyExc_ValueError;
      break;
    case absl::StatusCode::kNotFound:
      type = area == ErrorArea::kStore ? t.store : PyExc_FileNotFoundError;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      type = area == ErrorArea::kStore ? t.store_timeout : t.timeout;
      break;
    case absl::StatusCode::kUnavailable:
      type = area == ErrorArea::kStore ? t.store : t.peer;
      break;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      type = area == ErrorArea::kStore ? t.store : t.dist;
      break;
    default:
      type = area == ErrorArea::kStore ? t.store : PyExc_RuntimeError;
      break;
  }
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

DType DTypeFromNumpy(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const py::ssize_t size = dtype.itemsize();
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 8) return DType::kFloat64;
  if (kind == 'f' && size == 2) return DType::kFloat16;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'b' && size == 1) return DType::kBool;
  throw py::type_error(absl::StrCat(
      "unsupported dtype ", std::string(py::str(static_cast<const py::handle&>(dtype))),
      "; paddle supports float32, float64, float16, bfloat16 (torch), int8, uint8, int32, "
      "int64 and bool"));
}

py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return py::dtype::of<float>();
    case DType::kFloat64:
      return py::dtype::of<double>();
    case DType::kFloat16:
      return py::dtype("float16");
    case DType::kInt8:
      return py::dtype::of<int8_t>();
    case DType::kUInt8:
      return py::dtype::of<uint8_t>();
    case DType::kInt32:
      return py::dtype::of<int32_t>();
    case DType::kInt64:
      return py::dtype::of<int64_t>();
    case DType::kBool:
      return py::dtype::of<bool>();
    case DType::kBFloat16:
      break;
  }
  throw py::type_error(absl::StrCat(
      "numpy has no ", DTypeName(dtype),
      " dtype; convert first (e.g. paddle.Tensor.to('float32')) or use a torch tensor"));
}

namespace {

bool IsNativeByteOrder(const py::array& array) {
  return array.dtype().attr("isnative").cast<bool>();
}

}  // namespace

py::array InNativeByteOrder(const py::array& array) {
  if (IsNativeByteOrder(array)) return array;
  return py::array::ensure(array.attr("astype")(array.dtype().attr("newbyteorder")("=")));
}

Tensor TensorFromNumpy(const py::array& array, const NumpyRequirements& req) {
  // A '>f4' array has kind 'f' and 4-byte items like float32: without this check its bytes would
  // be read, and written, as little-endian floats.
  if (!IsNativeByteOrder(array)) {
    const std::string name = py::str(static_cast<py::handle>(array.dtype()));
    throw py::type_error(absl::StrCat("the ", req.what, " has dtype ", name,
                                      ", whose byte order is not this machine's; paddle uses numpy "
                                      "memory in place and cannot read it: pass "
                                      "arr.astype(arr.dtype.newbyteorder('=')), a converted copy"));
  }
  DType dtype = req.dtype.has_value() ? *req.dtype : DTypeFromNumpy(array.dtype());
  if (req.dtype.has_value()) {
    if (DTypeSize(*req.dtype) != static_cast<size_t>(array.itemsize())) {
      throw py::value_error(
          absl::StrCat("cannot view ", std::string(py::str(static_cast<py::handle>(array.dtype()))),
                       " elements as ", DTypeName(*req.dtype)));
    }
  }
  if (req.writable && !array.writeable()) {
    throw py::value_error(absl::StrCat(
        "the ", req.what,
        " is read-only, but the operation writes its result in place; pass a writable copy "
        "(numpy: arr.copy())"));
  }
  const bool c_contiguous = (array.flags() & py::array::c_style) != 0 || array.size() == 0;
  if (req.contiguous && !c_contiguous) {
    throw py::value_error(
        absl::StrCat("the ", req.what, " (", array.ndim(),
                     "-d) is not C-contiguous; in-place collectives need contiguous memory (numpy: "
                     "np.ascontiguousarray, torch: .contiguous())"));
  }
  std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
  std::vector<int64_t> strides;
  if (!c_contiguous) {
    for (py::ssize_t d = 0; d < array.ndim(); ++d) {
      py::ssize_t s = array.strides()[d];
      if (s < 0 || s % array.itemsize() != 0) {
        throw py::value_error(absl::StrCat("the ", req.what, " has stride ", s,
                                           " bytes in dimension ", d,
                                           "; paddle needs non-negative strides that are multiples "
                                           "of the element size (numpy: np.ascontiguousarray)"));
      }
      strides.push_back(s / array.itemsize());
    }
  }
  PyObject* owner = array.ptr();
  auto release = [owner](void*) {
    if (!Py_IsInitialized()) return;  // interpreter gone: nothing left to release
    py::gil_scoped_acquire gil;
    Py_DECREF(owner);
  };
  Tensor t = Unwrap(Tensor::FromBlob(const_cast<void*>(array.data()), shape, dtype, Device::Cpu(),
                                     release, strides));
  Py_INCREF(owner);  // only now: FromBlob does not call `release` when it fails
  return t;
}

py::array TensorToNumpy(const Tensor& tensor) {
  if (!tensor.defined()) throw py::value_error("the tensor is undefined (it has no storage)");
  if (!tensor.device().is_cpu()) {
    throw py::type_error(absl::StrCat("cannot view a ", tensor.ToString(),
                                      " tensor as numpy; copy it to the CPU first"));
  }
  py::dtype dtype = NumpyDType(tensor.dtype());
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : tensor.strides()) {
    strides.push_back(static_cast<py::ssize_t>(s * tensor.element_size()));
  }
  auto* keep = new Tensor(tensor);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dtype, shape, strides, tensor.data(), base);
}

}  // namespace paddle::python
