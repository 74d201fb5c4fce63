// Reads the click data files of tools/make-ctr-data (Note [CTR data layout] in ctr_data.h).
#include "examples/ctr_data.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/data/dataset_cache.h"

namespace paddle::examples {
namespace {

constexpr char kMagic[8] = {'P', 'D', 'C', 'T', 'R', '0', '1', '\0'};
constexpr size_t kFixedHeader = 24;  // magic, two u32, one u64
// Generous limits: a header that exceeds them is damage, not data.
constexpr uint32_t kMaxFields = 4096;

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // the files are little-endian, as is every host we build for
  return v;
}

}  // namespace

absl::StatusOr<CtrData> ReadCtrData(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open CTR data file '", path,
                                            "': ", std::strerror(errno),
                                            " (write one with tools/make-ctr-data --out=DIR)"));
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&path](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("CTR data file '", path, "': ", what));
  };
  if (bytes.size() < kFixedHeader || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return bad(absl::StrCat("not a PDCTR01 file (", bytes.size(),
                            " bytes, expected the magic \"PDCTR01\" first)"));
  }
  CtrData d;
  const uint32_t num_categorical = Load<uint32_t>(bytes.data() + 8);
  const uint32_t num_dense = Load<uint32_t>(bytes.data() + 12);
  const uint64_t num_samples = Load<uint64_t>(bytes.data() + 16);
  if (num_categorical == 0 || num_categorical > kMaxFields || num_dense > kMaxFields) {
    return bad(absl::StrCat("header has ", num_categorical, " categorical and ", num_dense,
                            " dense fields (need 1..", kMaxFields, ")"));
  }
  const uint64_t header = kFixedHeader + 8 * uint64_t{num_categorical};
  const uint64_t record = 4 * (uint64_t{num_categorical} + num_dense + 1);
  if (bytes.size() < header || (bytes.size() - header) / record != num_samples ||
      (bytes.size() - header) % record != 0) {
    return bad(absl::StrCat("size ", bytes.size(), " bytes, but the header says ", num_samples,
                            " records of ", record, " bytes after a ", header, "-byte header (",
                            header + num_samples * record, " bytes): truncated or damaged"));
  }
  d.num_samples = static_cast<int64_t>(num_samples);
  d.num_categorical = static_cast<int>(num_categorical);
  d.num_dense = static_cast<int>(num_dense);
  int64_t offset = 0;
  for (uint32_t f = 0; f < num_categorical; ++f) {
    const uint64_t v = Load<uint64_t>(bytes.data() + kFixedHeader + 8 * f);
    if (v == 0 || v > (uint64_t{1} << 32)) {
      return bad(absl::StrCat("field ", f, " has vocabulary ", v, " (need 1..2^32)"));
    }
    d.vocab.push_back(static_cast<int64_t>(v));
    d.offsets.push_back(offset);
    offset += static_cast<int64_t>(v);
  }
  d.ids.resize(num_samples * num_categorical);
  d.dense.resize(num_samples * num_dense);
  d.labels.resize(num_samples);
  const char* p = bytes.data() + header;
  for (uint64_t i = 0; i < num_samples; ++i, p += record) {
    for (uint32_t f = 0; f < num_categorical; ++f) {
      const uint32_t id = Load<uint32_t>(p + 4 * f);
      if (id >= d.vocab[f]) {
        return bad(absl::StrCat("sample ", i, " field ", f, ": id ", id,
                                " is outside the vocabulary of ", d.vocab[f]));
      }
      d.ids[i * num_categorical + f] = d.offsets[f] + id;
    }
    for (uint32_t j = 0; j < num_dense; ++j) {
      const float x = Load<float>(p + 4 * (num_categorical + j));
      if (!std::isfinite(x)) {
        return bad(absl::StrCat("sample ", i, " dense feature ", j, " is ", x));
      }
      d.dense[i * num_dense + j] = x;
    }
    const float label = Load<float>(p + 4 * (num_categorical + num_dense));
    if (label != 0.0f && label != 1.0f) {
      return bad(absl::StrCat("sample ", i, " has label ", label, " (need 0 or 1)"));
    }
    d.labels[i] = label;
  }
  return d;
}

absl::StatusOr<double> ReadBestAuc(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no manifest '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // The manifest is flat JSON written by tools/make-ctr-data; one number is all we need.
  const std::string key = "\"best_auc\":";
  size_t at = text.find(key);
  double value = 0;
  if (at != std::string::npos) {
    at += key.size();
    size_t end = text.find_first_of(",\n}", at);
    std::string number = text.substr(at, end == std::string::npos ? end : end - at);
    number.erase(0, number.find_first_not_of(' '));
    if (absl::SimpleAtod(number, &value) && value > 0 && value <= 1) return value;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("manifest '", path, "' has no best_auc number in (0, 1]"));
}

namespace {

// The generator's flags for the default data set; part of the cache key.
constexpr const char* kDefaultCtrFlags[] = {"--max-vocab=100000"};

// tools/make-ctr-data beside this binary (its runfiles) or in $PADDLE_WORKSPACE; "" if neither.
std::string FindCtrGenerator() {
  std::vector<std::string> candidates;
  if (const char* dir = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(absl::StrCat(dir, "/paddle/tools/make-ctr-data"));
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0)
    candidates.push_back(
        absl::StrCat(std::string(self, n), ".runfiles/paddle/tools/make-ctr-data"));
  if (const char* ws = std::getenv("PADDLE_WORKSPACE")) {
    candidates.push_back(absl::StrCat(ws, "/tools/make-ctr-data"));
  }
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) return c;
  }
  return "";
}

// Runs /usr/bin/python3 `script` `args`...; its output goes to this process's stderr.
absl::Status RunGenerator(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {"/usr/bin/python3", script};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);  // keep stdout for the training lines
  pid_t pid = 0;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start /usr/bin/python3 ", script, ": ", std::strerror(error)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        script, " failed (", WIFEXITED(status) ? "exit " : "signal ",
        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), "); its message is above"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DefaultCtrData() {
  const std::string script = FindCtrGenerator();
  if (script.empty()) {
    return absl::NotFoundError(
        "no --data given and tools/make-ctr-data is not among this binary's runfiles nor in "
        "$PADDLE_WORKSPACE: pass --data=DIR made by tools/make-ctr-data --out=DIR");
  }
  struct stat st {};
  stat(script.c_str(), &st);
  // The key: the generator's bytes decide the data, so its size and time stand for them.
  std::string key = absl::StrCat("ctr data; ", script, " ", st.st_size, " bytes, modified ",
                                 st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ";");
  for (const char* flag : kDefaultCtrFlags) absl::StrAppend(&key, " ", flag);
  return data::CachedFolder("ctr-data", key, [&](const std::string& dir) -> absl::Status {
    data::CacheProgress progress("making the synthetic click data (tools/make-ctr-data)", "");
    std::vector<std::string> args = {absl::StrCat("--out=", dir)};
    for (const char* flag : kDefaultCtrFlags) args.emplace_back(flag);
    RETURN_IF_ERROR(RunGenerator(script, args));
    progress.Done(dir);
    return absl::OkStatus();
  });
}

}  // namespace paddle::examples
