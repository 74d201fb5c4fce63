#!/bin/bash
# Builds the TCPStore frame-parser fuzzer with clang (libFuzzer + ASan + UBSan) and runs it for
# FUZZ_SECONDS (default 20) from a small seed corpus. Fails if it finds a crash, a sanitizer
# report or a broken property (see tcp_store_frame_fuzzer.cc); prints the executions count.
set -euo pipefail

SRC="${TEST_SRCDIR}/${TEST_WORKSPACE}"
WORK="${TEST_TMPDIR}/frame_fuzz"
ARTIFACTS="${TEST_UNDECLARED_OUTPUTS_DIR:-${WORK}}"
SECONDS_TO_RUN="${FUZZ_SECONDS:-20}"
CXX=/usr/bin/clang++
mkdir -p "${WORK}/corpus"

if [[ ! -x "${CXX}" ]]; then
  echo "FAIL: ${CXX} not found; install Debian's clang package (tools/install-deps)" >&2
  exit 1
fi

# Abseil libraries the protocol code needs; --as-needed drops the unused ones.
ABSL_LIBS=(-labsl_status -labsl_statusor -labsl_str_format_internal -labsl_strings
  -labsl_strings_internal -labsl_cord -labsl_cord_internal -labsl_cordz_functions
  -labsl_cordz_handle -labsl_cordz_info -labsl_cordz_sample_token -labsl_raw_logging_internal
  -labsl_base -labsl_spinlock_wait -labsl_throw_delegate -labsl_int128 -labsl_bad_optional_access
  -labsl_stacktrace -labsl_symbolize -labsl_debugging_internal -labsl_demangle_internal
  -labsl_malloc_internal -labsl_synchronization -labsl_graphcycles_internal -labsl_time
  -labsl_time_zone -labsl_exponential_biased -labsl_strerror -labsl_log_severity)

echo "compiling the fuzzer with ${CXX}"
"${CXX}" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"${SRC}" \
  "${SRC}/tests/collective/store/tcp_store_frame_fuzzer.cc" \
  "${SRC}/paddle/collective/store/tcp_store_protocol.cc" \
  -o "${WORK}/fuzzer" -Wl,--push-state,--as-needed "${ABSL_LIBS[@]}" -Wl,--pop-state -lpthread

# Seeds: one valid frame of most ops (first byte = chunk size), plus a truncated and an
# oversized one. Little-endian lengths count the type byte and the body.
seed() { printf "$2" > "${WORK}/corpus/$1"; }
seed set      '\x03\x0b\x00\x00\x00\x02\x01\x00\x00\x00k\x01\x00\x00\x00v'
seed get      '\x01\x06\x00\x00\x00\x03\x01\x00\x00\x00k'
seed add      '\x05\x0e\x00\x00\x00\x04\x01\x00\x00\x00c\x07\x00\x00\x00\x00\x00\x00\x00'
seed cas      '\x02\x0f\x00\x00\x00\x05\x01\x00\x00\x00k\x00\x00\x00\x00\x01\x00\x00\x00d'
seed wait     '\x10\x0f\x00\x00\x00\x06\x02\x00\x00\x00\x01\x00\x00\x00a\x01\x00\x00\x00b'
seed auth_num '\x04\x05\x00\x00\x00\x01\x00\x00\x00\x00\x01\x00\x00\x00\x09'
seed cancel   '\x07\x01\x00\x00\x00\x0a\x01\x00\x00\x00\x08'
seed partial  '\x02\x40\x00\x00\x00\x02\x01\x00'
seed oversize '\x01\xff\xff\xff\x7f\x02'
seed hello    '\x09\x2f\x00\x00\x00\x48PDTS\x01\x01\x00\x10\x00\x00\x20\x00\x00\x00aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'

echo "fuzzing for ${SECONDS_TO_RUN}s"
set +e
"${WORK}/fuzzer" -max_total_time="${SECONDS_TO_RUN}" -max_len=8192 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix="${ARTIFACTS}/" "${WORK}/corpus" \
  > "${WORK}/fuzz.log" 2>&1
rc=$?
set -e
grep -m 5 -E "property violated|ERROR:|SUMMARY:" "${WORK}/fuzz.log" || true
tail -n 12 "${WORK}/fuzz.log"
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "${WORK}/fuzz.log" | grep -o '[0-9]*$' || true)
echo "frame fuzzer: ${execs:-?} executions in ${SECONDS_TO_RUN}s, exit code ${rc}"
if [[ ${rc} -ne 0 ]]; then
  echo "FAIL: the fuzzer found a problem; the input is in ${ARTIFACTS}" >&2
  exit 1
fi
if [[ -z "${execs}" || "${execs}" -lt 1000 ]]; then
  echo "FAIL: the fuzzer ran too few inputs (${execs:-none})" >&2
  exit 1
fi
echo "PASS"
