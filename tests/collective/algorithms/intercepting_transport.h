// A Transport for tests that forwards to another one and watches the traffic: it records every
// send an algorithm posts (peer, bytes), so a test can tell which algorithm ran from its message
// pattern, and it can abort the real transport when a chosen send is posted, which is what a rank
// that crashes in the middle of a collective looks like to its peers.
#ifndef TESTS_COLLECTIVE_ALGORITHMS_INTERCEPTING_TRANSPORT_H_
#define TESTS_COLLECTIVE_ALGORITHMS_INTERCEPTING_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {
namespace testutil {

class InterceptingTransport : public Transport {
 public:
  struct SentMessage {
    int peer;
    size_t bytes;
  };

  explicit InterceptingTransport(Transport& inner);
  ~InterceptingTransport() override;

  // When send number `index` (0-based) is posted, abort the inner transport with `cause` instead.
  void AbortAtSend(int64_t index, absl::Status cause);
  std::vector<SentMessage> sends() const;

  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string name() const override { return "intercepted " + inner_.name(); }
  Channel& channel(int peer) override;
  void Abort(const absl::Status& cause) override { inner_.Abort(cause); }

 private:
  class InterceptingChannel;
  // Records a send to `peer`; true if the transport was aborted instead.
  bool OnSend(int peer, size_t bytes);

  Transport& inner_;
  std::vector<std::unique_ptr<InterceptingChannel>> channels_;
  mutable absl::Mutex mu_;
  std::vector<SentMessage> sends_ ABSL_GUARDED_BY(mu_);
  int64_t abort_at_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status abort_cause_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testutil
}  // namespace paddle

#endif  // TESTS_COLLECTIVE_ALGORITHMS_INTERCEPTING_TRANSPORT_H_
