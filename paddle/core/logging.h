// Logging for every layer of Paddle Collective: one macro family, compiled in everywhere but off
// by default, so a user can turn on exactly the subsystem they are debugging on a running job.
//
//   PADDLE_LOG(INFO, NET) << "connected to peer " << peer;
//   PADDLE_CHECK(n >= 0) << "negative count " << n;   // broken invariant: abort with message
//
// Runtime knobs (read once, at the first log statement):
//   PADDLE_LOG_LEVEL   ERROR | WARN (default) | INFO | DEBUG | TRACE
//   PADDLE_LOG_SUBSYS  comma list of INIT,STORE,NET,COLL,TRAIN,ALL (default ALL); a leading '^'
//                      inverts the list ("^NET" = everything but NET).
// A malformed value is an error, as for every setting (Note [Settings table]). The first log
// statement cannot return it, so it ends the process with a line naming the variable and what it
// accepts (as a malformed PADDLE_CPU_BASELINE does); entry points that can return a Status call
// LogConfigFromEnv() first to fail cleanly instead.
// Every line carries `host:pid [rank r/n]`, the level, the subsystem and the source location. The
// rank comes from the calling thread's `ScopedLogRank` (threads-as-ranks tests) or else from the
// process-wide `SetLogRank` (one rank per process). A disabled statement costs one load and a
// branch; its stream operands are not evaluated.
#ifndef PADDLE_CORE_LOGGING_H_
#define PADDLE_CORE_LOGGING_H_

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Subsystems are bits so PADDLE_LOG_SUBSYS can select any combination.
enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,
  kLogStore = 1u << 1,
  kLogNet = 1u << 2,
  kLogColl = 1u << 3,
  kLogTrain = 1u << 4,
  kLogAll = 0xffffffffu,
};

struct LogConfig {
  LogLevel level = LogLevel::kWarn;
  uint32_t subsys_mask = kLogAll;
};

// Parses PADDLE_LOG_LEVEL / PADDLE_LOG_SUBSYS values; an unknown word is an error naming it.
absl::Status ParseLogConfig(absl::string_view level, absl::string_view subsys, LogConfig* config);

// The configuration PADDLE_LOG_LEVEL and PADDLE_LOG_SUBSYS ask for; kInvalidArgument naming the
// variable, its value and what it accepts when one is malformed.
absl::StatusOr<LogConfig> LogConfigFromEnv();

// The active configuration; first use reads the environment (a malformed value: see above).
LogConfig ActiveLogConfig();
// Replaces the active configuration (tests, and programs with a --log-level flag).
void SetLogConfig(const LogConfig& config);

namespace internal {
// The active configuration packed into one word (level << 32 | subsystem mask), so that checking
// whether a statement is enabled is one relaxed load; kLogConfigUnset until first use.
constexpr uint64_t kLogConfigUnset = ~uint64_t{0};
extern std::atomic<uint64_t> g_log_config;
uint64_t LoadLogConfigFromEnv();
}  // namespace internal

inline bool LogEnabled(LogLevel level, uint32_t subsys) {
  uint64_t packed = internal::g_log_config.load(std::memory_order_relaxed);
  if (packed == internal::kLogConfigUnset) packed = internal::LoadLogConfigFromEnv();
  return static_cast<uint64_t>(level) <= (packed >> 32) &&
         (static_cast<uint32_t>(packed) & subsys) != 0;
}

// Process-wide rank shown in log prefixes, for programs running one rank per process.
void SetLogRank(int rank, int world_size);

// Thread-scoped rank for the prefix; nests and restores the previous one on destruction.
class ScopedLogRank {
 public:
  ScopedLogRank(int rank, int world_size);
  ~ScopedLogRank();
  ScopedLogRank(const ScopedLogRank&) = delete;
  ScopedLogRank& operator=(const ScopedLogRank&) = delete;

 private:
  int prev_rank_;
  int prev_world_size_;
};

// "host:pid [rank r/n]" for the calling thread ("host:pid" when no rank is known).
std::string LogPrefix();

// Where finished lines go; the default writes each line to stderr with a single write().
using LogSink = void (*)(absl::string_view line);
void SetLogSink(LogSink sink);  // nullptr restores stderr

namespace internal {

// Builds one line and emits it in the destructor; aborts afterwards if `fatal`.
class LogMessage {
 public:
  LogMessage(const char* file, int line, LogLevel level, uint32_t subsys, bool fatal = false);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  bool fatal_;
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream` type-check.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace paddle

#define PADDLE_LOG_LEVEL_ERROR ::paddle::LogLevel::kError
#define PADDLE_LOG_LEVEL_WARN ::paddle::LogLevel::kWarn
#define PADDLE_LOG_LEVEL_INFO ::paddle::LogLevel::kInfo
#define PADDLE_LOG_LEVEL_DEBUG ::paddle::LogLevel::kDebug
#define PADDLE_LOG_LEVEL_TRACE ::paddle::LogLevel::kTrace
#define PADDLE_LOG_SUBSYS_INIT ::paddle::kLogInit
#define PADDLE_LOG_SUBSYS_STORE ::paddle::kLogStore
#define PADDLE_LOG_SUBSYS_NET ::paddle::kLogNet
#define PADDLE_LOG_SUBSYS_COLL ::paddle::kLogColl
#define PADDLE_LOG_SUBSYS_TRAIN ::paddle::kLogTrain
#define PADDLE_LOG_SUBSYS_ALL ::paddle::kLogAll

// The statement macros end in a stream the caller appends to, so their replacement lists cannot
// be parenthesized. NOLINTBEGIN(bugprone-macro-parentheses)

// PADDLE_LOG(LEVEL, SUBSYS) << ...; LEVEL in ERROR WARN INFO DEBUG TRACE, SUBSYS in INIT STORE
// NET COLL TRAIN ALL.
#define PADDLE_LOG(level, subsys)                                                        \
  !::paddle::LogEnabled(PADDLE_LOG_LEVEL_##level, PADDLE_LOG_SUBSYS_##subsys)            \
      ? (void)0                                                                          \
      : ::paddle::internal::LogVoidify() &                                               \
            ::paddle::internal::LogMessage(__FILE__, __LINE__, PADDLE_LOG_LEVEL_##level, \
                                           PADDLE_LOG_SUBSYS_##subsys)                   \
                .stream()

// Aborts with the condition, the location and the streamed message when `cond` is false.
#define PADDLE_CHECK(cond)                                                                    \
  (cond) ? (void)0                                                                            \
         : ::paddle::internal::LogVoidify() &                                                 \
               ::paddle::internal::LogMessage(__FILE__, __LINE__, ::paddle::LogLevel::kError, \
                                              ::paddle::kLogAll, /*fatal=*/true)              \
                       .stream()                                                              \
                   << "Check failed: " #cond " "
// NOLINTEND(bugprone-macro-parentheses)

// Aborts when `status_expr` is not OK, printing the status.
#define PADDLE_CHECK_OK(status_expr)                                 \
  do {                                                               \
    const ::absl::Status paddle_check_status_ = (status_expr);       \
    PADDLE_CHECK(paddle_check_status_.ok()) << paddle_check_status_; \
  } while (0)

#endif  // PADDLE_CORE_LOGGING_H_
