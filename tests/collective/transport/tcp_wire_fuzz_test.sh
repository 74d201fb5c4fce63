#!/bin/bash
# Fuzzes the TCP transport's wire decoders (tcp_wire_fuzzer.cc) with libFuzzer, ASan and UBSan for
# FUZZ_SECONDS (default 20); see tests/testing/fuzz_lib.sh.
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/testing/fuzz_lib.sh"

# A Hello of rank 0 of 2 meaning rank 1, a Reply with 4 bytes of text, a message header.
seed hello   'PDTH\x02\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x11\x22\x33\x44\x55\x66\x77\x88abcdefghijklmnop'
seed reply   'PDTR\x04\x00\x00\x00nope'
seed message 'PDTM\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00'
seed abort   'PDTM\x01\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00'

FUZZ_MAX_LEN=64
fuzz_build tests/collective/transport/tcp_wire_fuzzer.cc paddle/collective/transport/tcp/tcp_wire.cc
fuzz_run "wire fuzzer"
