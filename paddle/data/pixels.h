// Byte pixels to normalized float32, shared by every path that decodes images (the in-memory
// Fashion-MNIST loader and the task feed's shard decoder), so that a sample is the same float
// whichever path read it (Note [One pixel conversion]).
#ifndef PADDLE_DATA_PIXELS_H_
#define PADDLE_DATA_PIXELS_H_

#include <cstddef>
#include <cstdint>

namespace paddle {
namespace data {

// The affine map of a pixel p in 0..255: p / divisor + bias, the quotient and the sum each
// rounded to float32. The default is exactly p / 255.
struct PixelNormalization {
  float divisor = 255.0f;
  float bias = 0.0f;

  // (p / 255 - mean) / std as one division and one add.
  static PixelNormalization MeanStd(float mean, float std);
};

// out[i] = in[i] / divisor + bias for i < n. `in` and `out` may not overlap.
void NormalizePixels(const uint8_t* in, size_t n, PixelNormalization norm, float* out);

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_PIXELS_H_
