// The checkpoint file format: round trips of every kind of tensor and value, the documented
// layout, and detection of every truncation and every flipped byte, with errors that name the
// file and the damaged part.
#include "paddle/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/checkpoint/proto/checkpoint.pb.h"
#include "tests/checkpoint/checkpoint_testing.h"

namespace paddle {
namespace checkpoint {
namespace {

using testing::FreshDir;
using ::testing::HasSubstr;
using testing::PatternTensor;
using testing::ReadBytes;
using testing::SameTensor;
using testing::WriteBytes;

absl::Status WriteFile(const std::string& path, int64_t step, const CheckpointState& state) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0) << path;
  absl::Status status = WriteCheckpointFile(fd, path, step, state);
  close(fd);
  return status;
}

CheckpointState SampleState() {
  CheckpointState s;
  s.tensors["model/fc1.weight"] = PatternTensor({4, 3}, DType::kFloat32, 1);
  s.tensors["model/fc1.bias"] = PatternTensor({3}, DType::kBFloat16, 2);
  s.tensors["optimizer/step"] = PatternTensor({}, DType::kInt64, 3);
  s.ints["data/position"] = 12345;
  s.ints["rng/offset"] = -7;
  s.strings["rng/state"] = std::string("\0\x01 abc", 6);
  return s;
}

void ExpectSameState(const CheckpointState& a, const CheckpointState& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    ASSERT_EQ(b.tensors.count(name), 1u) << name;
    EXPECT_TRUE(SameTensor(t, b.tensors.at(name)))
        << name << ": " << t.ToString() << " vs " << b.tensors.at(name).ToString();
  }
  EXPECT_EQ(a.ints, b.ints);
  EXPECT_EQ(a.strings, b.strings);
}

uint32_t ZlibCrc(const char* data, size_t n) {
  return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(data), n));
}

uint32_t GetU32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

void PutU32(std::string* bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*bytes)[at + i] = static_cast<char>(v >> (8 * i));
}

size_t AlignUp(size_t n) { return (n + 63) / 64 * 64; }

// A file in the documented layout around any manifest bytes and data section.
std::string AssembleFile(const std::string& manifest, const std::string& data,
                         uint32_t version = kFormatVersion) {
  std::string file(kMagic, sizeof(kMagic));
  file.resize(kHeaderBytes);
  PutU32(&file, 8, version);
  PutU32(&file, 12, static_cast<uint32_t>(manifest.size()));
  file += manifest;
  file.resize(file.size() + 4);
  PutU32(&file, file.size() - 4, ZlibCrc(file.data(), file.size() - 4));
  file.resize(AlignUp(file.size()), '\0');
  return file + data;
}

TEST(CheckpointFileTest, RoundTripsEveryDtype) {
  const std::string path = FreshDir() + "/all.pdk";
  const std::vector<DType> dtypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                     DType::kBFloat16, DType::kInt8,    DType::kUInt8,
                                     DType::kInt32,    DType::kInt64,   DType::kBool};
  CheckpointState state;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    // Odd sizes, so most tensors need padding to the next 64-byte boundary.
    state.tensors[absl::StrFormat("t/%s", DTypeName(dtypes[i]))] =
        PatternTensor({3, static_cast<int64_t>(5 + i)}, dtypes[i], 100 + i);
  }
  ASSERT_TRUE(WriteFile(path, 42, state).ok());
  absl::StatusOr<CheckpointFileContents> back = ReadCheckpointFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 42);
  ExpectSameState(state, back->state);
  for (const auto& [name, t] : back->state.tensors) EXPECT_TRUE(t.is_contiguous()) << name;
}

TEST(CheckpointFileTest, StridedViewsAreWrittenContiguously) {
  const std::string path = FreshDir() + "/views.pdk";
  Tensor base = PatternTensor({6, 8}, DType::kInt32, 7);
  CheckpointState state;
  state.tensors["transposed"] = *base.Transpose(0, 1);
  state.tensors["every_other_column"] = *base.Slice(1, 1, 8, 2);
  state.tensors["row"] = *base.Select(0, 3);
  state.tensors["column"] = *base.Select(1, 5);
  for (const auto& [name, t] : state.tensors) {
    if (name != "row") {
      ASSERT_FALSE(t.is_contiguous()) << name;
    }
  }
  ASSERT_TRUE(WriteFile(path, 1, state).ok());
  absl::StatusOr<CheckpointFileContents> back = ReadCheckpointFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameState(state, back->state);
  // Element by element against the base, not only against Contiguous().
  const Tensor& t = back->state.tensors.at("transposed");
  EXPECT_EQ(t.shape(), Shape({8, 6}));
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(**t.At<int32_t>({i, j}), **base.At<int32_t>({j, i}));
  }
}

TEST(CheckpointFileTest, ScalarsAndEmptyTensors) {
  const std::string path = FreshDir() + "/edge.pdk";
  CheckpointState state;
  state.tensors["scalar_f64"] = PatternTensor({}, DType::kFloat64, 1);
  state.tensors["scalar_bool"] = PatternTensor({}, DType::kBool, 2);
  state.tensors["empty"] = *Tensor::Empty({0}, DType::kFloat32);
  state.tensors["empty_3d"] = *Tensor::Empty({3, 0, 2}, DType::kFloat16);
  state.tensors["after_empty"] = PatternTensor({2}, DType::kInt8, 3);
  ASSERT_TRUE(WriteFile(path, 0, state).ok());
  absl::StatusOr<CheckpointFileContents> back = ReadCheckpointFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameState(state, back->state);
  EXPECT_EQ(back->state.tensors.at("scalar_f64").dim(), 0);
  EXPECT_EQ(back->state.tensors.at("scalar_f64").numel(), 1);
  EXPECT_EQ(back->state.tensors.at("empty_3d").shape(), Shape({3, 0, 2}));
}

TEST(CheckpointFileTest, IntsAndStrings) {
  const std::string path = FreshDir() + "/values.pdk";
  CheckpointState state;
  state.ints["min"] = std::numeric_limits<int64_t>::min();
  state.ints["max"] = std::numeric_limits<int64_t>::max();
  state.ints["zero"] = 0;
  state.strings["empty"] = "";
  state.strings["binary"] = std::string("\0\xff\x80\n", 4);
  state.strings["config"] = "lr=0.1;batch=256";
  // Names and keys are bytes, not necessarily UTF-8.
  state.strings[std::string("\xff\xfe", 2)] = "latin-1 key";
  state.ints[std::string("k\0\x80", 3)] = 3;
  state.tensors[std::string("w\xe9ight", 6)] = PatternTensor({2}, DType::kInt32, 1);
  ASSERT_TRUE(WriteFile(path, 9, state).ok());
  absl::StatusOr<CheckpointFileContents> back = ReadCheckpointFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameState(state, back->state);
}

TEST(CheckpointFileTest, LayoutMatchesTheDocumentedFormat) {
  const std::string path = FreshDir() + "/layout.pdk";
  const CheckpointState state = SampleState();
  const int64_t before_us = absl::ToUnixMicros(absl::Now());
  ASSERT_TRUE(WriteFile(path, 77, state).ok());
  const std::string file = ReadBytes(path);
  ASSERT_GE(file.size(), kHeaderBytes);
  EXPECT_EQ(file.substr(0, 8), std::string(kMagic, 8));
  EXPECT_EQ(GetU32(file, 8), kFormatVersion);
  const size_t manifest_bytes = GetU32(file, 12);
  EXPECT_EQ(GetU32(file, kHeaderBytes + manifest_bytes),
            ZlibCrc(file.data(), kHeaderBytes + manifest_bytes));
  proto::CheckpointManifest manifest;
  ASSERT_TRUE(manifest.ParseFromArray(file.data() + kHeaderBytes, manifest_bytes));
  EXPECT_EQ(manifest.format_version(), kFormatVersion);
  EXPECT_EQ(manifest.step(), 77);
  EXPECT_GE(manifest.create_time_us(), before_us);
  EXPECT_LE(manifest.create_time_us(), absl::ToUnixMicros(absl::Now()));
  ASSERT_EQ(manifest.ints_size(), 2);
  EXPECT_EQ(manifest.ints(0).key(), "data/position");
  EXPECT_EQ(manifest.ints(0).value(), 12345);
  ASSERT_EQ(manifest.strings_size(), 1);
  EXPECT_EQ(manifest.strings(0).value(), state.strings.at("rng/state"));
  const size_t data_start = AlignUp(kHeaderBytes + manifest_bytes + 4);
  EXPECT_EQ(file.size(), data_start + manifest.data_length());
  ASSERT_EQ(manifest.tensors_size(), 3);
  for (const proto::TensorEntry& entry : manifest.tensors()) {
    const Tensor& t = state.tensors.at(entry.name());
    EXPECT_EQ(entry.offset() % kDataAlignment, 0u) << entry.name();
    EXPECT_EQ(entry.dtype(), static_cast<uint32_t>(t.dtype()));
    EXPECT_EQ(Shape(entry.shape().begin(), entry.shape().end()), t.shape());
    ASSERT_EQ(entry.length(), t.nbytes());
    const char* bytes = file.data() + data_start + entry.offset();
    EXPECT_EQ(std::memcmp(bytes, t.data(), t.nbytes()), 0) << entry.name();
    EXPECT_EQ(entry.crc32(), ZlibCrc(bytes, t.nbytes())) << entry.name();
  }
}

TEST(CheckpointFileTest, TruncationAtAnyBoundaryIsNamed) {
  const std::string dir = FreshDir();
  const std::string good = dir + "/good.pdk";
  ASSERT_TRUE(WriteFile(good, 5, SampleState()).ok());
  const std::string file = ReadBytes(good);
  const size_t manifest_bytes = GetU32(file, 12);
  const size_t data_start = AlignUp(kHeaderBytes + manifest_bytes + 4);
  const std::vector<size_t> cuts = {0,
                                    7,
                                    15,
                                    16,
                                    17,
                                    kHeaderBytes + manifest_bytes / 2,
                                    kHeaderBytes + manifest_bytes,
                                    kHeaderBytes + manifest_bytes + 3,
                                    data_start - 1,
                                    data_start,
                                    data_start + 1,
                                    data_start + 64,
                                    (data_start + file.size()) / 2,
                                    file.size() - 1};
  for (size_t cut : cuts) {
    ASSERT_LT(cut, file.size());
    const std::string path = absl::StrFormat("%s/cut-%d.pdk", dir, cut);
    WriteBytes(path, file.substr(0, cut));
    absl::StatusOr<CheckpointFileContents> back = ReadCheckpointFile(path);
    ASSERT_FALSE(back.ok()) << "cut at " << cut;
    EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss) << back.status();
    EXPECT_THAT(back.status().message(), HasSubstr("checkpoint " + path + ": "));
    EXPECT_THAT(back.status().message(), HasSubstr("truncated")) << "cut at " << cut;
  }
  // Bytes appended after the data section are corruption too.
  const std::string longer = dir + "/longer.pdk";
  WriteBytes(longer, file + "x");
  EXPECT_THAT(ReadCheckpointFile(longer).status().message(),
              HasSubstr(absl::StrFormat("file is %d bytes, manifest expects %d", file.size() + 1,
                                        file.size())));
}

TEST(CheckpointFileTest, EveryFlippedByteIsDetected) {
  const std::string dir = FreshDir();
  const std::string good = dir + "/good.pdk";
  ASSERT_TRUE(WriteFile(good, 5, SampleState()).ok());
  const std::string file = ReadBytes(good);
  const std::string path = dir + "/flipped.pdk";
  for (uint8_t mask : {0x01, 0x80, 0xff}) {
    for (size_t at = 0; at < file.size(); ++at) {
      std::string bad = file;
      bad[at] = static_cast<char>(bad[at] ^ mask);
      WriteBytes(path, bad);
      absl::StatusOr<CheckpointFileContents> back = ReadCheckpointFile(path);
      ASSERT_FALSE(back.ok()) << "byte " << at << " of " << file.size() << " ^ " << int{mask};
      EXPECT_THAT(back.status().message(), HasSubstr("checkpoint " + path + ": "));
    }
  }
}

TEST(CheckpointFileTest, CorruptionNamesTheDamagedPart) {
  const std::string dir = FreshDir();
  const std::string good = dir + "/good.pdk";
  const CheckpointState state = SampleState();
  ASSERT_TRUE(WriteFile(good, 5, state).ok());
  const std::string file = ReadBytes(good);
  const size_t manifest_bytes = GetU32(file, 12);
  const size_t data_start = AlignUp(kHeaderBytes + manifest_bytes + 4);
  proto::CheckpointManifest manifest;
  ASSERT_TRUE(manifest.ParseFromArray(file.data() + kHeaderBytes, manifest_bytes));
  const proto::TensorEntry* weight = nullptr;
  for (const proto::TensorEntry& e : manifest.tensors()) {
    if (e.name() == "model/fc1.weight") weight = &e;
  }
  ASSERT_NE(weight, nullptr);
  const std::string path = dir + "/bad.pdk";
  auto load_with = [&](size_t at, char value) {
    std::string bad = file;
    bad[at] = value;
    WriteBytes(path, bad);
    return ReadCheckpointFile(path).status();
  };

  absl::Status s = load_with(2, 'X');
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("bad magic bytes 'PDXKPT\\r\\n'"));

  s = load_with(kHeaderBytes + 3, static_cast<char>(file[kHeaderBytes + 3] ^ 0x10));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("header and manifest crc mismatch: stored 0x"));

  // Padding before the data section (always present: the 20-byte header plus this manifest is
  // not a multiple of 64).
  ASSERT_NE((kHeaderBytes + manifest_bytes + 4) % 64, 0u);
  s = load_with(data_start - 1, 1);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrFormat("nonzero padding byte at offset %d before the data section",
                                        data_start - 1)));

  // One data byte of the weight: the error names the tensor and both checksums.
  const size_t at = data_start + weight->offset() + 5;
  std::string weight_bytes = file.substr(data_start + weight->offset(), weight->length());
  weight_bytes[5] = static_cast<char>(weight_bytes[5] ^ 0x04);
  s = load_with(at, static_cast<char>(file[at] ^ 0x04));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      s.message(),
      absl::StrFormat("checkpoint %s: tensor 'model/fc1.weight' crc mismatch: stored "
                      "0x%08x, computed 0x%08x",
                      path, weight->crc32(), ZlibCrc(weight_bytes.data(), weight_bytes.size())));

  // Padding after a tensor (the 6-byte bias is padded to 64).
  const size_t bias_end = data_start + manifest.tensors(0).offset() + manifest.tensors(0).length();
  ASSERT_EQ(manifest.tensors(0).name(), "model/fc1.bias");
  s = load_with(bias_end + 3, 1);
  EXPECT_THAT(s.message(),
              HasSubstr("nonzero padding byte at offset " + std::to_string(bias_end + 3) +
                        " after tensor 'model/fc1.bias'"));
}

TEST(CheckpointFileTest, NewerVersionIsAClearError) {
  const std::string dir = FreshDir();
  const std::string good = dir + "/good.pdk";
  ASSERT_TRUE(WriteFile(good, 5, SampleState()).ok());
  std::string file = ReadBytes(good);
  PutU32(&file, 8, 2);
  const std::string path = dir + "/v2.pdk";
  WriteBytes(path, file);
  absl::Status s = ReadCheckpointFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "checkpoint " + path +
                             ": format version 2 is newer than this build reads (version 1); load "
                             "it with a newer Paddle Collective");
  PutU32(&file, 8, 0);
  WriteBytes(path, file);
  s = ReadCheckpointFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("format version 0 is not a valid version"));
}

void AdviseHugePages(void* data, size_t bytes) {
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// Protobuf cannot serialize a message of 2 GiB or more (its sizes are int): such a manifest is a
// clear error before anything is written, not an abort halfway through the file.
TEST(CheckpointFileTest, ManifestOverTwoGiBIsRejectedBeforeWriting) {
  const std::string path = FreshDir() + "/huge.pdk";
  CheckpointState state;
  state.tensors["model/w"] = PatternTensor({4}, DType::kFloat32, 1);
  // kMaxManifestBytes of value plus its key: over the limit. Filled on transparent huge pages
  // where the kernel allows, since faulting in 2 GiB of 4 KiB pages takes ~20 s on a VM.
  std::string blob;
  blob.reserve(kMaxManifestBytes);
  AdviseHugePages(blob.data(), kMaxManifestBytes);
  blob.resize(kMaxManifestBytes, 'x');
  state.strings["blob"] = std::move(blob);
  absl::Status s = WriteFile(path, 1, state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("checkpoint " + path + ": manifest of at least " +
                                     std::to_string(kMaxManifestBytes + 4 + 7) + " bytes"));
  EXPECT_THAT(s.message(), HasSubstr("1 tensors, 0 ints, 1 strings) is over the limit of " +
                                     std::to_string(kMaxManifestBytes) + " bytes"));
  EXPECT_THAT(s.message(), HasSubstr("store large strings as uint8 tensors"));
  EXPECT_EQ(ReadBytes(path), "");
}

TEST(CheckpointFileTest, ManifestLengthOverTheLimitIsCorrupt) {
  const std::string path = FreshDir() + "/long.pdk";
  std::string file = AssembleFile("", "");
  PutU32(&file, 12, static_cast<uint32_t>(kMaxManifestBytes) + 1);
  WriteBytes(path, file);
  absl::Status s = ReadCheckpointFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "checkpoint " + path + ": manifest length 2147483648 is over the " +
                             "2147483647-byte limit no writer exceeds");
}

TEST(CheckpointFileTest, MissingFileIsNotFound) {
  const std::string path = FreshDir() + "/nope.pdk";
  absl::Status s = ReadCheckpointFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));
}

TEST(CheckpointFileTest, RejectsTensorsItCannotWrite) {
  const std::string path = FreshDir() + "/bad.pdk";
  CheckpointState state;
  state.tensors["model/w"] = Tensor();
  absl::Status s = WriteFile(path, 1, state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "checkpoint " + path + ": tensor 'model/w' is undefined (no storage)");

  float host[2] = {1, 2};
  state.tensors["model/w"] = *Tensor::FromBlob(host, {2}, DType::kFloat32, Device::Cuda(0));
  s = WriteFile(path, 1, state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'model/w' is float32[2] on cuda:0; copy it to the CPU"));
}

// Manifests whose crc is right but whose content is not (a broken or foreign writer): each
// inconsistency is caught before any tensor bytes are trusted.
TEST(CheckpointFileTest, InconsistentManifestsAreNamed) {
  const std::string dir = FreshDir();
  const std::string path = dir + "/crafted.pdk";
  std::string data(8, '\0');
  for (int i = 0; i < 8; ++i) data[i] = static_cast<char>(i * 37);
  proto::CheckpointManifest base;
  base.set_format_version(kFormatVersion);
  base.set_step(3);
  base.set_data_length(64);
  proto::TensorEntry* w = base.add_tensors();
  w->set_name("w");
  w->set_dtype(static_cast<uint32_t>(DType::kFloat32));
  w->add_shape(2);
  w->set_offset(0);
  w->set_length(8);
  w->set_crc32(ZlibCrc(data.data(), 8));
  const std::string section = data + std::string(56, '\0');

  WriteBytes(path, AssembleFile(base.SerializeAsString(), section));
  absl::StatusOr<CheckpointFileContents> ok = ReadCheckpointFile(path);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->step, 3);

  struct Case {
    std::function<void(proto::CheckpointManifest*)> mutate;
    std::string extra_data;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](auto* m) { m->mutable_tensors(0)->set_dtype(99); }, "",
       "tensor 'w' has unknown dtype value 99"},
      {[](auto* m) { m->mutable_tensors(0)->set_shape(0, -2); }, "",
       "tensor 'w' has invalid shape [-2]"},
      {[](auto* m) { m->mutable_tensors(0)->set_length(12); }, "",
       "tensor 'w' of float32[2] needs 8 bytes, manifest says 12"},
      {[](auto* m) { m->mutable_tensors(0)->clear_crc32(); }, "",
       "tensor 'w' has no crc32 in the manifest"},
      {[](auto* m) { *m->add_tensors() = m->tensors(0); }, "", "tensor 'w' appears twice"},
      {[](auto* m) { m->mutable_tensors(0)->set_offset(64); }, "",
       "tensor 'w' at data offset 64, expected 0 (tensors are packed in manifest order)"},
      {[](auto* m) {
         m->mutable_tensors(0)->set_shape(0, 32);
         m->mutable_tensors(0)->set_length(128);
       },
       "", "tensor 'w' (128 bytes at data offset 0) ends past the 64-byte data section"},
      {[](auto* m) { m->set_data_length(128); }, std::string(64, '\0'),
       "tensors fill 64 bytes of the 128-byte data section"},
      {[](auto* m) { m->set_format_version(7); }, "",
       "manifest says format version 7, header says 1"},
      {[](auto* m) {
         for (int i = 0; i < 2; ++i) m->add_ints()->set_key("lr");
       },
       "", "int 'lr' appears twice"},
      {[](auto* m) {
         for (int i = 0; i < 2; ++i) m->add_strings()->set_key("cfg");
       },
       "", "string 'cfg' appears twice"},
  };
  for (const Case& c : cases) {
    proto::CheckpointManifest m = base;
    c.mutate(&m);
    WriteBytes(path, AssembleFile(m.SerializeAsString(), section + c.extra_data));
    absl::Status s = ReadCheckpointFile(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.expected;
    EXPECT_EQ(std::string(s.message()), "checkpoint " + path + ": " + c.expected);
  }

  WriteBytes(path, AssembleFile("\xff\xff\xff", section));
  EXPECT_THAT(ReadCheckpointFile(path).status().message(),
              HasSubstr("the 3-byte manifest does not parse"));
}

}  // namespace
}  // namespace checkpoint
}  // namespace paddle
