// libFuzzer target over the checkpoint file reader, ReadCheckpointFile (built with clang by
// checkpoint_file_fuzz_test.sh; the Bazel toolchain is gcc).
//
// Random bytes almost never get past the header crc, so the first input byte picks one of three
// ways to turn the rest into a file:
//   0  the bytes are the whole file;
//   1  the bytes are a manifest and a data section: the fuzzer frames them with a valid header,
//      crc and padding, so the manifest parser and the layout checks see arbitrary manifests;
//   2  the bytes are edits (4-byte offset, 1-byte xor) of a valid checkpoint of a sample state,
//      then a cut: flipped and truncated files in every part of a real layout.
// Properties checked beyond "no crash, no sanitizer report, no exception":
//   - an error is kDataLoss (or kFailedPrecondition for a newer format version, kResourceExhausted
//     for a tensor too large to allocate) and names the file;
//   - a file that loads writes back (WriteCheckpointFile) to a file that loads to the same state.
// With FUZZ_WRITE_SEEDS=DIR set, startup writes one seed of each mode into DIR.
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "paddle/checkpoint/checkpoint_file.h"
#include "paddle/checkpoint/proto/checkpoint.pb.h"

namespace {

using paddle::checkpoint::CheckpointFileContents;
using paddle::checkpoint::CheckpointState;

void Require(bool ok, const char* what, const std::string& detail = "") {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s %s\n", what, detail.c_str());
    std::abort();
  }
}

// An in-memory file with a path the reader can open.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, 0)) {
    Require(fd_ >= 0, "memfd_create");
    path_ = absl::StrCat("/proc/self/fd/", fd_);
  }
  void Set(const std::string& bytes) {
    Require(ftruncate(fd_, 0) == 0, "ftruncate");
    Require(pwrite(fd_, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()),
            "pwrite");
  }
  // The file, emptied, for WriteCheckpointFile.
  int Reset() {
    Require(ftruncate(fd_, 0) == 0, "ftruncate");
    return fd_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t AlignUp(uint64_t n) { return (n + 63) / 64 * 64; }

// Header, `manifest`, a valid crc and padding, then `data`.
std::string Frame(const std::string& manifest, const std::string& data) {
  std::string file(paddle::checkpoint::kMagic, sizeof(paddle::checkpoint::kMagic));
  PutU32(&file, paddle::checkpoint::kFormatVersion);
  PutU32(&file, static_cast<uint32_t>(manifest.size()));
  file += manifest;
  PutU32(&file, static_cast<uint32_t>(
                    crc32_z(0, reinterpret_cast<const Bytef*>(file.data()), file.size())));
  file.resize(AlignUp(file.size()), '\0');
  return file + data;
}

CheckpointState SampleState() {
  CheckpointState s;
  paddle::Tensor w = *paddle::Tensor::Empty({3, 2}, paddle::DType::kFloat32);
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = static_cast<float>(i) * 0.5f;
  paddle::Tensor b = *paddle::Tensor::Empty({}, paddle::DType::kInt64);
  b.data<int64_t>()[0] = -3;
  s.tensors["model/w"] = w;
  s.tensors["model/b"] = b;
  s.tensors["empty"] = *paddle::Tensor::Empty({0, 4}, paddle::DType::kBFloat16);
  s.ints["data/epoch"] = 2;
  s.strings["note"] = std::string("a\0b", 3);
  return s;
}

std::string FileOf(const CheckpointState& state, int64_t step) {
  static MemFile* scratch = new MemFile("checkpoint_scratch");
  Require(
      paddle::checkpoint::WriteCheckpointFile(scratch->Reset(), scratch->path(), step, state).ok(),
      "writing a sample checkpoint");
  std::ifstream in(scratch->path(), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const std::string& ValidFile() {
  static const std::string* file = new std::string(FileOf(SampleState(), 42));
  return *file;
}

bool SameState(const CheckpointState& a, const CheckpointState& b) {
  if (a.ints != b.ints || a.strings != b.strings || a.tensors.size() != b.tensors.size()) {
    return false;
  }
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.dtype() != t.dtype() ||
        it->second.shape() != t.shape() ||
        (t.nbytes() > 0 && std::memcmp(t.data(), it->second.data(), t.nbytes()) != 0)) {
      return false;
    }
  }
  return true;
}

void WriteSeeds(const char* dir) {
  auto put = [dir](const char* name, const std::string& bytes) {
    std::ofstream(absl::StrCat(dir, "/", name), std::ios::binary) << bytes;
  };
  const std::string& valid = ValidFile();
  put("raw_valid", std::string(1, '\0') + valid);
  // Mode 1 wants the manifest and data without the framing: cut them out of the valid file.
  const uint32_t manifest_bytes =
      static_cast<unsigned char>(valid[12]) | static_cast<unsigned char>(valid[13]) << 8 |
      static_cast<unsigned char>(valid[14]) << 16 | static_cast<unsigned char>(valid[15]) << 24;
  put("framed_valid", std::string(1, '\1') + valid.substr(16, manifest_bytes) +
                          valid.substr(AlignUp(16 + manifest_bytes + 4)));
  put("edits_none", std::string(1, '\2') + std::string(4, '\xff'));
  put("edits_flip",
      std::string(1, '\2') + std::string("\x10\x00\x00\x00\x01", 5) + std::string(4, '\xff'));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_WRITE_SEEDS")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file;
  switch (data[0] % 3) {
    case 0:
      file = input;
      break;
    case 1: {
      // The first byte says where the manifest ends, as a fraction of the input.
      const size_t split = input.empty() ? 0 : input.size() * static_cast<uint8_t>(input[0]) / 255;
      file = Frame(input.substr(0, split), input.substr(split));
      break;
    }
    default: {
      file = ValidFile();
      size_t pos = 0;
      for (; pos + 5 <= input.size(); pos += 5) {
        uint32_t offset = 0;
        std::memcpy(&offset, input.data() + pos, 4);
        if (offset == 0xffffffffu) break;  // end of edits; the next 4 bytes are the cut
        file[offset % file.size()] ^= input[pos + 4];
      }
      if (pos + 8 <= input.size()) {
        uint32_t keep = 0;
        std::memcpy(&keep, input.data() + pos + 4, 4);
        if (keep < file.size()) file.resize(keep);
      }
    }
  }

  static MemFile* const in = new MemFile("checkpoint_in");
  in->Set(file);
  absl::StatusOr<CheckpointFileContents> got = paddle::checkpoint::ReadCheckpointFile(in->path());
  if (!got.ok()) {
    const absl::StatusCode code = got.status().code();
    Require(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kFailedPrecondition ||
                code == absl::StatusCode::kResourceExhausted,
            "an error is kDataLoss, kFailedPrecondition or kResourceExhausted",
            got.status().ToString());
    Require(absl::StrContains(got.status().message(), in->path()), "an error names the file",
            got.status().ToString());
    return 0;
  }
  const std::string again = FileOf(got->state, got->step);
  in->Set(again);
  absl::StatusOr<CheckpointFileContents> back = paddle::checkpoint::ReadCheckpointFile(in->path());
  Require(back.ok(), "a loaded state writes back to a loadable file",
          back.ok() ? "" : back.status().ToString());
  Require(back->step == got->step && SameState(back->state, got->state),
          "a loaded state round-trips");
  return 0;
}
