#!/usr/bin/env bash
# Failure handling with the real training example (tools/paddlerun/agent.py):
#  1. kill -9 of one worker with --max-restarts=0 ends the job within 30 s, with a non-zero exit,
#     a message naming the rank, and no process of the job left behind;
#  2. with --max-restarts=1 and --checkpoint-dir the job completes after the same kill, resumes
#     from the checkpoint and reaches the final test accuracy of an uninterrupted run (within
#     0.5 points).
# Prints the measured times (death -> every process gone, death -> training resumed).
set -uo pipefail
launch=$1
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/restart.XXXXXX")
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
now() { date +%s.%N; }
train=(--model=mlp --epochs=2 --train-samples=24000 --test-samples=2000 --checkpoint-every=20)

# The pid of the worker with RANK=$2 among the processes whose command line mentions $1.
worker_pid() {
  local pid
  for pid in $(pgrep -f -- "$1"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$2"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# Waits (up to 60 s) for a checkpoint in $1, then kills rank 1 by SIGKILL; prints the kill time.
kill_rank1_after_checkpoint() {
  local dir=$1 pid
  for _ in $(seq 600); do
    if compgen -G "$dir/ckpt-*" >/dev/null && pid=$(worker_pid "$dir" 1); then
      kill -9 "$pid" && now && return 0
    fi
    sleep 0.1
  done
  return 1
}

accuracy() { grep -o '"test_accuracy": [0-9.]*' "$1" | tail -1 | awk '{print $2}'; }

# The reference: an uninterrupted run.
"$launch" --nproc=2 //examples:fashion_mnist "${train[@]}" --checkpoint-dir="$work/ref" \
  >"$work/ref.out" 2>&1 || fail "uninterrupted run: $(tail -5 "$work/ref.out")"
ref=$(accuracy "$work/ref.out")
[[ -n "$ref" ]] || fail "no accuracy in the uninterrupted run: $(tail -5 "$work/ref.out")"

# 1. --max-restarts=0: the job ends.
"$launch" --nproc=2 --max-restarts=0 --grace-s=3 //examples:fashion_mnist "${train[@]}" \
  --checkpoint-dir="$work/ck0" >"$work/r0.out" 2>&1 &
launcher=$!
killed_at=$(kill_rank1_after_checkpoint "$work/ck0") || fail "no checkpoint/worker to kill"
for _ in $(seq 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
wait "$launcher"
rc=$?
gone_at=$(now)
while pgrep -f -- "$work/ck0" >/dev/null && (($(echo "$(now) - $killed_at < 30" | bc))); do
  sleep 0.05
done
all_gone_at=$(now)
[[ $rc -ne 0 ]] || fail "killed worker: the launcher exited 0"
grep -q "rank 1 (local rank 1 on node 0, pid [0-9]*) killed by signal 9 (SIGKILL)" "$work/r0.out" ||
  fail "no message naming rank 1: $(grep paddlerun "$work/r0.out")"
grep -q "job failed: rank 1" "$work/r0.out" || fail "no final failure line"
if pgrep -f -- "$work/ck0" >/dev/null; then fail "a worker outlived the launcher"; fi
stop_s=$(echo "$all_gone_at - $killed_at" | bc)
(($(echo "$stop_s < 30" | bc))) || fail "ending the job took ${stop_s}s"
echo "max-restarts=0: worker death -> launcher exit $(echo "$gone_at - $killed_at" | bc) s, -> every process gone $stop_s s (exit status $rc)"

# 2. --max-restarts=1 with --resume: the job completes with the reference accuracy.
"$launch" --nproc=2 --max-restarts=1 --grace-s=3 //examples:fashion_mnist "${train[@]}" \
  --checkpoint-dir="$work/ck1" --resume >"$work/r1.out" 2>&1 &
launcher=$!
killed_at=$(kill_rank1_after_checkpoint "$work/ck1") || fail "no checkpoint/worker to kill"
resumed_at=""
while kill -0 "$launcher" 2>/dev/null; do
  if [[ -z "$resumed_at" ]] && grep -q "resumed from" "$work/r1.out"; then resumed_at=$(now); fi
  sleep 0.05
done
wait "$launcher" || fail "restarted job failed: $(tail -8 "$work/r1.out")"
grep -q "restarting every worker: restart 1 of --max-restarts=1" "$work/r1.out" ||
  fail "no restart reported: $(grep paddlerun "$work/r1.out")"
grep -q "^\[rank 0\] resumed from $work/ck1/ckpt-" "$work/r1.out" ||
  fail "the restarted job did not resume from a checkpoint"
got=$(accuracy "$work/r1.out")
[[ -n "$got" ]] && (($(echo "define abs(x) { if (x < 0) return -x; return x; }; abs($got - $ref) <= 0.005" | bc -l))) ||
  fail "accuracy after the restart $got, uninterrupted $ref (must agree within 0.5 points)"
if pgrep -f -- "$work/ck1" >/dev/null; then fail "a worker outlived the launcher"; fi
[[ -n "$resumed_at" ]] && echo "max-restarts=1: worker death -> training resumed $(echo "$resumed_at - $killed_at" | bc) s; accuracy $got (uninterrupted $ref)"

[[ $failures -eq 0 ]] || exit 1
echo PASS
