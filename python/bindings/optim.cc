// paddle.optim: the C++ optimizers (SGD, Adam/AdamW, LARS, LAMB) and learning-rate schedules.
// Optimizers update the parameters' memory in place, so a numpy view of a parameter sees each
// step. `exclude` chooses the parameters without weight decay and trust ratio ("below2d", the
// default of Note [Excluded parameters] in paddle/optim/optimizer.h, or "none", PyTorch's).
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/lamb.h"
#include "paddle/optim/lars.h"
#include "paddle/optim/lr_schedule.h"
#include "paddle/optim/optimizer.h"
#include "paddle/optim/sgd.h"
#include "python/bindings/bindings.h"
#include "python/bindings/common.h"

namespace paddle::python {
namespace {

using autograd::Variable;
using optim::LrSchedule;
using optim::Optimizer;

optim::ExcludePredicate Exclude(const std::string& name) {
  if (name == "below2d") return nullptr;
  if (name == "none") return optim::ExcludeNone();
  throw py::value_error(absl::StrCat("exclude='", name, "': choose 'below2d' or 'none'"));
}

// A schedule shared with Python, handed to WarmupLr (which takes ownership of its inner one).
class SharedLr final : public LrSchedule {
 public:
  explicit SharedLr(std::shared_ptr<LrSchedule> inner) : inner_(std::move(inner)) {}
  double LrAt(int64_t step) const override { return inner_->LrAt(step); }

 private:
  std::shared_ptr<LrSchedule> inner_;
};

template <typename T>
std::shared_ptr<T> Shared(absl::StatusOr<std::unique_ptr<T>> made) {
  return std::shared_ptr<T>(Unwrap(std::move(made)));
}

void BindOptimizers(py::module_& o) {
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(o, "Optimizer")
      .def("step",
           [](Optimizer& opt) {
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = opt.Step();
             }
             Check(st);
           })
      .def("zero_grad", &Optimizer::ZeroGrad)
      .def_property("lr", &Optimizer::lr, &Optimizer::set_lr)
      .def_property_readonly("step_count", &Optimizer::step_count)
      .def_property_readonly("state_bytes", &Optimizer::StateBytes)
      .def("state_dict",
           [](const Optimizer& opt) {
             std::map<std::string, Tensor> tensors;
             std::map<std::string, int64_t> ints;
             Check(opt.SaveState(&tensors, &ints));
             py::dict out;
             for (const auto& [k, t] : tensors) out[py::str(k)] = Variable(t);
             for (const auto& [k, v] : ints) out[py::str(k)] = v;
             return out;
           })
      .def(
          "load_state_dict",
          [](Optimizer& opt, const py::dict& state) {
            std::map<std::string, Tensor> tensors;
            std::map<std::string, int64_t> ints;
            for (const auto& [k, v] : state) {
              auto key = k.cast<std::string>();
              if (py::isinstance<py::int_>(v)) {
                ints[key] = v.cast<int64_t>();
              } else if (py::isinstance<Variable>(v)) {
                tensors[key] = v.cast<const Variable&>().data();
              } else {
                tensors[key] = TensorFromNumpy(InNativeByteOrder(py::array::ensure(v)));
              }
            }
            Check(opt.LoadState(tensors, ints));
          },
          py::arg("state_dict"));

  py::class_<optim::Sgd, Optimizer, std::shared_ptr<optim::Sgd>>(o, "SGD").def(
      py::init([](std::vector<Variable> params, double lr, double momentum, double dampening,
                  bool nesterov, double weight_decay, const std::string& exclude) {
        optim::SgdOptions s{lr, momentum, dampening, nesterov, weight_decay, Exclude(exclude)};
        return Shared(optim::Sgd::Create(std::move(params), s));
      }),
      py::arg("params"), py::arg("lr") = 0.01, py::arg("momentum") = 0.0,
      py::arg("dampening") = 0.0, py::arg("nesterov") = false, py::arg("weight_decay") = 0.0,
      py::arg("exclude") = "below2d");
  auto adam = [](std::vector<Variable> params, double lr, std::pair<double, double> betas,
                 double eps, double weight_decay, bool decoupled, const std::string& exclude) {
    optim::AdamOptions a{lr,           betas.first, betas.second,    eps,
                         weight_decay, decoupled,   Exclude(exclude)};
    return Shared(optim::Adam::Create(std::move(params), a));
  };
  py::class_<optim::Adam, Optimizer, std::shared_ptr<optim::Adam>>(o, "Adam").def(
      py::init([adam](std::vector<Variable> params, double lr, std::pair<double, double> betas,
                      double eps, double weight_decay, const std::string& exclude) {
        return adam(std::move(params), lr, betas, eps, weight_decay, false, exclude);
      }),
      py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
      py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("exclude") = "below2d");
  // AdamW is Adam with decoupled weight decay (PyTorch's default 0.01).
  o.def(
      "AdamW",
      [adam](std::vector<Variable> params, double lr, std::pair<double, double> betas, double eps,
             double weight_decay, const std::string& exclude) {
        return adam(std::move(params), lr, betas, eps, weight_decay, true, exclude);
      },
      py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
      py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.01, py::arg("exclude") = "below2d");
  py::class_<optim::Lars, Optimizer, std::shared_ptr<optim::Lars>>(o, "LARS").def(
      py::init([](std::vector<Variable> params, double lr, double momentum, double weight_decay,
                  double eta, const std::string& exclude) {
        optim::LarsOptions l{lr, momentum, weight_decay, eta, Exclude(exclude)};
        return Shared(optim::Lars::Create(std::move(params), l));
      }),
      py::arg("params"), py::arg("lr") = 0.1, py::arg("momentum") = 0.9,
      py::arg("weight_decay") = 5e-4, py::arg("eta") = 0.001, py::arg("exclude") = "below2d");
  py::class_<optim::Lamb, Optimizer, std::shared_ptr<optim::Lamb>>(o, "LAMB").def(
      py::init([](std::vector<Variable> params, double lr, std::pair<double, double> betas,
                  double eps, double weight_decay, const std::string& exclude) {
        optim::LambOptions l{lr, betas.first, betas.second, eps, weight_decay, Exclude(exclude)};
        return Shared(optim::Lamb::Create(std::move(params), l));
      }),
      py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
      py::arg("eps") = 1e-6, py::arg("weight_decay") = 0.01, py::arg("exclude") = "below2d");
}

void BindSchedules(py::module_& o) {
  py::class_<LrSchedule, std::shared_ptr<LrSchedule>>(o, "LrSchedule")
      .def("lr_at", &LrSchedule::LrAt, py::arg("step"))
      .def(
          "apply",
          [](const LrSchedule& s, Optimizer& opt) {
            double lr = s.LrAt(opt.step_count());
            opt.set_lr(lr);
            return lr;
          },
          py::arg("optimizer"), "Sets the optimizer's lr for its next step; returns it.");
  py::class_<optim::ConstantLr, LrSchedule, std::shared_ptr<optim::ConstantLr>>(o, "ConstantLR")
      .def(py::init([](double lr) { return Shared(optim::ConstantLr::Create(lr)); }),
           py::arg("lr"));
  py::class_<optim::StepLr, LrSchedule, std::shared_ptr<optim::StepLr>>(o, "StepLR")
      .def(py::init([](double base, int64_t step_size, double gamma) {
             return Shared(optim::StepLr::Create(base, step_size, gamma));
           }),
           py::arg("base_lr"), py::arg("step_size"), py::arg("gamma") = 0.1);
  py::class_<optim::CosineLr, LrSchedule, std::shared_ptr<optim::CosineLr>>(o, "CosineLR")
      .def(py::init([](double base, int64_t total, double min_lr) {
             return Shared(optim::CosineLr::Create(base, total, min_lr));
           }),
           py::arg("base_lr"), py::arg("total_steps"), py::arg("min_lr") = 0.0);
  py::class_<optim::WarmupLr, LrSchedule, std::shared_ptr<optim::WarmupLr>>(o, "WarmupLR")
      .def(py::init([](std::shared_ptr<LrSchedule> after, int64_t warmup, double start_factor) {
             if (!after) throw py::value_error("WarmupLR: `after` schedule is None");
             return Shared(optim::WarmupLr::Create(std::make_unique<SharedLr>(std::move(after)),
                                                   warmup, start_factor));
           }),
           py::arg("after"), py::arg("warmup_steps"), py::arg("start_factor") = 0.1);
  o.def(
      "scaled_lr",
      [](double base_lr, int64_t base_batch, int64_t global_batch) {
        return Unwrap(optim::ScaledLr(base_lr, base_batch, global_batch));
      },
      py::arg("base_lr"), py::arg("base_batch"), py::arg("global_batch"));
}

}  // namespace

void BindOptim(py::module_& m) {
  py::module_ o = m.def_submodule("optim", "optimizers and learning-rate schedules");
  BindOptimizers(o);
  BindSchedules(o);
}

}  // namespace paddle::python
