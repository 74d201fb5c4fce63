#include "paddle/core/tensor_serialization.h"

#include <string>

#include "gtest/gtest.h"

namespace paddle {
namespace {

TEST(TensorSerializationTest, RoundTripsThroughBytes) {
  Tensor t = *Tensor::Empty({3, 4}, DType::kInt32);
  for (int i = 0; i < 12; ++i) t.data<int32_t>()[i] = i * 7 - 20;
  // A strided view is written contiguously.
  Tensor view = *t.Transpose(0, 1);
  std::string bytes = TensorToProto(view)->SerializeAsString();
  proto::TensorProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  Tensor back = *TensorFromProto(parsed);
  EXPECT_EQ(back.ToString(), "int32[4, 3] on cpu");
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(**back.At<int32_t>({i, j}), **t.At<int32_t>({j, i}));
  }
}

TEST(TensorSerializationTest, BadProtosAreNamed) {
  proto::TensorProto p;
  p.set_dtype(200);
  EXPECT_EQ(TensorFromProto(p).status().message(), "TensorProto has unknown dtype value 200");
  p.set_dtype(static_cast<uint32_t>(DType::kFloat32));
  p.add_shape(2);
  p.add_shape(2);
  p.set_data(std::string(12, '\0'));
  EXPECT_EQ(TensorFromProto(p).status().message(),
            "TensorProto of float32[2, 2] needs 16 bytes of data, has 12");
  p.set_shape(0, -2);
  EXPECT_EQ(TensorFromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(TensorToProto(Tensor()).ok());
}

}  // namespace
}  // namespace paddle
