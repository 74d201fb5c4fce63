// The flat allreduce schedules' costs and the tuning file; see allreduce_cost_model.h.
#include "paddle/collective/algorithms/allreduce_cost_model.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace paddle {
namespace {

// One step run `repeat` times; every flow of a step on one host is alike, so the step lasts as
// long as any one of them.
double Step(const LinkCost& link, double bytes, double reduce_bytes, double pieces, double repeat) {
  return repeat * (link.alpha_us + link.overhead_us * std::max(pieces - 1, 0.0) +
                   link.beta_us_per_byte * bytes + link.gamma_us_per_byte * reduce_bytes);
}

struct Segment {
  double bytes;
  double count;
};

// Full segments, then the remainder (schedules.py _segments).
std::vector<Segment> Segments(double total, double segment) {
  std::vector<Segment> out;
  const double full = std::floor(total / segment);
  const double rest = total - full * segment;
  if (full > 0) out.push_back({segment, full});
  if (rest > 0) out.push_back({rest, 1});
  return out;
}

int LargestPowerOfTwo(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

double Ring(const LinkCost& link, int n, double bytes, double piece) {
  const double block = bytes / n;
  const double pieces = std::max(1.0, std::ceil(std::ceil(block) / piece));
  return Step(link, block, block, pieces, n - 1) + Step(link, block, 0, pieces, n - 1);
}

double Tree(const LinkCost& link, int n, double bytes, double piece) {
  const int p2 = LargestPowerOfTwo(n);
  const bool folded = p2 != n;
  double total = 0;
  for (const Segment& s : Segments(bytes, piece)) {
    if (folded) total += Step(link, s.bytes, s.bytes, 1, s.count);
    for (int d = 1; d < p2; d *= 2) total += Step(link, s.bytes, s.bytes, 1, s.count);
    if (folded) total += Step(link, s.bytes, 0, 1, s.count);
  }
  return total;
}

double HalvingDoubling(const LinkCost& link, int n, double bytes, double piece) {
  const int p2 = LargestPowerOfTwo(n);
  const bool folded = p2 != n;
  double total = 0;
  for (const Segment& s : Segments(bytes, piece * p2)) {
    if (folded) total += Step(link, s.bytes, s.bytes, 1, s.count);
    for (int d = p2 / 2; d >= 1; d /= 2) {
      const double half = s.bytes * d / p2;
      total += Step(link, half, half, 1, s.count);
    }
    for (int d = 1; d < p2; d *= 2) total += Step(link, s.bytes * d / p2, 0, 1, s.count);
    if (folded) total += Step(link, s.bytes, 0, 1, s.count);
  }
  return total;
}

constexpr char kHeader[] = "paddle_tuning_params";
constexpr int64_t kMaxBucketBytes = int64_t{1} << 30;
constexpr const char* kFields[] = {"alpha_us", "overhead_us", "beta_us_per_byte",
                                   "gamma_us_per_byte"};

// "tcp", "shm@2": a transport name, optionally "@R" with R >= 1.
bool ValidName(absl::string_view name) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '@');
  if (parts.empty() || parts.size() > 2 || parts[0].empty()) return false;
  for (char c : parts[0]) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  int ranks = 0;
  return parts.size() == 1 || (absl::SimpleAtoi(parts[1], &ranks) && ranks >= 1);
}

}  // namespace

double PredictAllreduceUs(ModelAlgorithm algorithm, const LinkCost& link, int world_size,
                          double bytes, int64_t piece_bytes) {
  if (world_size <= 1 || bytes <= 0) return 0;
  const double piece = static_cast<double>(std::max<int64_t>(piece_bytes, 1));
  switch (algorithm) {
    case ModelAlgorithm::kTree:
      return Tree(link, world_size, bytes, piece);
    case ModelAlgorithm::kHalvingDoubling:
      return HalvingDoubling(link, world_size, bytes, piece);
    case ModelAlgorithm::kRing:
      return Ring(link, world_size, bytes, piece);
  }
  return 0;
}

ModelAlgorithm ModelAllreduceChoice(const LinkCost& link, int world_size, int64_t bytes,
                                    int64_t piece_bytes) {
  constexpr ModelAlgorithm kOrder[] = {ModelAlgorithm::kTree, ModelAlgorithm::kHalvingDoubling,
                                       ModelAlgorithm::kRing};
  double times[3];
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    times[i] =
        PredictAllreduceUs(kOrder[i], link, world_size, static_cast<double>(bytes), piece_bytes);
    if (i == 0 || times[i] < best) best = times[i];
  }
  for (int i = 0; i < 3; ++i) {
    if (times[i] <= best * (1 + 1e-9)) return kOrder[i];
  }
  return ModelAlgorithm::kRing;  // unreachable: the best is within its own tolerance
}

absl::StatusOr<TuningParams> TuningParams::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the tuning file ", path, ": ", std::strerror(errno),
                     " (write one with `tools/simulate tune --emit=FILE`)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

absl::StatusOr<TuningParams> TuningParams::Parse(absl::string_view text, const std::string& path) {
  TuningParams params;
  params.path_ = path;
  bool header = false;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::string where = absl::StrCat(path, ":", line_number, ": ");
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (!header) {
      if (words.size() != 2 || words[0] != kHeader || words[1] != "1") {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "expected \"", kHeader, " 1\" as the first line, got \"", line,
                         "\" (write the file with `tools/simulate tune --emit=FILE`)"));
      }
      header = true;
      continue;
    }
    if (words[0] == "bucket") {
      absl::Status bucket = params.ParseBucket(words, where);
      if (!bucket.ok()) return bucket;
      continue;
    }
    if (words[0] != "link") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "unknown keyword \"", words[0], "\"; expected \"link NAME ",
                       absl::StrJoin(kFields, " "), "\" or \"bucket FIRST_BYTES BUCKET_BYTES\""));
    }
    if (words.size() < 2 || !ValidName(words[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "link name \"", words.size() < 2 ? "" : words[1],
                       "\" is not a transport name with an optional @RANKS_PER_HOST (tcp, shm@2)"));
    }
    const std::string name(words[1]);
    if (words.size() != 6) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "link ", name, " has ", words.size() - 2,
          " values; expected 4: ", absl::StrJoin(kFields, " "),
          words.size() < 6 ? absl::StrCat(" (", kFields[words.size() - 2], " is missing)") : ""));
    }
    double values[4];
    for (int i = 0; i < 4; ++i) {
      if (!absl::SimpleAtod(words[i + 2], &values[i]) || !std::isfinite(values[i]) ||
          values[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(where, "link ", name, ": ", kFields[i],
                                                       " is \"", words[i + 2],
                                                       "\"; expected a finite number >= 0"));
      }
    }
    if (!params.links_.emplace(name, LinkCost{values[0], values[1], values[2], values[3]}).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "link ", name, " appears twice"));
    }
  }
  if (!header || (params.links_.empty() && !params.buckets_.has_value())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", header ? "no \"link\" or \"bucket\" lines" : "empty",
                     "; write the file with `tools/simulate tune --emit=FILE`"));
  }
  return params;
}

absl::Status TuningParams::ParseBucket(const std::vector<absl::string_view>& words,
                                       const std::string& where) {
  if (buckets_.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "a second \"bucket\" line"));
  }
  if (words.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(where, "\"bucket\" has ", words.size() - 1,
                                                   " values; expected FIRST_BYTES BUCKET_BYTES"));
  }
  int64_t caps[2];
  for (int i = 0; i < 2; ++i) {
    if (!absl::SimpleAtoi(words[i + 1], &caps[i]) || caps[i] < 1 || caps[i] > kMaxBucketBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "bucket ", i == 0 ? "FIRST_BYTES" : "BUCKET_BYTES", " is \"", words[i + 1],
          "\"; expected a whole number of bytes from 1 to ", kMaxBucketBytes));
    }
  }
  buckets_ = TunedBucketCaps{caps[0], caps[1]};
  return absl::OkStatus();
}

const LinkCost* TuningParams::Find(absl::string_view transport, int ranks_per_host,
                                   std::string* name) const {
  auto found = [&](const std::string& key) -> const LinkCost* {
    auto it = links_.find(key);
    if (it == links_.end()) return nullptr;
    if (name != nullptr) *name = key;
    return &it->second;
  };
  if (const LinkCost* exact = found(absl::StrCat(transport, "@", ranks_per_host))) return exact;
  if (const LinkCost* pooled = found(std::string(transport))) return pooled;
  // The nearest per-R fit, the smaller R on a tie.
  const std::string prefix = absl::StrCat(transport, "@");
  const std::string* nearest = nullptr;
  int nearest_ranks = 0;
  for (const auto& [key, link] : links_) {
    int ranks = 0;
    if (!absl::StartsWith(key, prefix) || !absl::SimpleAtoi(key.substr(prefix.size()), &ranks)) {
      continue;
    }
    const int distance = std::abs(ranks - ranks_per_host);
    const int best = std::abs(nearest_ranks - ranks_per_host);
    if (nearest == nullptr || distance < best || (distance == best && ranks < nearest_ranks)) {
      nearest = &key;
      nearest_ranks = ranks;
    }
  }
  return nearest == nullptr ? nullptr : found(*nearest);
}

}  // namespace paddle
