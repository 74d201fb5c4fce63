// paddle.torch._C: the Python face of ProcessGroupPaddle (process_group_paddle.h).
//
// The class is registered as a subclass of torch's own ProcessGroup binding, so torch.distributed
// treats it like ProcessGroupGloo; torch must be imported first (paddle/torch/__init__.py does).
// `create` has the signature Backend.register_backend expects: (store, rank, size, timeout).
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "python/torch_bindings/process_group_paddle.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch.distributed backend 'paddle' on Paddle Collective's native communicator";
  py::module_::import("torch.distributed");
  py::class_<paddle::torch_ext::ProcessGroupPaddle, c10d::ProcessGroup,
             c10::intrusive_ptr<paddle::torch_ext::ProcessGroupPaddle>>(m, "ProcessGroupPaddle");
  m.def(
      "create",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout) {
        // Connecting blocks until every rank arrives, and a Python-implemented store needs the GIL.
        py::gil_scoped_release release;
        return paddle::torch_ext::ProcessGroupPaddle::Create(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      "Creates the process group of backend 'paddle' (Backend.register_backend's creator).");
}
