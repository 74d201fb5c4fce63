#include "paddle/core/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "paddle/core/settings.h"

namespace paddle {
namespace {

struct ProcessRank {
  std::atomic<int> rank{-1};
  std::atomic<int> world_size{-1};
};

ProcessRank& TheProcessRank() {
  static ProcessRank* r = new ProcessRank();
  return *r;
}

thread_local int t_rank = -1;
thread_local int t_world_size = -1;

std::atomic<LogSink> g_sink{nullptr};

uint64_t Pack(const LogConfig& c) { return (static_cast<uint64_t>(c.level) << 32) | c.subsys_mask; }

LogConfig Unpack(uint64_t packed) {
  LogConfig c;
  c.level = static_cast<LogLevel>(packed >> 32);
  c.subsys_mask = static_cast<uint32_t>(packed);
  return c;
}

const char* LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "E";
    case LogLevel::kWarn:
      return "W";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kTrace:
      return "T";
  }
  return "?";
}

const char* SubsysName(uint32_t subsys) {
  switch (subsys) {
    case kLogInit:
      return "INIT";
    case kLogStore:
      return "STORE";
    case kLogNet:
      return "NET";
    case kLogColl:
      return "COLL";
    case kLogTrain:
      return "TRAIN";
    default:
      return "ALL";
  }
}

const std::string& HostPid() {
  static const std::string* host_pid = [] {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '?';
    return new std::string(absl::StrCat(host, ":", getpid()));
  }();
  return *host_pid;
}

}  // namespace

absl::Status ParseLogConfig(absl::string_view level, absl::string_view subsys, LogConfig* config) {
  std::string lvl = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(level));
  if (lvl.empty() || lvl == "WARN" || lvl == "WARNING") {
    config->level = LogLevel::kWarn;
  } else if (lvl == "ERROR") {
    config->level = LogLevel::kError;
  } else if (lvl == "INFO") {
    config->level = LogLevel::kInfo;
  } else if (lvl == "DEBUG") {
    config->level = LogLevel::kDebug;
  } else if (lvl == "TRACE") {
    config->level = LogLevel::kTrace;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("PADDLE_LOG_LEVEL=", level, " is not one of ERROR, WARN, INFO, DEBUG, TRACE"));
  }
  std::string list = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(subsys));
  if (list.empty()) {
    config->subsys_mask = kLogAll;
    return absl::OkStatus();
  }
  const bool invert = list[0] == '^';
  if (invert) list.erase(0, 1);
  uint32_t mask = 0;
  for (absl::string_view word : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    word = absl::StripAsciiWhitespace(word);
    if (word == "INIT") {
      mask |= kLogInit;
    } else if (word == "STORE") {
      mask |= kLogStore;
    } else if (word == "NET") {
      mask |= kLogNet;
    } else if (word == "COLL") {
      mask |= kLogColl;
    } else if (word == "TRAIN") {
      mask |= kLogTrain;
    } else if (word == "ALL") {
      mask |= kLogAll;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "PADDLE_LOG_SUBSYS=", subsys, ": unknown subsystem '", word,
          "'; use a comma list of INIT, STORE, NET, COLL, TRAIN, ALL, optionally after '^'"));
    }
  }
  config->subsys_mask = invert ? ~mask : mask;
  return absl::OkStatus();
}

absl::StatusOr<LogConfig> LogConfigFromEnv() {
  // The settings table checks the level (its error names the variable and every choice);
  // ParseLogConfig the subsystems.
  absl::StatusOr<std::optional<std::string>> level = ChoiceSetting("PADDLE_LOG_LEVEL");
  if (!level.ok()) return level.status();
  LogConfig config;
  absl::Status s =
      ParseLogConfig(level->value_or(""), StringSetting("PADDLE_LOG_SUBSYS").value_or(""), &config);
  if (!s.ok()) return s;
  return config;
}

namespace internal {

std::atomic<uint64_t> g_log_config{kLogConfigUnset};

uint64_t LoadLogConfigFromEnv() {
  absl::StatusOr<LogConfig> from_env = LogConfigFromEnv();
  if (!from_env.ok()) {  // ends the process (see the header)
    LogMessage(__FILE__, __LINE__, LogLevel::kError, kLogInit, /*fatal=*/true).stream()
        << from_env.status().message();
  }
  const LogConfig config = *from_env;
  // Racing first uses parse the same environment; whichever store lands is the same value,
  // unless SetLogConfig got there first, which then wins.
  uint64_t expected = kLogConfigUnset;
  const uint64_t packed = Pack(config);
  if (!g_log_config.compare_exchange_strong(expected, packed)) return expected;
  return packed;
}

}  // namespace internal

LogConfig ActiveLogConfig() {
  uint64_t packed = internal::g_log_config.load(std::memory_order_relaxed);
  if (packed == internal::kLogConfigUnset) packed = internal::LoadLogConfigFromEnv();
  return Unpack(packed);
}

void SetLogConfig(const LogConfig& config) { internal::g_log_config.store(Pack(config)); }

void SetLogRank(int rank, int world_size) {
  TheProcessRank().rank.store(rank);
  TheProcessRank().world_size.store(world_size);
}

ScopedLogRank::ScopedLogRank(int rank, int world_size)
    : prev_rank_(t_rank), prev_world_size_(t_world_size) {
  t_rank = rank;
  t_world_size = world_size;
}

ScopedLogRank::~ScopedLogRank() {
  t_rank = prev_rank_;
  t_world_size = prev_world_size_;
}

std::string LogPrefix() {
  int rank = t_rank;
  int world = t_world_size;
  if (rank < 0) {
    rank = TheProcessRank().rank.load();
    world = TheProcessRank().world_size.load();
  }
  if (rank < 0) return HostPid();
  return absl::StrCat(HostPid(), " [rank ", rank, "/", world, "]");
}

void SetLogSink(LogSink sink) { g_sink.store(sink); }

namespace internal {

LogMessage::LogMessage(const char* file, int line, LogLevel level, uint32_t subsys, bool fatal)
    : fatal_(fatal) {
  absl::string_view path(file);
  size_t slash = path.rfind('/');
  if (slash != absl::string_view::npos) path.remove_prefix(slash + 1);
  stream_ << LevelLetter(level)
          << absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone()) << " "
          << LogPrefix() << " " << SubsysName(subsys) << " " << path << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  LogSink sink = g_sink.load();
  if (sink != nullptr) {
    sink(line);
  } else {
    // One write() per line: lines from many threads and processes never interleave mid-line.
    (void)!write(STDERR_FILENO, line.data(), line.size());
  }
  if (fatal_) std::abort();
}

}  // namespace internal
}  // namespace paddle
