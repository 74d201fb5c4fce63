#!/bin/bash
# Fuzzes the checkpoint file reader (checkpoint_file_fuzzer.cc) with libFuzzer, ASan and UBSan for
# FUZZ_SECONDS (default 20); see tests/testing/fuzz_lib.sh. The manifest's C++ classes come from
# protoc here, as Bazel's cc_proto_library makes them; the seeds (a valid checkpoint in each of
# the fuzzer's input modes) come from the fuzzer itself.
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/testing/fuzz_lib.sh"

GEN="${FUZZ_WORK}/gen"
mkdir -p "${GEN}"
/usr/bin/protoc --cpp_out="${GEN}" -I"${FUZZ_SRC}" \
  "${FUZZ_SRC}/paddle/checkpoint/proto/checkpoint.proto"

fuzz_build tests/checkpoint/checkpoint_file_fuzzer.cc paddle/checkpoint/checkpoint_file.cc \
  paddle/core/allocator.cc paddle/core/cpu_features.cc paddle/core/device.cc \
  paddle/core/dtype.cc paddle/core/env.cc paddle/core/settings.cc paddle/core/half.cc paddle/core/logging.cc \
  paddle/core/status.cc paddle/core/storage.cc paddle/core/tensor.cc \
  -- -I"${GEN}" "${GEN}/paddle/checkpoint/proto/checkpoint.pb.cc" -lprotobuf -lz

FUZZ_WRITE_SEEDS="${FUZZ_WORK}/corpus" "${FUZZ_WORK}/fuzzer" -runs=0 >/dev/null 2>&1
[[ -s "${FUZZ_WORK}/corpus/framed_valid" ]] || { echo "FAIL: the fuzzer wrote no seeds" >&2; exit 1; }
FUZZ_MAX_LEN=4096 fuzz_run "checkpoint file fuzzer"
