#!/usr/bin/env bash
# examples:fashion_mnist end to end on a slice of the real data: an interrupted run (SIGKILL
# mid-epoch and at an epoch boundary) resumed from its checkpoints ends with bitwise the same
# parameters as an uninterrupted one, also when the newest checkpoint is corrupt; every
# optimizer and model trains; bad flags and a missing dataset fail with clear messages.
set -uo pipefail
binary=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# The parameter fingerprint from the JSON last line of a run's output.
param_hash() { tail -n 1 "$1" | sed -n 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/p'; }

common=(--model=cnn --epochs=2 --batch=64 --train-samples=768 --test-samples=200 --threads=1
  --seed=3 --checkpoint-every=5)

timeout 300 "$binary" "${common[@]}" --checkpoint-dir="$work/full" >"$work/full.out" 2>&1 ||
  fail "uninterrupted run: $(tail -3 "$work/full.out")"
reference=$(param_hash "$work/full.out")
[[ -n "$reference" ]] || fail "uninterrupted run printed no param_hash"
grep -q '"epoch": 2' "$work/full.out" || fail "last line lacks the epoch key"

# crash_and_resume NAME STEP [corrupt]: kill after STEP steps, optionally corrupt the newest
# checkpoint, resume, and compare the final parameters with the uninterrupted run.
crash_and_resume() {
  local name=$1 step=$2 corrupt=${3:-}
  local dir="$work/$name"
  timeout 300 "$binary" "${common[@]}" --checkpoint-dir="$dir" --crash-after-steps="$step" \
    >"$work/$name.crash.out" 2>&1
  local rc=$?
  [[ $rc -eq 137 ]] || fail "$name: expected death by SIGKILL (137), got $rc"
  if [[ -n "$corrupt" ]]; then
    local newest
    newest=$(ls "$dir"/ckpt-*.pdk | sort | tail -n 1)
    truncate -s 100 "$newest"
  fi
  timeout 300 "$binary" "${common[@]}" --checkpoint-dir="$dir" --resume \
    >"$work/$name.resume.out" 2>"$work/$name.resume.err" ||
    fail "$name: resume failed: $(tail -3 "$work/$name.resume.err")"
  grep -q "^resumed from" "$work/$name.resume.out" || fail "$name: did not resume"
  [[ "$(param_hash "$work/$name.resume.out")" == "$reference" ]] ||
    fail "$name: resumed parameters differ from the uninterrupted run"
  if [[ -n "$corrupt" ]]; then
    grep -q "truncated\|corrupt\|crc\|short" "$work/$name.resume.err" ||
      fail "$name: the skipped checkpoint was not reported: $(cat "$work/$name.resume.err")"
  fi
}
crash_and_resume mid_epoch 17        # last checkpoint at step 15, mid epoch 2
crash_and_resume epoch_end 12        # the epoch-1 checkpoint, then nothing more
crash_and_resume corrupt_newest 17 corrupt  # falls back to step 10 and replays

# Every optimizer and model runs and reports a finite loss.
for opt in sgd adam lars lamb; do
  timeout 300 "$binary" --model=mlp --optimizer=$opt --epochs=1 --train-samples=512 \
    --test-samples=100 --warmup-epochs=0.5 >"$work/$opt.out" 2>&1 || fail "optimizer $opt failed"
  tail -n 1 "$work/$opt.out" | grep -q '"train_loss": [0-9]' || fail "optimizer $opt: no loss"
done
timeout 300 "$binary" --model=resnet --epochs=1 --batch=32 --train-samples=64 --test-samples=32 \
  >"$work/resnet.out" 2>&1 || fail "resnet failed: $(tail -3 "$work/resnet.out")"

# Bad input: clear messages, exit status 2 for flags and 1 for a missing dataset.
"$binary" --model=vgg --epochs=0 >/dev/null 2>"$work/vgg.err"
[[ $? -eq 1 ]] && grep -q "unknown model 'vgg'" "$work/vgg.err" || fail "bad model: $(cat "$work/vgg.err")"
"$binary" --batch=0 >/dev/null 2>"$work/batch.err"
[[ $? -eq 2 ]] && grep -q "bad value for --batch" "$work/batch.err" || fail "bad batch"
"$binary" --resume >/dev/null 2>"$work/resume.err"
[[ $? -eq 2 ]] && grep -q "needs --checkpoint-dir" "$work/resume.err" || fail "resume without dir"
"$binary" --data-dir="$work/nowhere" >/dev/null 2>"$work/data.err"
[[ $? -eq 1 ]] && grep -q "dataset-fashion-mnist" "$work/data.err" || fail "missing data: $(cat "$work/data.err")"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s); outputs in $work" >&2
  exit 1
fi
echo "PASS"
