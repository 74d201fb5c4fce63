// Spans as Chrome trace "complete" events (ph "X", microseconds), gathered with Allgatherv.
#include "paddle/parallel/timeline.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

std::string Metadata(int rank) {
  return absl::StrFormat(
      R"({"name": "process_name", "ph": "M", "pid": %d, "args": {"name": "rank %d"}}, )"
      R"({"name": "thread_name", "ph": "M", "pid": %d, "tid": 0, "args": {"name": "compute"}}, )"
      R"({"name": "thread_name", "ph": "M", "pid": %d, "tid": 1, "args": {"name": "allreduce"}})",
      rank, rank, rank, rank);
}

}  // namespace

std::unique_ptr<Timeline> Timeline::FromEnv(int rank) {
  std::optional<std::string> path = StringSetting("PADDLE_TIMELINE");
  if (!path.has_value()) return nullptr;
  return std::make_unique<Timeline>(*path, rank);
}

Timeline::Timeline(std::string path, int rank)
    : path_(std::move(path)), rank_(rank), events_(Metadata(rank)) {}

void Timeline::Span(absl::string_view name, Lane lane, absl::Time start, absl::Time end,
                    int64_t bytes) {
  std::string args = bytes >= 0 ? absl::StrFormat(R"(, "args": {"bytes": %d})", bytes) : "";
  std::string event =
      absl::StrFormat(R"(, {"name": "%s", "ph": "X", "pid": %d, "tid": %d, "ts": %d, "dur": %d%s})",
                      name, rank_, static_cast<int>(lane), absl::ToUnixMicros(start),
                      std::max<int64_t>(0, absl::ToInt64Microseconds(end - start)), args);
  std::lock_guard<std::mutex> lock(mu_);
  events_ += event;
  ++count_;
}

int64_t Timeline::num_spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

absl::Status Timeline::Write(Communicator* comm) {
  std::string mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine = events_;
  }
  std::string all = mine;
  if (comm != nullptr && comm->world_size() > 1) {
    // Every rank's length, then every rank's bytes.
    int64_t length = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lengths(comm->world_size());
    ASSIGN_OR_RETURN(Tensor in, Tensor::FromBlob(&length, {1}, DType::kInt64, Device::Cpu()));
    ASSIGN_OR_RETURN(Tensor out, Tensor::FromBlob(lengths.data(), {comm->world_size()},
                                                  DType::kInt64, Device::Cpu()));
    RETURN_IF_ERROR(comm->Allgather(in, out)->Wait());
    int64_t total = 0;
    for (int64_t l : lengths) total += l;
    std::string gathered(static_cast<size_t>(total), ' ');
    ASSIGN_OR_RETURN(Tensor bytes_in,
                     Tensor::FromBlob(mine.data(), {length}, DType::kUInt8, Device::Cpu()));
    ASSIGN_OR_RETURN(Tensor bytes_out,
                     Tensor::FromBlob(gathered.data(), {total}, DType::kUInt8, Device::Cpu()));
    RETURN_IF_ERROR(comm->Allgatherv(bytes_in, bytes_out, lengths)->Wait());
    if (comm->rank() != 0) return absl::OkStatus();
    all.clear();
    int64_t offset = 0;
    for (int64_t l : lengths) {
      if (!all.empty()) all += ", ";
      all += gathered.substr(static_cast<size_t>(offset), static_cast<size_t>(l));
      offset += l;
    }
  }
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("PADDLE_TIMELINE: cannot write '", path_, "'"));
  }
  std::fprintf(f, "{\"traceEvents\": [%s], \"displayTimeUnit\": \"ms\"}\n", all.c_str());
  if (std::fclose(f) != 0) {
    return absl::UnavailableError(absl::StrCat("PADDLE_TIMELINE: error writing '", path_, "'"));
  }
  return absl::OkStatus();
}

}  // namespace paddle
