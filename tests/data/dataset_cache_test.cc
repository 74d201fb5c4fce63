// The data set cache (Note [Cache folders]): an entry is made once and reused, a failed or killed
// maker leaves nothing that is read, a new key makes a new folder and removes the old one,
// concurrent makers make it once; and the Fashion-MNIST shards made into it read back whole.
#include "paddle/data/dataset_cache.h"

#include <sys/stat.h>
#include <sys/time.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/data/shard_set.h"
#include "paddle/data/shard_writer.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace data {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

class DatasetCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/cache-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    env_ = std::make_unique<ScopedEnv>("PADDLE_CACHE_DIR", root_.c_str());
  }
  // A maker that writes one file and counts its calls.
  MakeFolderFn Maker(std::atomic<int>* calls, const std::string& text = "data") {
    return [calls, text](const std::string& dir) {
      ++*calls;
      std::ofstream(dir + "/data.txt") << text;
      return absl::OkStatus();
    };
  }
  std::vector<std::string> Entries() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(root_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string root_;
  std::unique_ptr<ScopedEnv> env_;
};

TEST_F(DatasetCacheTest, MadeOnceThenReused) {
  std::atomic<int> calls{0};
  absl::StatusOr<std::string> first = CachedFolder("thing", "key 1", Maker(&calls));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(fs::path(*first).parent_path(), fs::path(root_));
  absl::StatusOr<std::string> again = CachedFolder("thing", "key 1", Maker(&calls));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(calls.load(), 1);
  std::ifstream key(*first + "/CACHE_KEY");
  std::string line;
  std::getline(key, line);
  EXPECT_EQ(line, "key 1");
}

TEST_F(DatasetCacheTest, AFailedMakerLeavesNothingAndNamesTheEntry) {
  absl::StatusOr<std::string> made = CachedFolder("thing", "k", [](const std::string& dir) {
    std::ofstream(dir + "/half") << "half";
    return absl::DataLossError("disk full");
  });
  EXPECT_EQ(made.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(made.status().message()),
              AllOf(HasSubstr("thing"), HasSubstr("disk full")));
  EXPECT_EQ(Entries(), std::vector<std::string>{"thing.lock"});
}

TEST_F(DatasetCacheTest, AKilledMakersPartialFolderIsNeverReadAndIsRemoved) {
  std::atomic<int> calls{0};
  absl::StatusOr<std::string> made = CachedFolder("thing", "k", Maker(&calls, "good"));
  ASSERT_TRUE(made.ok());
  const std::string folder = *made;
  fs::remove_all(folder);
  fs::create_directories(folder + ".partial");  // what a SIGKILLed maker leaves
  std::ofstream(folder + ".partial/data.txt") << "torn";
  made = CachedFolder("thing", "k", Maker(&calls, "good"));
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(calls.load(), 2);
  std::string text;
  std::ifstream(*made + "/data.txt") >> text;
  EXPECT_EQ(text, "good");
  EXPECT_FALSE(fs::exists(folder + ".partial"));
}

TEST_F(DatasetCacheTest, ANewKeyIsANewFolderAndTheOldOneGoes) {
  std::atomic<int> calls{0};
  absl::StatusOr<std::string> v1 = CachedFolder("thing", "version 1", Maker(&calls));
  absl::StatusOr<std::string> other = CachedFolder("other", "version 1", Maker(&calls));
  absl::StatusOr<std::string> v2 = CachedFolder("thing", "version 2", Maker(&calls));
  ASSERT_TRUE(v1.ok() && v2.ok() && other.ok());
  EXPECT_NE(*v1, *v2);
  EXPECT_FALSE(fs::exists(*v1));
  EXPECT_TRUE(fs::exists(*v2));
  EXPECT_TRUE(fs::exists(*other));  // another name is left alone
  EXPECT_EQ(calls.load(), 3);
}

TEST_F(DatasetCacheTest, ConcurrentMakersMakeItOnce) {
  std::atomic<int> calls{0};
  MakeFolderFn slow = [&calls](const std::string& dir) {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ofstream(dir + "/data.txt") << "x";
    return absl::OkStatus();
  };
  std::vector<std::thread> threads;
  std::vector<absl::StatusOr<std::string>> results(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { results[i] = CachedFolder("thing", "k", slow); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(calls.load(), 1);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, *results[0]);
  }
}

TEST_F(DatasetCacheTest, AHeldLockIsADeadlineNamingTheLockFile) {
  std::atomic<int> calls{0};
  absl::StatusOr<std::string> inner_result;
  absl::StatusOr<std::string> outer = CachedFolder("thing", "k", [&](const std::string& dir) {
    // While this maker holds the lock, a second one gives up after its wait.
    inner_result = CachedFolder("thing", "k", Maker(&calls), absl::Milliseconds(300));
    return absl::OkStatus();
  });
  ASSERT_TRUE(outer.ok());
  EXPECT_EQ(inner_result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(inner_result.status().message()), HasSubstr("thing.lock"));
}

TEST_F(DatasetCacheTest, RootFromHomeWithoutTheVariable) {
  ScopedEnv no_dir("PADDLE_CACHE_DIR", nullptr);
  ScopedEnv home("HOME", "/home/someone");
  absl::StatusOr<std::string> root = DatasetCacheRoot();
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(*root, "/home/someone/.cache/paddle");
  ScopedEnv no_home("HOME", nullptr);
  EXPECT_EQ(DatasetCacheRoot().status().code(), absl::StatusCode::kFailedPrecondition);
}

// Fashion-MNIST's test split as shards in the cache: whole, reused, and made again when a source
// file changes.
TEST_F(DatasetCacheTest, FashionMnistShardsReadBackAndFollowTheirSources) {
  const std::string source = absl::StrCat(root_, "-source");
  fs::remove_all(source);
  fs::create_directories(source);
  for (const char* f : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    fs::copy_file(absl::StrCat(kDefaultFashionMnistDir, "/", f), absl::StrCat(source, "/", f));
  }
  absl::StatusOr<std::string> dir = FashionMnistShards(source, Split::kTest);
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<ShardSet> set = LoadShardSet(*dir);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->NumRecords(), 10000);
  EXPECT_EQ(set->RecordBytes(), 8 + 1 + 784);
  absl::StatusOr<std::string> again = FashionMnistShards(source, Split::kTest);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *dir);
  // A newer labels file: another entry, and the old one is gone.
  const std::string labels = source + "/t10k-labels-idx1-ubyte.gz";
  struct timeval times[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(utimes(labels.c_str(), times), 0);
  absl::StatusOr<std::string> remade = FashionMnistShards(source, Split::kTest);
  ASSERT_TRUE(remade.ok()) << remade.status();
  EXPECT_NE(*remade, *dir);
  EXPECT_FALSE(fs::exists(*dir));
  // A missing source is LoadFashionMnist's error, which says how to install it.
  absl::StatusOr<std::string> missing = FashionMnistShards(source + "/nowhere", Split::kTest);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace data
}  // namespace paddle
