#!/usr/bin/env bash
# tools/fuzz on the TCP wire fuzzer for 2 s, its corpus and log in a temporary folder: the run is
# logged as a row of hours.tsv, the inputs it found are merged into the kept folder, --summary
# adds them up, and an unknown target is a usage error (exit 2) that lists the targets.
set -uo pipefail
fuzz=$(realpath "$1")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/fuzz-tool.XXXXXX")
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

/usr/bin/python3 "$fuzz" --seconds=2 --corpus-root="$work/kept" tcp_wire >"$work/out" 2>&1 ||
  fail "tools/fuzz exited $?: $(tail -5 "$work/out")"
cat "$work/out"
grep -Eq "^fuzz: tcp_wire: [0-9,]+ executions, no finding; kept corpus: [0-9]+ inputs" "$work/out" ||
  fail "no result line"
n=$(find "$work/kept/tcp_wire" -type f | wc -l)
[[ $n -ge 1 ]] || fail "nothing merged into the kept corpus"
/usr/bin/python3 - "$work/kept/hours.tsv" <<'PY' || fail "hours.tsv"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
assert rows[0] == ["date", "commit", "target", "seconds", "cpu_seconds", "executions",
                   "result"], rows[0]
assert len(rows) == 2 and rows[1][2:4] == ["tcp_wire", "2"] and rows[1][6] == "ok", rows
assert float(rows[1][4]) >= 1 and int(rows[1][5]) > 1000, rows
PY
/usr/bin/python3 "$fuzz" --summary --corpus-root="$work/kept" >"$work/summary" 2>&1
grep -Eq "^tcp_wire +1 +0\.00 +0\.0[0-9] +[0-9,]+ +0$" "$work/summary" || fail "summary: $(cat "$work/summary")"
/usr/bin/python3 "$fuzz" --seconds=1 --corpus-root="$work/kept" no_such_target >"$work/bad" 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "an unknown target exited $rc"
grep -q "unknown target(s) no_such_target; targets: .*tcp_wire" "$work/bad" ||
  fail "unknown target: $(cat "$work/bad")"

[[ $failures -eq 0 ]] || exit 1
echo PASS
