#include "paddle/core/philox.h"

#include <cmath>

namespace paddle {
namespace {

// Multipliers and Weyl key increments of Philox4x32 (from the paper).
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

}  // namespace

Philox::Block Philox::Generate(Block ctr, std::array<uint32_t, 2> key) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, ctr[0], &hi0, &lo0);
    MulHiLo(kMul1, ctr[2], &hi1, &lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

Philox::Block Philox::BlockAt(uint64_t index) const {
  const Block counter = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                         static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)};
  return Generate(counter, {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
}

uint32_t Philox::NextU32() {
  const uint64_t block = position_ / 4;
  if (block != cached_index_) {
    cached_ = BlockAt(block);
    cached_index_ = block;
  }
  return cached_[position_++ % 4];
}

uint64_t Philox::NextU64() {
  const uint64_t lo = NextU32();
  return (static_cast<uint64_t>(NextU32()) << 32) | lo;
}

float Philox::NextFloat() { return static_cast<float>(NextU32() >> 8) * 0x1.0p-24f; }

double Philox::NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

float Philox::NextNormal() {
  // 1 - u keeps the logarithm's argument in (0, 1].
  const double u1 = 1.0 - NextDouble();
  const double u2 = NextDouble();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace paddle
