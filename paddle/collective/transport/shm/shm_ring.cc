// ShmRing and the doorbell; see shm_ring.h.
#include "paddle/collective/transport/shm/shm_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>

#include "absl/strings/str_cat.h"

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

namespace {

const char* KindName(ShmRecordKind kind) {
  switch (kind) {
    case ShmRecordKind::kPad:
      return "pad";
    case ShmRecordKind::kEager:
      return "eager";
    case ShmRecordKind::kCma:
      return "CMA";
    case ShmRecordKind::kAck:
      return "ack";
    case ShmRecordKind::kStream:
      return "stream";
  }
  return "unknown";
}

absl::Status Corrupt(uint32_t tail, const ShmRecord& record, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt shared-memory ring: ", KindName(record.kind),
                                          " record (kind ", static_cast<uint32_t>(record.kind),
                                          ") at ring offset ", tail & (kShmRingBytes - 1), ": ",
                                          what));
}

}  // namespace

void StampShmControl(ShmControl& control, int world_size, const ShmSegmentOwner& owner) {
  control.job_nonce = owner.job_nonce;
  control.owner_pid = owner.pid;
  control.owner_start_ticks = owner.start_ticks;
  control.magic = kShmControlMagic;
  control.version = kShmLayoutVersion;
  control.world_size = static_cast<uint32_t>(world_size);
  control.control_bytes = kShmControlBytes;
  control.ring_bytes = kShmRingBytes;
}

absl::Status CheckShmControl(const ShmControl& control, int world_size, absl::string_view segment,
                             const ShmSegmentOwner& expected) {
  // Note [Untrusted rings]: each field is read once.
  const uint64_t job_nonce = control.job_nonce;
  const int32_t owner_pid = control.owner_pid;
  const uint64_t owner_start_ticks = control.owner_start_ticks;
  const uint64_t magic = control.magic;
  const uint32_t version = control.version;
  const uint32_t ranks = control.world_size;
  const uint64_t control_bytes = control.control_bytes;
  const uint64_t ring_bytes = control.ring_bytes;
  if (magic != kShmControlMagic) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory segment ", segment,
                     " is not a segment of this transport: its control block "
                     "starts with 0x",
                     absl::Hex(magic, absl::kZeroPad16), ", expected 0x",
                     absl::Hex(kShmControlMagic, absl::kZeroPad16),
                     " (another program, or a store prefix shared with one?)"));
  }
  if (version != kShmLayoutVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory segment ", segment, " has layout version ", version, ", this build has ",
        kShmLayoutVersion, ": every rank must run the same build of Paddle Collective"));
  }
  if (ranks != static_cast<uint32_t>(world_size) || control_bytes != kShmControlBytes ||
      ring_bytes != kShmRingBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory segment ", segment, " is laid out for ", ranks, " ranks, a ",
                     control_bytes, "-byte control block and ", ring_bytes,
                     "-byte rings; this rank expects ", world_size, ", ", kShmControlBytes, " and ",
                     kShmRingBytes, " (ranks with different world sizes or builds?)"));
  }
  if (job_nonce != expected.job_nonce) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory segment ", segment, " belongs to another job (job nonce 0x",
        absl::Hex(job_nonce, absl::kZeroPad16), ", this job's is 0x",
        absl::Hex(expected.job_nonce, absl::kZeroPad16),
        "): two jobs share this store and prefix, or another job's token differs; give each job "
        "its own store (or TransportOptions.store_prefix) and one PADDLE_STORE_TOKEN"));
  }
  if (owner_pid != expected.pid || owner_start_ticks != expected.start_ticks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory segment ", segment, " was created by pid ", owner_pid, " (start tick ",
        owner_start_ticks, "), not by the rank that published it, pid ", expected.pid,
        " (start tick ", expected.start_ticks,
        "): a foreign segment, refused (another process of this user published its name)"));
  }
  return absl::OkStatus();
}

absl::Status CheckShmRecord(const ShmRecord& record, uint32_t tail, uint32_t head) {
  const size_t published = static_cast<uint32_t>(head - tail);
  if (published > kShmRingBytes || published % kShmRecordHeaderBytes != 0) {
    return absl::DataLossError(
        absl::StrCat("corrupt shared-memory ring: the producer's head ", head, " is ", published,
                     " bytes past the consumer's tail ", tail, "; the bound is the ring's ",
                     kShmRingBytes, " bytes, in whole ", kShmRecordHeaderBytes, "-byte units"));
  }
  const size_t offset = tail & (kShmRingBytes - 1);
  const size_t bytes = ShmRecordBytes(record.length);
  if (bytes > published) {
    return Corrupt(tail, record,
                   absl::StrCat("length ", record.length, " (", bytes,
                                " ring bytes) is more than the ", published, " bytes published"));
  }
  if (bytes > kShmRingBytes - offset) {
    return Corrupt(tail, record,
                   absl::StrCat("length ", record.length, " (", bytes,
                                " ring bytes) runs past the end of the ring, ",
                                kShmRingBytes - offset, " bytes on"));
  }
  switch (record.kind) {
    case ShmRecordKind::kPad:
      if (bytes != kShmRingBytes - offset) {
        return Corrupt(tail, record,
                       absl::StrCat("length ", record.length, " (", bytes,
                                    " ring bytes) does not reach the end of the ring, ",
                                    kShmRingBytes - offset, " bytes on"));
      }
      return absl::OkStatus();
    case ShmRecordKind::kEager:
      if (record.length != record.size) {
        return Corrupt(
            tail, record,
            absl::StrCat("length ", record.length, " differs from the message size ", record.size));
      }
      return absl::OkStatus();
    case ShmRecordKind::kCma:
    case ShmRecordKind::kAck:
      if (record.length != 0) {
        return Corrupt(tail, record, absl::StrCat("length ", record.length, ", expected 0"));
      }
      return absl::OkStatus();
    case ShmRecordKind::kStream:
      if (record.length > record.size || record.word0 > record.size - record.length) {
        return Corrupt(tail, record,
                       absl::StrCat("piece at offset ", record.word0, " with length ",
                                    record.length, " ends past the message size ", record.size));
      }
      return absl::OkStatus();
  }
  return Corrupt(tail, record, "unknown kind");
}

absl::StatusOr<bool> ShmRing::TryWrite(const ShmRecord& record, const void* payload) {
  const size_t bytes = ShmRecordBytes(record.length);
  const uint32_t tail = header_->tail.Load();
  const size_t used = static_cast<uint32_t>(head_ - tail);
  if (used > kShmRingBytes) {
    return absl::DataLossError(absl::StrCat("corrupt shared-memory ring: the consumer's tail ",
                                            tail, " is ", used,
                                            " bytes behind the producer's head ", head_,
                                            "; the bound is the ring's ", kShmRingBytes, " bytes"));
  }
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

absl::StatusOr<bool> ShmRing::Next(ShmRecord& record, const char** payload) {
  while (true) {
    const uint32_t head = header_->head.Load();  // acquire: the record's bytes are visible
    if (head == tail_) return false;
    const char* at = data_ + (tail_ & (kShmRingBytes - 1));
    std::memcpy(&record, at, sizeof(record));
    // The checks and every later use must see this one copy, not a second read of the ring.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    absl::Status valid = CheckShmRecord(record, tail_, head);
    if (!valid.ok()) return valid;
    if (record.kind != ShmRecordKind::kPad) {
      *payload = at + kShmRecordHeaderBytes;
      return true;
    }
    Pop(record);
  }
}

void ShmRing::Pop(const ShmRecord& record) {
  tail_ += static_cast<uint32_t>(ShmRecordBytes(record.length));
  header_->tail.Post(tail_);
}

}  // namespace paddle
