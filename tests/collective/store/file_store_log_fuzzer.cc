// libFuzzer target over the FileStore log parser, ParseFileStoreLog (built with clang by
// file_store_log_fuzz_test.sh; the Bazel toolchain is gcc).
//
// The first input byte says where to cut the rest in two, as FileStore reads a log that grows
// while it is read. Properties checked beyond "no crash, no sanitizer report":
//   - the bytes parsed are whole records: re-encoding the records gives exactly those bytes;
//   - what is left after a successful parse is a torn tail (it holds no whole record);
//   - parsing up to the cut and then on from where that stopped delivers the same records as one
//     parse of everything (FileStore replays incrementally);
//   - an error is kDataLoss naming the file offset of the bad record.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "paddle/collective/store/file_store.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

struct Parsed {
  absl::StatusOr<size_t> consumed = size_t{0};
  std::string encoded;  // the delivered records, re-encoded
};

Parsed Parse(absl::string_view log, uint64_t log_offset) {
  Parsed out;
  out.consumed =
      paddle::ParseFileStoreLog(log, log_offset, [&out](const paddle::FileStoreRecord& r) {
        out.encoded.push_back(r.type);
        PutU32(&out.encoded, static_cast<uint32_t>(r.key.size()));
        PutU32(&out.encoded, static_cast<uint32_t>(r.value.size()));
        absl::StrAppend(&out.encoded, r.key, r.value);
      });
  return out;
}

void CheckError(const absl::Status& status) {
  Require(status.code() == absl::StatusCode::kDataLoss, "an error is kDataLoss");
  Require(absl::StrContains(status.message(), "unknown record type") &&
              absl::StrContains(status.message(), "at offset "),
          "an error names the record type and offset");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view log(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = log.size() * data[0] / 255;

  const Parsed whole = Parse(log, 16);
  if (!whole.consumed.ok()) {
    CheckError(whole.consumed.status());
  } else {
    Require(*whole.consumed <= log.size(), "parsed at most the input");
    Require(whole.encoded == log.substr(0, *whole.consumed), "parsed bytes are whole records");
    const Parsed rest = Parse(log.substr(*whole.consumed), 16 + *whole.consumed);
    Require(rest.consumed.ok() && *rest.consumed == 0 && rest.encoded.empty(),
            "what is left is a torn tail");
  }

  // Incremental: what FileStore::Replay sees when the file grows from `cut` bytes to all of them.
  const Parsed first = Parse(log.substr(0, cut), 16);
  if (!first.consumed.ok()) {
    CheckError(first.consumed.status());
    Require(!whole.consumed.ok(), "an error in a prefix is an error in the whole");
    return 0;
  }
  const Parsed second = Parse(log.substr(*first.consumed), 16 + *first.consumed);
  if (!second.consumed.ok()) {
    CheckError(second.consumed.status());
    Require(whole.consumed.status() == second.consumed.status(),
            "the incremental parse fails like the whole one");
    return 0;
  }
  Require(whole.consumed.ok() && *first.consumed + *second.consumed == *whole.consumed &&
              first.encoded + second.encoded == whole.encoded,
          "the incremental parse delivers the same records");
  return 0;
}
