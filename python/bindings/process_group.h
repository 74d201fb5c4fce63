// The process group of paddle._C.distributed (a Communicator and the rendezvous that made it) and
// its DistributedDataParallel, shared by distributed.cc (collectives, DDP) and parallel.cc (each
// elastic generation's group; local SGD over a DDP).
// See Note [GIL and communicator threads] in distributed.cc.
#ifndef PYTHON_BINDINGS_PROCESS_GROUP_H_
#define PYTHON_BINDINGS_PROCESS_GROUP_H_

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/rendezvous/rendezvous.h"
#include "paddle/nn/module.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "python/bindings/common.h"

namespace paddle::python {

namespace py = pybind11;

// A `timeout` argument in seconds; None is zero, "the group's default". NaN, infinity and values
// past absl::Duration's range are errors: absl::Seconds would make each an infinite wait.
inline absl::Duration Seconds(const std::optional<double>& s) {
  if (!s) return absl::ZeroDuration();
  const bool valid = std::isfinite(*s) && *s > 0 && absl::Seconds(*s) != absl::InfiniteDuration();
  if (!valid) {
    throw py::value_error(
        absl::StrCat("timeout must be a positive, finite number of seconds, got ", *s));
  }
  // A positive timeout below the clock's resolution must not become zero, the default.
  return std::max(absl::Seconds(*s), absl::Nanoseconds(1));
}

// One group of ranks. The root group owns the rendezvous (store and, on rank 0, its server);
// groups made by split share it, so the store outlives every communicator that uses it.
class ProcessGroup {
 public:
  ProcessGroup(std::shared_ptr<RendezvousResult> rendezvous, std::shared_ptr<Communicator> comm)
      : rendezvous_(std::move(rendezvous)), comm_(std::move(comm)) {}
  // The rendezvous' destructor may wait for peers to close their store connections (Note [Store
  // teardown] in rendezvous.h): another reason to drop it without the GIL.
  ~ProcessGroup() {
    Close();
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      rendezvous_.reset();
    }
  }

  Communicator& comm() const {
    if (!comm_) throw py::value_error("the process group was destroyed");
    return *comm_;
  }
  const std::shared_ptr<RendezvousResult>& rendezvous() const { return rendezvous_; }
  // Destroys the communicator (joining its threads) without the GIL (Note [GIL and communicator
  // threads] in distributed.cc). An elastic generation's group shares its communicator with the
  // ElasticGroup (the last holder destroys it).
  void Close() {
    if (!comm_) return;
    std::shared_ptr<Communicator> comm = std::move(comm_);
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      comm.reset();
    } else {
      comm.reset();
    }
  }

 private:
  std::shared_ptr<RendezvousResult> rendezvous_;  // null for an elastic generation's group
  std::shared_ptr<Communicator> comm_;
};

// DistributedDataParallel over one group; keeps the group (and so the communicator) alive.
class Ddp {
 public:
  Ddp(std::shared_ptr<ProcessGroup> group, std::shared_ptr<nn::Module> module,
      const DdpOptions& options)
      : group_(std::move(group)) {
    absl::StatusOr<std::unique_ptr<DistributedDataParallel>> made;
    {
      py::gil_scoped_release release;
      made = DistributedDataParallel::Create(std::move(module), &group_->comm(), options);
    }
    ddp_ = Unwrap(std::move(made));
  }
  ~Ddp() {
    py::gil_scoped_release release;
    ddp_.reset();
  }
  Ddp(const Ddp&) = delete;
  Ddp& operator=(const Ddp&) = delete;

  DistributedDataParallel& ddp() { return *ddp_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::unique_ptr<DistributedDataParallel> ddp_;
};

}  // namespace paddle::python

#endif  // PYTHON_BINDINGS_PROCESS_GROUP_H_
