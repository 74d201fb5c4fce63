// CudaIpcWorkspace: creation by the agreement of Note [CUDA IPC agreement], and teardown.
#include "paddle/collective/intranode/cuda/cuda_ipc_workspace.h"

#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "paddle/collective/intranode/cuda/ipc_agreement.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

std::string HandleToHex(const cudaIpcMemHandle_t& handle) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(&handle), sizeof(handle)));
}

absl::StatusOr<cudaIpcMemHandle_t> HandleFromHex(absl::string_view hex, int rank) {
  const std::string bytes = absl::HexStringToBytes(hex);
  if (bytes.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " offered a CUDA IPC handle of ",
                                                   bytes.size(), " bytes, expected ",
                                                   sizeof(cudaIpcMemHandle_t)));
  }
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, bytes.data(), sizeof(handle));
  return handle;
}

// Publishes this rank's vote under `round` and reads every rank's.
absl::StatusOr<std::vector<ParsedVote>> Vote(const CudaIpcWorkspaceOptions& options,
                                             absl::string_view round, absl::string_view vote) {
  RETURN_IF_ERROR(
      options.store->Set(absl::StrCat(options.store_prefix, "/", round, "/", options.rank), vote));
  std::vector<ParsedVote> votes;
  for (int r = 0; r < options.world_size; ++r) {
    const std::string key = absl::StrCat(options.store_prefix, "/", round, "/", r);
    absl::StatusOr<std::string> text = options.store->Get(key, options.timeout);
    if (!text.ok()) {
      return Annotate(text.status(),
                      absl::StrCat("rank ", options.rank, "/", options.world_size,
                                   " waiting for rank ", r, "'s CUDA IPC ", round, " vote (key ",
                                   key, "); did rank ", r, " die or not reach its first CUDA ",
                                   "collective? Every rank must pass CUDA tensors to it"));
    }
    ASSIGN_OR_RETURN(ParsedVote parsed, ParseVote(*text));
    votes.push_back(std::move(parsed));
  }
  return votes;
}

// This rank's own allocations and exports; "" reason on success.
struct Offer {
  void* buffers[2] = {nullptr, nullptr};
  std::string vote;
};

absl::Status MakeOffer(const CudaIpcWorkspaceOptions& options, Offer* offer) {
  for (int b = 0; b < 2; ++b) {
    PADDLE_CUDA_RETURN_IF_ERROR(cudaMalloc(&offer->buffers[b], options.buffer_bytes));
  }
  std::string payload;
  for (int b = 0; b < 2; ++b) {
    cudaIpcMemHandle_t handle;
    PADDLE_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&handle, offer->buffers[b]));
    absl::StrAppend(&payload, b == 0 ? "" : " ", HandleToHex(handle));
  }
  offer->vote = OkVote(payload);
  return absl::OkStatus();
}

}  // namespace

CudaIpcWorkspace::CudaIpcWorkspace(int device, int rank, int size, size_t buffer_bytes,
                                   CudaStream stream)
    : device_(device),
      rank_(rank),
      size_(size),
      buffer_bytes_(buffer_bytes),
      stream_(std::move(stream)) {
  for (auto& b : buffers_) b.assign(static_cast<size_t>(size), nullptr);
}

absl::StatusOr<std::unique_ptr<CudaIpcWorkspace>> CudaIpcWorkspace::Create(
    const CudaIpcWorkspaceOptions& options, std::string* fallback_reason) {
  PADDLE_CHECK(options.store != nullptr) << "CudaIpcWorkspace needs the group's store";
  const std::string who = absl::StrCat("rank ", options.rank, "/", options.world_size);
  std::unique_ptr<CudaIpcWorkspace> ws;
  Offer offer;
  std::string vote = NoVote(options.local_veto);
  if (options.local_veto.empty()) {
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(options.device);
    absl::StatusOr<CudaStream> stream = guard.ok() ? CudaStream::Create(options.device)
                                                   : absl::StatusOr<CudaStream>(guard.status());
    absl::Status made = stream.ok() ? MakeOffer(options, &offer) : stream.status();
    if (made.ok()) {
      ws.reset(new CudaIpcWorkspace(options.device, options.rank, options.world_size,
                                    options.buffer_bytes, *std::move(stream)));
      for (int b = 0; b < 2; ++b)
        ws->buffers_[b][static_cast<size_t>(options.rank)] = offer.buffers[b];
      vote = offer.vote;
    } else {
      vote = NoVote(made.ToString());
      for (void* p : offer.buffers) {
        if (p != nullptr) (void)cudaFree(p);
      }
    }
  }

  // Round 1: offers.
  ASSIGN_OR_RETURN(std::vector<ParsedVote> offers, Vote(options, "offer", vote));
  std::string no = FirstNo(offers);
  if (!no.empty()) {
    *fallback_reason = no;
    return std::unique_ptr<CudaIpcWorkspace>();  // ws's destructor frees this rank's buffers
  }

  // Round 2: open every peer's buffers.
  absl::Status opened = absl::OkStatus();
  {
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(options.device);
    if (!guard.ok()) opened = guard.status();
    for (int r = 0; opened.ok() && r < options.world_size; ++r) {
      if (r == options.rank) continue;
      const std::vector<std::string> hex = absl::StrSplit(offers[r].payload, ' ');
      for (int b = 0; opened.ok() && b < 2; ++b) {
        if (hex.size() != 2) {
          opened = absl::InvalidArgumentError(
              absl::StrCat("rank ", r, " offered ", hex.size(), " handles, expected 2"));
          break;
        }
        absl::StatusOr<cudaIpcMemHandle_t> handle = HandleFromHex(hex[b], r);
        if (!handle.ok()) {
          opened = handle.status();
          break;
        }
        void* mapped = nullptr;
        const cudaError_t e =
            cudaIpcOpenMemHandle(&mapped, *handle, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
          (void)cudaGetLastError();
          opened = Annotate(CudaErrorToStatus(e, "cudaIpcOpenMemHandle", __FILE__, __LINE__),
                            absl::StrCat("opening scratch buffer ", b, " of rank ", r));
          break;
        }
        ws->buffers_[b][static_cast<size_t>(r)] = mapped;
      }
    }
  }
  ASSIGN_OR_RETURN(std::vector<ParsedVote> opens,
                   Vote(options, "open", opened.ok() ? OkVote("") : NoVote(opened.ToString())));
  no = FirstNo(opens);
  if (no.empty()) {
    PADDLE_LOG(INFO, COLL) << who << ": CUDA IPC path on cuda:" << options.device << ", 2 x "
                           << options.buffer_bytes << " bytes of scratch per rank";
    return ws;
  }
  // Round 3: nobody frees a buffer before every peer has closed its mapping of it.
  *fallback_reason = no;
  {
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(options.device);
    for (int b = 0; b < 2; ++b) {
      for (int r = 0; r < options.world_size; ++r) {
        void*& p = ws->buffers_[b][static_cast<size_t>(r)];
        if (r != options.rank && p != nullptr) {
          (void)cudaIpcCloseMemHandle(p);
          p = nullptr;
        }
      }
    }
  }
  RETURN_IF_ERROR(Vote(options, "closed", OkVote("")).status());
  return std::unique_ptr<CudaIpcWorkspace>();
}

CudaIpcWorkspace::~CudaIpcWorkspace() {
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
  if (!guard.ok()) return;
  if (stream_.get() != nullptr) {
    // Bounded: a stream that does not drain leaks the buffers rather than hanging the destructor.
    const absl::Status idle = stream_.Synchronize(Deadline::After(absl::Seconds(30)));
    if (!idle.ok()) {
      PADDLE_LOG(WARN, COLL) << "CUDA IPC workspace of rank " << rank_
                             << " leaks its scratch: " << idle;
      return;
    }
  }
  for (int b = 0; b < 2; ++b) {
    for (int r = 0; r < size_; ++r) {
      void* p = buffers_[b][static_cast<size_t>(r)];
      if (p == nullptr) continue;
      // CUDA calls freeing an exported buffer that a peer still has open undefined; the ranks
      // of a group destroy their communicators together, after their last collective, and the
      // mappings are closed before the own buffers are freed. Not verified on a GPU yet.
      (void)(r == rank_ ? cudaFree(p) : cudaIpcCloseMemHandle(p));
    }
  }
  (void)cudaGetLastError();
}

}  // namespace paddle
