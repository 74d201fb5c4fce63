#!/usr/bin/env bash
# The wheel: tools/wheel/stage_and_build.py (the script tools/build-wheel runs) builds it from
# this test's runfiles; pip installs it into a fresh venv (--system-site-packages: Debian's numpy
# and torch); then, from a folder outside any checkout and with nothing of Bazel's in the
# environment: import paddle and paddle.torch (backend "paddle" registered), `paddlerun --help`,
# a 2-process torch.distributed all_reduce on backend "paddle" under the venv's paddlerun, the
# Python example (a copy of examples/fashion_mnist.py) on 3 workers, and an elastic job, whose
# store is the paddle_store_server inside the package.
#
#   wheel_test.sh STAGE_AND_BUILD C_EXT TORCH_EXT STORE_SERVER EXAMPLE
#                                              (bazel test //tests/tools:wheel_test)
#   wheel_test.sh --wheel=dist/paddle_collective-...whl  (a wheel from tools/build-wheel, in the
#                                              checkout: the example is examples/fashion_mnist.py)
set -uo pipefail
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/wheel.XXXXXX")
[[ -n "${TEST_TMPDIR:-}" ]] || trap '[[ $BASHPID == $$ ]] && rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
die() {
  echo "FAIL: $*" >&2
  exit 1
}

t0=$SECONDS
if [[ "${1:-}" == --wheel=* ]]; then
  wheel=$(realpath "${1#--wheel=}")
  example=$(realpath "$(dirname "$0")/../../examples/fashion_mnist.py")
else
  [[ $# -eq 5 ]] ||
    die "usage: $0 STAGE_AND_BUILD C_EXT TORCH_EXT STORE_SERVER EXAMPLE | --wheel=WHEEL"
  example=$(realpath "$5")
  wheel=$(/usr/bin/python3 "$1" --c-ext="$2" --torch-ext="$3" --store-server="$4" \
    --out="$work/dist" 2>"$work/build.err" | tail -1) ||
    die "stage_and_build.py failed: $(cat "$work/build.err")"
  cat "$work/build.err"
fi
[[ -f "$wheel" ]] || die "no wheel at '$wheel'"
case "$(basename "$wheel")" in
  paddle_collective-*-cp311-cp311-linux_x86_64.whl) ;;
  *) fail "wheel $(basename "$wheel") is not tagged cp311-cp311-linux_x86_64" ;;
esac
# The binaries keep their executable bits (pip sets them from the zip entries).
/usr/bin/python3 - "$wheel" <<'PY' || fail "wheel contents"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
for name in ["paddle/_C.so", "paddle/torch/_C.so", "paddlerun/bin/paddle_store_server",
             "paddle/__init__.py", "paddle/torch/__init__.py", "paddlerun/main.py"]:
    if name not in modes:
        sys.exit(f"{name} is not in the wheel")
    if name.endswith(("_C.so", "server")) and not modes[name] & 0o100:
        sys.exit(f"{name} is not executable in the wheel (mode {modes[name]:o})")
entry = [n for n in modes if n.endswith(".dist-info/entry_points.txt")]
if not entry or "paddlerun = paddlerun.main:main" not in z.read(entry[0]).decode():
    sys.exit("no paddlerun console script")
PY
echo "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB, built in $((SECONDS - t0)) s"

# Nothing of the checkout, of Bazel's runfiles or of a workspace may help from here on.
outside="$work/outside"
mkdir -p "$outside"
run() {
  (cd "$outside" && env -i PATH=/usr/bin:/bin HOME="$work" TMPDIR="${TMPDIR:-/tmp}" \
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PIP_NO_CACHE_DIR=1 "$@")
}
venv="$work/venv"
t1=$SECONDS
run /usr/bin/python3 -m venv --system-site-packages "$venv" || die "python3 -m venv failed"
# As a user types it: no --no-deps (numpy comes from Debian's site-packages), nothing downloaded.
run "$venv/bin/pip" install --disable-pip-version-check --no-index "$wheel" \
  >"$work/pip.out" 2>&1 || die "pip install failed: $(cat "$work/pip.out")"
# A paddle-collective that the venv sees outside itself (pip installed system-wide, or an old
# tools/install-python .pth file) makes pip skip the wheel.
seen="paddle-collective is already installed|already satisfied: paddle-collective"
! grep -Eq "$seen" "$work/pip.out" ||
  fail "pip installed nothing: paddle-collective is installed outside the venv and seen through" \
    "--system-site-packages: $(grep -E "$seen" "$work/pip.out")"
echo "venv + pip install: $((SECONDS - t1)) s"

run "$venv/bin/python" - "$venv" <<'PY' || fail "imports from the venv"
import os, sys
venv = os.path.realpath(sys.argv[1])
import paddle, paddle.distributed, paddle.torch, paddlerun
import torch.distributed as dist
for m in (paddle, paddle.torch, paddlerun):
    if not os.path.realpath(m.__file__).startswith(venv + "/"):
        sys.exit(f"{m.__name__} comes from {m.__file__}, not from the venv")
if "PADDLE" not in dist.Backend._plugins:
    sys.exit(f'backend "paddle" is not registered: {dist.Backend._plugins}')
t = paddle.tensor([1.0, 2.0]) * 2
print("imports OK:", paddle.__file__, t.numpy().tolist())
PY

run "$venv/bin/paddlerun" --help >"$work/help.out" 2>&1 ||
  fail "paddlerun --help exited $?: $(tail -3 "$work/help.out")"
grep -q -- "--nproc" "$work/help.out" || fail "paddlerun --help says nothing of --nproc"

cat >"$work/allreduce.py" <<'PY'
import torch
import torch.distributed as dist

import paddle.torch  # noqa: F401  registers backend "paddle"

dist.init_process_group(backend="paddle")  # env:// from paddlerun
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.arange(5, dtype=torch.float32) + rank
dist.all_reduce(t)
want = torch.arange(5, dtype=torch.float32) * world + sum(range(world))
assert torch.equal(t, want), (t, want)
print(f"OK {rank}/{world} {dist.get_backend()} {t.tolist()}", flush=True)
dist.destroy_process_group()
PY
t1=$SECONDS
# A .py file runs with the venv's Python (the launcher's own), which sees the venv's paddle.
run "$venv/bin/paddlerun" --nproc=2 "$work/allreduce.py" >"$work/job.out" 2>&1 ||
  fail "paddlerun --nproc=2 all_reduce job failed: $(tail -5 "$work/job.out")"
for r in 0 1; do
  grep -Eq "^\[rank $r\] OK $r/2 paddle \[1\.0, 3\.0, 5\.0, 7\.0, 9\.0\]$" "$work/job.out" ||
    fail "rank $r all_reduce on backend paddle: $(cat "$work/job.out")"
done
echo "2-process all_reduce on backend paddle: $((SECONDS - t1)) s"

# The Python example on 3 workers (its global batch of 64 splits 22/21/21; the default 128 would
# split 43/43/42, which parallel_example_test covers against the C++ example).
cp "$example" "$work/fashion_mnist.py"
t1=$SECONDS
run "$venv/bin/paddlerun" --nproc=3 "$work/fashion_mnist.py" --model=mlp --epochs=1 --batch=64 \
  --train-samples=640 --test-samples=200 >"$work/example.out" 2>&1 ||
  fail "paddlerun --nproc=3 fashion_mnist.py failed: $(tail -5 "$work/example.out")"
grep -Eq '^\[rank 0\] \{"epoch": 1, .*"world_size": 3' "$work/example.out" ||
  fail "the 3-worker example printed no result line: $(tail -5 "$work/example.out")"
echo "3-worker Python example: $((SECONDS - t1)) s"

# --min-nproc: the launcher starts the job's store as a paddle_store_server process, which only
# the package has here (no runfiles, no workspace).
# shellcheck disable=SC2016  # the workers expand $RANK and $MASTER_PORT
run "$venv/bin/paddlerun" --nproc=2 --min-nproc=1 \
  /bin/sh -c 'echo "worker $RANK store $MASTER_PORT"' >"$work/elastic.out" 2>&1 ||
  fail "elastic job failed: $(tail -5 "$work/elastic.out")"
grep -q "elastic: hosting the workers' store" "$work/elastic.out" ||
  fail "the elastic job hosted no paddle_store_server: $(cat "$work/elastic.out")"
grep -q "worker 1 store [0-9]" "$work/elastic.out" ||
  fail "elastic workers: $(cat "$work/elastic.out")"

echo "total $((SECONDS - t0)) s"
if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo PASS
