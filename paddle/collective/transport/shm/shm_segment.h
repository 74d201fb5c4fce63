// A shared-memory segment mapped into this process, and the reference through which other
// processes of the host open it.
//
// Segments are how ranks on one host share memory: the shared-memory transport's rings and the
// node workspace of the intra-node collectives live in them. One rank creates a segment and
// publishes its reference through the store; the others open it; once every rank has mapped it,
// the creator stops sharing it (StopSharing), and the memory then lives only in the mappings.
// A segment has no name in any file system (Note [Nameless segments] in shm_segment.cc), so no
// death, of any process at any moment, can leave one behind.
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
  // Creates and maps a zero-filled segment of `bytes`, with the reference
  // "/paddle-<pid namespace inode>-<pid>-<fd>-<tag>-<random>"
  // (`tag`: letters, digits, '-' and '_', at most 64 characters). Errors name the size and the
  // errno text.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(absl::string_view tag, size_t bytes);

  // Opens and maps the segment that another process of this host and PID namespace created and
  // still shares under `reference`. The reference may come from anywhere (a store), so it must
  // be one Create could have made (else kInvalidArgument), of this PID namespace (else
  // kFailedPrecondition), still shared by a live creator (else kUnavailable), be that very
  // segment, of this process's uid (else kPermissionDenied) and exactly `bytes` (else
  // kFailedPrecondition); each error names the reference and what was found. What the memory
  // holds is the caller's to check.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& reference,
                                                          size_t bytes);

  ~ShmSegment();  // unmaps, after StopSharing
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Closes the handle others open the segment through (idempotent; for an opened segment a
  // no-op): Open of the reference fails from then on, and the mapping stays valid in every
  // process that has it.
  void StopSharing();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }  // the reference
  int shared_fd() const { return fd_; }              // -1 once not shared, or when opened

 private:
  ShmSegment(std::string name, void* data, size_t size, int fd)
      : name_(std::move(name)), data_(data), size_(size), fd_(fd) {}

  std::string name_;
  void* data_;
  size_t size_;
  int fd_;  // the creator's handle while it shares the segment, else -1
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_SEGMENT_H_
