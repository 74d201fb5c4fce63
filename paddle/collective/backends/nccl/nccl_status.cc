// NCCL results as Status; see nccl_status.h.
#include "paddle/collective/backends/nccl/nccl_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace paddle {
namespace {

absl::StatusCode CodeFor(ncclResult_t result) {
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::StatusCode::kInvalidArgument;
    case ncclRemoteError:
    case ncclSystemError:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status NcclErrorToStatus(ncclResult_t result, absl::string_view expr, absl::string_view file,
                               int line, ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  std::string message = absl::StrCat("NCCL call `", expr, "` failed at ", file, ":", line, ": ",
                                     ncclGetErrorString(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, "; NCCL's last error: ", last);
  return absl::Status(CodeFor(result), message);
}

absl::StatusOr<ncclDataType_t> NcclDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt8:
      return ncclInt8;
    case DType::kUInt8:
      return ncclUint8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kBool:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype ", DTypeName(dtype), " (value ", static_cast<int>(dtype),
      ") has no NCCL type; NCCL moves float32, float64, float16, bfloat16, int8, uint8, int32 and "
      "int64 (send bool as uint8)"));
}

absl::StatusOr<ncclRedOp_t> NcclRedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProd:
      return ncclProd;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("reduce op value ", static_cast<int>(op), " is not sum, avg, min, max or prod"));
}

}  // namespace paddle
