// paddle.Tensor: an autograd::Variable seen from Python, with zero-copy numpy interop (Note
// [Zero-copy numpy] in common.h), the autograd entry points (backward, grad, no_grad), moves
// between devices (Note [Tensor.to a device]) and the arithmetic a training script needs.
// Operations the C++ functional API lacks (transpose, matmul, sum, scale) are recorded here with
// autograd::RecordOperation so they take part in backward.
//
// Note [Host views of device tensors]: numpy(), np.asarray and the buffer protocol view a
// tensor's memory, and the in-place updates of _tensor_ops.py write through those views. A CUDA
// tensor has no host memory to view, so they raise TypeError naming the device and .cpu() (an
// explicit copy), as torch does; a silent copy would make `t.numpy()[0] = 1` a lost write. Only
// repr() and item(), which just read, copy to the host themselves.
#include <pybind11/stl.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/core/autograd/engine.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/core/device.h"
#include "paddle/core/status.h"
#include "paddle/nn/device_dispatch.h"
#include "paddle/nn/functional.h"
#include "paddle/ops/cpu/elementwise.h"
#include "python/bindings/bindings.h"
#include "python/bindings/common.h"

namespace paddle::python {
namespace {

using autograd::Edge;
using autograd::Variable;
using Grads = absl::StatusOr<std::vector<Tensor>>;
using HostFn = std::function<absl::StatusOr<Tensor>(const Tensor&)>;
namespace F = nn::functional;
using nn::internal::MoveTensor;

const Variable& Defined(const Variable& v);

// Note [Host fallback]: transpose, scale and sum below are CPU kernels. On a CUDA tensor they
// run on a host copy and move the result back (synchronous, two copies): correct everywhere, and
// fast enough for the scalar arithmetic of a training script; models run their layers
// (paddle.nn), whose operations have CUDA kernels.
absl::StatusOr<Tensor> OnHost(const Tensor& x, const HostFn& fn) {
  if (x.device().is_cpu()) return fn(x);
  ASSIGN_OR_RETURN(Tensor host, MoveTensor(x, Device::Cpu()));
  ASSIGN_OR_RETURN(Tensor y, fn(host));
  return MoveTensor(y, x.device());
}

// y = forward(x), dx = backward(dy), both host functions (Note [Host fallback]).
Variable HostUnary(const Variable& x, const char* name, const HostFn& forward, HostFn backward) {
  Tensor y = Unwrap(OnHost(x.data(), forward));
  return autograd::RecordOperation(y, name, {x.GradientEdge()},
                                   [backward = std::move(backward)](const Tensor& g) -> Grads {
                                     ASSIGN_OR_RETURN(Tensor dx, OnHost(g, backward));
                                     return std::vector<Tensor>{dx};
                                   });
}

absl::StatusOr<Tensor> TransposeTensor(const Tensor& t) {
  ASSIGN_OR_RETURN(Tensor view, t.Transpose(0, 1));
  return view.Contiguous();
}

Variable Transpose2d(const Variable& x) {
  if (x.data().dim() != 2) {
    throw py::value_error(
        absl::StrCat("transpose needs a 2-d tensor, got shape ", ShapeToString(x.shape())));
  }
  return HostUnary(x, "transpose", TransposeTensor, TransposeTensor);
}

// a [N, K] @ b [K, M], as Linear(a, b^T).
Variable Matmul(const Variable& a, const Variable& b) {
  if (a.data().dim() != 2 || b.data().dim() != 2 || a.shape()[1] != b.shape()[0]) {
    throw py::value_error(absl::StrCat("matmul needs [N, K] @ [K, M], got ",
                                       ShapeToString(a.shape()), " @ ", ShapeToString(b.shape())));
  }
  return Unwrap(F::Linear(a, Transpose2d(b), Variable()));
}

Variable Scale(const Variable& x, double s) {
  HostFn scale = [s](const Tensor& t) { return ops::cpu::Scale(t, static_cast<float>(s)); };
  return HostUnary(x, "scale", scale, scale);
}

// Sum of all elements (float32), accumulated in double; a 0-d result.
Variable Sum(const Variable& x) {
  if (x.data().dtype() != DType::kFloat32) {
    throw py::type_error(absl::StrCat("sum supports float32 tensors, got ", x.data().ToString()));
  }
  HostFn sum = [](const Tensor& t) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor c, t.Contiguous());
    double total = 0;
    const float* p = c.data<float>();
    for (int64_t i = 0; i < c.numel(); ++i) total += p[i];
    ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({}, DType::kFloat32));
    *y.data<float>() = static_cast<float>(total);
    return y;
  };
  HostFn spread = [shape = x.shape()](const Tensor& g) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor d, Tensor::Empty(shape, DType::kFloat32));
    RETURN_IF_ERROR(ops::cpu::Fill(&d, *g.data<float>()));
    return d;
  };
  return HostUnary(x, "sum", sum, std::move(spread));
}

// A constant filled with `value`, on `device`.
Variable Full(const Shape& shape, DType dtype, double value, Device device = Device::Cpu()) {
  Tensor t = Unwrap(Tensor::Empty(shape, dtype));
  Check(ops::cpu::Fill(&t, static_cast<float>(value)));
  return Variable(Unwrap(MoveTensor(t, device)));
}

Variable MulAny(const Variable& a, const py::object& b) {
  if (py::isinstance<Variable>(b)) return Unwrap(F::Mul(a, b.cast<Variable>()));
  return Scale(a, b.cast<double>());
}

Variable AddAny(const Variable& a, const py::object& b, double sign) {
  if (py::isinstance<Variable>(b)) {
    Variable other = b.cast<Variable>();
    return Unwrap(F::Add(a, sign > 0 ? other : Scale(other, -1.0)));
  }
  Variable c = Full(a.shape(), a.data().dtype(), sign * b.cast<double>(), a.data().device());
  return Unwrap(F::Add(a, c));
}

// Note [Tensor.to a device]: the copy on another device is recorded as an operation whose
// backward moves the gradient back, so a loss computed on the GPU reaches leaves on the CPU (and
// the reverse), as with torch's Tensor.to: the copy of a tensor that requires a gradient is not a
// leaf (make device leaves with paddle.randn(..., device=) or t.to(d).detach().requires_grad_()).
// Under no_grad, or when x requires no gradient, the copy is a plain leaf. A tensor already on
// the device is returned itself (the same Python object).
py::object MoveTo(const py::object& self, const std::string& text) {
  const Variable& x = Defined(self.cast<const Variable&>());
  const Device device = Unwrap(ParseDevice(text));
  const Device from = x.data().device();
  if (from == device) return self;
  absl::StatusOr<Tensor> moved;
  {
    py::gil_scoped_release release;
    moved = MoveTensor(x.data(), device);
  }
  if (!moved.ok()) {
    // Unusable device (no GPU or driver, or no CUDA in the build): say which devices are left.
    const bool unusable = absl::IsFailedPrecondition(moved.status());
    Check(Annotate(moved.status(),
                   absl::StrCat("Tensor.to('", text, "')",
                                unusable ? ": tensors can use only the CPU in this build on this "
                                           "machine"
                                         : "")));
  }
  return py::cast(autograd::RecordOperation(*moved, "to_device", {x.GradientEdge()},
                                            [from](const Tensor& g) -> Grads {
                                              ASSIGN_OR_RETURN(Tensor dx, MoveTensor(g, from));
                                              return std::vector<Tensor>{dx};
                                            }));
}

// The tensor's memory for a host view (Note [Host views of device tensors]).
const Tensor& HostData(const Variable& v, const char* what) {
  const Tensor& t = Defined(v).data();
  if (!t.device().is_cpu()) {
    throw py::type_error(absl::StrCat(what, ": the tensor is ", t.ToString(),
                                      "; numpy views host memory only: call .cpu() first for "
                                      "a host copy (t.cpu().numpy())"));
  }
  return t;
}

// `t` itself on the CPU, else a host copy (repr and item read it only).
Tensor HostCopy(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  absl::StatusOr<Tensor> host;
  {
    py::gil_scoped_release release;
    host = MoveTensor(t, Device::Cpu());
  }
  return Unwrap(std::move(host));
}

std::string Repr(const Variable& v) {
  if (!v.defined()) return "paddle.Tensor(undefined)";
  const Tensor& t = v.data();
  std::string body;
  if (t.dtype() != DType::kBFloat16) body = std::string(py::str(TensorToNumpy(HostCopy(t))));
  return absl::StrCat(
      "paddle.Tensor(", body, ", ", DTypeName(t.dtype()), ", shape=", ShapeToString(v.shape()),
      t.device().is_cpu() ? "" : absl::StrCat(", device='", t.device().ToString(), "'"),
      v.requires_grad() ? ", requires_grad=True" : "",
      v.name().empty() ? "" : absl::StrCat(", name='", v.name(), "'"), ")");
}

// Note [Python functions in the graph]: paddle.autograd.Function records a node whose backward
// calls Python. The engine runs it with the GIL released (Tensor.backward releases it), so the
// node takes the GIL to call, and its reference to the Python callable is dropped under the GIL
// too, from whichever thread frees the graph.
class PyCallable {
 public:
  explicit PyCallable(py::object fn) : fn_(fn.release().ptr()) {}
  ~PyCallable() {
    if (!Py_IsInitialized()) return;  // interpreter gone: nothing left to release
    py::gil_scoped_acquire gil;
    Py_DECREF(fn_);
  }
  PyCallable(const PyCallable&) = delete;
  PyCallable& operator=(const PyCallable&) = delete;
  py::handle get() const { return fn_; }

 private:
  PyObject* fn_;
};

// `output` (computed without a graph) as the result of an operation on `inputs` whose gradients
// `backward(grad_output)` returns: a sequence with one entry per input, each a Tensor, a numpy
// array or None (no gradient). `saved_inputs` (positions in `inputs`) and `saved_output` declare
// what forward saved for backward (Note [Saved tensor versions] in paddle/core/autograd/node.h).
Variable RecordPythonFunction(const Variable& output, const std::vector<Variable>& inputs,
                              py::function backward, const std::string& name,
                              const std::vector<int>& saved_inputs, bool saved_output) {
  std::vector<Edge> edges;
  std::vector<Shape> shapes;
  for (const Variable& v : inputs) {
    edges.push_back(Defined(v).GradientEdge());
    shapes.push_back(v.shape());
  }
  std::vector<autograd::SavedTensor> saved;
  for (int i : saved_inputs) {
    if (i < 0 || i >= static_cast<int>(inputs.size())) {
      throw py::index_error(absl::StrCat("saved input ", i, " of ", name, ": there are ",
                                         inputs.size(), " tensor inputs"));
    }
    saved.emplace_back("input", inputs[i].data(), i);
  }
  if (saved_output) saved.emplace_back("output", Defined(output).data());
  auto fn = std::make_shared<PyCallable>(std::move(backward));
  return autograd::RecordOperation(
      Defined(output).data(), name.c_str(), std::move(edges), std::move(saved),
      [fn, shapes](const Tensor& g) -> Grads {
        py::gil_scoped_acquire gil;
        try {
          py::object result = fn->get()(Variable(g));
          py::sequence grads = py::reinterpret_borrow<py::sequence>(result);
          if (!py::isinstance<py::sequence>(result) || py::len(grads) != shapes.size()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "autograd.Function.backward must return one gradient per tensor input (",
                shapes.size(), "), got ", std::string(py::repr(result))));
          }
          std::vector<Tensor> out;
          for (size_t i = 0; i < shapes.size(); ++i) {
            py::object gi = grads[i];
            if (gi.is_none()) {
              out.emplace_back();
              continue;
            }
            Tensor t = py::isinstance<Variable>(gi)
                           ? gi.cast<const Variable&>().data()
                           : TensorFromNumpy(py::array::ensure(gi, py::array::c_style));
            if (t.shape() != shapes[i]) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "autograd.Function.backward: the gradient of input ", i, " has shape ",
                  ShapeToString(t.shape()), ", the input has ", ShapeToString(shapes[i])));
            }
            out.push_back(std::move(t));
          }
          return out;
        } catch (py::error_already_set& e) {
          return absl::InternalError(absl::StrCat("autograd.Function.backward raised ", e.what()));
        }
      });
}

const Variable& Defined(const Variable& v) {
  if (!v.defined()) throw py::value_error("the tensor is undefined");
  return v;
}

// The buffer protocol: format characters as the struct module spells them.
const char* BufferFormat(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "f";
    case DType::kFloat64:
      return "d";
    case DType::kFloat16:
      return "e";
    case DType::kInt8:
      return "b";
    case DType::kUInt8:
      return "B";
    case DType::kInt32:
      return "i";
    case DType::kInt64:
      return "q";
    case DType::kBool:
      return "?";
    case DType::kBFloat16:
      break;
  }
  throw py::type_error("bfloat16 tensors have no buffer format; convert to float32 first");
}

// Note [Buffer errors]: the def_buffer callback raises for tensors without a host view (CUDA,
// bfloat16), but pybind11 2.10's buffer hook does not catch C++ exceptions: one would unwind
// through CPython into std::terminate. Tensor's hook is this wrapper, which sets the Python error
// instead (numpy then falls back to __array__, which raises the same message).
int GetBufferOrRaise(PyObject* obj, Py_buffer* view, int flags) {
  try {
    return py::detail::pybind11_getbuffer(obj, view, flags);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_BufferError, e.what());
  }
  if (view != nullptr) view->obj = nullptr;
  return -1;
}

}  // namespace

void BindTensor(py::module_& m) {
  py::class_<Variable> tensor(m, "Tensor", py::buffer_protocol(), R"(A typed, shaped tensor on the
CPU or a CUDA device that takes part in automatic differentiation. On the CPU it views numpy
memory without copies (paddle.from_numpy) and is viewed by numpy without copies (Tensor.numpy(),
np.asarray(t)); t.to("cuda") / t.cpu() copy between devices.)");
  tensor
      .def(py::init([](const Variable& data, bool requires_grad) {
             return Variable(Defined(data).data(), requires_grad, data.name());
           }),
           py::arg("data"), py::arg("requires_grad") = false,
           "A new leaf sharing `data`'s memory (paddle.nn.Parameter builds on it).")
      .def_static(
          "from_numpy",
          [](const py::array& a, bool requires_grad, const std::string& name,
             const std::optional<std::string>& dtype) {
            NumpyRequirements req;
            if (dtype) req.dtype = Unwrap(ParseDType(*dtype));
            return Variable(TensorFromNumpy(a, req), requires_grad, name);
          },
          py::arg("array"), py::arg("requires_grad") = false, py::arg("name") = "",
          py::arg("dtype") = py::none())
      .def_buffer([](const Variable& v) {
        const Tensor& t = HostData(v, "the buffer protocol");
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
        std::vector<py::ssize_t> strides;
        for (int64_t s : t.strides()) strides.push_back(s * t.element_size());
        return py::buffer_info(t.data(), t.element_size(), BufferFormat(t.dtype()), t.dim(), shape,
                               strides);
      })
      .def(
          "numpy", [](const Variable& v) { return TensorToNumpy(HostData(v, "Tensor.numpy()")); },
          "A numpy view of this tensor's memory (no copy); CPU tensors only (Note [Host views of "
          "device tensors]).")
      .def(
          "__array__",
          [](const Variable& v, const py::object& dtype) {
            py::array a = TensorToNumpy(HostData(v, "numpy.asarray(tensor)"));
            return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
          },
          py::arg("dtype") = py::none())
      .def_property_readonly("shape",
                             [](const Variable& v) {
                               const Shape& s = Defined(v).shape();
                               return py::tuple(py::cast(std::vector<int64_t>(s.begin(), s.end())));
                             })
      .def_property_readonly(
          "dtype",
          [](const Variable& v) { return std::string(DTypeName(Defined(v).data().dtype())); })
      .def_property_readonly("ndim", [](const Variable& v) { return Defined(v).data().dim(); })
      .def("numel", [](const Variable& v) { return Defined(v).data().numel(); })
      .def("__len__",
           [](const Variable& v) {
             if (Defined(v).data().dim() == 0) throw py::type_error("len() of a 0-d tensor");
             return v.shape()[0];
           })
      .def("is_contiguous", [](const Variable& v) { return Defined(v).data().is_contiguous(); })
      .def_property_readonly(
          "device", [](const Variable& v) { return Defined(v).data().device().ToString(); })
      .def_property_readonly("is_cuda",
                             [](const Variable& v) { return Defined(v).data().device().is_cuda(); })
      .def("_to_device", &MoveTo, py::arg("device"), "Note [Tensor.to a device]")
      .def_property_readonly("requires_grad", &Variable::requires_grad)
      .def_property_readonly("is_leaf", &Variable::is_leaf)
      .def_property("name", &Variable::name, &Variable::set_name)
      .def(
          "requires_grad_",
          [](Variable& v, bool on) -> Variable& {
            if (!Defined(v).is_leaf()) {
              throw py::value_error("requires_grad_ applies to leaf tensors only; use detach()");
            }
            v = Variable(v.data(), on, v.name());
            return v;
          },
          py::arg("requires_grad") = true, "Makes this leaf tensor require a gradient (in place).")
      .def_property_readonly("grad",
                             [](const Variable& v) -> py::object {
                               if (!Defined(v).is_leaf() || !v.grad().defined()) return py::none();
                               return py::cast(Variable(v.grad()));
                             })
      .def("zero_grad", [](Variable& v) { v.ZeroGrad(); })
      .def_property_readonly(
          "_version", [](const Variable& v) { return Defined(v).data().version(); },
          "In-place writes to this tensor's memory so far (Note [Version counters] in "
          "paddle/core/storage.h); shared by views.")
      .def(
          "_bump_version", [](const Variable& v) { Defined(v).data().BumpVersion(); },
          "Records an in-place write made through a numpy view (the in-place operators call it).")
      .def(
          "backward",
          [](const Variable& v, const std::optional<Variable>& grad, bool retain_graph) {
            Tensor g = grad ? grad->data() : Tensor();
            absl::Status st;
            {
              py::gil_scoped_release release;
              st = autograd::RunBackward(Defined(v), g, retain_graph);
            }
            Check(st);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false,
          "Runs the backward pass from this tensor; leaves accumulate into .grad. Frees the graph "
          "unless retain_graph (Note [Freed graphs] in paddle/core/autograd/node.h).")
      .def(
          "detach", [](const Variable& v) { return Variable(Defined(v).data()); },
          "The same memory, cut from the graph.")
      // clone and contiguous copy on the tensor's device: CloneGradient uses the operations
      // registered for it (Note [Gradient arithmetic on devices] in
      // paddle/core/autograd/variable.h), which moving a tensor there registered.
      .def("clone",
           [](const Variable& v) {
             return Variable(Unwrap(autograd::CloneGradient(Defined(v).data())));
           })
      .def("contiguous",
           [](const Variable& v) {
             const Tensor& t = Defined(v).data();
             return Variable(t.is_contiguous() ? t : Unwrap(autograd::CloneGradient(t)));
           })
      .def(
          "copy_",
          [](Variable& v, const Variable& src) -> Variable& {
            Tensor dst = Defined(v).data();
            Check(nn::internal::CopyInto(Defined(src).data(), dst));
            return v;
          },
          "Copies `src` (same shape and dtype, any device) into this tensor's memory.")
      .def("item",
           [](const Variable& v) -> py::object {
             if (Defined(v).data().numel() != 1) {
               throw py::value_error(absl::StrCat("item() needs one element, the tensor has shape ",
                                                  ShapeToString(v.shape())));
             }
             return TensorToNumpy(HostCopy(v.data()))
                 .attr("reshape")(-1)[py::int_(0)]
                 .attr("item")();
           })
      .def("reshape",
           [](const Variable& v, const std::vector<int64_t>& shape) {
             return Unwrap(F::Reshape(Defined(v), shape));
           })
      .def("flatten", [](const Variable& v) { return Unwrap(F::Flatten(Defined(v))); })
      .def_property_readonly("T", [](const Variable& v) { return Transpose2d(Defined(v)); })
      .def("t", [](const Variable& v) { return Transpose2d(Defined(v)); })
      .def("sum", [](const Variable& v) { return Sum(Defined(v)); })
      .def("mean",
           [](const Variable& v) {
             return Scale(Sum(Defined(v)), 1.0 / static_cast<double>(v.data().numel()));
           })
      .def("relu", [](const Variable& v) { return Unwrap(F::Relu(Defined(v))); })
      .def("__matmul__", [](const Variable& a, const Variable& b) { return Matmul(a, b); })
      .def("__add__", [](const Variable& a, const py::object& b) { return AddAny(a, b, 1.0); })
      .def("__radd__", [](const Variable& a, const py::object& b) { return AddAny(a, b, 1.0); })
      .def("__sub__", [](const Variable& a, const py::object& b) { return AddAny(a, b, -1.0); })
      .def("__rsub__",
           [](const Variable& a, const py::object& b) { return AddAny(Scale(a, -1.0), b, 1.0); })
      .def("__mul__", &MulAny)
      .def("__rmul__", &MulAny)
      .def("__neg__", [](const Variable& a) { return Scale(a, -1.0); })
      .def("__repr__", &Repr);
  reinterpret_cast<PyTypeObject*>(tensor.ptr())->tp_as_buffer->bf_getbuffer = &GetBufferOrRaise;

  m.def("matmul", &Matmul, py::arg("a"), py::arg("b"));
  m.def("_record_function", &RecordPythonFunction, py::arg("output"), py::arg("inputs"),
        py::arg("backward"), py::arg("name") = "python_function",
        py::arg("saved_inputs") = std::vector<int>{}, py::arg("saved_output") = false,
        "Note [Python functions in the graph] (python/bindings/tensor.cc)");
  m.def(
      "full",
      [](const std::vector<int64_t>& shape, double value, const std::string& dtype,
         bool requires_grad) {
        Variable v = Full(Shape(shape.begin(), shape.end()), Unwrap(ParseDType(dtype)), value);
        return Variable(v.data(), requires_grad);
      },
      py::arg("shape"), py::arg("value"), py::arg("dtype") = "float32",
      py::arg("requires_grad") = false);
  m.def(
      "check_device",
      [](const std::string& device) {
        Check(nn::internal::CheckDeviceUsable(Unwrap(ParseDevice(device))));
      },
      py::arg("device"),
      "Returns if `device` ('cpu', 'cuda', 'cuda:N') can hold tensors, else raises why: "
      "RuntimeError without CUDA in the build or without a GPU and driver, ValueError for a bad "
      "name or a device number this process does not see.");
  m.def("is_grad_enabled", &autograd::GradMode::IsEnabled);
  m.def("set_grad_enabled", &autograd::GradMode::SetEnabled, py::arg("enabled"));
}

}  // namespace paddle::python
