// The parts of the extension paddle._C, one per area, each adding its classes and functions to
// the module (or a submodule) it is given. paddle_core_module.cc calls them in this order, since
// later areas use the types earlier ones register (Tensor first).
#ifndef PYTHON_BINDINGS_BINDINGS_H_
#define PYTHON_BINDINGS_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace paddle::python {

void BindTensor(pybind11::module_& m);       // tensor.cc
void BindNn(pybind11::module_& m);           // nn.cc
void BindOptim(pybind11::module_& m);        // optim.cc
void BindData(pybind11::module_& m);         // data.cc (data sets, loaders, save/load)
void BindDistributed(pybind11::module_& m);  // distributed.cc
void BindParallel(pybind11::module_& m);     // parallel.cc (after BindDistributed)
void BindTelemetry(pybind11::module_& m);    // telemetry.cc (the worker's metrics)

}  // namespace paddle::python

#endif  // PYTHON_BINDINGS_BINDINGS_H_
