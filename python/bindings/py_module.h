// PyModule: the C++ side of a paddle.nn.Module subclass written in Python.
//
// A Python module is a real nn::Module, so everything written for C++ modules (state dicts,
// train/eval, To(device), optimizers, DistributedDataParallel) works on it unchanged; its
// parameters, buffers and children are registered through Set* as Python assigns attributes.
// Forward() calls the Python `forward`, taking the GIL: C++ callers (a C++ Sequential holding a
// Python module, DDP) usually run without it.
//
// Note [Python module lifetime]: C++ holds a Python module by shared_ptr, which keeps the C++ part
// alive but not the Python object (its __dict__ and methods). paddle.nn.Module keeps every child
// in its own Python attributes, and C++ containers bound with keep_alive do the same, so a Python
// module lives as long as anything that can call it.
#ifndef PYTHON_BINDINGS_PY_MODULE_H_
#define PYTHON_BINDINGS_PY_MODULE_H_

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/nn/module.h"

namespace paddle::python {

class PyModule : public nn::Module {
 public:
  explicit PyModule(std::string type) : Module(std::move(type)) {}

  absl::StatusOr<autograd::Variable> Forward(const autograd::Variable& x) override {
    pybind11::gil_scoped_acquire gil;
    pybind11::function forward =
        pybind11::get_override(static_cast<const Module*>(this), "forward");
    if (!forward) {
      return absl::FailedPreconditionError(
          absl::StrCat("the Python module ", type(), " defines no forward()"));
    }
    try {
      return forward(x).cast<autograd::Variable>();
    } catch (pybind11::error_already_set& e) {
      return absl::InternalError(absl::StrCat(type(), ".forward raised ", e.what()));
    } catch (const pybind11::cast_error&) {
      return absl::InvalidArgumentError(
          absl::StrCat(type(),
                       ".forward must return one paddle.Tensor when called from C++ (DDP, a C++ "
                       "Sequential)"));
    }
  }

  using Module::SetBuffer;
  using Module::SetModule;
  using Module::SetParameter;
};

}  // namespace paddle::python

#endif  // PYTHON_BINDINGS_PY_MODULE_H_
