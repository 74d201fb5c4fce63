// Helpers shared by the checkpoint tests: scratch directories under TEST_TMPDIR, tensors whose
// bytes come from (seed, index) so any mismatch is visible, and whole-file read/write for
// corrupting checkpoints on purpose.
#ifndef TESTS_CHECKPOINT_CHECKPOINT_TESTING_H_
#define TESTS_CHECKPOINT_CHECKPOINT_TESTING_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"
#include "paddle/core/philox.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace checkpoint {
namespace testing {

// A fresh, empty directory named after the running test.
inline std::string FreshDir(const std::string& suffix = "") {
  const char* base = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" +
                          info->test_suite_name() + "." + info->name() + suffix;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A contiguous CPU tensor whose byte i is Philox(seed, 0) word i's low byte. Any bit pattern is
// fine: checkpoints move bytes, they never interpret them.
inline Tensor PatternTensor(Shape shape, DType dtype, uint64_t seed) {
  Tensor t = *Tensor::Empty(shape, dtype);
  Philox rng(seed, 0);
  auto* bytes = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng.NextU32());
  return t;
}

// True when `a` and `b` have the same dtype, shape and elements (any strides).
inline bool SameTensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = *a.Contiguous();
  Tensor cb = *b.Contiguous();
  return a.nbytes() == 0 || std::memcmp(ca.data(), cb.data(), a.nbytes()) == 0;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

}  // namespace testing
}  // namespace checkpoint
}  // namespace paddle

#endif  // TESTS_CHECKPOINT_CHECKPOINT_TESTING_H_
