#!/usr/bin/env bash
# tools/chaos, bounded: 4 trials (seed 1) of the training example under the launcher, each with
# one fault (SIGKILL, SIGSTOP or a 2 s SIGSTOP of a worker or the launcher, in rendezvous,
# training, a checkpoint save or shutdown). It must exit 0 (no hang, no orphan, no leaked
# /dev/shm segment, every outcome the expected one), print the table with every trial counted,
# and write a JSON record per trial.
set -uo pipefail
launch=$(realpath "$1")
example=$(realpath "$2")
chaos=$(realpath "$3")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/chaos.XXXXXX")
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

timeout 840 /usr/bin/python3 "$chaos" --trials=4 --seed=1 --launch="$launch" --program="$example" \
  --json="$work/chaos.json" --keep-logs="$work/logs" >"$work/out" 2>&1
rc=$?
cat "$work/out"
[[ $rc -eq 0 ]] || fail "tools/chaos exited $rc (1: a hang, orphan or leak; 124: it hung itself)"
grep -Eq '^ +trials +fault +ended +hangs +p50 s +p95 s +max s +named:w +named:l +named +expected +orphans +leaks$' \
  "$work/out" || fail "no table header"
grep -Eq '^all +4 +[0-9] +[0-9] +0 ' "$work/out" || fail "the table's 'all' row is not 4 trials, 0 hangs"
grep -q '^chaos: PASS: 0 hangs, 0 orphans, 0 leaked segments, 0 unexpected outcomes in 4 trials (seed 1)$' "$work/out" ||
  fail "no PASS line"
/usr/bin/python3 - "$work/chaos.json" <<'PY' || fail "bad JSON record"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["seed"] == 1 and len(d["trials"]) == 4, d
assert d["summary"]["injected"] >= 3, d["summary"]  # a fault may miss a job that already ended
for t in d["trials"]:
    assert t["signal"] in ("KILL", "STOP", "SLOW") and t["phase"] in (
        "rendezvous", "training", "checkpoint", "shutdown"), t
    assert not t["hang"] and not t["orphans"] and not t["leaked_segments"], t
    assert t["expected"] in (True, None), t
PY

[[ $failures -eq 0 ]] || exit 1
echo PASS
