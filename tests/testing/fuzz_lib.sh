#!/bin/bash
# Shared by the fuzz tests (sourced): builds a libFuzzer target with clang (the Bazel toolchain is
# gcc) under ASan + UBSan and runs it for FUZZ_SECONDS (default 20) from a seed corpus. The test
# fails on a crash, a sanitizer report, a broken property (the target aborts with "property
# violated: ...") or too few executions. A fuzz test script sources this file, calls `seed` for
# each seed input, then `fuzz_build SOURCES... [-- LINK FLAGS]` and `fuzz_run`.
#
# The corpus that long runs found (tests/fuzz_corpus/<name>/, <name> being the script's name less
# _fuzz_test.sh; tools/fuzz grows it) is read beside the seeds, so every run replays it. With
# FUZZ_MERGE_INTO=DIR, fuzz_run then merges into DIR the inputs of this run that reach new
# coverage (libFuzzer's -merge=1), which is how tools/fuzz keeps them.
#
# Under Bazel (tests/testing/fuzz.bzl) the compile is an action of its own: with
# FUZZ_BUILD_ONLY=PATH, fuzz_build writes the fuzzer to PATH and ends the script; the test then
# gets that binary as the script's first argument, and fuzz_build takes it instead of compiling.
set -euo pipefail

FUZZ_SRC="${TEST_SRCDIR}/${TEST_WORKSPACE}"
FUZZ_WORK="${TEST_TMPDIR}/fuzz"
FUZZ_ARTIFACTS="${TEST_UNDECLARED_OUTPUTS_DIR:-${FUZZ_WORK}}"
FUZZ_SECONDS_TO_RUN="${FUZZ_SECONDS:-20}"
FUZZ_MAX_LEN="${FUZZ_MAX_LEN:-8192}"
FUZZ_CXX=/usr/bin/clang++
FUZZ_NAME="$(basename "$0" _fuzz_test.sh)"
FUZZ_PREBUILT="${1:+${FUZZ_SRC}/$1}"
FUZZ_KEPT="${FUZZ_SRC}/tests/fuzz_corpus/${FUZZ_NAME}"
mkdir -p "${FUZZ_WORK}/corpus"

# Abseil libraries our parsers use; --as-needed drops the unused ones.
FUZZ_ABSL_LIBS=(-labsl_status -labsl_statusor -labsl_str_format_internal -labsl_strings
  -labsl_strings_internal -labsl_cord -labsl_cord_internal -labsl_cordz_functions
  -labsl_cordz_handle -labsl_cordz_info -labsl_cordz_sample_token -labsl_raw_logging_internal
  -labsl_base -labsl_spinlock_wait -labsl_throw_delegate -labsl_int128 -labsl_bad_optional_access
  -labsl_stacktrace -labsl_symbolize -labsl_debugging_internal -labsl_demangle_internal
  -labsl_malloc_internal -labsl_synchronization -labsl_graphcycles_internal -labsl_time
  -labsl_time_zone -labsl_exponential_biased -labsl_strerror -labsl_log_severity)

# seed NAME PRINTF-FORMAT: one seed input, written with printf (so \xNN escapes work).
seed() { printf "$2" >"${FUZZ_WORK}/corpus/$1"; }

# fuzz_build SOURCE... [-- LINK-FLAG...]: sources relative to the workspace root.
fuzz_build() {
  local sources=() link=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do
    sources+=("${FUZZ_SRC}/$1")
    shift
  done
  [[ $# -gt 0 ]] && shift
  link=("$@")
  if [[ -n "${FUZZ_PREBUILT}" ]]; then
    echo "the fuzzer, built by Bazel: ${FUZZ_PREBUILT#"${FUZZ_SRC}/"}"
    cp "${FUZZ_PREBUILT}" "${FUZZ_WORK}/fuzzer"
    return 0
  fi
  if [[ ! -x "${FUZZ_CXX}" ]]; then
    echo "FAIL: ${FUZZ_CXX} not found; install Debian's clang package (tools/install-deps)" >&2
    exit 1
  fi
  echo "compiling the fuzzer with ${FUZZ_CXX}"
  "${FUZZ_CXX}" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"${FUZZ_SRC}" "${sources[@]}" -o "${FUZZ_WORK}/fuzzer" \
    -Wl,--push-state,--as-needed "${FUZZ_ABSL_LIBS[@]}" "${link[@]}" -Wl,--pop-state -lpthread
  if [[ -n "${FUZZ_BUILD_ONLY:-}" ]]; then
    cp "${FUZZ_WORK}/fuzzer" "${FUZZ_BUILD_ONLY}"
    exit 0
  fi
}

fuzz_run() {
  local name="${1:-fuzzer}"
  local kept=()
  [[ -d "${FUZZ_KEPT}" ]] && kept=("${FUZZ_KEPT}")
  echo "fuzzing for ${FUZZ_SECONDS_TO_RUN}s (kept corpus: ${kept[*]:-none})"
  set +e
  "${FUZZ_WORK}/fuzzer" -max_total_time="${FUZZ_SECONDS_TO_RUN}" -max_len="${FUZZ_MAX_LEN}" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="${FUZZ_ARTIFACTS}/" \
    "${FUZZ_WORK}/corpus" "${kept[@]}" >"${FUZZ_WORK}/fuzz.log" 2>&1
  local rc=$?
  set -e
  grep -m 5 -E "property violated|ERROR:|SUMMARY:" "${FUZZ_WORK}/fuzz.log" || true
  tail -n 12 "${FUZZ_WORK}/fuzz.log"
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "${FUZZ_WORK}/fuzz.log" |
    grep -o '[0-9]*$' || true)
  echo "${name}: ${execs:-?} executions in ${FUZZ_SECONDS_TO_RUN}s, exit code ${rc}"
  echo "fuzz-result: ${FUZZ_NAME} ${FUZZ_SECONDS_TO_RUN} ${execs:-0} ${rc}"
  if [[ ${rc} -eq 0 && -n "${FUZZ_MERGE_INTO:-}" ]]; then
    mkdir -p "${FUZZ_MERGE_INTO}"
    "${FUZZ_WORK}/fuzzer" -merge=1 -max_len="${FUZZ_MAX_LEN}" "${FUZZ_MERGE_INTO}" \
      "${FUZZ_WORK}/corpus" >"${FUZZ_WORK}/merge.log" 2>&1 ||
      { tail -n 5 "${FUZZ_WORK}/merge.log"; echo "FAIL: merging the corpus" >&2; exit 1; }
    echo "kept corpus: $(find "${FUZZ_MERGE_INTO}" -type f | wc -l) inputs in ${FUZZ_MERGE_INTO}"
  fi
  if [[ ${rc} -ne 0 ]]; then
    echo "FAIL: the fuzzer found a problem; the input is in ${FUZZ_ARTIFACTS}" >&2
    exit 1
  fi
  if [[ -z "${execs}" || "${execs}" -lt 1000 ]]; then
    echo "FAIL: the fuzzer ran too few inputs (${execs:-none})" >&2
    exit 1
  fi
  echo "PASS"
}
