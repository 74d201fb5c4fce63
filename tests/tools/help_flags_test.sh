#!/usr/bin/env bash
# --help prints usage and exits 0; an unknown flag exits 2 with a message naming it; a bad value
# names its flag and what it takes. For bench/collectives and paddle_store_server.
set -uo pipefail
collectives=$1
store_server=$2
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect STATUS NEEDLE COMMAND...: COMMAND exits STATUS and its output holds NEEDLE.
expect() {
  local status=$1 needle=$2
  shift 2
  timeout 30 "$@" >"$work/out" 2>&1 </dev/null
  local rc=$?
  [[ $rc -eq $status ]] || fail "$* exited $rc, not $status: $(cat "$work/out")"
  grep -qF -- "$needle" "$work/out" || fail "$* printed no '$needle': $(cat "$work/out")"
}

for binary in "$collectives" "$store_server"; do
  expect 0 "usage: " "$binary" --help
  expect 0 "usage: " "$binary" -h
  expect 2 "unknown" "$binary" --no-such-flag
done
expect 0 "--nproc=N" "$collectives" --help
expect 2 '"--no-such-flag"' "$collectives" --no-such-flag
expect 2 "--nproc takes 1..15" "$collectives" --nproc=99
expect 2 "--backend takes native or gloo" "$collectives" --backend=mpi
expect 0 "--until-signal" "$store_server" --help
expect 2 "'--no-such-flag'" "$store_server" --no-such-flag
expect 2 "--port is 'x'; a port is 0..65535" "$store_server" --port=x
# --help stops at once: nothing is started, nothing listens.
"$collectives" --nproc=2 --help >/dev/null 2>&1 || fail "--help after other flags"

[[ $failures -eq 0 ]] || exit 1
echo PASS
