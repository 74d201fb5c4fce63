// The Reducer with CUDA buckets (Note [Reducer devices]) through DistributedDataParallel on one
// rank over backend=nccl: kSteps SGD steps of the MLP on cuda:0 with DDP give the parameters of the
// same steps without DDP (an average over one rank changes nothing: expected equal to 1e-6
// absolute, only the NCCL kernel's fp32 average could round), every gradient is a CUDA view into a
// bucket, and bf16 compression on the device stays within bf16 rounding (atol 1e-3, rtol 2e-2).
// Without a usable GPU the tests skip naming CUDA's reason; the mixed-device error runs here.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "paddle/nn/device_dispatch.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/models.h"
#include "paddle/optim/sgd.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "paddle/parallel/reducer/reducer.h"
#include "tests/testing/gpu_test.h"

namespace paddle {
namespace {

using nn::Variable;
using ::testing::HasSubstr;

constexpr int kSteps = 3;
constexpr int64_t kBatch = 32;

Tensor Images(uint64_t seed) {
  Tensor t = Tensor::Empty({kBatch, 1, 28, 28}, DType::kFloat32).value();
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.NextFloat();
  return t;
}

Tensor Labels(uint64_t seed) {
  Tensor t = Tensor::Empty({kBatch}, DType::kInt64).value();
  Philox rng(seed, 1);
  for (int64_t i = 0; i < kBatch; ++i)
    t.data<int64_t>()[i] = static_cast<int64_t>(rng.NextU32() % 10);
  return t;
}

// Trains on cuda:0, through DDP over `comm` when it is not null; parameters on the host.
absl::StatusOr<std::map<std::string, Tensor>> Train(Communicator* comm,
                                                    const std::string& compression) {
  const Device device = Device::Cuda(0);
  auto dropout = std::make_shared<nn::Generator>(7, 1);
  ASSIGN_OR_RETURN(std::shared_ptr<nn::Module> model, nn::MakeModel("mlp", 5, dropout));
  RETURN_IF_ERROR(model->To(device));
  std::unique_ptr<DistributedDataParallel> ddp;
  if (comm != nullptr) {
    DdpOptions options;
    options.first_bucket_bytes = 64 << 10;  // several buckets, so launches overlap the backward
    options.bucket_bytes = 256 << 10;
    options.compression = compression;
    ASSIGN_OR_RETURN(ddp, DistributedDataParallel::Create(model, comm, options));
    if (ddp->reducer().num_buckets() < 2) return absl::InternalError("expected several buckets");
  }
  optim::SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  ASSIGN_OR_RETURN(std::unique_ptr<optim::Sgd> sgd, optim::Sgd::Create(model->Parameters(), o));
  for (int step = 0; step < kSteps; ++step) {
    ASSIGN_OR_RETURN(Tensor images, nn::internal::MoveTensor(Images(step), device));
    ASSIGN_OR_RETURN(Tensor labels, nn::internal::MoveTensor(Labels(step), device));
    sgd->ZeroGrad();
    ASSIGN_OR_RETURN(Variable logits, model->Forward(Variable(images)));
    ASSIGN_OR_RETURN(Variable loss, nn::functional::SoftmaxCrossEntropy(logits, labels));
    RETURN_IF_ERROR(ddp ? ddp->Backward(loss) : loss.Backward());
    RETURN_IF_ERROR(sgd->Step());
  }
  std::map<std::string, Tensor> out;
  std::set<const void*> storages;
  for (const auto& [name, v] : model->NamedParameters()) {
    if (v.grad().device() != device) {
      return absl::InternalError(absl::StrCat("gradient of ", name, " is ", v.grad().ToString()));
    }
    storages.insert(v.grad().storage().get());
    ASSIGN_OR_RETURN(out[name], nn::internal::MoveTensor(v.data(), Device::Cpu()));
  }
  // Note [Gradients as views]: with DDP the gradients share the buckets' storage.
  if (ddp && static_cast<int>(storages.size()) != ddp->reducer().num_buckets()) {
    return absl::InternalError(absl::StrCat(storages.size(), " gradient storages for ",
                                            ddp->reducer().num_buckets(), " buckets"));
  }
  return out;
}

void ExpectClose(const std::map<std::string, Tensor>& got,
                 const std::map<std::string, Tensor>& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    int bad = 0;
    for (int64_t i = 0; i < w.numel() && bad < 5; ++i) {
      const float a = g.data<float>()[i];
      const float b = w.data<float>()[i];
      if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b))) {
        ADD_FAILURE() << name << "[" << i << "]: ddp " << a << ", plain " << b;
        ++bad;
      }
    }
  }
}

absl::StatusOr<std::unique_ptr<Communicator>> Nccl() {
  CommunicatorOptions options;
  options.backend = Backend::kNccl;
  options.store = std::make_shared<HashStore>();
  options.rank = 0;
  options.world_size = 1;
  return Communicator::Create(options);
}

TEST(CudaReducer, OneRankNcclDdpEqualsPlainTraining) {
  PADDLE_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Nccl();
  ASSERT_TRUE(comm.ok()) << comm.status();
  absl::StatusOr<std::map<std::string, Tensor>> plain = Train(nullptr, "none");
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<std::map<std::string, Tensor>> ddp = Train(comm->get(), "none");
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  ExpectClose(*ddp, *plain, 1e-6, 0);
}

TEST(CudaReducer, Bf16CompressionOnTheDeviceStaysClose) {
  PADDLE_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Nccl();
  ASSERT_TRUE(comm.ok()) << comm.status();
  absl::StatusOr<std::map<std::string, Tensor>> plain = Train(nullptr, "none");
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<std::map<std::string, Tensor>> ddp = Train(comm->get(), "bf16");
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  ExpectClose(*ddp, *plain, 1e-3, 2e-2);
}

// Runs everywhere: the device check comes before any bucket is allocated.
TEST(CudaReducer, ParametersOnTwoDevicesAreInvalidArgument) {
  static char fake[1];
  Variable a(Tensor::Zeros({4}, DType::kFloat32).value(), true, "a");
  Variable b(Tensor::FromBlob(fake, {4}, DType::kFloat32, Device::Cuda(0)).value(), true, "b");
  CommunicatorOptions options;
  options.backend = Backend::kNative;
  options.store = std::make_shared<HashStore>();
  options.rank = 0;
  options.world_size = 1;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  absl::StatusOr<std::unique_ptr<Reducer>> r =
      Reducer::Create({{"a", a}, {"b", b}}, comm->get(), {});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("'b' is float32[4] on cuda:0"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("one device"));
}

}  // namespace
}  // namespace paddle
