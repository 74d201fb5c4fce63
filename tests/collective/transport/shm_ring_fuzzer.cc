// libFuzzer target over the receive side of the shared-memory transport: a ShmChannel reading
// records that a hostile peer put in its inbound ring (Note [Untrusted rings] in shm_ring.h).
// Built with clang by shm_ring_fuzz_test.sh (the Bazel toolchain is gcc).
//
// The input is a list of commands, run in order against one channel:
//   0 tag size:3              post a receive of `size` bytes (modulo kMaxReceiveBytes; a heap
//                             buffer of exactly that size)
//   1 kind tag size:3 length:3 word0:3
//                             the peer's producer appends a record with these fields (any kind,
//                             lengths that need not agree) and publishes it
//   2 offset:3 n bytes...     the peer writes (n % 8) + 1 raw bytes at `offset` into the ring,
//                             header (head and tail) included
//   3                         the channel makes progress
// (multi-byte fields little-endian). Properties checked beyond "no crash, no sanitizer report":
//   - an error from the channel is one of the codes it documents and says why;
//   - the consumer never moves its tail past the head it was shown;
//   - after Fail() every posted receive is complete.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "paddle/collective/transport/shm/shm_channel.h"
#include "paddle/collective/transport/shm/shm_ring.h"

// The fuzzer links only the channel, the ring and what they need. Nobody sleeps on a signal
// here, so posting is a plain release store; and nobody waits on a request.
namespace paddle {
void ShmSignal::Post(uint32_t v) { value.store(v, std::memory_order_release); }
absl::Duration Deadline::Elapsed() const { return absl::ZeroDuration(); }
}  // namespace paddle

// Unexpected messages get buffers of the size their first record claims: above this ASan
// returns null (the channel's kResourceExhausted) rather than reporting the allocation.
extern "C" const char* __asan_default_options() {
  return "allocator_may_return_null=1:max_allocation_size_mb=512";
}

namespace {

using paddle::ShmChannel;
using paddle::ShmControl;
using paddle::ShmRecord;
using paddle::ShmRecordKind;
using paddle::ShmRing;
using paddle::ShmRingHeader;

constexpr size_t kRingRegion = sizeof(ShmRingHeader) + paddle::kShmRingBytes;
constexpr size_t kMaxPosted = 8;
// Up to three stream pieces.
constexpr size_t kMaxReceiveBytes = 3 * paddle::kShmStreamPieceBytes;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

// The transport's side of the channel: poisoning fails the channel, as ShmEngine does.
class FakeOwner final : public ShmChannel::Owner, public std::enable_shared_from_this<FakeOwner> {
 public:
  absl::Status PoisonCause() const override { return cause_; }
  void Poison(const absl::Status& cause) override {
    if (!cause_.ok()) return;
    cause_ = cause;
    if (channel != nullptr) channel->Fail(cause);
  }
  absl::Status Await(const paddle::ShmOp&, const paddle::Deadline&) override {
    return absl::UnimplementedError("not waited on");
  }
  void WakeLocal() override {}
  std::shared_ptr<Owner> Handle() override { return shared_from_this(); }

  ShmChannel* channel = nullptr;

 private:
  absl::Status cause_;
};

// Memory that lives across inputs: an exactly sized heap block per ring, so ASan sees a read or
// write past either end.
struct Memory {
  char* inbound = static_cast<char*>(std::aligned_alloc(64, kRingRegion));
  char* outbound = static_cast<char*>(std::aligned_alloc(64, kRingRegion));
  ShmControl* peer_control =
      static_cast<ShmControl*>(std::aligned_alloc(64, (sizeof(ShmControl) + 63) / 64 * 64));
  std::vector<char> pattern = std::vector<char>(paddle::kShmRingBytes);

  Memory() {
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i * 131 + 7);
  }
};

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint32_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t U24() {
    const uint32_t a = Byte(), b = Byte(), c = Byte();
    return a | (b << 8) | (c << 16);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

bool ExpectedCode(const absl::Status& status) {
  return absl::IsDataLoss(status) || absl::IsInvalidArgument(status) ||
         absl::IsResourceExhausted(status) || absl::IsUnavailable(status);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Memory* memory = new Memory();
  std::memset(memory->inbound, 0, kRingRegion);
  std::memset(memory->outbound, 0, sizeof(ShmRingHeader));
  std::memset(static_cast<void*>(memory->peer_control), 0, sizeof(ShmControl));
  auto* inbound_header = reinterpret_cast<ShmRingHeader*>(memory->inbound);

  auto owner = std::make_shared<FakeOwner>();
  paddle::ShmLinkInfo link{0, 2, 1, /*peer_pid=*/0, "fuzzed peer"};  // CMA reads fail: pid 0
  ShmChannel channel(link, owner.get(), ShmRing(memory->inbound), ShmRing(memory->outbound),
                     memory->peer_control, /*peer_reads_cma=*/false);
  owner->channel = &channel;
  ShmRing producer(memory->inbound);

  std::vector<std::unique_ptr<char[]>> buffers;
  std::vector<std::unique_ptr<paddle::TransportRequest>> requests;
  Input input(data, size);
  while (!input.empty() && owner->PoisonCause().ok()) {
    switch (input.Byte() % 4) {
      case 0: {
        const uint64_t tag = input.Byte() % 4;
        const size_t bytes = input.U24() % kMaxReceiveBytes;
        if (buffers.size() >= kMaxPosted) break;
        buffers.emplace_back(new char[bytes]);  // uninitialized: the channel only writes it
        requests.push_back(channel.Recv(buffers.back().get(), bytes, tag));
        break;
      }
      case 1: {
        ShmRecord record{};
        record.kind = static_cast<ShmRecordKind>(input.Byte() % 7);
        record.tag = input.Byte() % 4;
        record.size = input.U24();
        record.length = std::min<uint32_t>(input.U24(), paddle::kShmRingBytes);
        record.word0 = input.U24();
        absl::StatusOr<bool> written = producer.TryWrite(record, memory->pattern.data());
        if (written.ok() && *written) producer.Publish();
        break;
      }
      case 2: {
        const size_t offset = input.U24() % kRingRegion;
        const size_t n = input.Byte() % 8 + 1;
        for (size_t i = 0; i < n && offset + i < kRingRegion; ++i) {
          memory->inbound[offset + i] = static_cast<char>(input.Byte());
        }
        break;
      }
      case 3: {
        const uint32_t head = inbound_header->head.Load();
        const uint32_t tail_before = inbound_header->tail.Load();
        bool completed = false;
        absl::Status status = channel.Progress(&completed);
        const uint32_t tail = inbound_header->tail.Load();
        if (tail != tail_before) {  // the consumer posted its own tail
          Require(static_cast<uint32_t>(head - tail) <= paddle::kShmRingBytes,
                  "the consumer's tail stays within what was published");
        }
        if (!status.ok()) {
          Require(ExpectedCode(status), "a documented error code");
          Require(!status.message().empty(), "an error says why");
          owner->Poison(status);
        }
        break;
      }
    }
  }
  channel.Fail(absl::CancelledError("end of input"));
  for (const auto& request : requests) {
    Require(request->IsCompleted(), "Fail() completes every posted receive");
  }
  return 0;
}
