// One checkpoint file: a training job's tensors (model, optimizer state) and its small values
// (RNG state, data position, config) in a format whose every byte is checked on load.
//
// Layout (integers little-endian):
//
//   offset 0   magic "PDCKPT\r\n" (8 bytes)
//          8   format version (uint32, kFormatVersion)
//         12   manifest length L (uint32, at most kMaxManifestBytes)
//         16   manifest: a serialized proto::CheckpointManifest (paddle/checkpoint/proto)
//     16 + L   crc32 of bytes [0, 16 + L): header and manifest (uint32)
//     20 + L   zeros up to the data section at S = AlignUp(20 + L, 64)
//          S   data section: each tensor's bytes in manifest order, each padded with zeros to a
//              multiple of 64 bytes; the file ends exactly at S + manifest.data_length
//
// Tensor data is contiguous, row-major and in memory byte order (little-endian; the build refuses
// big-endian hosts), so a file could be mapped and its tensors used in place. Reading checks the
// magic, the version (a newer one is a clear error), the header crc, the manifest's layout against
// the file size, each tensor's dtype, shape, bounds and crc32, and that padding is zero: flipping
// or cutting any byte of a file makes ReadCheckpointFile fail with kDataLoss naming the file and
// the part that is wrong.
//
// These functions write and read one file; CheckpointManager (checkpoint.h) makes writes atomic,
// names and prunes files, and falls back past corrupt ones.
#ifndef PADDLE_CHECKPOINT_CHECKPOINT_FILE_H_
#define PADDLE_CHECKPOINT_CHECKPOINT_FILE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace checkpoint {

constexpr char kMagic[8] = {'P', 'D', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr uint32_t kFormatVersion = 1;
// Bytes before the manifest: magic, version, manifest length.
constexpr size_t kHeaderBytes = 16;
// Protobuf serializes and parses messages of at most 2 GiB - 1 bytes (its sizes are `int`), so a
// manifest past this is rejected before anything is written; large values belong in tensors.
constexpr uint64_t kMaxManifestBytes = 0x7fffffff;
// Alignment of the data section and of every tensor in it.
constexpr size_t kDataAlignment = 64;

// What a training job saves and restores. Tensors may be any dtype, any shape (scalars and
// zero-element tensors included) and strided CPU views; loaded tensors are contiguous CPU tensors.
struct CheckpointState {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, int64_t> ints;
  std::map<std::string, std::string> strings;
};

struct CheckpointFileContents {
  CheckpointState state;
  int64_t step = 0;
  int64_t create_time_us = 0;  // microseconds since the Unix epoch
};

// Writes the whole file to `fd` (open for writing, empty), from offset 0, with large writes and
// one pass over each tensor's bytes. `path` only names the file in errors. Does not fsync.
// kInvalidArgument, before writing anything, for a tensor it cannot store or a manifest (names,
// ints and strings) over kMaxManifestBytes.
absl::Status WriteCheckpointFile(int fd, const std::string& path, int64_t step,
                                 const CheckpointState& state);

// Reads and checks `path`. kNotFound when it does not exist, kDataLoss when it is truncated or
// corrupt, kFailedPrecondition when it was written by a newer format version.
absl::StatusOr<CheckpointFileContents> ReadCheckpointFile(const std::string& path);

}  // namespace checkpoint
}  // namespace paddle

#endif  // PADDLE_CHECKPOINT_CHECKPOINT_FILE_H_
