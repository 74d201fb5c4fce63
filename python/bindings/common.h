// What every binding file of the extension `paddle._C` shares: the one translation of
// absl::Status into Python exceptions, and the numpy <-> Tensor bridge.
//
// Note [Status to exception]: ThrowStatus is the only place a C++ error becomes a Python one, so
// a code means the same exception everywhere. The rule: a rank's own bad argument is a ValueError;
// what happens between ranks (their calls disagree, a peer dies, a timeout) is a DistError, a
// RuntimeError as in PyTorch.
//   ranks that disagree            -> paddle.distributed.DistError (kInvalidArgument marked by
//                                     MarkRanksDisagree, Note [Ranks disagree] in status.h)
//   kInvalidArgument, kOutOfRange  -> ValueError
//   kNotFound                      -> FileNotFoundError
//   kDeadlineExceeded              -> paddle.distributed.DistTimeoutError
//   kUnavailable                   -> paddle.distributed.DistPeerError (a lost or closed peer)
//   kAborted, kCancelled           -> paddle.distributed.DistError (an aborted communicator)
//   anything else                  -> RuntimeError
// In ErrorArea::kStore (rendezvous and store calls) failures other than bad arguments become
// DistStoreError, and a store timeout DistStoreTimeoutError (both a DistStoreError and a
// DistTimeoutError). The message is the C++ status message unchanged.
//
// Note [Zero-copy numpy]: TensorFromNumpy wraps the array's memory in a Tensor whose storage holds
// a reference to the array, released (under the GIL, from whichever thread drops the last view)
// when the last Tensor view is gone; TensorToNumpy returns an array whose base owns a Tensor view.
// So writes through either side are seen by the other, and neither frees memory the other uses.
#ifndef PYTHON_BINDINGS_COMMON_H_
#define PYTHON_BINDINGS_COMMON_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/dtype.h"
#include "paddle/core/tensor.h"

namespace paddle::python {

namespace py = pybind11;

enum class ErrorArea { kGeneral, kStore };

// Creates the exception classes (paddle._C.DistError, ...) in `m`; call once, first.
void RegisterExceptions(py::module_& m);

// Raises the Python exception for `status` (Note [Status to exception]); never returns.
[[noreturn]] void ThrowStatus(const absl::Status& status, ErrorArea area = ErrorArea::kGeneral);

inline void Check(const absl::Status& status, ErrorArea area = ErrorArea::kGeneral) {
  if (!status.ok()) ThrowStatus(status, area);
}

template <typename T>
T Unwrap(absl::StatusOr<T> value, ErrorArea area = ErrorArea::kGeneral) {
  if (!value.ok()) ThrowStatus(value.status(), area);
  return *std::move(value);
}

// The DType of a numpy dtype; TypeError naming it when there is none.
DType DTypeFromNumpy(const py::dtype& dtype);
// The numpy dtype of `dtype`; TypeError for bfloat16, which numpy lacks.
py::dtype NumpyDType(DType dtype);

struct NumpyRequirements {
  bool writable = false;    // the array must be writable (outputs of a collective)
  bool contiguous = false;  // C-contiguous (what the communicator needs)
  // Reinterpret the elements as this dtype (same size): bfloat16 from uint16/int16 memory.
  std::optional<DType> dtype;
  const char* what = "array";  // names the argument in errors
};

// A Tensor viewing `array`'s memory (Note [Zero-copy numpy]). ValueError for a read-only array
// when writable is required, for a non-contiguous one when contiguous is required, and for
// negative or unaligned strides; TypeError for an unsupported dtype and for a byte order other
// than this machine's (np.dtype('>f4') on x86), which a view would misread.
Tensor TensorFromNumpy(const py::array& array, const NumpyRequirements& req = {});
// `array` itself when its byte order is this machine's, else a converted copy: for arguments that
// are only read (labels, state dicts), where a copy is harmless.
py::array InNativeByteOrder(const py::array& array);
// An array viewing `tensor`'s memory (any strides), keeping the storage alive.
py::array TensorToNumpy(const Tensor& tensor);

}  // namespace paddle::python

#endif  // PYTHON_BINDINGS_COMMON_H_
