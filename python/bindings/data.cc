// paddle.data (Fashion-MNIST, DistributedSampler, DataLoader), paddle.save / paddle.load (the
// checkpoint file format of paddle/checkpoint/checkpoint_file.h) and the CPU thread count.
#include <fcntl.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/checkpoint/checkpoint_file.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/data/data_loader.h"
#include "paddle/data/distributed_sampler.h"
#include "paddle/data/fashion_mnist.h"
#include "paddle/ops/cpu/threading.h"
#include "python/bindings/bindings.h"
#include "python/bindings/common.h"

namespace paddle::python {
namespace {

using autograd::Variable;
using data::DataLoader;
using data::Dataset;
using data::DistributedSampler;

// Writes `state` to `path` atomically: a temporary file beside it, fsynced, renamed over it.
// Runs without the GIL.
absl::Status SaveFile(const std::string& path, int64_t step,
                      const checkpoint::CheckpointState& state) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot create ", tmp, " to save ", path, ": ", std::strerror(errno)));
  }
  absl::Status st = checkpoint::WriteCheckpointFile(fd, path, step, state);
  if (st.ok() && ::fsync(fd) != 0) st = absl::InternalError(absl::StrCat("fsync ", tmp, " failed"));
  ::close(fd);
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = absl::InternalError(absl::StrCat("rename ", tmp, " -> ", path, " failed"));
  }
  if (!st.ok()) std::remove(tmp.c_str());
  return st;
}

void BindDataSets(py::module_& d) {
  py::class_<Dataset>(d, "Dataset", "A whole split in memory: images and labels tensors.")
      .def(py::init([](const Variable& images, const Variable& labels) {
             return Dataset{images.data(), labels.data()};
           }),
           py::arg("images"), py::arg("labels"))
      .def_property_readonly("images", [](const Dataset& s) { return Variable(s.images); })
      .def_property_readonly("labels", [](const Dataset& s) { return Variable(s.labels); })
      .def("__len__", &Dataset::size)
      .def(
          "head",
          [](const Dataset& s, int64_t n) {
            if (n <= 0 || n >= s.size()) return s;
            return Dataset{Unwrap(s.images.Slice(0, 0, n)), Unwrap(s.labels.Slice(0, 0, n))};
          },
          py::arg("n"), "The first n samples (all when n is 0 or too large); no copy.");
  d.def(
      "load_fashion_mnist",
      [](const std::string& split, const std::string& root, bool normalize) {
        data::Split s;
        if (split == "train") {
          s = data::Split::kTrain;
        } else if (split == "test") {
          s = data::Split::kTest;
        } else {
          throw py::value_error(absl::StrCat("split='", split, "': choose 'train' or 'test'"));
        }
        absl::StatusOr<Dataset> set;
        {
          py::gil_scoped_release release;
          set = data::LoadFashionMnist(s, root, normalize);
        }
        return Unwrap(std::move(set));
      },
      py::arg("split") = "train", py::arg("root") = data::kDefaultFashionMnistDir,
      py::arg("normalize") = true);

  py::class_<DistributedSampler>(d, "DistributedSampler")
      .def(py::init([](int64_t size, int rank, int world, uint64_t seed, bool shuffle,
                       bool drop_last, int64_t global_batch) {
             return Unwrap(DistributedSampler::Create(size, rank, world, seed, shuffle, drop_last,
                                                      global_batch));
           }),
           py::arg("dataset_size"), py::arg("rank") = 0, py::arg("world_size") = 1,
           py::arg("seed") = 0, py::arg("shuffle") = true, py::arg("drop_last") = false,
           py::arg("global_batch") = 0,
           "global_batch > 0: every step reads that many samples over the ranks, shared out "
           "unevenly when world_size does not divide it (local_batch is this rank's share).")
      .def("set_epoch", &DistributedSampler::SetEpoch, py::arg("epoch"))
      .def("indices", &DistributedSampler::Indices)
      .def("__iter__", [](const DistributedSampler& s) { return py::iter(py::cast(s.Indices())); })
      .def("__len__", &DistributedSampler::NumSamples)
      .def_property_readonly("num_samples", &DistributedSampler::NumSamples)
      .def_property_readonly("local_batch", &DistributedSampler::LocalBatch)
      .def_property_readonly("total_size", &DistributedSampler::TotalSize)
      .def_property_readonly("rank", &DistributedSampler::rank)
      .def_property_readonly("world_size", &DistributedSampler::world_size);

  py::class_<DataLoader, std::shared_ptr<DataLoader>>(d, "DataLoader")
      .def(py::init([](const Dataset& set, const DistributedSampler& sampler, int64_t batch,
                       bool drop_last, int prefetch) {
             return std::shared_ptr<DataLoader>(
                 Unwrap(DataLoader::Create(set, sampler, batch, drop_last, prefetch)));
           }),
           py::arg("dataset"), py::arg("sampler"), py::arg("batch_size"),
           py::arg("drop_last") = false, py::arg("prefetch") = 2)
      .def("start_epoch", &DataLoader::StartEpoch, py::arg("epoch"),
           py::call_guard<py::gil_scoped_release>())
      .def(
          "next",
          [](DataLoader& l) -> py::object {
            absl::StatusOr<std::optional<data::Batch>> b;
            {
              py::gil_scoped_release release;
              b = l.Next();
            }
            std::optional<data::Batch> batch = Unwrap(std::move(b));
            if (!batch) return py::none();
            return py::make_tuple(Variable(batch->images), Variable(batch->labels));
          },
          "(images, labels) of the next batch, or None at the end of the epoch.")
      .def("__len__", &DataLoader::NumBatches)
      .def_property_readonly("batch_size", &DataLoader::batch_size)
      .def_property_readonly("offset", [](const DataLoader& l) { return l.state().offset; });
}

void BindSaveLoad(py::module_& m) {
  m.def(
      "save_state",
      [](const std::string& path, const std::map<std::string, Variable>& tensors,
         const std::map<std::string, int64_t>& ints,
         const std::map<std::string, std::string>& strings, int64_t step) {
        checkpoint::CheckpointState state;
        for (const auto& [k, v] : tensors) state.tensors[k] = v.data();
        state.ints = ints;
        state.strings = strings;
        absl::Status st;
        {
          py::gil_scoped_release release;
          st = SaveFile(path, step, state);
        }
        Check(st);
      },
      py::arg("path"), py::arg("tensors"), py::arg("ints"), py::arg("strings"),
      py::arg("step") = 0);
  m.def(
      "load_state",
      [](const std::string& path) {
        absl::StatusOr<checkpoint::CheckpointFileContents> c;
        {
          py::gil_scoped_release release;
          c = checkpoint::ReadCheckpointFile(path);
        }
        checkpoint::CheckpointFileContents contents = Unwrap(std::move(c));
        std::map<std::string, Variable> tensors;
        for (const auto& [k, t] : contents.state.tensors) tensors[k] = Variable(t);
        return py::make_tuple(tensors, contents.state.ints, contents.state.strings, contents.step);
      },
      py::arg("path"));
  m.def("set_num_threads", &ops::cpu::SetNumThreads, py::arg("n"));
  m.def("get_num_threads", &ops::cpu::NumThreads);
}

}  // namespace

void BindData(py::module_& m) {
  py::module_ d = m.def_submodule("data", "data sets, samplers and loaders");
  BindDataSets(d);
  BindSaveLoad(m);
}

}  // namespace paddle::python
