#!/usr/bin/env bash
# The demo job end to end: real processes, env:// rendezvous, TCP store. Repeated runs check the
# store teardown (Note [Store teardown]); a rank started with another --numel must make every
# rank fail within the store timeout with a message naming the problem, never hang.
set -uo pipefail
binary=$1
work=${TEST_TMPDIR:-$(mktemp -d)}

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run_job N NUMEL_OF_LAST_RANK: starts N ranks, returns the number of failed ranks.
run_job() {
  local n=$1 last_numel=$2 port pids=() failed=0
  port=$(free_port)
  for ((r = 0; r < n; r++)); do
    local numel=4096
    ((r == n - 1)) && numel=$last_numel
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n PADDLE_STORE_TIMEOUT_S=10 \
      timeout 60 "$binary" --numel="$numel" >"$work/out.$r" 2>"$work/err.$r" &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || failed=$((failed + 1)); done
  return $failed
}

for n in 1 2 4 5; do
  for attempt in 1 2 3; do
    if ! run_job "$n" 4096; then
      echo "FAIL: world size $n, attempt $attempt"; cat "$work"/err.*; exit 1
    fi
    if ! grep -q '"verified": true' "$work/out.0"; then
      echo "FAIL: rank 0 printed no verified result (world size $n)"; cat "$work/out.0"; exit 1
    fi
    grep -q "\"world_size\": $n" "$work/out.0" || { echo "FAIL: wrong world size"; exit 1; }
  done
done
echo "ok: world sizes 1, 2, 4, 5, three runs each"

rm -f "$work"/out.* "$work"/err.*
start=$(date +%s)
if run_job 3 1000; then
  echo "FAIL: a rank with another --numel did not fail the job"; exit 1
fi
elapsed=$(( $(date +%s) - start ))
if ! grep -h "start every rank with the same --numel" "$work"/err.* >/dev/null; then
  echo "FAIL: no rank named the mismatch"; cat "$work"/err.*; exit 1
fi
(( elapsed < 50 )) || { echo "FAIL: took ${elapsed}s (a hang cut by timeout)"; exit 1; }
echo "ok: mismatched --numel failed every rank in ${elapsed}s:"
cat "$work"/err.*
