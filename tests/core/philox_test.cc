#include "paddle/core/philox.h"

#include <cmath>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace paddle {
namespace {

// Known-answer vectors published with the Random123 library (philox4x32, 10 rounds).
TEST(PhiloxTest, KnownAnswers) {
  EXPECT_EQ(Philox::Generate({0, 0, 0, 0}, {0, 0}),
            (Philox::Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(Philox::Generate({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                             {0xffffffffu, 0xffffffffu}),
            (Philox::Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(Philox::Generate({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                             {0xa4093822u, 0x299f31d0u}),
            (Philox::Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(PhiloxTest, SameSeedAndStreamGiveSameSequence) {
  Philox a(42, 7), b(42, 7);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.NextU32(), b.NextU32()) << i;
}

TEST(PhiloxTest, RandomAccessMatchesSequentialAndSkip) {
  Philox seq(1234, 3);
  std::vector<uint32_t> words;
  for (int i = 0; i < 103; ++i) words.push_back(seq.NextU32());
  Philox ra(1234, 3);
  for (uint64_t i = 0; i < words.size(); ++i) EXPECT_EQ(ra.WordAt(i), words[i]) << i;
  Philox skipped(1234, 3);
  skipped.Skip(57);
  EXPECT_EQ(skipped.NextU32(), words[57]);
  EXPECT_EQ(skipped.position(), 58u);
}

TEST(PhiloxTest, StreamsAndSeedsDiffer) {
  // Rank-specific streams: no shared words among the first draws of 8 streams.
  std::set<uint32_t> seen;
  for (uint64_t stream = 0; stream < 8; ++stream) {
    Philox p(99, stream);
    for (int i = 0; i < 256; ++i) seen.insert(p.NextU32());
  }
  EXPECT_GT(seen.size(), 8u * 256u - 4u);  // 32-bit collisions among 2048 draws are rare
  EXPECT_NE(Philox(1, 0).NextU32(), Philox(2, 0).NextU32());
  // High bits of seed and stream matter too.
  EXPECT_NE(Philox(1, 0).BlockAt(0), Philox(1 + (uint64_t{1} << 40), 0).BlockAt(0));
  EXPECT_NE(Philox(1, 0).BlockAt(0), Philox(1, uint64_t{1} << 40).BlockAt(0));
}

TEST(PhiloxTest, UniformAndNormalMoments) {
  Philox p(2024, 0);
  constexpr int kN = 200000;
  double sum = 0, sum_sq = 0, nsum = 0, nsum_sq = 0;
  for (int i = 0; i < kN; ++i) {
    const float u = p.NextFloat();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sum_sq += u * u;
    const double d = p.NextDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    const float z = p.NextNormal();
    ASSERT_TRUE(std::isfinite(z));
    nsum += z;
    nsum_sq += z * z;
  }
  // Mean and variance within ~6 standard errors.
  EXPECT_NEAR(sum / kN, 0.5, 0.004);
  EXPECT_NEAR(sum_sq / kN - (sum / kN) * (sum / kN), 1.0 / 12, 0.002);
  EXPECT_NEAR(nsum / kN, 0.0, 0.014);
  EXPECT_NEAR(nsum_sq / kN, 1.0, 0.02);
}

}  // namespace
}  // namespace paddle
