// Timeline: a Chrome trace of a training run, for chrome://tracing or https://ui.perfetto.dev.
//
// With PADDLE_TIMELINE=FILE every rank records spans (forward, backward, optimizer, waiting for
// data, and each gradient bucket's allreduce from launch to completion) and at the end rank 0
// writes one trace with a row per rank (pid = rank): thread "compute" for the step's phases and
// thread "allreduce" for the buckets, so overlap of communication with the backward pass, and a
// rank that makes the others wait, show at a glance. The ranks' spans travel to rank 0 through
// the communicator, so it works across machines without a shared file system.
#ifndef PADDLE_PARALLEL_TIMELINE_H_
#define PADDLE_PARALLEL_TIMELINE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"

namespace paddle {

class Timeline {
 public:
  enum class Lane { kCompute = 0, kAllreduce = 1 };

  // The timeline PADDLE_TIMELINE asks for, or nullptr when it is unset or empty.
  static std::unique_ptr<Timeline> FromEnv(int rank);
  Timeline(std::string path, int rank);

  // Thread-safe. `bytes` < 0 leaves it out of the span's arguments.
  void Span(absl::string_view name, Lane lane, absl::Time start, absl::Time end,
            int64_t bytes = -1);
  int64_t num_spans() const;

  // Collective when `comm` is given (every rank calls it): gathers all ranks' spans and rank 0
  // writes the trace. With no communicator this process writes its own spans.
  absl::Status Write(Communicator* comm);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int rank_;
  mutable std::mutex mu_;
  std::string events_;  // guarded by mu_: comma-separated JSON objects
  int64_t count_ = 0;   // guarded by mu_
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_TIMELINE_H_
