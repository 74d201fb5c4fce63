// Counter-based random numbers (Philox4x32-10; Salmon, Moraes, Dror and Shaw, SC'11).
//
// A counter-based generator is a pure function of (key, counter), so any element of any stream
// can be drawn directly without stepping through the ones before it. That is what data-parallel
// training needs: all ranks can draw the same stream (same seed and stream id: identical weight
// initialisation, identical shuffles) or disjoint rank-specific streams (stream id = rank: dropout
// masks) reproducibly, no matter how the work is split across threads or ranks.
//
// Here the 64-bit key is the seed and the 128-bit counter is (stream id, block index), so streams
// never overlap. Each block gives four 32-bit words.
#ifndef PADDLE_CORE_PHILOX_H_
#define PADDLE_CORE_PHILOX_H_

#include <array>
#include <cstdint>

namespace paddle {

class Philox {
 public:
  using Block = std::array<uint32_t, 4>;

  // The raw generator: ten rounds of Philox4x32 on `counter` under `key`.
  static Block Generate(Block counter, std::array<uint32_t, 2> key);

  Philox(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  // Block `index` of this stream, independent of any state.
  Block BlockAt(uint64_t index) const;
  // Word `index` of this stream (word i is word i % 4 of block i / 4).
  uint32_t WordAt(uint64_t index) const { return BlockAt(index / 4)[index % 4]; }

  // Sequential draws; the position counts 32-bit words from the start of the stream.
  uint32_t NextU32();
  uint64_t NextU64();
  float NextFloat();    // uniform in [0, 1), 24 random bits
  double NextDouble();  // uniform in [0, 1), 53 random bits
  float NextNormal();   // standard normal (Box-Muller, one value per pair of uniforms)
  void Skip(uint64_t words) { position_ += words; }
  uint64_t position() const { return position_; }

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t position_ = 0;
  uint64_t cached_index_ = ~uint64_t{0};
  Block cached_{};
};

}  // namespace paddle

#endif  // PADDLE_CORE_PHILOX_H_
