#!/bin/bash
# Fuzzes the FileStore log parser (file_store_log_fuzzer.cc) with libFuzzer, ASan and UBSan for
# FUZZ_SECONDS (default 20); see tests/testing/fuzz_lib.sh.
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/testing/fuzz_lib.sh"

# Seeds (first byte: where to cut, out of 255): records of every type, a torn tail, an unknown
# type. A record is type | u32 key length | u32 value length | key | value, little-endian.
seed set_delete '\x80S\x01\x00\x00\x00\x01\x00\x00\x00kvD\x01\x00\x00\x00\x00\x00\x00\x00k'
seed closed     '\x40C\x00\x00\x00\x00\x00\x00\x00\x00C\x00\x00\x00\x00\x00\x00\x00\x00'
seed torn       '\xffS\x03\x00\x00\x00\x05\x00\x00\x00keyval'
seed unknown    '\x10S\x00\x00\x00\x00\x00\x00\x00\x00X\x00\x00\x00\x00\x00\x00\x00\x00'
seed huge_len   '\x20S\xff\xff\xff\xff\xff\xff\xff\xffk'

fuzz_build tests/collective/store/file_store_log_fuzzer.cc \
  paddle/collective/store/file_store.cc paddle/collective/store/hash_store.cc \
  paddle/collective/store/store.cc paddle/core/deadline.cc paddle/core/env.cc paddle/core/settings.cc \
  paddle/core/logging.cc paddle/core/status.cc \
  -- -labsl_raw_hash_set -labsl_hash -labsl_city -labsl_low_level_hash
fuzz_run "FileStore log fuzzer"
