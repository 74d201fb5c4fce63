// FileStore: the contract suite, plus the file's own life: cleanup by the last user, several
// processes, torn records, held locks and the errors a user meets for bad paths.
#include "paddle/collective/store/file_store.h"

#include <fcntl.h>
#include <ftw.h>
#include <linux/capability.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/collective/store/store_contract.h"

namespace paddle {
namespace {

using ::testing::HasSubstr;

const absl::Duration kLong = absl::Seconds(60);

// A fresh directory under the test's temp dir, removed (with its files) on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/filestore.XXXXXX");
    CheckOrDie(mkdtemp(&pattern[0]) != nullptr, pattern);
    path_ = pattern;
  }
  ~TempDir() {
    nftw(
        path_.c_str(), [](const char* p, const struct stat*, int, FTW*) { return remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  const std::string& path() const { return path_; }
  std::string File(absl::string_view name) const { return absl::StrCat(path_, "/", name); }

 private:
  static void CheckOrDie(bool ok, const std::string& what) {
    if (!ok) {
      std::perror(what.c_str());
      std::abort();
    }
  }
  std::string path_;
};

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Drops the capabilities that let root ignore file permissions, from this process only.
bool DropFileCapabilities() {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &header, data) != 0) return false;
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
    data[cap / 32].effective &= ~(1u << (cap % 32));
  }
  return syscall(SYS_capset, &header, data) == 0;
}

class FileStoreFixture : public StoreFixture {
 public:
  absl::StatusOr<std::unique_ptr<Store>> NewClient() override {
    // So many users that the file outlives every client; TempDir removes it.
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(dir_.File("store"), 1 << 20);
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(std::move(store).value());
  }

 private:
  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(File, StoreContractTest,
                         ::testing::Values(StoreContractParam{
                             "file", [] { return std::make_unique<FileStoreFixture>(); }}),
                         StoreContractParamName);

INSTANTIATE_TEST_SUITE_P(File, StoreProcessContractTest,
                         ::testing::Values(StoreContractParam{
                             "file", [] { return std::make_unique<FileStoreFixture>(); }}),
                         StoreContractParamName);

TEST(FileStoreTest, LastOfNumUsersRemovesTheFile) {
  TempDir dir;
  const std::string path = dir.File("store");
  auto a = FileStore::Open(path, 3);
  auto b = FileStore::Open(path, 3);
  auto c = FileStore::Open(path, 3);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status() << b.status() << c.status();
  ASSERT_TRUE((*a)->Set("k", "v").ok());
  EXPECT_EQ((*c)->Get("k", kLong).value_or("?"), "v");
  a->reset();
  b->reset();
  EXPECT_TRUE(Exists(path)) << "removed before its last user closed it";
  EXPECT_EQ((*c)->Get("k", kLong).value_or("?"), "v");
  c->reset();
  EXPECT_FALSE(Exists(path)) << "the last user left the file behind";

  // The next job at the same path starts empty.
  auto next = FileStore::Open(path, 1);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)->NumKeys().value_or(-1), 0);
}

TEST(FileStoreTest, TwoProcessesShareTheFileAndTheLastRemovesIt) {
  TempDir dir;
  const std::string path = dir.File("store");
  std::fflush(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    {
      auto store = FileStore::Open(path, 2);
      if (!store.ok()) _exit(1);
      if (!(*store)->Set("from-child", "c").ok()) code = 2;
      if (code == 0 && (*store)->Add("counter", 1).value_or(0) < 1) code = 3;
      if (code == 0 && (*store)->Get("from-parent", kLong).value_or("?") != "p") code = 4;
    }
    _exit(code);
  }
  {
    auto store = FileStore::Open(path, 2);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Set("from-parent", "p").ok());
    EXPECT_EQ((*store)->Get("from-child", kLong).value_or("?"), "c");
    EXPECT_GE((*store)->Add("counter", 1).value_or(0), 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(Exists(path));
}

TEST(FileStoreTest, DifferentNumUsersIsRefusedNamingBoth) {
  TempDir dir;
  const std::string path = dir.File("store");
  auto first = FileStore::Open(path, 4);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = FileStore::Open(path, 8);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInvalidArgument);
  std::string message(second.status().message());
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("created for 4 users"));
  EXPECT_THAT(message, HasSubstr("says 8"));
}

TEST(FileStoreTest, MissingDirectoryIsNotFoundNamingIt) {
  TempDir dir;
  const std::string missing_dir = dir.File("no-such-dir");
  auto store = FileStore::Open(missing_dir + "/store", 2);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("the directory " + missing_dir + " does not exist"));
}

TEST(FileStoreTest, DirectoryPathIsInvalidArgument) {
  TempDir dir;
  auto store = FileStore::Open(dir.path(), 2);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr(dir.path()));
}

TEST(FileStoreTest, BadArgumentsAreInvalidArgument) {
  EXPECT_EQ(FileStore::Open("", 1).status().code(), absl::StatusCode::kInvalidArgument);
  TempDir dir;
  auto zero = FileStore::Open(dir.File("store"), 0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("num_users is 0"));
}

TEST(FileStoreTest, PermissionDeniedNamesThePath) {
  TempDir dir;
  const std::string locked_dir = dir.File("locked");
  ASSERT_EQ(mkdir(locked_dir.c_str(), 0700), 0);
  const std::string path = locked_dir + "/store";
  ASSERT_EQ(chmod(locked_dir.c_str(), 0), 0);
  // Root ignores permissions, so the open runs in a child that drops the capabilities for that.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  std::fflush(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    if (!DropFileCapabilities()) _exit(2);
    absl::Status s = FileStore::Open(path, 2).status();
    std::string report = absl::StrCat(static_cast<int>(s.code()), " ", s.message());
    if (write(pipe_fds[1], report.data(), report.size()) < 0) _exit(4);
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string report;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) report.append(buf, n);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  chmod(locked_dir.c_str(), 0700);  // so TempDir can remove it
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_NE(WEXITSTATUS(status), 2) << "could not drop the capabilities";
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_THAT(report,
              HasSubstr(absl::StrCat(static_cast<int>(absl::StatusCode::kPermissionDenied), " ")));
  EXPECT_THAT(report, HasSubstr(path));
  EXPECT_THAT(report, HasSubstr("Permission denied"));
}

TEST(FileStoreTest, ForeignFileIsRefused) {
  TempDir dir;
  const std::string path = dir.File("notes.txt");
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("some unrelated file contents\n", f);
  std::fclose(f);
  auto store = FileStore::Open(path, 2);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr(path));
  EXPECT_TRUE(Exists(path)) << "a foreign file must be left alone";
}

TEST(FileStoreTest, TornRecordOfADeadWriterIsCutOff) {
  TempDir dir;
  const std::string path = dir.File("store");
  auto a = FileStore::Open(path, 100);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->Set("before", "1").ok());
  // What a writer killed mid-record leaves: a record header promising more bytes than follow.
  FILE* f = std::fopen(path.c_str(), "a");
  ASSERT_NE(f, nullptr);
  const std::string torn =
      std::string("S\x05\0\0\0\x03\0\0\0", 9) + "ab";  // key_len 5, value_len 3
  ASSERT_EQ(std::fwrite(torn.data(), 1, torn.size(), f), torn.size());
  std::fclose(f);

  auto b = FileStore::Open(path, 100);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->Get("before", kLong).value_or("?"), "1");
  ASSERT_TRUE((*b)->Set("after", "2").ok());
  EXPECT_EQ((*a)->Get("after", kLong).value_or("?"), "2");
  EXPECT_EQ((*a)->NumKeys().value_or(-1), 2);
}

TEST(FileStoreTest, HeldLockTimesOutNamingThePath) {
  TempDir dir;
  const std::string path = dir.File("store");
  auto store = FileStore::Open(path, 100);
  ASSERT_TRUE(store.ok()) << store.status();
  // A separate open file stands for another process holding the lock.
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  (*store)->set_timeout(absl::Milliseconds(200));
  absl::Status s = (*store)->Set("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(std::string(s.message()), HasSubstr("lock"));
  // Get with a short timeout reports the missing key even though the lock is what blocked it.
  absl::Status g = (*store)->Get("k", absl::Milliseconds(100)).status();
  EXPECT_EQ(g.code(), absl::StatusCode::kDeadlineExceeded) << g;
  flock(fd, LOCK_UN);
  close(fd);
  (*store)->set_timeout(kLong);
  EXPECT_TRUE((*store)->Set("k", "v").ok());
}

}  // namespace
}  // namespace paddle
