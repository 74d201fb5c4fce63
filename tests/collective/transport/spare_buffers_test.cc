// SpareBuffers: which buffers are kept and which one a later message gets (Note [Spare
// unexpected-message buffers] in paddle/collective/transport/spare_buffers.cc).
#include "paddle/collective/transport/spare_buffers.h"

#include <cstddef>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace paddle {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(SpareBuffersTest, ReusesAKeptBufferThatFitsWithinTwiceTheSize) {
  SpareBuffers spares;
  SpareBuffers::Buffer first = spares.Take(kMiB);
  ASSERT_NE(first.data, nullptr);
  EXPECT_EQ(first.capacity, kMiB);
  char* address = first.data.get();
  spares.GiveBack(std::move(first));
  EXPECT_EQ(spares.size(), 1u);

  SpareBuffers::Buffer again = spares.Take(kMiB / 2 + 1);  // fits, and not twice too large
  EXPECT_EQ(again.data.get(), address);
  EXPECT_EQ(again.capacity, kMiB);
  EXPECT_EQ(spares.size(), 0u);
  spares.GiveBack(std::move(again));

  SpareBuffers::Buffer small = spares.Take(kMiB / 2 - 1);  // would waste over half: a new one
  EXPECT_NE(small.data.get(), address);
  EXPECT_EQ(small.capacity, kMiB / 2 - 1);
  SpareBuffers::Buffer large = spares.Take(kMiB + 1);  // does not fit: a new one
  EXPECT_NE(large.data.get(), address);
  EXPECT_EQ(spares.size(), 1u);
}

TEST(SpareBuffersTest, PicksTheSmallestThatFits) {
  SpareBuffers spares;
  SpareBuffers::Buffer a = spares.Take(2 * kMiB);
  SpareBuffers::Buffer b = spares.Take(3 * kMiB / 2);
  char* smaller = b.data.get();
  spares.GiveBack(std::move(a));
  spares.GiveBack(std::move(b));
  EXPECT_EQ(spares.Take(kMiB + 1).data.get(), smaller);
}

TEST(SpareBuffersTest, KeepsNeitherSmallBuffersNorMoreThanTheLimits) {
  SpareBuffers spares;
  spares.GiveBack(spares.Take(SpareBuffers::kMinBytes - 1));
  EXPECT_EQ(spares.size(), 0u);
  spares.GiveBack(SpareBuffers::Buffer{});  // a failed allocation
  EXPECT_EQ(spares.size(), 0u);

  // At most kMaxSpares: the smallest make room for a newcomer.
  auto size_of = [](size_t k) { return SpareBuffers::kMinBytes + k * 4096; };
  for (size_t k = 1; k <= SpareBuffers::kMaxSpares + 2; ++k) {
    spares.GiveBack(spares.Take(size_of(k)));
  }
  EXPECT_EQ(spares.size(), SpareBuffers::kMaxSpares);
  // The two smallest are gone: the third is the smallest that fits.
  EXPECT_EQ(spares.Take(size_of(1)).capacity, size_of(3));
  EXPECT_EQ(spares.size(), SpareBuffers::kMaxSpares - 1);
  spares.clear();
  for (size_t mib = 4; mib <= 6; ++mib) spares.GiveBack(spares.Take(mib * kMiB));
  EXPECT_EQ(spares.size(), 3u);

  // Over 128 MiB in all, the smallest make room too; one over the limit alone is not kept.
  spares.GiveBack(spares.Take(100 * kMiB));
  EXPECT_EQ(spares.size(), 4u);             // 4, 5, 6 and 100 MiB: 115 MiB
  spares.GiveBack(spares.Take(20 * kMiB));  // 135 MiB: the 4 and 5 MiB spares go
  EXPECT_EQ(spares.size(), 3u);
  EXPECT_EQ(spares.Take(5 * kMiB).capacity, 6 * kMiB);  // the smallest fit left
  spares.GiveBack(spares.Take(129 * kMiB));
  EXPECT_EQ(spares.size(), 2u);
  spares.clear();
  EXPECT_EQ(spares.size(), 0u);
}

// A broadcast root that runs ahead (Note [Spare unexpected-message buffers]): dozens of
// messages of one size arrive before their receives; once copied out, every buffer is kept, and
// the next burst reuses them all instead of allocating (and page-faulting) anew.
TEST(SpareBuffersTest, KeepsABurstOfSameSizeMessages) {
  constexpr size_t kBurst = 40;                 // 128 KiB messages in flight
  constexpr size_t kBytes = size_t{128} << 10;  // as in a 128 KiB broadcast
  static_assert(kBurst <= SpareBuffers::kMaxSpares, "the burst must fit the count limit");
  static_assert(kBurst * kBytes <= SpareBuffers::kMaxSpareBytes, "and the byte limit");
  SpareBuffers spares;
  std::vector<SpareBuffers::Buffer> in_flight;
  std::set<const char*> addresses;
  for (size_t i = 0; i < kBurst; ++i) {
    in_flight.push_back(spares.Take(kBytes));
    addresses.insert(in_flight.back().data.get());
  }
  for (auto& buffer : in_flight) spares.GiveBack(std::move(buffer));
  EXPECT_EQ(spares.size(), kBurst);
  in_flight.clear();
  for (size_t i = 0; i < kBurst; ++i) {
    in_flight.push_back(spares.Take(kBytes));
    EXPECT_EQ(addresses.count(in_flight.back().data.get()), 1u) << "message " << i;
  }
  EXPECT_EQ(spares.size(), 0u);
}

}  // namespace
}  // namespace paddle
