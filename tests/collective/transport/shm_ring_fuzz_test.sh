#!/bin/bash
# Fuzzes the shared-memory channel's receive side (shm_ring_fuzzer.cc: records and ring positions
# a hostile peer wrote) with libFuzzer, ASan and UBSan for FUZZ_SECONDS (default 20); see
# tests/testing/fuzz_lib.sh.
FUZZ_MAX_LEN="${FUZZ_MAX_LEN:-512}"
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/testing/fuzz_lib.sh"

# Seeds (the commands of shm_ring_fuzzer.cc): an eager message into a posted receive, a message
# streamed in two pieces, an unexpected message received later, an eager length past its size, a
# piece past its message, and a head moved far past the tail.
seed eager      '\x00\x03\x64\x00\x00\x01\x02\x03\x64\x00\x00\x64\x00\x00\x00\x00\x00\x03'
seed stream     '\x00\x01\x00\x00\x05\x01\x05\x01\x00\x00\x05\x00\x00\x04\x00\x00\x00\x03\x01\x05\x01\x00\x00\x05\x00\x00\x01\x00\x00\x04\x03'
seed unexpected '\x01\x02\x02\x08\x00\x00\x08\x00\x00\x00\x00\x00\x03\x00\x02\x08\x00\x00\x03'
seed oversize   '\x00\x03\x10\x00\x00\x01\x02\x03\x10\x00\x00\x00\x10\x00\x00\x00\x00\x03'
seed past_end   '\x00\x01\x00\x00\x05\x01\x05\x01\x00\x00\x05\x00\x00\x04\x00\x00\x00\x01\x05\x01\x00\x00\x05\x00\x10\x00\x00\x00\x10\x03'
seed head       '\x01\x02\x01\x08\x00\x00\x08\x00\x00\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x40\x00\x03'

fuzz_build tests/collective/transport/shm_ring_fuzzer.cc \
  paddle/collective/transport/shm/shm_channel.cc paddle/collective/transport/shm/shm_ring.cc \
  paddle/collective/transport/shm/cma.cc paddle/collective/transport/spare_buffers.cc \
  paddle/core/status.cc paddle/core/env.cc paddle/core/settings.cc
fuzz_run "shm ring fuzzer"
