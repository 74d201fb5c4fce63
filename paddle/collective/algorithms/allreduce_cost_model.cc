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

// The share of an allreduce of `bytes` that misses the cache (cost_model.py miss_fraction).
double MissFraction(const LinkCost& link, double bytes) {
  if (link.cache_bytes <= 0 || link.memory_us_per_byte <= 0) return 0;
  return std::max(0.0, 1.0 - link.cache_bytes / std::max(bytes, 1.0));
}

// 1 when an allreduce of `bytes` has its buffers on small pages (cost_model.py small_pages).
double SmallPages(const LinkCost& link, double bytes) {
  return bytes > 0 && bytes < link.huge_page_bytes ? 1 : 0;
}

// One link and the allreduce it serves: each step's cost (engine.py link_features).
struct Costing {
  const LinkCost& link;
  double miss;         // MissFraction of the whole allreduce
  double small_pages;  // SmallPages of the whole allreduce

  // One step run `repeat` times; every flow of a step on one host is alike, so the step lasts as
  // long as any one of them.
  double Step(double bytes, double reduce_bytes, double pieces, double repeat) const {
    const bool large = link.eager_bytes > 0 && bytes / std::max(pieces, 1.0) > link.eager_bytes;
    const double wire = large ? link.rendezvous_us * std::max(pieces, 1.0) +
                                    link.rendezvous_beta_us_per_byte * bytes +
                                    link.small_page_us_per_byte * small_pages * bytes
                              : link.beta_us_per_byte * bytes;
    return repeat * (link.alpha_us + link.overhead_us * std::max(pieces - 1, 0.0) + wire +
                     link.gamma_us_per_byte * reduce_bytes +
                     link.memory_us_per_byte * miss * (bytes + reduce_bytes));
  }
};

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

double Ring(const Costing& c, int n, double bytes, double piece) {
  const double block = bytes / n;
  const double pieces = std::max(1.0, std::ceil(std::ceil(block) / piece));
  return c.Step(block, block, pieces, n - 1) + c.Step(block, 0, pieces, n - 1);
}

double Tree(const Costing& c, int n, double bytes, double piece) {
  const int p2 = LargestPowerOfTwo(n);
  const bool folded = p2 != n;
  double total = 0;
  for (const Segment& s : Segments(bytes, piece)) {
    if (folded) total += c.Step(s.bytes, s.bytes, 1, s.count);
    for (int d = 1; d < p2; d *= 2) total += c.Step(s.bytes, s.bytes, 1, s.count);
    if (folded) total += c.Step(s.bytes, 0, 1, s.count);
  }
  return total;
}

double HalvingDoubling(const Costing& c, int n, double bytes, double piece) {
  const int p2 = LargestPowerOfTwo(n);
  const bool folded = p2 != n;
  double total = 0;
  for (const Segment& s : Segments(bytes, piece * p2)) {
    if (folded) total += c.Step(s.bytes, s.bytes, 1, s.count);
    for (int d = p2 / 2; d >= 1; d /= 2) {
      const double half = s.bytes * d / p2;
      total += c.Step(half, half, 1, s.count);
    }
    for (int d = 1; d < p2; d *= 2) total += c.Step(s.bytes * d / p2, 0, 1, s.count);
    if (folded) total += c.Step(s.bytes, 0, 1, s.count);
  }
  return total;
}

constexpr char kHeader[] = "paddle_tuning_params";
constexpr int64_t kMaxBucketBytes = int64_t{1} << 30;
// A link line has the first kRequiredFields values, the first kKneeFields (files written before
// Note [Small pages]), or all of them.
constexpr const char* kFields[] = {"alpha_us",
                                   "overhead_us",
                                   "beta_us_per_byte",
                                   "gamma_us_per_byte",
                                   "memory_us_per_byte",
                                   "rendezvous_us",
                                   "rendezvous_beta_us_per_byte",
                                   "cache_bytes",
                                   "eager_bytes",
                                   "small_page_us_per_byte",
                                   "huge_page_bytes"};
constexpr int kAllFields = sizeof(kFields) / sizeof(kFields[0]);
constexpr int kRequiredFields = 4;
constexpr int kKneeFields = 9;

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
  const Costing c{link, MissFraction(link, bytes), SmallPages(link, bytes)};
  switch (algorithm) {
    case ModelAlgorithm::kTree:
      return Tree(c, world_size, bytes, piece);
    case ModelAlgorithm::kHalvingDoubling:
      return HalvingDoubling(c, world_size, bytes, piece);
    case ModelAlgorithm::kRing:
      return Ring(c, world_size, bytes, piece);
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
                       absl::StrJoin(kFields, kFields + kRequiredFields, " "),
                       " [...]\" or \"bucket FIRST_BYTES BUCKET_BYTES\""));
    }
    if (words.size() < 2 || !ValidName(words[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "link name \"", words.size() < 2 ? "" : words[1],
                       "\" is not a transport name with an optional @RANKS_PER_HOST (tcp, shm@2)"));
    }
    const std::string name(words[1]);
    const int count = static_cast<int>(words.size()) - 2;
    if (count != kRequiredFields && count != kKneeFields && count != kAllFields) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "link ", name, " has ", count, " values; expected ", kRequiredFields, " (",
          absl::StrJoin(kFields, kFields + kRequiredFields, " "), "), ", kKneeFields, " (and ",
          absl::StrJoin(kFields + kRequiredFields, kFields + kKneeFields, " "), ") or ", kAllFields,
          " (and ", absl::StrJoin(kFields + kKneeFields, kFields + kAllFields, " "), ")",
          count < kRequiredFields ? absl::StrCat("; ", kFields[count], " is missing") : ""));
    }
    double values[kAllFields] = {};
    for (int i = 0; i < count; ++i) {
      if (!absl::SimpleAtod(words[i + 2], &values[i]) || !std::isfinite(values[i]) ||
          values[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(where, "link ", name, ": ", kFields[i],
                                                       " is \"", words[i + 2],
                                                       "\"; expected a finite number >= 0"));
      }
    }
    const LinkCost link{values[0], values[1], values[2], values[3], values[4], values[5],
                        values[6], values[7], values[8], values[9], values[10]};
    if (!params.links_.emplace(name, link).second) {
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
