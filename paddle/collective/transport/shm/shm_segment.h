// A POSIX shared-memory segment (/dev/shm) mapped into this process.
//
// Segments are how ranks on one host share memory: the shared-memory transport's rings and the
// node workspace of the intra-node collectives live in them. One rank creates a segment under a
// unique name and publishes the name through the store; the others open it; once every rank has
// mapped it, the creator unlinks the name, so a process killed later leaves nothing behind (the
// kernel frees the memory with the last mapping). Note [Segment cleanup] in shm_segment.cc says
// what happens when a process dies before that.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_SEGMENT_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_SEGMENT_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {

class ShmSegment {
 public:
  // Creates and maps a zero-filled segment of `bytes`. The name is
  // "/paddle-<pid namespace inode>-<pid>-<tag>-<random>"
  // (`tag`: letters, digits, '-' and '_', at most 64 characters), unique on this host. Before
  // creating, removes the segments that earlier processes of this scheme left behind when they
  // died (Note [Segment cleanup]). Errors name the size and the errno text, and say how much
  // /dev/shm has free when it is full.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(absl::string_view tag, size_t bytes);

  // Opens and maps the segment `name` created by another process. `name` may come from anywhere
  // (a store), so it must be one Create could have made ("/paddle-" and letters, digits, '-' or
  // '_'; else kInvalidArgument), be a regular file of this process's uid (else
  // kPermissionDenied) and be exactly `bytes` (else kFailedPrecondition); each error names the
  // segment and what was found. What the memory holds is the caller's to check.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name, size_t bytes);

  ~ShmSegment();  // unmaps; unlinks the name if this process created it and has not yet
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name (idempotent); the mapping stays valid in every process that has it.
  void Unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, void* data, size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), linked_(owner) {}

  std::string name_;
  void* data_;
  size_t size_;
  bool linked_;  // this process created it and has not unlinked it yet
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_SEGMENT_H_
