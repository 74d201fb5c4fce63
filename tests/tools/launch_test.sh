#!/usr/bin/env bash
# tools/launch.py: the torchrun environment reaches every worker, output is prefixed by rank, a
# Bazel label runs from the runfiles, and a failing worker stops the job (the others are
# terminated, none survives) with the failing rank and status reported and returned.
set -uo pipefail
launch=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

cat >"$work/env.sh" <<'SH'
#!/bin/sh
echo "env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $*"
SH
chmod +x "$work/env.sh"
"$launch" --nproc=3 "$work/env.sh" --x=1 a >"$work/env.out" 2>&1 || fail "env job failed"
for r in 0 1 2; do
  grep -Eq "^\[rank $r\] env $r $r 3 3 0 127\.0\.0\.1 [0-9]+ --x=1 a$" "$work/env.out" ||
    fail "rank $r environment/arguments: $(cat "$work/env.out")"
done

"$launch" --nproc=2 //examples:store_allreduce --numel=1000 >"$work/job.out" 2>&1 ||
  fail "store_allreduce by label: $(tail -3 "$work/job.out")"
grep -q '^\[rank 0\] {"job": "store_allreduce".*"verified": true' "$work/job.out" ||
  fail "no verified result line"

# Rank 1 fails at once; rank 0 would sleep for minutes: it must be stopped.
cat >"$work/fail.sh" <<'SH'
#!/bin/sh
echo $$ > "$PIDDIR/pid.$RANK"
if [ "$RANK" = 1 ]; then exit 7; fi
sleep 300
SH
chmod +x "$work/fail.sh"
start=$(date +%s)
PIDDIR=$work timeout 60 "$launch" --nproc=2 --grace-s=2 "$work/fail.sh" >"$work/fail.out" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
[[ $rc -eq 7 ]] || fail "expected the failing rank's status 7, got $rc"
((elapsed < 30)) || fail "stopping the job took ${elapsed}s"
grep -q "rank 1 (local rank 1 on node 0, pid [0-9]*) exited with status 7" "$work/fail.out" || fail "failure not reported: $(cat "$work/fail.out")"
sleep 0.5
if kill -0 "$(cat "$work/pid.0")" 2>/dev/null; then fail "rank 0 outlived the launcher"; fi

"$launch" --nproc=2 //examples:nothing >/dev/null 2>"$work/label.err"
[[ $? -ne 0 ]] && grep -q "not among the launcher's runfiles" "$work/label.err" || fail "unknown label"

[[ $failures -eq 0 ]] || exit 1
echo PASS
