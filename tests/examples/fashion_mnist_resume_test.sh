#!/usr/bin/env bash
# examples:fashion_mnist --resume from checkpoints it cannot use, and data-parallel resumes:
#  - a checkpoint of another program (other keys) or of another model (other parameter names or
#    shapes) is a clear error naming the file and what does not fit, not an uncaught exception;
#  - an unreadable newest checkpoint is an error naming it, not a silent resume from an older one;
#  - 2 workers resume from the same step even when their directories differ: rank 0's newest is
#    corrupt, so both take the previous step and end bitwise like an uninterrupted run; rank 1
#    lacking the step rank 0 chose makes both fail, naming rank 1.
set -uo pipefail
binary=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
param_hash() { tail -n 1 "$1" | sed -n 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/p'; }
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# write_checkpoint PATH KIND: a valid checkpoint file (checkpoint_file.h layout) that this example
# did not write. KIND "other": a step and an unrelated integer, no tensors; "shapes": every key
# the example reads, but model tensors of the wrong shapes.
write_checkpoint() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import struct, sys, zlib
path, kind = sys.argv[1], sys.argv[2]
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])
def vfield(f, n): return varint(f << 3) + varint(n)
def bfield(f, b): return varint(f << 3 | 2) + varint(len(b)) + b
align = lambda n: (n + 63) // 64 * 64
tensors, ints, strings = [], {b"other/thing": 42}, {}
if kind == "shapes":
    tensors = [(b"model/1.weight", [2, 2]), (b"model/1.bias", [2])]
    ints = {b"data/epoch": 0, b"data/offset": 0, b"train/step": 7, b"train/loss_count": 0,
            b"rng/dropout_offset": 0}
    strings = {b"train/loss_sum": b"0x0p+0"}
manifest = vfield(1, 1) + vfield(2, 7)
entries, data = b"", b""
for name, shape in tensors:
    length = 4 * (shape[0] * (shape[1] if len(shape) > 1 else 1))
    entry = (bfield(1, name) + vfield(2, 0) + bfield(3, b"".join(varint(d) for d in shape)) +
             vfield(4, len(data)) + vfield(5, length) + varint(6 << 3 | 5) +
             struct.pack("<I", zlib.crc32(bytes(length))))
    entries += bfield(5, entry)
    data += bytes(align(length))
manifest += vfield(4, len(data)) + entries
manifest += b"".join(bfield(6, bfield(1, k) + vfield(2, v)) for k, v in ints.items())
manifest += b"".join(bfield(7, bfield(1, k) + bfield(2, v)) for k, v in strings.items())
head = b"PDCKPT\r\n" + struct.pack("<II", 1, len(manifest)) + manifest
head += struct.pack("<I", zlib.crc32(head))
open(path, "wb").write(head + bytes(align(len(head)) - len(head)) + data)
PY
}

single=(--model=mlp --epochs=1 --batch=64 --train-samples=256 --test-samples=50 --threads=1)

# Another program's checkpoint: no uncaught exception (exit 134), a message naming file and key.
mkdir -p "$work/other"
write_checkpoint "$work/other/ckpt-00000007.pdk" other
"$binary" "${single[@]}" --checkpoint-dir="$work/other" --resume >"$work/other.out" 2>"$work/other.err"
rc=$?
[[ $rc -eq 1 ]] || fail "other program's checkpoint: exit $rc, want 1: $(tail -3 "$work/other.err")"
grep -q "checkpoint $work/other/ckpt-00000007.pdk (step 7) does not fit this run: it has no integer 'data/epoch'" \
  "$work/other.err" || fail "other program's checkpoint: $(cat "$work/other.err")"

# Another model's parameters: the message names the file and the parameter and both shapes.
mkdir -p "$work/shapes"
write_checkpoint "$work/shapes/ckpt-00000007.pdk" shapes
"$binary" "${single[@]}" --checkpoint-dir="$work/shapes" --resume >"$work/shapes.out" 2>"$work/shapes.err"
rc=$?
[[ $rc -eq 1 ]] || fail "wrong shapes: exit $rc, want 1: $(tail -3 "$work/shapes.err")"
grep -q "checkpoint $work/shapes/ckpt-00000007.pdk (step 7) does not fit this run: model parameters: state dict entry '1\.\(weight\|bias\)' is .*, the model has " \
  "$work/shapes.err" || fail "wrong shapes: $(cat "$work/shapes.err")"

# A checkpoint of the cnn resumed as the mlp: names a parameter the checkpoint lacks.
"$binary" "${single[@]}" --model=cnn --checkpoint-dir="$work/cnn" >"$work/cnn.out" 2>&1 ||
  fail "cnn run: $(tail -3 "$work/cnn.out")"
"$binary" "${single[@]}" --checkpoint-dir="$work/cnn" --resume >"$work/mlp.out" 2>"$work/mlp.err"
rc=$?
[[ $rc -eq 1 ]] || fail "cnn checkpoint into mlp: exit $rc, want 1"
grep -q "checkpoint $work/cnn/ckpt-[0-9]*\.pdk (step [0-9]*) does not fit this run: model parameters: " \
  "$work/mlp.err" || fail "cnn checkpoint into mlp: $(cat "$work/mlp.err")"

# The newest checkpoint is a directory (an I/O error, not corruption): an error, no fallback.
mkdir -p "$work/cnn/ckpt-99999999.pdk"
"$binary" "${single[@]}" --model=cnn --checkpoint-dir="$work/cnn" --resume >"$work/eisdir.out" \
  2>"$work/eisdir.err"
rc=$?
[[ $rc -eq 1 ]] || fail "unreadable newest: exit $rc, want 1"
grep -q "ckpt-99999999.pdk: Is a directory; not falling back" "$work/eisdir.err" ||
  fail "unreadable newest: $(cat "$work/eisdir.err")"
grep -q "^resumed from" "$work/eisdir.out" && fail "unreadable newest: resumed from an older one"

# run NAME N [per-rank extra args via EXTRA_<r>] -- common args: starts N ranks; waits for all.
run() {
  local name=$1 n=$2
  shift 2
  local port pids=() r
  port=$(free_port)
  for ((r = 0; r < n; r++)); do
    local extra_var="EXTRA_$r"
    # shellcheck disable=SC2086
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n PADDLE_TIMEOUT_S=20 \
      PADDLE_STORE_TIMEOUT_S=30 timeout 120 "$binary" "$@" ${!extra_var:-} \
      >"$work/$name.out.$r" 2>"$work/$name.err.$r" &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}"
    echo $? >"$work/$name.rc.$r"
  done
}
ddp=(--model=mlp --epochs=1 --batch=60 --train-samples=1200 --test-samples=200 --seed=2
  --threads=1 --checkpoint-every=5)

# Reference: uninterrupted, rank 0 saves steps 10, 15, 20 (the newest 3) into full/.
run full 2 "${ddp[@]}" --checkpoint-dir="$work/full"
for r in 0 1; do
  [[ $(cat "$work/full.rc.$r") == 0 ]] || fail "ddp reference rank $r: $(tail -3 "$work/full.err.$r")"
done
reference=$(param_hash "$work/full.out.0")
[[ -n "$reference" ]] || fail "ddp reference printed no param_hash"
newest=$(basename "$(ls "$work"/full/ckpt-*.pdk | sort | tail -n 1)")

# Rank 0's newest is corrupt, rank 1's is not: both resume from the previous step and end with
# the reference parameters (a rank resuming alone from the newest would train on other samples).
cp -r "$work/full" "$work/a0" && cp -r "$work/full" "$work/a1"
truncate -s 100 "$work/a0/$newest"
EXTRA_0="--checkpoint-dir=$work/a0" EXTRA_1="--checkpoint-dir=$work/a1" run agree 2 "${ddp[@]}" --resume
for r in 0 1; do
  [[ $(cat "$work/agree.rc.$r") == 0 ]] || fail "agree rank $r: $(tail -3 "$work/agree.err.$r")"
done
grep -q "^resumed from $work/a0/ckpt-" "$work/agree.out.0" || fail "agree: rank 0 did not resume"
grep -q "^resumed from $work/a0/$newest" "$work/agree.out.0" && fail "agree: resumed from the corrupt file"
grep -q "skipping checkpoint $work/a0/$newest: .*truncated" "$work/agree.err.0" ||
  fail "agree: the skipped checkpoint was not reported: $(cat "$work/agree.err.0")"
[[ "$(param_hash "$work/agree.out.0")" == "$reference" ]] ||
  fail "agree: resumed parameters differ from the uninterrupted run"

# Rank 1 lacks the step rank 0 chose: both fail, rank 1 naming its missing file, both naming rank 1.
cp -r "$work/full" "$work/b0" && cp -r "$work/full" "$work/b1"
rm "$work/b1/$newest"
EXTRA_0="--checkpoint-dir=$work/b0" EXTRA_1="--checkpoint-dir=$work/b1" run missing 2 "${ddp[@]}" --resume
for r in 0 1; do
  rc=$(cat "$work/missing.rc.$r")
  [[ $rc == 1 ]] || fail "missing: rank $r exit $rc, want 1: $(tail -3 "$work/missing.err.$r")"
  grep -q "rank(s) 1 of 2 could not load checkpoint step" "$work/missing.err.$r" ||
    fail "missing: rank $r message: $(cat "$work/missing.err.$r")"
done
grep -q "rank 1/2: opening checkpoint $work/b1/$newest: No such file or directory" "$work/missing.err.1" ||
  fail "missing: rank 1 did not name its file: $(cat "$work/missing.err.1")"

[[ $failures -eq 0 ]] || { echo "$failures failure(s); outputs in $work" >&2; exit 1; }
echo PASS
