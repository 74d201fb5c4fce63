// The contract every Store implementation keeps, as one parameterized gtest suite.
//
// Each store's test file defines a StoreFixture that makes clients of one fresh backing store and
// instantiates the suite with it:
//
//   INSTANTIATE_TEST_SUITE_P(Tcp, StoreContractTest,
//       ::testing::Values(StoreContractParam{"tcp", [] { return std::make_unique<TcpFixture>();
//       }}), StoreContractParamName);
//
// The suite checks values (binary, empty, 1 MiB), timeouts that name the missing keys, atomic Add
// and CompareSet under contention, Wait, Check, DeleteKey, NumKeys, PrefixStore isolation and many
// threads. Stores that processes can share also instantiate StoreProcessContractTest (several
// forked processes at once) with the same parameter.
#ifndef TESTS_COLLECTIVE_STORE_STORE_CONTRACT_H_
#define TESTS_COLLECTIVE_STORE_STORE_CONTRACT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/store.h"

namespace paddle {

class StoreFixture {
 public:
  virtual ~StoreFixture() = default;
  // A new client of the same backing store (each call a new connection/handle).
  virtual absl::StatusOr<std::unique_ptr<Store>> NewClient() = 0;
};

struct StoreContractParam {
  std::string name;
  std::function<std::unique_ptr<StoreFixture>()> make_fixture;
  // Adds per thread (of 8) in ConcurrentAddsAreExact. Fewer for a store whose every Add is a
  // consensus round trip (etcd: a compare-and-swap retried under contention, ~10 ms each on this
  // machine); a hundred per thread still keeps all eight colliding for the whole run.
  int contended_adds = 1000;
};

class StoreContractTest : public ::testing::TestWithParam<StoreContractParam> {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A fresh client; fails the test (returns nullptr) if the fixture cannot make one.
  std::unique_ptr<Store> NewClient();

  std::unique_ptr<StoreFixture> fixture_;
  std::unique_ptr<Store> store_;  // the first client, made in SetUp
};

// The multi-process part of the contract, for stores whose clients may live in forked processes.
class StoreProcessContractTest : public StoreContractTest {};

std::string StoreContractParamName(const ::testing::TestParamInfo<StoreContractParam>& info);

}  // namespace paddle

#endif  // TESTS_COLLECTIVE_STORE_STORE_CONTRACT_H_
