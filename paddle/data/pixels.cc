#include "paddle/data/pixels.h"

#include <emmintrin.h>

#include <cstring>

namespace paddle {
namespace data {

// Note [One pixel conversion]
// Decoding is the one per-epoch cost that shards add over an in-memory data set (60,000 images
// of 784 pixels are converted again every epoch), and a 256-entry table lookup per pixel costs
// about two cycles. Sixteen pixels at a time with SSE2 (baseline x86-64: no dispatch) widen the
// bytes to int32, convert, divide and add (a division, not a multiplication by the inverse, so
// that unnormalized pixels are exactly p / 255). Every pixel, the tail included (through a zeroed
// 16-byte block), takes the same packed instructions in the one compiled copy of this function,
// so both loaders produce the same bits for the same byte however a build contracts or
// vectorizes other code. The normalized form rounds differently from (p / 255 - mean) / std: the
// two differ by up to about 1e-7 near p = 255 mean, where the subtraction cancels.
void NormalizePixels(const uint8_t* in, size_t n, PixelNormalization norm, float* out) {
  const __m128 divisor = _mm_set1_ps(norm.divisor);
  const __m128 bias = _mm_set1_ps(norm.bias);
  const __m128i zero = _mm_setzero_si128();
  auto sixteen = [&](const uint8_t* src, float* dst) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i lo = _mm_unpacklo_epi8(bytes, zero);
    const __m128i hi = _mm_unpackhi_epi8(bytes, zero);
    const __m128i words[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
                              _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
    for (int q = 0; q < 4; ++q) {
      const __m128 x = _mm_cvtepi32_ps(words[q]);
      _mm_storeu_ps(dst + 4 * q, _mm_add_ps(_mm_div_ps(x, divisor), bias));
    }
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) sixteen(in + i, out + i);
  if (i < n) {
    uint8_t src[16] = {};
    float dst[16];
    std::memcpy(src, in + i, n - i);
    sixteen(src, dst);
    std::memcpy(out + i, dst, (n - i) * sizeof(float));
  }
}

PixelNormalization PixelNormalization::MeanStd(float mean, float std) {
  return PixelNormalization{255.0f * std, -mean / std};
}

}  // namespace data
}  // namespace paddle
