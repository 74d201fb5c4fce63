#!/usr/bin/env bash
# examples:fashion_mnist --shard-optimizer (ZeRO-1), real processes over env:// and TCP: on 2
# workers Adam with its state sharded trains to the same loss and the same parameters as the
# unsharded run, with half the optimizer_state_bytes; checkpoints of the sharded state resume
# bit-exactly at 2 workers and load at 3.
set -uo pipefail
binary=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run NAME N args...: starts N ranks, waits for all, fails the test if one fails.
run() {
  local name=$1 n=$2
  shift 2
  local port pids=() r
  port=$(free_port)
  for ((r = 0; r < n; r++)); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n PADDLE_TIMEOUT_S=20 \
      PADDLE_STORE_TIMEOUT_S=30 timeout 120 "$binary" "$@" \
      >"$work/$name.out.$r" 2>"$work/$name.err.$r" &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || fail "$name: rank $r failed: $(tail -3 "$work/$name.err.$r")"
  done
}
common=(--model=mlp --batch=60 --train-samples=1200 --test-samples=200 --seed=2 --optimizer=adam)

run plain 2 "${common[@]}" --epochs=1
run sharded 2 "${common[@]}" --epochs=1 --shard-optimizer
# Two ranks add their gradients in either order to the same sum, so the reduce-scatter's average
# is the allreduce's and the parameters must match bit for bit, not only the loss.
/usr/bin/python3 - "$work/plain.out.0" "$work/sharded.out.0" <<'PY' || fail "sharded differs"
import json, sys
plain, sharded = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:3])
assert sharded["train_loss"] == plain["train_loss"], (plain, sharded)
assert sharded["param_hash"] == plain["param_hash"], (plain, sharded)
# Adam: 2 slots x 4 bytes per parameter, half of them per rank (up to one element of rounding).
assert abs(2 * sharded["optimizer_state_bytes"] - plain["optimizer_state_bytes"]) <= 16, (plain, sharded)
assert sharded["optimizer_state_bytes"] > 0 and plain["peak_rss_mb"] > 0, (plain, sharded)
print(f"train_loss {sharded['train_loss']} both; optimizer_state_bytes "
      f"{plain['optimizer_state_bytes']} -> {sharded['optimizer_state_bytes']}")
PY

# A sharded checkpoint holds the whole state: a 2-epoch run saves at each epoch's end; without
# the last checkpoint, resuming from the first at 2 workers ends where the run ended, and 3
# workers load it too.
run full 2 "${common[@]}" --epochs=2 --shard-optimizer --checkpoint-dir="$work/ckpt"
newest=$(ls "$work/ckpt"/ckpt-*.pdk | sort | tail -n 1)
[[ $(ls "$work/ckpt"/ckpt-*.pdk | wc -l) -ge 2 ]] || fail "expected two checkpoints in $work/ckpt"
rm -f "$newest"
cp -r "$work/ckpt" "$work/ckpt3"
run resumed 2 "${common[@]}" --epochs=2 --shard-optimizer --checkpoint-dir="$work/ckpt" --resume
run resumed3 3 "${common[@]}" --epochs=2 --shard-optimizer --checkpoint-dir="$work/ckpt3" --resume
grep -q "resumed from" "$work/resumed3.out.0" || fail "3 workers did not resume"
/usr/bin/python3 - "$work/full.out.0" "$work/resumed.out.0" "$work/resumed3.out.0" <<'PY' ||
import json, sys
full, resumed, three = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:4])
assert resumed["param_hash"] == full["param_hash"], (full, resumed)
assert three["world_size"] == 3 and abs(three["train_loss"] - full["train_loss"]) < 1e-3, (full, three)
print(f"resumed: param_hash {resumed['param_hash']} as uninterrupted; 3 workers: loss "
      f"{three['train_loss']} (2 workers {full['train_loss']})")
PY
  fail "sharded checkpoint did not resume"

[[ $failures -eq 0 ]] || exit 1
echo "PASS"
