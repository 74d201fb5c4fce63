// paddle._C.distributed: process groups (a rendezvous plus a Communicator), work handles and
// DistributedDataParallel. The Python package paddle.distributed builds the torch.distributed-style
// API on these (argument conversion from numpy/torch, the default group, list outputs).
//
// Note [GIL and communicator threads]: a communicator runs operations on its own thread, and the
// last view of a numpy-backed tensor may be dropped there, which takes the GIL (Note [Zero-copy
// numpy] in common.h). So every call that waits on that thread (Work.wait, creating, splitting
// and destroying a communicator, a DDP backward pass) releases the GIL first; holding it there
// could deadlock, and releasing it lets other Python threads run while C++ waits.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/rendezvous/rendezvous.h"
#include "paddle/collective/rendezvous/url.h"
#include "paddle/collective/work.h"
#include "paddle/nn/module.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "paddle/parallel/metrics.h"
#include "python/bindings/bindings.h"
#include "python/bindings/common.h"
#include "python/bindings/process_group.h"

namespace paddle::python {
namespace {

using autograd::Variable;

// A pending operation and the tensors it reads or writes, kept alive until it completes.
class WorkHandle {
 public:
  WorkHandle(std::shared_ptr<Work> work, std::vector<Tensor> tensors)
      : work_(std::move(work)), tensors_(std::move(tensors)) {}
  // A handle dropped early still waits (bounded by the collective timeout), so the memory it
  // writes is never freed under the communicator.
  ~WorkHandle() {
    if (work_->IsCompleted()) return;
    py::gil_scoped_release release;
    work_->Wait().IgnoreError();
  }
  WorkHandle(const WorkHandle&) = delete;
  WorkHandle& operator=(const WorkHandle&) = delete;

  bool Wait(const std::optional<double>& timeout_s) {
    absl::Duration timeout = timeout_s ? Seconds(timeout_s) : absl::InfiniteDuration();
    absl::Status st;
    {
      py::gil_scoped_release release;
      st = work_->Wait(timeout);
    }
    Check(st);
    return true;  // as torch's Work.wait
  }
  const Work& work() const { return *work_; }

 private:
  std::shared_ptr<Work> work_;
  std::vector<Tensor> tensors_;
};

// The memory of a collective argument: contiguous, as the communicator requires. Which devices
// a backend takes (gloo: CPU; nccl: the group's CUDA device; native: either) is the backend's
// check, whose error names the operation and the backend.
Tensor Buffer(const Variable& v, const char* what) {
  if (!v.defined()) throw py::value_error(absl::StrCat("the ", what, " tensor is undefined"));
  const Tensor& t = v.data();
  if (!t.is_contiguous()) {
    throw py::value_error(absl::StrCat("the ", what, " tensor (", t.ToString(),
                                       ") is not contiguous; call .contiguous() first"));
  }
  return t;
}

std::shared_ptr<ProcessGroup> CreateGroup(const std::string& url, const std::string& backend,
                                          double timeout_s, bool debug_checks) {
  Backend b = Unwrap(ParseBackend(backend));
  absl::Duration timeout = Seconds(timeout_s);
  auto rendezvous = std::make_shared<RendezvousResult>();
  absl::Status st;
  {
    py::gil_scoped_release release;
    absl::StatusOr<RendezvousResult> r = Rendezvous(url, timeout);
    if (r.ok()) {
      *rendezvous = *std::move(r);
    } else {
      st = r.status();
    }
  }
  Check(st, ErrorArea::kStore);
  CommunicatorOptions options;
  options.backend = b;
  options.store = rendezvous->store;
  options.rank = rendezvous->rank;
  options.world_size = rendezvous->world_size;
  options.timeout = timeout;
  options.debug_checks = debug_checks;
  absl::StatusOr<std::unique_ptr<Communicator>> comm;
  {
    py::gil_scoped_release release;
    comm = Communicator::Create(options);
  }
  return std::make_shared<ProcessGroup>(rendezvous, Unwrap(std::move(comm)));
}

// Runs `launch` (which starts an operation) and returns its handle keeping `tensors` alive.
template <typename Launch>
std::unique_ptr<WorkHandle> Start(std::vector<Tensor> tensors, Launch launch) {
  std::shared_ptr<Work> work = launch();
  return std::make_unique<WorkHandle>(std::move(work), std::move(tensors));
}

void BindGroup(py::module_& d) {
  py::enum_<ReduceOp>(d, "ReduceOp")
      .value("SUM", ReduceOp::kSum)
      .value("AVG", ReduceOp::kAvg)
      .value("MIN", ReduceOp::kMin)
      .value("MAX", ReduceOp::kMax)
      .value("PRODUCT", ReduceOp::kProd);

  py::class_<WorkHandle>(d, "Work", "The handle of an asynchronous collective (async_op=True).")
      .def("wait", &WorkHandle::Wait, py::arg("timeout") = py::none(),
           "Waits (GIL released) for the operation; raises its error. timeout in seconds.")
      .def("is_completed", [](const WorkHandle& w) { return w.work().IsCompleted(); })
      .def_property_readonly("seq", [](const WorkHandle& w) { return w.work().seq(); })
      .def("__repr__", [](const WorkHandle& w) {
        return absl::StrCat("paddle.distributed.Work(", w.work().Describe(),
                            w.work().IsCompleted() ? ", completed)" : ", pending)");
      });

  using Group = ProcessGroup;
  using OptSeconds = std::optional<double>;
  auto call = [](const OptSeconds& s) { return CallOptions{Seconds(s)}; };
  py::class_<Group, std::shared_ptr<Group>>(d, "ProcessGroup")
      .def_static("create", &CreateGroup, py::arg("url"), py::arg("backend") = "native",
                  py::arg("timeout") = 300.0, py::arg("debug_checks") = false)
      .def_property_readonly("rank", [](const Group& g) { return g.comm().rank(); })
      .def_property_readonly("size", [](const Group& g) { return g.comm().world_size(); })
      .def_property_readonly(
          "backend", [](const Group& g) { return std::string(BackendName(g.comm().backend())); })
      .def(
          "allreduce",
          [call](const Group& g, const Variable& t, ReduceOp op, const OptSeconds& s) {
            Tensor b = Buffer(t, "input");
            return Start({b}, [&] { return g.comm().Allreduce(b, op, call(s)); });
          },
          py::arg("tensor"), py::arg("op"), py::arg("timeout") = py::none())
      .def(
          "broadcast",
          [call](const Group& g, const Variable& t, int root, const OptSeconds& s) {
            Tensor b = Buffer(t, "input");
            return Start({b}, [&] { return g.comm().Broadcast(b, root, call(s)); });
          },
          py::arg("tensor"), py::arg("src"), py::arg("timeout") = py::none())
      .def(
          "reduce",
          [call](const Group& g, const Variable& t, int root, ReduceOp op, const OptSeconds& s) {
            Tensor b = Buffer(t, "input");
            return Start({b}, [&] { return g.comm().Reduce(b, root, op, call(s)); });
          },
          py::arg("tensor"), py::arg("dst"), py::arg("op"), py::arg("timeout") = py::none())
      .def(
          "allgather",
          [call](const Group& g, const Variable& in, const Variable& out, const OptSeconds& s) {
            Tensor i = Buffer(in, "input"), o = Buffer(out, "output");
            return Start({i, o}, [&] { return g.comm().Allgather(i, o, call(s)); });
          },
          py::arg("input"), py::arg("output"), py::arg("timeout") = py::none())
      .def(
          "reduce_scatter",
          [call](const Group& g, const Variable& in, const Variable& out, ReduceOp op,
                 const OptSeconds& s) {
            Tensor i = Buffer(in, "input"), o = Buffer(out, "output");
            return Start({i, o}, [&] { return g.comm().ReduceScatter(i, o, op, call(s)); });
          },
          py::arg("input"), py::arg("output"), py::arg("op"), py::arg("timeout") = py::none())
      .def(
          "alltoall",
          [call](const Group& g, const Variable& in, const Variable& out, const OptSeconds& s) {
            Tensor i = Buffer(in, "input"), o = Buffer(out, "output");
            return Start({i, o}, [&] { return g.comm().Alltoall(i, o, call(s)); });
          },
          py::arg("input"), py::arg("output"), py::arg("timeout") = py::none())
      .def(
          "barrier",
          [call](const Group& g, const OptSeconds& s) {
            return Start({}, [&] { return g.comm().Barrier(call(s)); });
          },
          py::arg("timeout") = py::none())
      .def(
          "send",
          [call](const Group& g, const Variable& t, int dst, uint32_t tag, const OptSeconds& s) {
            Tensor b = Buffer(t, "input");
            return Start({b}, [&] { return g.comm().Send(b, dst, tag, call(s)); });
          },
          py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0, py::arg("timeout") = py::none())
      .def(
          "recv",
          [call](const Group& g, const Variable& t, int src, uint32_t tag, const OptSeconds& s) {
            Tensor b = Buffer(t, "output");
            return Start({b}, [&] { return g.comm().Recv(b, src, tag, call(s)); });
          },
          py::arg("tensor"), py::arg("src"), py::arg("tag") = 0, py::arg("timeout") = py::none())
      .def(
          "split",
          [](const Group& g, std::vector<int> ranks) -> std::shared_ptr<Group> {
            absl::StatusOr<std::unique_ptr<Communicator>> sub;
            {
              py::gil_scoped_release release;
              sub = g.comm().Split(std::move(ranks));
            }
            std::unique_ptr<Communicator> comm = Unwrap(std::move(sub));
            if (!comm) return nullptr;
            return std::make_shared<Group>(g.rendezvous(), std::move(comm));
          },
          py::arg("ranks"), "A group of `ranks` (collective); None on ranks not in it.")
      .def(
          "abort",
          [](const Group& g, const std::string& why) { g.comm().Abort(absl::AbortedError(why)); },
          py::arg("reason"))
      .def(
          "close",
          [](Group& g) {
            Communicator* comm = nullptr;
            try {
              comm = &g.comm();
            } catch (const py::value_error&) {
              return;  // closed already
            }
            absl::Status verdict;
            {
              py::gil_scoped_release release;
              verdict = comm->Shutdown();
            }
            g.Close();  // released whatever the verdict
            // A mismatch found here is not the caller's bad argument (ValueError) but the job's
            // collectives' failure: DistError, a RuntimeError.
            if (absl::IsInvalidArgument(verdict)) {
              verdict = absl::Status(absl::StatusCode::kAborted, verdict.message());
            }
            Check(verdict);
          },
          "Shuts the communicator down (Communicator::Shutdown: waits for its operations and the "
          "last call checks), destroys it, then raises the shutdown's failure, if any.");
}

void BindDdp(py::module_& d) {
  py::class_<Ddp>(d, "DistributedDataParallel")
      .def(py::init([](std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                       const std::optional<double>& bucket_cap_mb,
                       const std::optional<double>& first_bucket_mb, const std::string& compression,
                       bool find_unused, const std::optional<double>& timeout_s) {
             // Bounded so the byte counts fit int64_t; NaN fails the comparisons. None: 0, the
             // tuned or default cap (Note [Tuned bucket caps]).
             constexpr double kMaxMiB = 1 << 30;
             auto bytes = [&](const std::optional<double>& mb) -> int64_t {
               if (!mb.has_value()) return 0;
               if (!(*mb > 0 && *mb <= kMaxMiB)) {
                 throw py::value_error(absl::StrCat(
                     "bucket sizes must be positive MiB up to ", kMaxMiB,
                     " (or None: PADDLE_TUNING_PARAMS's or the default), got bucket_cap_mb=",
                     bucket_cap_mb ? absl::StrCat(*bucket_cap_mb) : "None", " and first_bucket_mb=",
                     first_bucket_mb ? absl::StrCat(*first_bucket_mb) : "None"));
               }
               return std::max<int64_t>(static_cast<int64_t>(*mb * (1 << 20)), 1);
             };
             DdpOptions o;
             o.bucket_bytes = bytes(bucket_cap_mb);
             o.first_bucket_bytes = bytes(first_bucket_mb);
             o.compression = compression;
             o.find_unused_parameters = find_unused;
             o.timeout = Seconds(timeout_s);
             if (group->rendezvous()) o.store = group->rendezvous()->store;
             return std::make_unique<Ddp>(std::move(group), std::move(module), o);
           }),
           py::arg("module"), py::arg("group"), py::arg("bucket_cap_mb") = py::none(),
           py::arg("first_bucket_mb") = py::none(), py::arg("compression") = "none",
           py::arg("find_unused_parameters") = false, py::arg("timeout") = py::none())
      .def("forward",
           [](Ddp& d, const Variable& x) {
             absl::StatusOr<Variable> y;
             {
               py::gil_scoped_release release;
               y = d.ddp().Forward(x);
             }
             return Unwrap(std::move(y));
           })
      .def("backward",
           [](Ddp& d, const Variable& loss) {
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = d.ddp().Backward(loss);
             }
             Check(st);
           })
      .def("prepare_for_backward",
           [](Ddp& d) {
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = d.ddp().PrepareForBackward();
             }
             Check(st);
           })
      .def("finalize_backward",
           [](Ddp& d) {
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = d.ddp().FinalizeBackward();
             }
             Check(st);
           })
      .def("set_sync", [](Ddp& d, bool sync) { d.ddp().set_sync(sync); })
      .def("comm_wait_seconds",
           [](Ddp& d) { return absl::ToDoubleSeconds(d.ddp().reducer().stats().comm_wait_time); })
      .def("describe_layout", [](Ddp& d) { return d.ddp().reducer().DescribeLayout(); });
}

// Metrics over every rank's samples (paddle/parallel/metrics.h); sum_over_ranks is a collective.
void BindMetrics(py::module_& d) {
  using Scores = py::array_t<float, py::array::c_style | py::array::forcecast>;
  using Labels = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
  py::class_<AucHistogram>(d, "AucHistogram",
                           "Binary AUC from score histograms summed over ranks (Note [Histogram "
                           "AUC] in paddle/parallel/metrics.h).")
      .def(py::init([](int64_t buckets) { return Unwrap(AucHistogram::Create(buckets)); }),
           py::arg("buckets") = AucHistogram::kDefaultBuckets)
      .def(
          "add",
          [](AucHistogram& h, const Scores& scores, const Labels& labels) {
            Check(h.Add(absl::MakeConstSpan(scores.data(), scores.size()),
                        absl::MakeConstSpan(labels.data(), labels.size())));
          },
          py::arg("scores"), py::arg("labels"))
      .def(
          "sum_over_ranks",
          [](AucHistogram& h, const std::shared_ptr<ProcessGroup>& g,
             const std::optional<double>& s) {
            absl::Status st;
            {
              py::gil_scoped_release release;
              st = h.SumOverRanks(g->comm(), CallOptions{Seconds(s)});
            }
            Check(st);
          },
          py::arg("group"), py::arg("timeout") = py::none())
      .def("auc", [](const AucHistogram& h) { return Unwrap(h.Auc()); })
      .def("error_bound", &AucHistogram::ErrorBound)
      .def_property_readonly("buckets", &AucHistogram::buckets)
      .def_property_readonly("positives", &AucHistogram::positives)
      .def_property_readonly("negatives", &AucHistogram::negatives);
  py::class_<ClassificationTotals>(d, "ClassificationTotals",
                                   "Accuracy and mean loss over every sample of every rank.")
      .def(py::init<>())
      .def(
          "add",
          [](ClassificationTotals& t, int64_t samples, int64_t correct, double loss_sum) {
            Check(t.Add(samples, correct, loss_sum));
          },
          py::arg("samples"), py::arg("correct"), py::arg("loss_sum"))
      .def(
          "sum_over_ranks",
          [](ClassificationTotals& t, const std::shared_ptr<ProcessGroup>& g,
             const std::optional<double>& s) {
            absl::Status st;
            {
              py::gil_scoped_release release;
              st = t.SumOverRanks(g->comm(), CallOptions{Seconds(s)});
            }
            Check(st);
          },
          py::arg("group"), py::arg("timeout") = py::none())
      .def("accuracy", [](const ClassificationTotals& t) { return Unwrap(t.Accuracy()); })
      .def("mean_loss", [](const ClassificationTotals& t) { return Unwrap(t.MeanLoss()); })
      .def_property_readonly("samples", &ClassificationTotals::samples)
      .def_property_readonly("correct", &ClassificationTotals::correct);
}

}  // namespace

void BindDistributed(py::module_& m) {
  py::module_ d = m.def_submodule("distributed", "process groups and collectives");
  d.attr("MAX_WORLD_SIZE") = kMaxWorldSize;
  BindGroup(d);
  BindDdp(d);
  BindMetrics(d);
}

}  // namespace paddle::python
