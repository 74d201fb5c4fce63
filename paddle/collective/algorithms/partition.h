// How algorithms cut a buffer: into blocks (one per rank, or per power-of-two group member) and
// blocks into pieces (the unit a pipeline moves). Every rank computes the same cuts from the same
// counts, so both ends of a message agree on its size without telling each other. Parts differ
// by at most one element, the larger ones first, so a count that the number of parts does not
// divide (1000003 over 7 ranks) needs no padding.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_PARTITION_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_PARTITION_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "paddle/core/dtype.h"

namespace paddle {

// A run of elements: [offset, offset + count).
struct ElementRange {
  int64_t offset = 0;
  int64_t count = 0;
};

// Part `index` of `count` elements cut into `parts` near-equal parts.
inline ElementRange EvenPart(int64_t count, int64_t parts, int64_t index) {
  const int64_t base = count / parts;
  const int64_t extra = count % parts;
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

inline std::vector<int64_t> EvenCounts(int64_t count, int64_t parts) {
  std::vector<int64_t> counts(static_cast<size_t>(parts));
  for (int64_t i = 0; i < parts; ++i)
    counts[static_cast<size_t>(i)] = EvenPart(count, parts, i).count;
  return counts;
}

// offsets[i] = counts[0] + ... + counts[i - 1].
inline std::vector<int64_t> PrefixOffsets(absl::Span<const int64_t> counts) {
  std::vector<int64_t> offsets(counts.size());
  int64_t sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    offsets[i] = sum;
    sum += counts[i];
  }
  return offsets;
}

// i modulo n in [0, n), for rank arithmetic around a ring (i may be negative).
inline int ModRank(int64_t i, int n) { return static_cast<int>(((i % n) + n) % n); }

// The number of pieces to cut each block into so that the largest block's pieces hold at most
// `piece_bytes`: at least 1. Every block gets the same number of pieces (the smaller blocks'
// pieces are smaller, some possibly empty), so step s of a ring moves pieces 0..P-1 of one block
// whichever block that is.
inline int64_t PiecesPerBlock(absl::Span<const int64_t> counts, DType dtype, size_t piece_bytes) {
  int64_t largest = 0;
  for (int64_t c : counts) largest = std::max(largest, c);
  const int64_t piece_elements =
      std::max<int64_t>(1, static_cast<int64_t>(piece_bytes / DTypeSize(dtype)));
  return std::max<int64_t>(1, (largest + piece_elements - 1) / piece_elements);
}

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_PARTITION_H_
