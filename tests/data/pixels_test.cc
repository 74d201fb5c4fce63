// NormalizePixels (Note [One pixel conversion]): every byte value, at every position of a block
// and of a tail, gives the same bits, and they are (p / 255 - mean) / std within float rounding.
#include "paddle/data/pixels.h"

#include <cstdint>
#include <vector>

#include "absl/base/casts.h"
#include "gtest/gtest.h"

namespace paddle {
namespace data {
namespace {

TEST(PixelsTest, EveryValueIsTheSameAtEveryPositionAndCloseToTheFormula) {
  const PixelNormalization norm = PixelNormalization::MeanStd(0.2860f, 0.3530f);
  std::vector<uint8_t> all(256);
  for (int p = 0; p < 256; ++p) all[p] = static_cast<uint8_t>(p);
  std::vector<float> reference(256);
  NormalizePixels(all.data(), all.size(), norm, reference.data());
  for (int p = 0; p < 256; ++p) {
    EXPECT_NEAR(reference[p], (p / 255.0f - 0.2860f) / 0.3530f, 1e-6) << p;
  }
  // Every length 1..40 from every offset 0..15: tails, short inputs and blocks agree bit for bit.
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t n = 1; n <= 40; ++n) {
      std::vector<uint8_t> in(offset + n);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 37 + n * 11);
      std::vector<float> out(n + 1, -7.0f);
      NormalizePixels(in.data() + offset, n, norm, out.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(absl::bit_cast<uint32_t>(out[i]),
                  absl::bit_cast<uint32_t>(reference[in[offset + i]]))
            << offset << " " << n << " " << i;
      }
      EXPECT_EQ(out[n], -7.0f) << "wrote past the end, n=" << n;
    }
  }
}

TEST(PixelsTest, DefaultScalesToTheUnitInterval) {
  const uint8_t in[3] = {0, 51, 255};
  float out[3];
  NormalizePixels(in, 3, PixelNormalization{}, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], 0.2f);
  EXPECT_FLOAT_EQ(out[2], 1.0f);
  NormalizePixels(in, 0, PixelNormalization{}, nullptr);  // nothing to do, nothing touched
}

}  // namespace
}  // namespace data
}  // namespace paddle
