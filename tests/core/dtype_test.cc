// DType sizes, names, parsing and the DTypeOf trait. The numeric values are checked too: they are
// part of the wire format, so renumbering must fail a test rather than silently break old peers.
#include "paddle/core/dtype.h"

#include <cstdint>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace {

using ::testing::HasSubstr;

constexpr DType kAll[] = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                          DType::kBFloat16, DType::kInt8,    DType::kUInt8,
                          DType::kInt32,    DType::kInt64,   DType::kBool};

template <typename T>
constexpr bool SizeMatches() {
  return DTypeSize(DTypeOf<T>::value) == sizeof(T);
}
static_assert(SizeMatches<float>() && SizeMatches<double>() && SizeMatches<Half>() &&
                  SizeMatches<BFloat16>() && SizeMatches<int8_t>() && SizeMatches<uint8_t>() &&
                  SizeMatches<int32_t>() && SizeMatches<int64_t>() && SizeMatches<bool>(),
              "DTypeSize disagrees with sizeof");

TEST(DTypeTest, TraitMapsEachType) {
  EXPECT_EQ(DTypeOf<float>::value, DType::kFloat32);
  EXPECT_EQ(DTypeOf<double>::value, DType::kFloat64);
  EXPECT_EQ(DTypeOf<Half>::value, DType::kFloat16);
  EXPECT_EQ(DTypeOf<BFloat16>::value, DType::kBFloat16);
  EXPECT_EQ(DTypeOf<int8_t>::value, DType::kInt8);
  EXPECT_EQ(DTypeOf<uint8_t>::value, DType::kUInt8);
  EXPECT_EQ(DTypeOf<int32_t>::value, DType::kInt32);
  EXPECT_EQ(DTypeOf<int64_t>::value, DType::kInt64);
  EXPECT_EQ(DTypeOf<bool>::value, DType::kBool);
}

TEST(DTypeTest, WireValuesAreStable) {
  EXPECT_EQ(sizeof(DType), 1u);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(static_cast<int>(kAll[i]), i);
}

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kInt8), 1u);
  EXPECT_EQ(DTypeSize(DType::kUInt8), 1u);
  EXPECT_EQ(DTypeSize(DType::kInt32), 4u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
}

TEST(DTypeTest, FloatingPoint) {
  std::set<DType> floating;
  for (DType d : kAll) {
    if (IsFloatingPoint(d)) floating.insert(d);
  }
  EXPECT_EQ(floating,
            (std::set<DType>{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}));
}

TEST(DTypeTest, CanonicalNames) {
  EXPECT_EQ(DTypeName(DType::kFloat32), "float32");
  EXPECT_EQ(DTypeName(DType::kFloat64), "float64");
  EXPECT_EQ(DTypeName(DType::kFloat16), "float16");
  EXPECT_EQ(DTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(DTypeName(DType::kInt8), "int8");
  EXPECT_EQ(DTypeName(DType::kUInt8), "uint8");
  EXPECT_EQ(DTypeName(DType::kInt32), "int32");
  EXPECT_EQ(DTypeName(DType::kInt64), "int64");
  EXPECT_EQ(DTypeName(DType::kBool), "bool");
}

TEST(DTypeTest, NameRoundTripsThroughParse) {
  for (DType d : kAll) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, d);
  }
}

TEST(DTypeTest, ParsesAliasesIgnoringCase) {
  const std::pair<const char*, DType> cases[] = {
      {"fp32", DType::kFloat32},    {"F32", DType::kFloat32},       {"float", DType::kFloat32},
      {"FLOAT32", DType::kFloat32}, {"fp64", DType::kFloat64},      {"double", DType::kFloat64},
      {"fp16", DType::kFloat16},    {"half", DType::kFloat16},      {"f16", DType::kFloat16},
      {"bf16", DType::kBFloat16},   {"BFloat16", DType::kBFloat16}, {"i8", DType::kInt8},
      {"u8", DType::kUInt8},        {"int", DType::kInt32},         {"i64", DType::kInt64},
      {"long", DType::kInt64},      {"Bool", DType::kBool},
  };
  for (const auto& c : cases) {
    absl::StatusOr<DType> parsed = ParseDType(c.first);
    ASSERT_TRUE(parsed.ok()) << c.first << ": " << parsed.status();
    EXPECT_EQ(*parsed, c.second) << c.first;
  }
}

TEST(DTypeTest, UnknownNameListsValidNames) {
  for (const char* bad : {"float8", "", "fp 32", "float32 ", "bfloat"}) {
    absl::StatusOr<DType> parsed = ParseDType(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(parsed.status().message());
    EXPECT_THAT(message, HasSubstr(std::string("\"") + bad + "\""));
    for (DType d : kAll) EXPECT_THAT(message, HasSubstr(std::string(DTypeName(d))));
    EXPECT_THAT(message, HasSubstr("bfloat16 (bf16)"));
  }
}

TEST(DTypeTest, OutOfRangeValue) {
  const DType corrupt = static_cast<DType>(200);
  EXPECT_EQ(DTypeSize(corrupt), 0u);
  EXPECT_EQ(DTypeName(corrupt), "invalid");
  EXPECT_FALSE(IsFloatingPoint(corrupt));
}

}  // namespace
}  // namespace paddle
