// paddle._C.distributed.elastic: the elastic group (paddle/parallel/elastic.h), the training
// state it commits and rolls back (elastic_state.h) and the global-batch arithmetic
// (global_batch.h), for training loops written in Python. python/paddle/distributed/elastic.py
// builds the user-facing API on these; examples/fashion_mnist.py --elastic uses it. And
// paddle._C.distributed.LocalSGD (paddle/parallel/local_sgd.h), paddle.distributed.LocalSGD,
// and paddle._C.distributed.ZeroRedundancyOptimizer (paddle/parallel/zero_redundancy_optimizer.h),
// paddle.distributed.ZeroRedundancyOptimizer.
//
// Each generation's process group shares its communicator with the ElasticGroup
// (ElasticGroup::shared_comm), so a Python object that still holds an old generation's group
// (or a DDP made on it) fails with the transport's error instead of touching freed memory. Every
// call that waits on peers releases the GIL (Note [GIL and communicator threads] in
// distributed.cc).
#include <pybind11/stl.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/parallel/elastic.h"
#include "paddle/parallel/elastic_state.h"
#include "paddle/parallel/global_batch.h"
#include "paddle/parallel/local_sgd.h"
#include "paddle/parallel/zero_redundancy_optimizer.h"
#include "python/bindings/bindings.h"
#include "python/bindings/common.h"
#include "python/bindings/process_group.h"

namespace paddle::python {
namespace {

class PyElasticGroup {
 public:
  PyElasticGroup(const std::string& host, int port, int min_size, int max_size,
                 const std::string& backend, const std::optional<double>& timeout_s,
                 const std::string& prefix) {
    if (min_size < 1 || max_size < min_size) {
      throw py::value_error(absl::StrCat("elastic: need 1 <= min_size <= max_size, got min_size=",
                                         min_size, " max_size=", max_size));
    }
    ElasticOptions o;
    o.min_size = min_size;
    o.max_size = max_size;
    o.prefix = prefix;
    o.comm.backend = Unwrap(ParseBackend(backend));
    if (timeout_s) o.comm.timeout = Seconds(timeout_s);  // else the communicator's default
    TcpStoreOptions so;
    so.host = host;
    so.port = port;
    absl::StatusOr<std::unique_ptr<TcpStore>> store;
    {
      py::gil_scoped_release release;
      store = TcpStore::Connect(so);
    }
    o.store = Unwrap(std::move(store), ErrorArea::kStore);
    group_ = Unwrap(ElasticGroup::Create(std::move(o)));
  }
  ~PyElasticGroup() {
    py::gil_scoped_release release;
    group_.reset();
  }
  PyElasticGroup(const PyElasticGroup&) = delete;
  PyElasticGroup& operator=(const PyElasticGroup&) = delete;

  // (generation, rank, size, root_commit_step), or None once the job has finished.
  std::optional<std::tuple<int64_t, int, int, int64_t>> Join(int64_t commit_step, int expected) {
    absl::StatusOr<Membership> m;
    {
      py::gil_scoped_release release;
      m = group_->Join(commit_step, expected);
    }
    if (absl::IsCancelled(m.status())) return std::nullopt;
    Membership got = Unwrap(std::move(m));
    return std::make_tuple(got.generation, got.rank, got.size, got.root_commit_step);
  }

  void Leave(const std::optional<std::string>& cause) {
    py::gil_scoped_release release;
    group_->Leave(cause ? absl::UnavailableError(*cause) : absl::OkStatus());
  }

  // (joiners, leavers, the sum of `value` over the ranks).
  std::tuple<int, std::vector<int>, double> AgreeOnChange(bool leaving, double value) {
    absl::StatusOr<MembershipChange> change;
    {
      py::gil_scoped_release release;
      change = group_->AgreeOnChange(leaving, &value);
    }
    MembershipChange c = Unwrap(std::move(change));
    return std::make_tuple(c.joiners, c.leavers, value);
  }

  // The process group of the current generation (its communicator shared with the group).
  std::shared_ptr<ProcessGroup> Group() const {
    std::shared_ptr<Communicator> comm = group_->shared_comm();
    if (!comm) throw py::value_error("elastic: not in a generation (call join first)");
    return std::make_shared<ProcessGroup>(nullptr, std::move(comm));
  }

  ElasticGroup& get() { return *group_; }

 private:
  std::unique_ptr<ElasticGroup> group_;
};

// The state and what it points at, kept alive together.
class PyElasticState {
 public:
  PyElasticState(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> opt)
      : model_(std::move(model)), opt_(std::move(opt)) {
    if (!model_ || !opt_) throw py::value_error("ElasticState needs a model and an optimizer");
    state_ = std::make_unique<ElasticState>(model_.get(), opt_.get());
  }
  ElasticState& get() { return *state_; }

 private:
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<optim::Optimizer> opt_;
  std::unique_ptr<ElasticState> state_;
};

#define PROGRESS_FIELD(name)                                            \
  def_property(                                                         \
      #name, [](PyElasticState& s) { return s.get().progress().name; }, \
      [](PyElasticState& s, decltype(TrainProgress::name) v) { s.get().progress().name = v; })

void BindElasticClasses(py::module_& e) {
  py::class_<PyElasticGroup>(e, "ElasticGroup",
                             "Members of an elastic job meeting in generations through the "
                             "job's TCP store (paddle/parallel/elastic.h).")
      .def(py::init<const std::string&, int, int, int, const std::string&,
                    const std::optional<double>&, const std::string&>(),
           py::arg("host"), py::arg("port"), py::arg("min_size"), py::arg("max_size"),
           py::arg("backend") = "native", py::arg("timeout") = py::none(),
           py::arg("prefix") = "elastic")
      .def("join", &PyElasticGroup::Join, py::arg("commit_step"), py::arg("expected"),
           "Joins the next generation: (generation, rank, size, root_commit_step), or None when "
           "the job has finished.")
      .def("leave", &PyElasticGroup::Leave, py::arg("cause") = py::none(),
           "Drops this generation's communicator, aborting it with `cause` when one is given.")
      .def("agree_on_change", &PyElasticGroup::AgreeOnChange, py::arg("leaving"),
           py::arg("value") = 0.0,
           "Collective: (joiners waiting, ranks leaving, the sum of `value` over the ranks).")
      .def("group", &PyElasticGroup::Group)
      .def("job_started",
           [](PyElasticGroup& g) {
             absl::StatusOr<bool> r;
             {
               py::gil_scoped_release release;
               r = g.get().JobStarted();
             }
             return Unwrap(std::move(r), ErrorArea::kStore);
           })
      .def("mark_done",
           [](PyElasticGroup& g) {
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = g.get().MarkDone();
             }
             Check(st, ErrorArea::kStore);
           })
      .def_property_readonly("rank", [](PyElasticGroup& g) { return g.get().rank(); })
      .def_property_readonly("size", [](PyElasticGroup& g) { return g.get().size(); })
      .def_property_readonly("generation", [](PyElasticGroup& g) { return g.get().generation(); })
      .def_property_readonly("changes", [](PyElasticGroup& g) { return g.get().changes(); });

  py::class_<PyElasticState>(e, "ElasticState",
                             "A replica's model, optimizer state and progress with in-memory "
                             "commit and rollback (paddle/parallel/elastic_state.h).")
      .def(py::init<std::shared_ptr<nn::Module>, std::shared_ptr<optim::Optimizer>>(),
           py::arg("model"), py::arg("optimizer"))
      .def("commit", [](PyElasticState& s) { Check(s.get().Commit()); })
      .def("rollback", [](PyElasticState& s) { Check(s.get().Rollback()); })
      .def(
          "broadcast",
          [](PyElasticState& s, const ProcessGroup& g, int root) {
            absl::Status st;
            {
              py::gil_scoped_release release;
              st = s.get().Broadcast(g.comm(), root);
            }
            Check(st);
          },
          py::arg("group"), py::arg("root") = 0)
      .def_property_readonly("has_commit", [](PyElasticState& s) { return s.get().has_commit(); })
      .def_property_readonly("committed_step",
                             [](PyElasticState& s) { return s.get().committed().step; })
      .def_property_readonly("commit_bytes",
                             [](PyElasticState& s) { return s.get().commit_bytes(); })
      .PROGRESS_FIELD(epoch)
      .PROGRESS_FIELD(step)
      .PROGRESS_FIELD(samples)
      .PROGRESS_FIELD(loss_sum)
      .PROGRESS_FIELD(loss_count)
      .def(
          "get_extra",
          [](PyElasticState& s, const std::string& key) {
            auto it = s.get().extras().find(key);
            if (it == s.get().extras().end()) {
              throw py::key_error(absl::StrCat("elastic state has no extra '", key, "'"));
            }
            return it->second;
          },
          py::arg("key"))
      .def(
          "set_extra",
          [](PyElasticState& s, const std::string& key, int64_t v) { s.get().extras()[key] = v; },
          py::arg("key"), py::arg("value"));

  e.def(
      "share_of_global_batch",
      [](int64_t epoch_size, int64_t position, int64_t global_batch, int rank, int world) {
        BatchShare b = Unwrap(ShareOfGlobalBatch(epoch_size, position, global_batch, rank, world));
        return std::make_tuple(b.global_size, b.begin, b.count);
      },
      py::arg("epoch_size"), py::arg("position"), py::arg("global_batch"), py::arg("rank"),
      py::arg("world"),
      "(samples of the step over all ranks, this rank's first, this rank's count).");
  e.def("steps_per_epoch", &StepsPerEpoch, py::arg("epoch_size"), py::arg("global_batch"));
  e.def(
      "epoch_order",
      [](int64_t size, uint64_t seed, int64_t epoch) {
        return Unwrap(EpochOrder(size, seed, epoch));
      },
      py::arg("dataset_size"), py::arg("seed"), py::arg("epoch"),
      "The epoch's sample order, the same on every rank: a function of (seed, epoch) only.");
}

#undef PROGRESS_FIELD

// Runs a collective step of `sgd` without the GIL.
template <typename T>
T Released(const std::function<absl::StatusOr<T>()>& f) {
  absl::StatusOr<T> r;
  {
    py::gil_scoped_release release;
    r = f();
  }
  return Unwrap(std::move(r));
}

void BindLocalSgd(py::module_& d) {
  py::class_<LocalSgd>(d, "LocalSGD",
                       "Local SGD: ranks step on their own gradients and average parameters "
                       "every `period` steps (paddle/parallel/local_sgd.h).")
      .def(py::init([](std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                       int64_t period, int64_t warmup_steps, double outer_lr, double outer_momentum,
                       bool average_buffers, Ddp* ddp) {
             LocalSgdOptions o;
             o.period = period;
             o.warmup_steps = warmup_steps;
             o.outer_lr = outer_lr;
             o.outer_momentum = outer_momentum;
             o.average_buffers = average_buffers;
             absl::StatusOr<std::unique_ptr<LocalSgd>> made;
             {
               py::gil_scoped_release release;
               made = LocalSgd::Create(std::move(module), &group->comm(), o,
                                       ddp ? &ddp->ddp() : nullptr);
             }
             return Unwrap(std::move(made));
           }),
           py::arg("module"), py::arg("group"), py::arg("period") = 4, py::arg("warmup_steps") = 0,
           py::arg("outer_lr") = 1.0, py::arg("outer_momentum") = 0.0,
           py::arg("average_buffers") = true, py::arg("ddp") = nullptr,
           // The group and the DDP (whose sync it switches) live as long as this object.
           py::keep_alive<1, 3>(), py::keep_alive<1, 9>())
      .def("after_step", [](LocalSgd& l) { return Released<bool>([&] { return l.AfterStep(); }); })
      .def("synchronize",
           [](LocalSgd& l) {
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = l.Synchronize();
             }
             Check(st);
           })
      .def_property_readonly("steps", &LocalSgd::steps)
      .def_property_readonly("averages", &LocalSgd::averages)
      .def_property_readonly("averaged_bytes", &LocalSgd::averaged_bytes)
      .def_property_readonly("in_warmup", &LocalSgd::in_warmup);
}

// The rule `rule` ("sgd", "adam", "adamw", "lars", "lamb") with the keyword arguments of the
// paddle.optim class of that name; an argument the class does not take is a TypeError.
OptimizerFactory RuleFromKwargs(const std::string& rule, const py::dict& kwargs) {
  static const auto* accepted = new std::map<std::string, std::set<std::string>>{
      {"sgd", {"lr", "momentum", "dampening", "nesterov", "weight_decay", "exclude"}},
      {"adam", {"lr", "betas", "eps", "weight_decay", "exclude"}},
      {"adamw", {"lr", "betas", "eps", "weight_decay", "exclude"}},
      {"lars", {"lr", "momentum", "weight_decay", "eta", "exclude"}},
      {"lamb", {"lr", "betas", "eps", "weight_decay", "exclude"}}};
  auto it = accepted->find(rule);
  if (it == accepted->end()) {
    throw py::value_error(absl::StrCat("ZeroRedundancyOptimizer: no optimizer '", rule,
                                       "'; choose SGD, Adam, AdamW, LARS or LAMB"));
  }
  for (const auto& [k, v] : kwargs) {
    if (it->second.count(k.cast<std::string>()) == 0) {
      throw py::type_error(absl::StrCat("ZeroRedundancyOptimizer: ", rule, " takes no argument '",
                                        k.cast<std::string>(), "'"));
    }
  }
  auto num = [&kwargs](const char* key, double fallback) {
    return kwargs.contains(key) ? kwargs[key].cast<double>() : fallback;
  };
  auto betas = [&kwargs](double b1, double b2) {
    return kwargs.contains("betas") ? kwargs["betas"].cast<std::pair<double, double>>()
                                    : std::make_pair(b1, b2);
  };
  const std::string exclude =
      kwargs.contains("exclude") ? kwargs["exclude"].cast<std::string>() : std::string("below2d");
  if (exclude != "below2d" && exclude != "none") {
    throw py::value_error(absl::StrCat("exclude='", exclude, "': choose 'below2d' or 'none'"));
  }
  const optim::ExcludePredicate whole = exclude == "none" ? optim::ExcludeNone() : nullptr;
  if (rule == "sgd") {
    optim::SgdOptions o{
        num("lr", 0.01),          num("momentum", 0.0),
        num("dampening", 0.0),    kwargs.contains("nesterov") && kwargs["nesterov"].cast<bool>(),
        num("weight_decay", 0.0), whole};
    return SgdFactory(o);
  }
  if (rule == "lars") {
    optim::LarsOptions o{num("lr", 0.1), num("momentum", 0.9), num("weight_decay", 5e-4),
                         num("eta", 0.001), whole};
    return LarsFactory(o);
  }
  if (rule == "lamb") {
    const auto [b1, b2] = betas(0.9, 0.999);
    optim::LambOptions o{num("lr", 1e-3),           b1,   b2, num("eps", 1e-6),
                         num("weight_decay", 0.01), whole};
    return LambFactory(o);
  }
  const bool decoupled = rule == "adamw";
  const auto [b1, b2] = betas(0.9, 0.999);
  optim::AdamOptions o{
      num("lr", 1e-3), b1,   b2, num("eps", 1e-8), num("weight_decay", decoupled ? 0.01 : 0.0),
      decoupled,       whole};
  return AdamFactory(o);
}

py::dict StateToDict(const std::map<std::string, Tensor>& tensors,
                     const std::map<std::string, int64_t>& ints) {
  py::dict out;
  for (const auto& [k, t] : tensors) out[py::str(k)] = autograd::Variable(t);
  for (const auto& [k, v] : ints) out[py::str(k)] = v;
  return out;
}

void BindZero(py::module_& d) {
  py::class_<ZeroRedundancyOptimizer>(d, "ZeroRedundancyOptimizer",
                                      "Optimizer state sharded over the ranks (ZeRO-1, "
                                      "paddle/parallel/zero_redundancy_optimizer.h).")
      .def(py::init([](std::vector<autograd::Variable> params, std::shared_ptr<ProcessGroup> group,
                       const std::string& rule, const py::dict& kwargs) {
             OptimizerFactory factory = RuleFromKwargs(rule, kwargs);
             absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> made;
             {
               py::gil_scoped_release release;
               made = ZeroRedundancyOptimizer::Create(std::move(params), &group->comm(), factory);
             }
             return Unwrap(std::move(made));
           }),
           py::arg("params"), py::arg("group"), py::arg("rule"), py::arg("kwargs"),
           py::keep_alive<1, 3>())  // the group lives as long as this object
      .def("step",
           [](ZeroRedundancyOptimizer& z) {
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = z.Step();
             }
             Check(st);
           })
      .def("zero_grad", &ZeroRedundancyOptimizer::ZeroGrad)
      .def_property("lr", &ZeroRedundancyOptimizer::lr, &ZeroRedundancyOptimizer::set_lr)
      .def_property_readonly("step_count", &ZeroRedundancyOptimizer::step_count)
      .def_property_readonly("optimizer_state_bytes", &ZeroRedundancyOptimizer::OptimizerStateBytes)
      .def_property_readonly("shard",
                             [](const ZeroRedundancyOptimizer& z) {
                               return std::make_pair(z.shard_begin(), z.shard_end());
                             })
      .def("state_dict",
           [](const ZeroRedundancyOptimizer& z) {
             std::map<std::string, Tensor> tensors;
             std::map<std::string, int64_t> ints;
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = z.SaveState(&tensors, &ints);
             }
             Check(st);
             return StateToDict(tensors, ints);
           })
      .def(
          "load_state_dict",
          [](ZeroRedundancyOptimizer& z, const py::dict& state) {
            std::map<std::string, Tensor> tensors;
            std::map<std::string, int64_t> ints;
            for (const auto& [k, v] : state) {
              auto key = k.cast<std::string>();
              if (py::isinstance<py::int_>(v)) {
                ints[key] = v.cast<int64_t>();
              } else {
                tensors[key] = v.cast<const autograd::Variable&>().data();
              }
            }
            Check(z.LoadState(tensors, ints));
          },
          py::arg("state_dict"));
}

}  // namespace

void BindParallel(py::module_& m) {
  py::module_ d = m.attr("distributed").cast<py::module_>();
  py::module_ e = d.def_submodule("elastic", "elastic groups and committed training state");
  BindElasticClasses(e);
  BindLocalSgd(d);
  BindZero(d);
}

}  // namespace paddle::python
