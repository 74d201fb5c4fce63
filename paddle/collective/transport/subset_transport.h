// A view of a Transport restricted to some of its ranks, renumbered 0..k-1.
//
// Composite algorithms run a phase among a subset of the group: the hierarchical allreduce
// reduces each block among the ranks that hold the same local rank on every host. The view
// forwards channels to the parent (so errors still name the parent's peer ranks and addresses)
// and aborting it aborts the parent.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SUBSET_TRANSPORT_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SUBSET_TRANSPORT_H_

#include <string>
#include <vector>

#include "paddle/collective/transport/transport.h"

namespace paddle {

class SubsetTransport final : public Transport {
 public:
  // `ranks`: parent ranks, in the subset's order; the parent's own rank must be among them.
  // The parent must outlive the view.
  SubsetTransport(Transport& parent, std::vector<int> ranks);

  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(ranks_.size()); }
  std::string name() const override { return parent_.name(); }
  Channel& channel(int peer) override { return parent_.channel(ranks_[peer]); }
  void Abort(const absl::Status& cause) override { parent_.Abort(cause); }

 private:
  Transport& parent_;
  std::vector<int> ranks_;
  int rank_ = -1;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SUBSET_TRANSPORT_H_
