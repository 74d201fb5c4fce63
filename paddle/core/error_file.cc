// RecordError; see error_file.h.
#include "paddle/core/error_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"

namespace paddle {

void RecordError(const absl::Status& cause, int rank) {
  static std::atomic<bool> written{false};
  const std::optional<std::string> path = StringSetting("PADDLE_ERROR_FILE");
  if (!path.has_value() || path->empty() || written.exchange(true)) return;
  const std::string text =
      absl::StrCat(absl::GetCurrentTimeNanos(), " ", rank, "\n", cause.ToString(), "\n");
  const int fd = open(path->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    PADDLE_LOG(WARN, INIT) << "rank " << rank
                           << ": cannot write the error file PADDLE_ERROR_FILE=" << *path << " ("
                           << text.size() << " bytes): " << std::strerror(errno)
                           << "; the launcher will name the first worker to exit instead";
  }
  if (fd >= 0) close(fd);
}

}  // namespace paddle
