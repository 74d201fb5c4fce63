// ShmRing and the doorbell; see shm_ring.h.
#include "paddle/collective/transport/shm/shm_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

namespace paddle {

void RingDoorbell(ShmSignal& doorbell) {
  // Note [Signal wake-ups] in shm_signal.cc: the value changes before `sleepers` is read, both
  // sequentially consistent, so a waiter either sees the new value or is woken.
  doorbell.value.fetch_add(1, std::memory_order_seq_cst);
  if (doorbell.sleepers.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&doorbell.value), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
  }
}

bool ShmRing::TryWrite(const ShmRecord& record, const void* payload) {
  const size_t bytes = ShmRecordBytes(record.length);
  const uint32_t tail = header_->tail.Load();
  const size_t used = static_cast<uint32_t>(head_ - tail);
  const size_t offset = head_ & (kShmRingBytes - 1);
  const size_t to_end = kShmRingBytes - offset;
  const size_t pad = bytes > to_end ? to_end : 0;
  if (used + pad + bytes > kShmRingBytes) return false;
  if (pad > 0) {
    ShmRecord filler{};
    filler.kind = ShmRecordKind::kPad;
    filler.length = static_cast<uint32_t>(pad - kShmRecordHeaderBytes);
    std::memcpy(data_ + offset, &filler, sizeof(filler));
    head_ += static_cast<uint32_t>(pad);
  }
  char* at = data_ + (head_ & (kShmRingBytes - 1));
  std::memcpy(at, &record, sizeof(record));
  if (record.length > 0) std::memcpy(at + kShmRecordHeaderBytes, payload, record.length);
  head_ += static_cast<uint32_t>(bytes);
  return true;
}

const ShmRecord* ShmRing::Peek(const char** payload) {
  while (true) {
    const uint32_t head = header_->head.Load();  // acquire: the record's bytes are visible
    const uint32_t tail = header_->tail.value.load(std::memory_order_relaxed);
    if (head == tail) return nullptr;
    const char* at = data_ + (tail & (kShmRingBytes - 1));
    const auto* record = reinterpret_cast<const ShmRecord*>(at);
    if (record->kind != ShmRecordKind::kPad) {
      *payload = at + kShmRecordHeaderBytes;
      return record;
    }
    header_->tail.Post(tail + static_cast<uint32_t>(ShmRecordBytes(record->length)));
  }
}

void ShmRing::Pop(const ShmRecord& record) {
  const uint32_t tail = header_->tail.value.load(std::memory_order_relaxed);
  header_->tail.Post(tail + static_cast<uint32_t>(ShmRecordBytes(record.length)));
}

}  // namespace paddle
