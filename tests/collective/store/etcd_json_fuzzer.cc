// libFuzzer target over the reader of etcd's gateway replies, EtcdJson::Parse (built with clang by
// etcd_json_fuzz_test.sh; the Bazel toolchain is gcc).
//
// Properties checked beyond "no crash, no sanitizer report, no exception":
//   - an error is kInternal and says at which byte (within the input) the JSON went wrong;
//   - every accessor works on every value of a parsed reply (AsBytes fails only with kInternal),
//     and a field or index that is not there reads as null;
//   - a parsed value written back as JSON parses to the same value (strings escaped the C way,
//     which the reader's unescaping undoes, numbers and bools by their text).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "paddle/collective/store/etcd_store.h"

namespace {

using paddle::EtcdJson;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

// `v` as JSON text that EtcdJson::Parse reads back to the same value.
std::string Write(const EtcdJson& v) {
  switch (v.kind()) {
    case EtcdJson::Kind::kNull:
      return "null";
    case EtcdJson::Kind::kBool:
    case EtcdJson::Kind::kNumber:
      return v.text();
    case EtcdJson::Kind::kString:
      return absl::StrCat("\"", absl::CEscape(v.text()), "\"");
    case EtcdJson::Kind::kArray: {
      std::string out = "[";
      for (const EtcdJson& item : v.items()) {
        absl::StrAppend(&out, out.size() > 1 ? "," : "", Write(item));
      }
      return out + "]";
    }
    case EtcdJson::Kind::kObject: {
      std::string out = "{";
      for (const auto& [name, value] : v.fields()) {
        absl::StrAppend(&out, out.size() > 1 ? "," : "", "\"", absl::CEscape(name),
                        "\":", Write(value));
      }
      return out + "}";
    }
  }
  return "";
}

// Calls every accessor on `v` and everything under it.
void Walk(const EtcdJson& v, int depth) {
  Require(depth <= 66, "nesting is bounded");
  (void)v.AsBool();
  (void)v.AsInt();
  absl::StatusOr<std::string> bytes = v.AsBytes();
  Require(bytes.ok() || bytes.status().code() == absl::StatusCode::kInternal,
          "AsBytes fails only with kInternal");
  if (v.kind() != EtcdJson::Kind::kString)
    Require(bytes.ok() && bytes->empty(), "non-string bytes");
  Require(v[v.items().size()].IsNull(), "an index past the end is null");
  Require(v["\x01no such field"].IsNull() || !v.fields().empty(), "a missing field is null");
  for (size_t i = 0; i < v.items().size(); ++i) {
    Require(&v[i] == &v.items()[i], "v[i] is item i");
    Walk(v.items()[i], depth + 1);
  }
  for (const auto& [name, value] : v.fields()) {
    const EtcdJson* first = nullptr;  // lookups take the first of duplicate names
    for (const auto& field : v.fields()) {
      if (field.first == name) {
        first = &field.second;
        break;
      }
    }
    Require(&v[name] == first, "a field is found by its name");
    Walk(value, depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<EtcdJson> parsed = EtcdJson::Parse(text);
  if (!parsed.ok()) {
    Require(parsed.status().code() == absl::StatusCode::kInternal, "an error is kInternal");
    absl::string_view message = parsed.status().message();
    Require(absl::StartsWith(message, "bad JSON from etcd ("), "an error says what it is");
    const size_t at = message.find(" at byte ");
    Require(at != absl::string_view::npos, "an error names the byte");
    message.remove_prefix(at + 9);
    uint64_t byte = 0;
    Require(absl::SimpleAtoi(message.substr(0, message.find(')')), &byte) && byte <= size + 1,
            "the byte is within the input");
    return 0;
  }
  Walk(*parsed, 0);
  const std::string written = Write(*parsed);
  absl::StatusOr<EtcdJson> again = EtcdJson::Parse(written);
  Require(again.ok(), "a written value parses");
  Require(Write(*again) == written, "a written value parses to the same value");
  return 0;
}
