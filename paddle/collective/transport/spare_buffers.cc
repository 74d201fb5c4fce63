#include "paddle/collective/transport/spare_buffers.h"

#include <algorithm>
#include <new>
#include <utility>

namespace paddle {

// Note [Spare unexpected-message buffers]
// A transport pulls a large message that arrives before its receive into a buffer of the
// receiving rank's own (the shm transport so as to release the sender, the TCP transport because
// the socket must be drained to see what follows). A fresh buffer of megabytes is a fresh mmap:
// every page faults in while the message is copied and is unmapped again after the copy out, and
// page faults are dear on the development VM. Measured there: shm streaming of 1-64 MiB messages
// both ways ran at 0.24-0.44 GB/s (a profile dominated by page faults under process_vm_readv);
// TCP streaming of 1 MiB messages one way, with the waiting thread reading, ran at 0.17 GB/s with
// 1.45 million page faults in a two-second run. Nor does malloc always serve mid sizes well:
// with a 256 KiB floor, a 3-rank ring allreduce of 512 KiB over TCP (175 KiB messages, many
// arriving before their receive, read by the waiting thread) spent 2.5x the CPU in copies of
// the same bytes, the main thread's heap shrinking and growing around each message, and took
// 1.9-2.1 ms instead of 0.5 ms; a 64 KiB floor keeps them. So buffers of at least kMinBytes go
// back to a small per-channel list once copied out, and the next unexpected message of a size
// they fit (no more than twice as large) reuses one. At most kMaxSpares buffers and
// kMaxSpareBytes are kept per channel; smaller buffers come from malloc's free lists.
namespace {

constexpr size_t kMaxSpares = 4;
constexpr size_t kMaxSpareBytes = size_t{128} << 20;

}  // namespace

SpareBuffers::Buffer SpareBuffers::Take(size_t bytes) {
  if (bytes >= kMinBytes) {
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->capacity >= bytes && it->capacity / 2 <= bytes &&
          (best == spare_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != spare_.end()) {
      Buffer buffer = std::move(*best);
      spare_.erase(best);
      return buffer;
    }
  }
  Buffer buffer;
  buffer.data.reset(new (std::nothrow) char[bytes]);
  buffer.capacity = buffer.data == nullptr ? 0 : bytes;
  return buffer;
}

void SpareBuffers::GiveBack(Buffer buffer) {
  if (buffer.data == nullptr || buffer.capacity < kMinBytes || buffer.capacity > kMaxSpareBytes) {
    return;
  }
  size_t kept = buffer.capacity;
  for (const Buffer& b : spare_) kept += b.capacity;
  // Over a limit, the smallest spares make room: recent sizes are the likeliest next ones.
  while (!spare_.empty() && (spare_.size() >= kMaxSpares || kept > kMaxSpareBytes)) {
    auto smallest =
        std::min_element(spare_.begin(), spare_.end(),
                         [](const Buffer& a, const Buffer& b) { return a.capacity < b.capacity; });
    kept -= smallest->capacity;
    spare_.erase(smallest);
  }
  if (kept > kMaxSpareBytes) return;
  spare_.push_back(std::move(buffer));
}

}  // namespace paddle
