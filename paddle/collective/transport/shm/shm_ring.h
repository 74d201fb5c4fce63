// The layout of a rank's shared-memory segment and the single-producer/single-consumer byte ring
// each peer writes into.
//
// Every rank creates one segment for what it receives: a control block (its doorbell, its abort
// flag and cause, the CMA probe word, which peers it can read with CMA) and one ring per peer.
// Peer p is the only producer of ring p and this rank its only consumer, so the ring needs no
// lock: the producer advances `head`, the consumer `tail`, both 32-bit byte positions that wrap
// (the ring size is a power of two, so a position modulo 2^32 still names the right byte).
//
// A ring holds records: a 64-byte header (kind, payload length, tag, message size, and two words
// whose meaning depends on the kind) followed by the payload, padded to 64 bytes so headers never
// straddle cache lines. A record never wraps: if it does not fit before the end of the ring, the
// producer fills the rest with a kPad record and starts over at offset 0.
//
// Note [Untrusted rings]. Everything in a segment can be written by any process that maps it, and
// a broken peer (or another program, or another build) may write anything there. So neither end
// of a ring trusts what it reads from shared memory: each position or record header is read once
// into a local (a header is copied out whole), checked against the ring's capacity and the
// record's own rules (CheckShmRecord), and only then used; the channel then checks it against
// its receive buffers. The consumer keeps its own copy of `tail`, as the producer keeps `head`,
// so a peer that moves either can only corrupt its own messages. A violation is kDataLoss and
// poisons the transport. The control block opens with a stamp (magic, layout version, sizes and
// owner: Note [Shm segment owner] in shm_transport.cc) that every process checks before it uses a
// segment (CheckShmControl).
//
// Note [Doorbell]. A thread waiting on the transport cannot sleep on every ring at once, so each
// segment has one doorbell (a ShmSignal used as a counter): whoever does something another
// process may be waiting for (a producer writing into this rank's ring, a consumer freeing space
// in a ring this rank writes, a rank aborting) increments the doorbell of that process and wakes
// its sleepers. A waiter reads the doorbell, makes what progress it can, and sleeps until the
// doorbell moves past the value it read, so no wake-up is lost.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_RING_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "paddle/collective/transport/shm/shm_signal.h"

namespace paddle {

// Bytes of one ring (one per ordered pair of ranks). 1 MiB holds 15 eager messages of the largest
// size, enough that a sender rarely waits for space, while 8 ranks need only 8 MiB per segment.
inline constexpr size_t kShmRingBytes = size_t{1} << 20;
// Messages up to this size are copied through the ring (eager); larger ones go single-copy with
// CMA or, without CMA, through the ring in pieces. Below ~64 KiB the two copies through the ring
// cost less than the CMA round trip (a descriptor, a system call, an acknowledgement); above it
// the second copy dominates.
inline constexpr size_t kShmEagerMaxBytes = size_t{64} << 10;
// The piece size of messages streamed through the ring without CMA: a quarter of the ring, so the
// producer fills one piece while the consumer drains another.
inline constexpr size_t kShmStreamPieceBytes = kShmRingBytes / 4;
// Ranks per segment the control block has room for (one CMA flag byte each).
inline constexpr int kShmMaxRanks = 2048;
inline constexpr size_t kShmAbortTextBytes = 1024;
inline constexpr size_t kShmRecordHeaderBytes = 64;

// The stamp at the start of every segment: "PDLSHMCB" read as a little-endian word. The version
// changes with any change of the segment layout or of the record format.
inline constexpr uint64_t kShmControlMagic = 0x4243'4d48'534c'4450;
inline constexpr uint32_t kShmLayoutVersion = 2;

// At offset 0 of every segment. Zero bytes are a valid initial state for all but the stamp, which
// StampShmControl writes before the segment's name is published.
struct ShmControl {
  uint64_t magic;          // kShmControlMagic
  uint32_t version;        // kShmLayoutVersion
  uint32_t world_size;     // rings in the segment
  uint64_t control_bytes;  // kShmControlBytes
  uint64_t ring_bytes;     // kShmRingBytes
  uint64_t job_nonce;      // Note [Shm segment owner]: the same on every rank of one job
  uint64_t owner_start_ticks;
  int32_t owner_pid;   // the process that created the segment (and its start time, above)
  ShmSignal doorbell;  // Note [Doorbell]
  std::atomic<uint32_t> aborted;
  std::atomic<int32_t> abort_code;
  uint64_t probe;  // a value peers read with process_vm_readv to check that CMA works
  char abort_text[kShmAbortTextBytes];  // written before `aborted` is set
  uint8_t cma_from[kShmMaxRanks];       // 1: this rank can read rank i's memory with CMA
};

inline constexpr size_t kShmControlBytes = (sizeof(ShmControl) + 4095) / 4096 * 4096;

struct ShmRingHeader {
  ShmSignal head;  // bytes written, modulo 2^32; posted by the producer
  ShmSignal tail;  // bytes consumed, modulo 2^32; posted by the consumer
};

inline constexpr size_t kShmRingStride = sizeof(ShmRingHeader) + kShmRingBytes;

// Bytes of the segment of a job of `world_size` ranks.
inline size_t ShmSegmentBytes(int world_size) {
  return kShmControlBytes + static_cast<size_t>(world_size) * kShmRingStride;
}

// Whose a segment is (Note [Shm segment owner] in shm_transport.cc): the job's nonce and the
// process that created it.
struct ShmSegmentOwner {
  uint64_t job_nonce = 0;
  int32_t pid = 0;
  uint64_t start_ticks = 0;
};

// Writes the stamp into the control block of a new segment for `world_size` ranks.
void StampShmControl(ShmControl& control, int world_size, const ShmSegmentOwner& owner);
// Checks the stamp of segment `segment` (its name, for the message), opened by a rank of a job of
// `world_size` ranks, against the owner it must have: kFailedPrecondition naming the segment,
// what it holds and what was expected.
absl::Status CheckShmControl(const ShmControl& control, int world_size, absl::string_view segment,
                             const ShmSegmentOwner& expected);

enum class ShmRecordKind : uint32_t {
  kPad = 1,     // skip to the start of the ring
  kEager = 2,   // a whole message: payload follows
  kCma = 3,     // a message to read with CMA: `word0` its address in the sender, `word1` its id
  kAck = 4,     // the CMA message `word1` was read: its send is complete
  kStream = 5,  // a piece of a message streamed without CMA: `word0` the piece's offset
};

struct ShmRecord {
  ShmRecordKind kind;
  uint32_t length;  // payload bytes after the header
  uint64_t tag;
  uint64_t size;  // bytes of the whole message
  uint64_t word0;
  uint64_t word1;
  char padding[kShmRecordHeaderBytes - 40];
};
static_assert(sizeof(ShmRecord) == kShmRecordHeaderBytes, "one cache line");

// Ring bytes a record with `length` payload bytes takes.
inline size_t ShmRecordBytes(size_t length) {
  return (kShmRecordHeaderBytes + length + 63) / 64 * 64;
}

// Checks a record header copied out of a ring (Note [Untrusted rings]) at consumer position
// `tail`, the producer having published up to `head`: the published bytes fit the ring, the
// record fits them and the end of the ring, and its fields agree with its kind (kPad reaches the
// end of the ring; kEager carries `size` bytes; kCma and kAck none; a kStream piece lies within
// its message: word0 + length <= size). kDataLoss naming the field, its value and the bound.
// `tail` is the consumer's own, a multiple of 64. Pure, so it can be fuzzed.
absl::Status CheckShmRecord(const ShmRecord& record, uint32_t tail, uint32_t head);

// Increments `doorbell` and wakes its sleepers (Note [Doorbell]); any process, any thread.
void RingDoorbell(ShmSignal& doorbell);

// One ring as seen by its producer or its consumer.
class ShmRing {
 public:
  ShmRing() = default;
  explicit ShmRing(void* at)
      : header_(static_cast<ShmRingHeader*>(at)),
        data_(static_cast<char*>(at) + sizeof(ShmRingHeader)) {}

  // Producer: appends a record (padding first if it would wrap); false if there is no room yet.
  // Published to the consumer only by Publish(). kDataLoss if the consumer's position read from
  // shared memory is impossible (more than the ring behind `head`).
  absl::StatusOr<bool> TryWrite(const ShmRecord& record, const void* payload);
  void Publish() { header_->head.Post(head_); }

  // Consumer: copies the next record's header into `record` and points `payload` at its payload
  // bytes in the ring; false when the ring is empty. kPad records are skipped here. kDataLoss
  // (from CheckShmRecord) if the producer wrote an impossible position or record.
  absl::StatusOr<bool> Next(ShmRecord& record, const char** payload);
  // Consumer: frees the record Next() returned.
  void Pop(const ShmRecord& record);
  // Consumer: true if records may be waiting (cheap, without the consumer's lock; a hint only).
  bool MaybeNonEmpty() const { return header_->head.Load() != header_->tail.Load(); }

 private:
  ShmRingHeader* header_ = nullptr;
  char* data_ = nullptr;
  uint32_t head_ = 0;  // producer's own position
  uint32_t tail_ = 0;  // consumer's own position (Note [Untrusted rings])
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_RING_H_
