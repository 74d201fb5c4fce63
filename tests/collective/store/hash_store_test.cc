// HashStore: the contract suite, plus what only an in-process store can show.
#include "paddle/collective/store/hash_store.h"

#include <memory>

#include "gtest/gtest.h"
#include "tests/collective/store/store_contract.h"

namespace paddle {
namespace {

// Every client is the same HashStore, seen through a forwarding wrapper so that destroying a
// client does not destroy the store.
class SharedClient : public Store {
 public:
  explicit SharedClient(std::shared_ptr<HashStore> store) : store_(std::move(store)) {}
  absl::Status Set(absl::string_view k, absl::string_view v) override { return store_->Set(k, v); }
  absl::StatusOr<std::string> Get(absl::string_view k, absl::Duration t) override {
    return store_->Get(k, t);
  }
  absl::StatusOr<int64_t> Add(absl::string_view k, int64_t d) override { return store_->Add(k, d); }
  absl::StatusOr<std::string> CompareSet(absl::string_view k, absl::string_view e,
                                         absl::string_view d) override {
    return store_->CompareSet(k, e, d);
  }
  absl::Status Wait(absl::Span<const std::string> k, absl::Duration t) override {
    return store_->Wait(k, t);
  }
  absl::StatusOr<bool> Check(absl::Span<const std::string> k) override { return store_->Check(k); }
  absl::StatusOr<bool> DeleteKey(absl::string_view k) override { return store_->DeleteKey(k); }
  absl::StatusOr<int64_t> NumKeys() override { return store_->NumKeys(); }
  std::string Describe() const override { return store_->Describe(); }

 private:
  std::shared_ptr<HashStore> store_;
};

class HashStoreFixture : public StoreFixture {
 public:
  absl::StatusOr<std::unique_ptr<Store>> NewClient() override {
    return std::unique_ptr<Store>(std::make_unique<SharedClient>(store_));
  }

 private:
  std::shared_ptr<HashStore> store_ = std::make_shared<HashStore>();
};

INSTANTIATE_TEST_SUITE_P(Hash, StoreContractTest,
                         ::testing::Values(StoreContractParam{
                             "hash", [] { return std::make_unique<HashStoreFixture>(); }}),
                         StoreContractParamName);

TEST(HashStoreTest, AddOverflowIsInvalidArgument) {
  HashStore store;
  ASSERT_TRUE(store.Set("big", "9223372036854775807").ok());
  absl::StatusOr<int64_t> v = store.Add("big", 1);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  EXPECT_EQ(store.Get("big", absl::Seconds(1)).value_or("?"), "9223372036854775807");
}

TEST(HashStoreTest, TimeoutMessageNamesStoreAndSetting) {
  HashStore store;
  absl::Status s = store.Wait({"k"}, absl::Milliseconds(10));
  ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("HashStore"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("PADDLE_STORE_TIMEOUT_S"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace paddle
