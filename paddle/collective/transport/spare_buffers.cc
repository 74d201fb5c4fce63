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
// page faults are dear, above all on virtual machines: streaming ran at a tenth of its speed or
// less, dominated by page faults. Nor does malloc always serve mid sizes well (the heap shrinks
// and grows around each message), so the floor is 64 KiB, not 256 KiB (figures:
// docs/performance-notes.md, "Spare buffers"). So buffers of at least kMinBytes go
// back to a small per-channel list once copied out, and the next unexpected message of a size
// they fit (no more than twice as large) reuses one. At most kMaxSpares buffers and
// kMaxSpareBytes are kept per channel; smaller buffers come from malloc's free lists.
//
// The count limit must cover a sender that runs ahead. A broadcast's root is done with a piece
// once the piece is in its socket, so back-to-back broadcasts (DDP's parameter broadcast at
// start, the benchmark's loop) put dozens of same-size messages in flight before their receives
// are posted, and the TCP transport reads them as they come. With four spares, every message past
// the fourth took a fresh buffer and freed it after the copy out, paying page faults in the
// socket copy and TLB flushes from munmap (figures: docs/performance-notes.md, "Spare buffers").
// The byte limit, not the count, bounds the memory kept.

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
