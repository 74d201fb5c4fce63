// Parsing, printing and writing the benchmark's rows.
#include "bench/collectives/report.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace paddle {
namespace bench {
namespace {

// The value of " key=" in `line`, or false.
bool Field(absl::string_view line, absl::string_view key, std::string* value) {
  for (absl::string_view part : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&part, key) && absl::ConsumePrefix(&part, "=")) {
      *value = std::string(part);
      return true;
    }
  }
  return false;
}

std::string Label(const Row& row) {
  return absl::StrCat(row.backend, "/", row.algo, "/", row.transport);
}

}  // namespace

double BusBandwidthFactor(BenchOp op, int nproc) {
  const double n = nproc;
  switch (op) {
    case BenchOp::kAllreduce:
      return 2 * (n - 1) / n;
    case BenchOp::kAllgather:
    case BenchOp::kReduceScatter:
    case BenchOp::kAlltoall:
      return (n - 1) / n;
    case BenchOp::kBroadcast:
      return 1;
  }
  return 1;
}

// The bandwidth columns from the row's mean time (report.h).
void SetBandwidth(BenchOp op, Row* row) {
  row->algbw_gbs = row->time_us > 0 ? static_cast<double>(row->bytes) / (row->time_us * 1e3) : 0;
  row->busbw_gbs = row->algbw_gbs * BusBandwidthFactor(op, row->nproc);
}

absl::StatusOr<std::vector<Row>> CollectRows(const std::vector<std::string>& outputs, BenchOp op,
                                             const Row& like) {
  struct Size {
    int64_t count = 0;
    double max_time_us = 0;
    double max_p50_us = 0;
    double max_max_us = 0;
    double max_min_us = 0;
    double max_p99_us = 0;
    int64_t wrong = 0;
    std::set<int> ranks;
  };
  std::map<int64_t, Size> sizes;
  for (const std::string& output : outputs) {
    for (absl::string_view line : absl::StrSplit(output, '\n')) {
      if (!absl::ConsumePrefix(&line, "ROW ")) continue;
      std::string rank, bytes, count, time_us, wrong, p50_us, max_us, min_us, p99_us;
      int r = 0;
      int64_t b = 0, c = 0, w = 0;
      double t = 0, p50 = 0, slowest = 0, fastest = 0, p99 = 0;
      if (!Field(line, "rank", &rank) || !Field(line, "bytes", &bytes) ||
          !Field(line, "count", &count) || !Field(line, "time_us", &time_us) ||
          !Field(line, "wrong", &wrong) || !absl::SimpleAtoi(rank, &r) ||
          !absl::SimpleAtoi(bytes, &b) || !absl::SimpleAtoi(count, &c) ||
          !absl::SimpleAtod(time_us, &t) || !absl::SimpleAtoi(wrong, &w)) {
        return absl::InvalidArgumentError(absl::StrCat("malformed result line: ", line));
      }
      // The per-operation figures are optional (older peers print only the mean).
      if ((Field(line, "p50_us", &p50_us) && !absl::SimpleAtod(p50_us, &p50)) ||
          (Field(line, "max_us", &max_us) && !absl::SimpleAtod(max_us, &slowest)) ||
          (Field(line, "min_us", &min_us) && !absl::SimpleAtod(min_us, &fastest)) ||
          (Field(line, "p99_us", &p99_us) && !absl::SimpleAtod(p99_us, &p99))) {
        return absl::InvalidArgumentError(absl::StrCat("malformed result line: ", line));
      }
      Size& size = sizes[b];
      size.count = c;
      size.max_time_us = std::max(size.max_time_us, t);
      size.max_p50_us = std::max(size.max_p50_us, p50);
      size.max_max_us = std::max(size.max_max_us, slowest);
      size.max_min_us = std::max(size.max_min_us, fastest);
      size.max_p99_us = std::max(size.max_p99_us, p99);
      size.wrong += w;
      size.ranks.insert(r);
    }
  }
  std::vector<Row> rows;
  for (const auto& [bytes, size] : sizes) {
    if (static_cast<int>(size.ranks.size()) != like.nproc) {
      return absl::DataLossError(absl::StrCat(Label(like), ": size ", bytes, " has results from ",
                                              size.ranks.size(), " of ", like.nproc, " ranks"));
    }
    Row row = like;
    row.bytes = bytes;
    row.count = size.count;
    row.time_us = size.max_time_us;
    row.p50_us = size.max_p50_us;
    row.max_us = size.max_max_us;
    row.min_us = size.max_min_us;
    row.p99_us = size.max_p99_us;
    row.wrong = size.wrong;
    SetBandwidth(op, &row);
    rows.push_back(row);
  }
  if (rows.empty()) return absl::DataLossError(absl::StrCat(Label(like), ": no result lines"));
  return rows;
}

namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

std::vector<Row> MedianOfRounds(const std::vector<std::vector<Row>>& rounds, BenchOp op) {
  std::vector<const std::vector<Row>*> usable;
  for (const std::vector<Row>& round : rounds) {
    if (!round.empty()) usable.push_back(&round);
  }
  std::vector<Row> combined;
  if (usable.empty()) return combined;
  for (const Row& first : *usable[0]) {
    std::vector<double> times, p50s, p99s;
    Row row = first;
    row.max_us = 0;
    row.wrong = 0;
    for (const std::vector<Row>* round : usable) {
      auto it = std::find_if(round->begin(), round->end(),
                             [&](const Row& r) { return r.bytes == first.bytes; });
      if (it == round->end()) break;
      times.push_back(it->time_us);
      p50s.push_back(it->p50_us);
      p99s.push_back(it->p99_us);
      row.max_us = std::max(row.max_us, it->max_us);
      row.min_us = std::min(row.min_us, it->min_us);
      row.wrong += it->wrong;
    }
    if (times.size() != usable.size()) continue;  // a size some round lacks
    row.time_us = Median(times);
    row.p50_us = Median(p50s);
    row.p99_us = Median(p99s);
    SetBandwidth(op, &row);
    combined.push_back(row);
  }
  return combined;
}

void PrintTable(std::FILE* out, const std::string& title, const std::vector<Row>& rows) {
  std::fprintf(out, "# %s\n", title.c_str());
  std::fprintf(out, "#%12s %12s %9s %11s %11s %11s %8s %10s %10s %10s %10s\n", "size(B)", "count",
               "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "min(us)", "p50(us)",
               "p99(us)", "max(us)");
  for (const Row& row : rows) {
    std::fprintf(out, " %12lld %12lld %9s %11.1f %11.3f %11.3f %8lld %10.1f %10.1f %10.1f %10.1f\n",
                 static_cast<long long>(row.bytes), static_cast<long long>(row.count),
                 row.dtype.c_str(), row.time_us, row.algbw_gbs, row.busbw_gbs,
                 static_cast<long long>(row.wrong), row.min_us, row.p50_us, row.p99_us, row.max_us);
  }
  std::fflush(out);
}

void PrintRatios(std::FILE* out, const std::vector<Row>& ours,
                 const std::vector<std::vector<Row>>& peers) {
  if (ours.empty()) return;
  std::fprintf(out, "# busbw of %s over each peer's (>1: ours is faster)\n",
               Label(ours[0]).c_str());
  std::string header = absl::StrFormat("#%12s %10s", "size(B)", "ours GB/s");
  for (const std::vector<Row>& peer : peers) {
    if (peer.empty()) continue;
    absl::StrAppend(&header, absl::StrFormat(" | %24s %7s", Label(peer[0]), "ratio"));
  }
  std::fprintf(out, "%s\n", header.c_str());
  for (const Row& row : ours) {
    std::string line = absl::StrFormat(" %12d %10.3f", row.bytes, row.busbw_gbs);
    for (const std::vector<Row>& peer : peers) {
      if (peer.empty()) continue;
      auto it = std::find_if(peer.begin(), peer.end(),
                             [&](const Row& p) { return p.bytes == row.bytes; });
      if (it == peer.end() || it->busbw_gbs <= 0) {
        absl::StrAppend(&line, absl::StrFormat(" | %24s %7s", "-", "-"));
      } else {
        absl::StrAppend(&line, absl::StrFormat(" | %24.3f %7.2f", it->busbw_gbs,
                                               row.busbw_gbs / it->busbw_gbs));
      }
    }
    std::fprintf(out, "%s\n", line.c_str());
  }
  std::fflush(out);
}

absl::Status WriteJson(const std::string& path, const std::vector<Row>& rows) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot write --json file ", path));
  }
  std::fprintf(f, "[\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    // Every string here is a fixed identifier (no quotes or backslashes to escape).
    std::fprintf(f,
                 "  {\"op\": \"%s\", \"backend\": \"%s\", \"algo\": \"%s\", \"transport\": \"%s\", "
                 "\"nproc\": %d, \"bytes\": %lld, \"dtype\": \"%s\", \"time_us\": %.3f, "
                 "\"min_us\": %.3f, \"p50_us\": %.3f, \"p99_us\": %.3f, \"max_us\": %.3f, "
                 "\"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, \"wrong\": %lld}%s\n",
                 r.op.c_str(), r.backend.c_str(), r.algo.c_str(), r.transport.c_str(), r.nproc,
                 static_cast<long long>(r.bytes), r.dtype.c_str(), r.time_us, r.min_us, r.p50_us,
                 r.p99_us, r.max_us, r.algbw_gbs, r.busbw_gbs, static_cast<long long>(r.wrong),
                 i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]\n");
  if (std::fclose(f) != 0) return absl::UnavailableError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace paddle
