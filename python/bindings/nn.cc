// paddle.nn: the C++ layers and models (paddle/nn) as Python classes, and nn.functional.
//
// Every layer is the C++ object itself, held by shared_ptr so a Sequential, a model and the
// Python handle share it; parameters() returns the live Variables (not copies), which is what
// optimizers update in place. Forward passes release the GIL: they are pure C++ compute. The
// Module class is also the base of modules written in Python (py_module.h), which register
// their entries through _set_parameter / _set_buffer / _set_module.
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "paddle/core/device.h"
#include "paddle/nn/embedding.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/generator.h"
#include "paddle/nn/layers.h"
#include "paddle/nn/models.h"
#include "paddle/nn/module.h"
#include "python/bindings/bindings.h"
#include "python/bindings/common.h"
#include "python/bindings/py_module.h"

namespace paddle::python {
namespace {

using autograd::Variable;
using nn::Generator;
using nn::Module;
namespace F = nn::functional;

// A Tensor from a paddle.Tensor or anything numpy can view (labels, indices, state dicts).
Tensor AsTensor(const py::handle& obj, const char* what) {
  if (py::isinstance<Variable>(obj)) return obj.cast<const Variable&>().data();
  py::array a = py::array::ensure(obj);
  if (!a) throw py::type_error(std::string(what) + " must be a paddle.Tensor or a numpy array");
  NumpyRequirements req;
  req.what = what;
  return TensorFromNumpy(InNativeByteOrder(a), req);
}

// The generator layers draw their initial weights from: the one given, else paddle.nn's default
// (paddle.manual_seed resets it).
std::shared_ptr<Generator> InitGenerator(const py::object& generator) {
  if (!generator.is_none()) return generator.cast<std::shared_ptr<Generator>>();
  return py::module_::import("paddle.nn")
      .attr("default_generator")()
      .cast<std::shared_ptr<Generator>>();
}

PyModule& AsPyModule(Module& m) {
  auto* py_module = dynamic_cast<PyModule*>(&m);
  if (py_module == nullptr) {
    throw py::type_error(
        "entries can be registered on Python-defined modules only (subclasses "
        "of paddle.nn.Module), not on the C++ " +
        m.type());
  }
  return *py_module;
}

Variable Forward(Module& m, const Variable& x) {
  absl::StatusOr<Variable> y;
  {
    py::gil_scoped_release release;
    y = m.Forward(x);
  }
  return Unwrap(std::move(y));
}

// FNV-1a over every parameter and buffer in name order (the C++ example's param_hash).
uint64_t ParamHash(const Module& m) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : m.StateDict()) {
    Tensor c = Unwrap(t.Contiguous());
    const auto* p = static_cast<const unsigned char*>(c.data());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

py::list Named(const std::vector<std::pair<std::string, Variable>>& entries) {
  py::list out;
  for (const auto& [name, v] : entries) out.append(py::make_tuple(name, v));
  return out;
}

ops::cpu::Pool2dOptions PoolOptions(int64_t kernel, int64_t stride, int64_t padding) {
  if (stride == 0) stride = kernel;
  return ops::cpu::Pool2dOptions{kernel, kernel, stride, stride, padding, padding};
}

void BindModules(py::module_& nn) {
  py::class_<Generator, std::shared_ptr<Generator>>(nn, "Generator",
                                                    "A Philox random stream (seed, stream) "
                                                    "with a growing offset.")
      .def(py::init<uint64_t, uint64_t>(), py::arg("seed"), py::arg("stream") = 0)
      .def_property_readonly("seed", &Generator::seed)
      .def_property_readonly("stream", &Generator::stream)
      .def_property("offset", &Generator::offset, &Generator::set_offset);

  // Only Python subclasses (paddle.nn.Module) construct this class directly: they get a PyModule.
  py::class_<Module, PyModule, std::shared_ptr<Module>>(nn, "Module")
      .def(py::init_alias<std::string>(), py::arg("type"))
      .def("_set_parameter", [](Module& m, const std::string& name,
                                const Variable& v) { Check(AsPyModule(m).SetParameter(name, v)); })
      .def("_set_buffer", [](Module& m, const std::string& name,
                             const Variable& v) { Check(AsPyModule(m).SetBuffer(name, v)); })
      .def("_set_module",
           [](Module& m, const std::string& name, std::shared_ptr<Module> child) {
             AsPyModule(m).SetModule(name, std::move(child));
           })
      .def(
          "to",
          [](Module& m, const std::string& device) -> Module& {
            Device target = Unwrap(ParseDevice(device));  // raises: needs the GIL
            absl::Status st;
            {
              py::gil_scoped_release release;
              st = m.To(target);
            }
            Check(st);
            return m;
          },
          py::arg("device"), py::return_value_policy::reference,
          "Moves every parameter and buffer to `device` ('cpu', 'cuda', 'cuda:N'); all or "
          "nothing. Without CUDA support or a GPU: RuntimeError naming the device.")
      .def_property_readonly("device", [](const Module& m) { return m.device().ToString(); })
      .def("__call__", &Forward, py::arg("input"))
      .def("forward", &Forward, py::arg("input"))
      .def("parameters", &Module::Parameters)
      .def("named_parameters", [](const Module& m) { return Named(m.NamedParameters()); })
      .def("named_buffers", [](const Module& m) { return Named(m.NamedBuffers()); })
      .def(
          "state_dict",
          [](const Module& m) {
            py::dict out;
            for (const auto& [name, t] : m.StateDict()) out[py::str(name)] = Variable(t);
            return out;
          },
          "Parameters and buffers by name: views of the live tensors, not copies.")
      .def(
          "load_state_dict",
          [](Module& m, const py::dict& state, bool strict) {
            std::map<std::string, Tensor> tensors;
            for (const auto& [k, v] : state) tensors[k.cast<std::string>()] = AsTensor(v, "value");
            Check(m.LoadStateDict(tensors, strict));
          },
          py::arg("state_dict"), py::arg("strict") = true)
      .def(
          "train",
          [](Module& m, bool on) -> Module& {
            m.Train(on);
            return m;
          },
          py::arg("mode") = true, py::return_value_policy::reference)
      .def(
          "eval",
          [](Module& m) -> Module& {
            m.Eval();
            return m;
          },
          py::return_value_policy::reference)
      .def_property_readonly("training", &Module::training)
      .def_property_readonly("type", &Module::type)
      .def("zero_grad", &Module::ZeroGrad)
      .def("num_parameters", &Module::NumParameters)
      .def(
          "param_hash", [](const Module& m) { return absl::StrFormat("%016x", ParamHash(m)); },
          "FNV-1a of every parameter and buffer in name order, as 16 hex digits.")
      .def("__repr__", [](const Module& m) {
        return absl::StrFormat("paddle.nn.%s(%d parameters)", m.type(), m.NumParameters());
      });

  py::class_<nn::Linear, Module, std::shared_ptr<nn::Linear>>(nn, "Linear")
      .def(py::init([](int64_t in, int64_t out, bool bias, const py::object& g) {
             if (in <= 0 || out <= 0) throw py::value_error("Linear: sizes must be positive");
             return std::make_shared<nn::Linear>(in, out, InitGenerator(g).get(), bias);
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true,
           py::arg("generator") = py::none())
      .def_property_readonly("weight", &nn::Linear::weight)
      .def_property_readonly("bias", [](const nn::Linear& l) -> py::object {
        return l.bias().defined() ? py::cast(l.bias()) : py::none();
      });
  py::class_<nn::Embedding, Module, std::shared_ptr<nn::Embedding>>(nn, "Embedding")
      .def(
          py::init([](int64_t num_embeddings, int64_t embedding_dim, bool sparse,
                      const py::object& g) {
            if (num_embeddings <= 0 || embedding_dim <= 0) {
              throw py::value_error("Embedding: num_embeddings and embedding_dim must be positive");
            }
            return std::make_shared<nn::Embedding>(num_embeddings, embedding_dim,
                                                   InitGenerator(g).get(), sparse);
          }),
          py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("sparse") = false,
          py::arg("generator") = py::none(),
          "Rows looked up by int64 ids of any shape. sparse=True: backward gives the weight a "
          "sparse gradient (the touched rows; weight.grad stays None), which DDP exchanges as "
          "rows and the optimizers apply lazily.")
      .def_property_readonly("weight", &nn::Embedding::weight)
      .def_property_readonly("sparse", &nn::Embedding::sparse);
  py::class_<nn::Conv2d, Module, std::shared_ptr<nn::Conv2d>>(nn, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                       bool bias, const py::object& g) {
             if (in <= 0 || out <= 0 || kernel <= 0 || stride <= 0 || padding < 0) {
               throw py::value_error("Conv2d: channels, kernel and stride must be positive");
             }
             return std::make_shared<nn::Conv2d>(in, out, kernel, InitGenerator(g).get(), stride,
                                                 padding, bias);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("bias") = true,
           py::arg("generator") = py::none());
  py::class_<nn::BatchNorm2d, Module, std::shared_ptr<nn::BatchNorm2d>>(nn, "BatchNorm2d")
      .def(py::init<int64_t, double, double>(), py::arg("num_features"), py::arg("momentum") = 0.1,
           py::arg("eps") = 1e-5);
  py::class_<nn::Dropout, Module, std::shared_ptr<nn::Dropout>>(nn, "Dropout")
      .def(py::init([](double p, const py::object& g) {
             if (p < 0 || p >= 1) throw py::value_error("Dropout: p must be in [0, 1)");
             return std::make_shared<nn::Dropout>(p, InitGenerator(g));
           }),
           py::arg("p") = 0.5, py::arg("generator") = py::none());
  py::class_<nn::Relu, Module, std::shared_ptr<nn::Relu>>(nn, "ReLU").def(py::init<>());
  py::class_<nn::Gelu, Module, std::shared_ptr<nn::Gelu>>(nn, "GELU").def(py::init<>());
  py::class_<nn::MaxPool2d, Module, std::shared_ptr<nn::MaxPool2d>>(nn, "MaxPool2d")
      .def(py::init<int64_t, int64_t>(), py::arg("kernel_size"), py::arg("stride") = 0);
  py::class_<nn::GlobalAvgPool, Module, std::shared_ptr<nn::GlobalAvgPool>>(nn, "GlobalAvgPool")
      .def(py::init<>());
  py::class_<nn::Flatten, Module, std::shared_ptr<nn::Flatten>>(nn, "Flatten").def(py::init<>());
  py::class_<nn::Sequential, Module, std::shared_ptr<nn::Sequential>>(nn, "Sequential")
      .def(py::init([](const py::args& layers) {
             auto seq = std::make_shared<nn::Sequential>();
             for (const py::handle& l : layers) seq->Add(l.cast<std::shared_ptr<Module>>());
             return seq;
           }),
           py::keep_alive<1, 2>())  // Note [Python module lifetime]
      .def(
          "append", [](nn::Sequential& s, std::shared_ptr<Module> l) { s.Add(std::move(l)); },
          py::keep_alive<1, 2>());

  nn.def(
      "make_model",
      [](const std::string& name, uint64_t seed, std::shared_ptr<Generator> dropout) {
        if (!dropout) dropout = std::make_shared<Generator>(seed, 1);
        return Unwrap(nn::MakeModel(name, seed, dropout));
      },
      py::arg("name"), py::arg("seed") = 1, py::arg("dropout_generator") = nullptr,
      "mlp, cnn or resnet for [N, 1, 28, 28] inputs (paddle/nn/models.h); weights from "
      "Generator(seed, 0), dropout masks from dropout_generator (default Generator(seed, 1)).");
}

void BindFunctional(py::module_& f) {
  f.def(
      "linear",
      [](const Variable& x, const Variable& w, const std::optional<Variable>& b) {
        return Unwrap(F::Linear(x, w, b.value_or(Variable())));
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  f.def(
      "conv2d",
      [](const Variable& x, const Variable& w, const std::optional<Variable>& b, int64_t stride,
         int64_t padding) {
        ops::cpu::Conv2dOptions o{stride, stride, padding, padding};
        return Unwrap(F::Conv2d(x, w, b.value_or(Variable()), o));
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0);
  f.def(
      "max_pool2d",
      [](const Variable& x, int64_t k, int64_t s, int64_t p) {
        return Unwrap(F::MaxPool2d(x, PoolOptions(k, s, p)));
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = 0, py::arg("padding") = 0);
  f.def(
      "avg_pool2d",
      [](const Variable& x, int64_t k, int64_t s, int64_t p) {
        return Unwrap(F::AvgPool2d(x, PoolOptions(k, s, p)));
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = 0, py::arg("padding") = 0);
  f.def("relu", [](const Variable& x) { return Unwrap(F::Relu(x)); });
  f.def("gelu", [](const Variable& x) { return Unwrap(F::Gelu(x)); });
  f.def(
      "dropout",
      [](const Variable& x, double p, bool training, Generator& g) {
        if (!training || p == 0) return x;
        uint64_t offset = g.Reserve(static_cast<uint64_t>(x.data().numel()));
        return Unwrap(F::Dropout(x, p, g.seed(), g.stream(), offset));
      },
      py::arg("input"), py::arg("p"), py::arg("training"), py::arg("generator"));
  f.def(
      "cross_entropy",
      [](const Variable& logits, const py::object& labels) {
        return Unwrap(F::SoftmaxCrossEntropy(logits, AsTensor(labels, "labels")));
      },
      py::arg("logits"), py::arg("labels"),
      "Mean over the batch of -log softmax(logits)[label]; labels int64 [N].");
  f.def("reshape", [](const Variable& x, const std::vector<int64_t>& shape) {
    return Unwrap(F::Reshape(x, shape));
  });
  f.def("flatten", [](const Variable& x) { return Unwrap(F::Flatten(x)); });
  f.def("add", [](const Variable& a, const Variable& b) { return Unwrap(F::Add(a, b)); });
  f.def("mul", [](const Variable& a, const Variable& b) { return Unwrap(F::Mul(a, b)); });
  f.def(
      "embedding",
      [](const Variable& weight, const py::object& indices) {
        return Unwrap(F::Embedding(weight, AsTensor(indices, "indices")));
      },
      py::arg("weight"), py::arg("indices"));
}

}  // namespace

void BindNn(py::module_& m) {
  py::module_ nn = m.def_submodule("nn", "layers and models (paddle/nn)");
  BindModules(nn);
  py::module_ f = nn.def_submodule("functional", "differentiable operations");
  BindFunctional(f);
}

}  // namespace paddle::python
