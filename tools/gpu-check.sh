#!/usr/bin/env bash
# gpu-check.sh: runs a GPU bundle made by tools/gpu-bundle on a machine with an NVIDIA GPU.
#
# Steps: 1) nvidia-smi (a machine without it is reported and the run continues: the tests then
# skip, naming CUDA's reason); 2) find the CUDA libraries the binaries need but the bundle does not
# carry (cuBLAS, cuDNN, NCCL): from PyTorch's pip wheels (site-packages/nvidia/*/lib, torch/lib),
# /usr/local/cuda*/lib64 and ldconfig; 3) ldd every binary and report each library that is still
# missing, with the versions this machine does have (e.g. needs libcublas.so.13, has .so.12);
# 4) run each test (gtest; pass/fail/skip counts from its output), the Python package's
# cuda_test.py (pytest, with the bundle's numpy; where python3 is the CPython the extension was
# built for, else a SKIP line saying why), each benchmark with a timeout, and the training
# checks (GPU vs CPU accuracy, PyTorch side by side); 5) a summary table and totals. The whole
# run stays under 5 minutes. Everything printed also goes to $OUT/gpu-check.log when OUT is
# set. Exit status: 0 if every binary passed (or skipped), 1 otherwise.
set -uo pipefail

BUNDLE=$(cd "$(dirname "$0")" && pwd)
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
TOTAL_BUDGET_S=${GPU_CHECK_BUDGET_S:-270}   # leaves headroom under 5 minutes
TEST_TIMEOUT_S=${GPU_CHECK_TEST_TIMEOUT_S:-120}
BENCH_TIMEOUT_S=${GPU_CHECK_BENCH_TIMEOUT_S:-60}

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  echo "Environment: GPU_CHECK_BUDGET_S (270), GPU_CHECK_TEST_TIMEOUT_S (120),"
  echo "GPU_CHECK_BENCH_TIMEOUT_S (60), GPU_CHECK_REPO (the repository, for the PyTorch comparison;"
  echo "default: the current folder), OUT (log folder)."
  echo "gpu-check.sh --sim-sweeps [ARGS]: instead of the checks, find the libraries as above and run"
  echo "sim-sweeps.sh ARGS (CPU allreduce sweeps for tools/simulate; see its --help)."
  exit 0
fi
SIM_SWEEPS=0
if [[ "${1:-}" == "--sim-sweeps" ]]; then
  SIM_SWEEPS=1
  shift
fi

if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/$( ((SIM_SWEEPS)) && echo sim-sweeps || echo gpu-check).log") 2>&1
fi
START=$(date +%s)
elapsed() { echo $(($(date +%s) - START)); }

echo "== gpu-check: bundle $BUNDLE on $(hostname), $(date -u +%FT%TZ)"
[[ -f "$BUNDLE/MANIFEST" ]] && sed 's/^/   /' "$BUNDLE/MANIFEST"

echo "== nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi || echo "nvidia-smi failed (exit $?); continuing"
else
  echo "no nvidia-smi on this machine (no NVIDIA driver?); continuing: the GPU tests will skip"
fi

echo "== CUDA libraries"
dirs=()
add_dir() { [[ -d "$1" ]] && dirs+=("$1"); }
torch_dir=""
if command -v python3 >/dev/null 2>&1; then
  torch_dir=$(timeout 90 python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' \
    2>/dev/null | tail -1)
fi
if [[ -n "$torch_dir" && -d "$torch_dir" ]]; then
  echo "PyTorch at $torch_dir"
  for d in "$(dirname "$torch_dir")"/nvidia/*/lib; do add_dir "$d"; done
  add_dir "$torch_dir/lib"
else
  echo "no PyTorch found by python3 (import torch failed); looking elsewhere"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib; do
  add_dir "$d"
done
if command -v ldconfig >/dev/null 2>&1; then
  while read -r d; do add_dir "$d"; done < <(ldconfig -p 2>/dev/null |
    grep -E 'lib(cublas|cudnn|nccl|cudart|cuda)\.so' | sed 's/.*=> //' | xargs -r -n1 dirname |
    sort -u)
fi
LD_LIBRARY_PATH="$BUNDLE/lib"
for d in "${dirs[@]}"; do LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
LD_LIBRARY_PATH="$LD_LIBRARY_PATH${ORIG_LD_LIBRARY_PATH:+:$ORIG_LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
# bench:collectives is built with CUDA where the toolkit is, so it needs NCCL and the CUDA
# runtime found above even for its CPU sweeps.
if ((SIM_SWEEPS)); then
  "$BUNDLE/sim-sweeps.sh" --bin="$BUNDLE/bin/cpu__bench__collectives" "$@"
  exit $?
fi

echo "== ldd"
missing_any=0
for f in "$BUNDLE"/bin/* "$BUNDLE"/python/paddle/_C.so; do
  [[ -e "$f" ]] || continue
  while read -r lib; do
    missing_any=1
    base=${lib%%.so*}
    have=""
    for d in "${dirs[@]}"; do
      for cand in "$d/$base".so*; do [[ -e "$cand" ]] && have="$have $(basename "$cand") ($d)"; done
    done
    echo "MISSING: $(basename "$f") needs $lib;" \
      "${have:+this machine has:$have}${have:-no version of $base.so found here}"
  done < <(ldd "$f" 2>/dev/null | awk '/not found/ {print $1}')
done
((missing_any)) || echo "every binary finds all its libraries"

echo "== running"
declare -a rows=()
total_pass=0 total_fail=0 total_skip=0 bad=0
# budget_left NAME MIN: sets LEFT to the seconds of the run's budget left; with fewer than MIN
# left it records NAME as not run and fails (rows and bad are this shell's, so no subshell).
budget_left() {
  LEFT=$((TOTAL_BUDGET_S - $(elapsed)))
  ((LEFT >= $2)) && return 0
  rows+=("$(printf '%-60s %-28s %6s' "$1" "NOT RUN (time budget spent)" "-")")
  bad=1
  return 1
}
run_one() {  # path, timeout, kind
  local f=$1 limit=$2 kind=$3 name out rc t0 secs result
  name=$(basename "$f")
  budget_left "$name" 5 || return 0
  local left=$LEFT
  ((limit > left)) && limit=$left
  echo "-- $name (timeout ${limit}s)"
  t0=$(date +%s.%N)
  out=$(cd "$BUNDLE" && timeout -k 5 "$limit" "$f" 2>&1)
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "$out" | tail -n 60
  if [[ $kind == test ]]; then
    local p f_ s
    p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f_=$(echo "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    s=$(echo "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -1)
    p=${p:-0} f_=${f_:-0} s=${s:-0}
    total_pass=$((total_pass + p)) total_fail=$((total_fail + f_)) total_skip=$((total_skip + s))
    result="pass $p fail $f_ skip $s"
  else
    result="ran"
  fi
  if ((rc == 124 || rc == 137)); then
    result="TIMEOUT after ${limit}s; $result"
    bad=1
  elif ((rc != 0)); then
    result="FAIL (exit $rc); $result"
    bad=1
  else
    result="ok; $result"
  fi
  rows+=("$(printf '%-60s %-28s %6s' "$name" "$result" "$secs")")
}
# Quick tests first, the multi-process native CUDA test (minutes) after the training checks.
slow_test=test__tests_collective_cuda__native_cuda_test
for f in "$BUNDLE"/bin/test__*; do
  [[ -e "$f" && $(basename "$f") != "$slow_test" ]] && run_one "$f" "$TEST_TIMEOUT_S" test
done

# Python: tests/python/cuda_test.py against the bundled package (python/paddle with _C.so).
run_python() {
  local dir="$BUNDLE/python" name="python__cuda_test.py" want have missing out rc t0 secs
  local p f_ s
  [[ -f "$dir/cuda_test.py" && -f "$dir/paddle/_C.so" ]] || return 0
  skip_python() {
    echo "SKIP $name: $1"
    rows+=("$(printf '%-60s %-28s %6s' "$name" "skip: $2" "-")")
  }
  want=$(cat "$dir/PYTHON_VERSION" 2>/dev/null)
  have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
  missing=$(ldd "$dir/paddle/_C.so" $(find "$dir/numpy" -name '*.so') 2>/dev/null |
    awk '/not found/ {print $1}' | sort -u | xargs)
  if [[ -z "$have" ]]; then
    skip_python "no python3 on this machine" "no python3"
    return 0
  elif [[ "$have" != "$want" ]]; then
    skip_python "paddle/_C.so is built for CPython $want, this machine's python3 is $have" \
      "python3 $have, not $want"
    return 0
  elif [[ -n "$missing" ]]; then
    skip_python "paddle/_C.so or numpy needs libraries this machine lacks: $missing" \
      "libraries missing"
    return 0
  fi
  budget_left "$name" 10 || return 0
  local left=$LEFT
  local limit=$TEST_TIMEOUT_S
  ((limit > left)) && limit=$left
  echo "-- $name (python3 $have, timeout ${limit}s)"
  t0=$(date +%s.%N)
  # PYTHONPATH puts the bundled paddle and numpy first; the bundled pytest (site/) goes last on
  # sys.path, so the machine's own pytest wins. torch stays out of the process: paddle.distributed
  # imports it when present (to accept torch tensors), and its CUDA libraries, other versions
  # than ours, would load beside ours.
  out=$(cd "$dir" && PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" timeout -k 5 "$limit" \
    python3 -c 'import os, sys; sys.path.append(os.path.abspath("site")); sys.modules["torch"] = None
import pytest
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "cuda_test.py"]))' 2>&1)
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "$out" | tail -n 60
  p=$(echo "$out" | tail -1 | grep -o '[0-9]* passed' | cut -d' ' -f1)
  f_=$(echo "$out" | tail -1 | grep -o '[0-9]* failed' | cut -d' ' -f1)
  s=$(echo "$out" | tail -1 | grep -o '[0-9]* skipped' | cut -d' ' -f1)
  p=${p:-0} f_=${f_:-0} s=${s:-0}
  total_pass=$((total_pass + p)) total_fail=$((total_fail + f_)) total_skip=$((total_skip + s))
  if ((rc == 124 || rc == 137)); then
    rows+=("$(printf '%-60s %-28s %6s' "$name" "TIMEOUT after ${limit}s; pass $p fail $f_" "$secs")")
    bad=1
  elif ((rc != 0)); then
    rows+=("$(printf '%-60s %-28s %6s' "$name" "FAIL (exit $rc); pass $p fail $f_ skip $s" "$secs")")
    bad=1
  else
    rows+=("$(printf '%-60s %-28s %6s' "$name" "ok; pass $p fail $f_ skip $s" "$secs")")
  fi
}
echo "== python"
run_python

# Training: the example on the GPU and on the CPU (same flags, so the same data order and
# initial weights): the GPU run must reach the CPU's test accuracy (within 1 point: the kernels
# round differently), and its samples/s is printed. Then PyTorch side by side, when this machine
# has torch with CUDA and the repository (GPU_CHECK_REPO, default the current folder) is here.
example="$BUNDLE/bin/example__fashion_mnist"
data="$BUNDLE/data/fashion-mnist"
train_one() {  # name, timeout, args...
  local name=$1 limit=$2 out rc t0 secs json
  shift 2
  budget_left "$name" 10 || return 1
  local left=$LEFT
  ((limit > left)) && limit=$left
  echo "-- $name: ${example##*/} $* (timeout ${limit}s)"
  t0=$(date +%s.%N)
  out=$(timeout -k 5 "$limit" "$example" --data-dir="$data" "$@" 2>&1)
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "$out" | tail -n 8
  json=$(echo "$out" | grep '^{' | tail -1)
  if ((rc != 0)) || [[ -z "$json" ]]; then
    rows+=("$(printf '%-60s %-28s %6s' "$name" "FAIL (exit $rc)" "$secs")")
    bad=1
    return 1
  fi
  TRAIN_ACC=$(echo "$json" | sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p')
  TRAIN_SPS=$(echo "$json" | sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p')
  rows+=("$(printf '%-60s %-28s %6s' "$name" "ok; acc $TRAIN_ACC, $TRAIN_SPS/s" "$secs")")
}
compare_acc() {  # name, gpu accuracy, cpu accuracy
  local verdict
  verdict=$(awk -v g="$2" -v c="$3" 'BEGIN { print (g + 0.01 >= c) ? "ok" : "FAIL" }')
  echo "accuracy $1: cuda $2, cpu $3: $verdict"
  rows+=("$(printf '%-60s %-28s %6s' "accuracy $1 cuda vs cpu" "$verdict; $2 vs $3" "-")")
  [[ $verdict == ok ]] || bad=1
}
if [[ -x "$example" && -d "$data" ]]; then
  echo "== training"
  for spec in "cnn 60000" "resnet 12800"; do
    read -r model samples <<<"$spec"
    common=(--model="$model" --epochs=1 --train-samples="$samples" --test-samples=10000)
    if train_one "train $model cuda" 120 "${common[@]}" --device=cuda; then
      gpu_acc=$TRAIN_ACC
      if train_one "train $model cpu (reference)" 150 "${common[@]}" --device=cpu --threads="$(nproc)"; then
        compare_acc "$model" "$gpu_acc" "$TRAIN_ACC"
      fi
    fi
  done
  repo=${GPU_CHECK_REPO:-$PWD}
  if [[ -f "$repo/bench/training/gpu_compare.py" ]] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "-- PyTorch side by side (bench/training/gpu_compare.py)"
    timeout -k 5 150 python3 "$repo/bench/training/gpu_compare.py" --binary="$example" \
      --data-dir="$data" --python="$(command -v python3)"
    rows+=("$(printf '%-60s %-28s %6s' "gpu_compare.py (torch side by side)" "exit $?" "-")")
  else
    echo "no PyTorch with CUDA or no repository at $repo: no side-by-side training run"
  fi
else
  echo "== training: no example binary or dataset in the bundle; skipped"
fi

for f in "$BUNDLE"/bin/$slow_test; do [[ -e "$f" ]] && run_one "$f" "$TEST_TIMEOUT_S" test; done
for f in "$BUNDLE"/bin/bench__*; do [[ -e "$f" ]] && run_one "$f" "$BENCH_TIMEOUT_S" bench; done

echo "== summary"
printf '%-60s %-28s %6s\n' "binary" "result" "sec"
for r in "${rows[@]}"; do echo "$r"; done
echo "totals: $total_pass passed, $total_fail failed, $total_skip skipped test cases;" \
  "${#rows[@]} binaries; $(elapsed)s"
((missing_any)) && echo "some libraries were missing (see == ldd above)"
if ((bad)); then
  echo "gpu-check: FAILED"
  exit 1
fi
echo "gpu-check: OK"
