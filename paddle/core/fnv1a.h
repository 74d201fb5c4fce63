// 64-bit FNV-1a: a hash of bytes that is the same in every process and every build (std::hash
// and absl::Hash need not be), for names and fingerprints that ranks or runs compare.
#ifndef PADDLE_CORE_FNV1A_H_
#define PADDLE_CORE_FNV1A_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace paddle {

inline uint64_t Fnv1a(absl::string_view bytes) {
  uint64_t hash = 14695981039346656037ull;  // the offset basis
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace paddle

#endif  // PADDLE_CORE_FNV1A_H_
