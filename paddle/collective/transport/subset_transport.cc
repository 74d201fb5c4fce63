// SubsetTransport; see subset_transport.h.
#include "paddle/collective/transport/subset_transport.h"

#include <utility>

#include "paddle/core/logging.h"

namespace paddle {

SubsetTransport::SubsetTransport(Transport& parent, std::vector<int> ranks)
    : parent_(parent), ranks_(std::move(ranks)) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    PADDLE_CHECK(ranks_[i] >= 0 && ranks_[i] < parent_.world_size());
    if (ranks_[i] == parent_.rank()) rank_ = static_cast<int>(i);
  }
  PADDLE_CHECK(rank_ >= 0);
}

}  // namespace paddle
