#!/usr/bin/env bash
# Cluster engines and PyTorch: a torch.distributed DDP script (gloo, env://) runs under the
# launcher and under mpirun; our training example runs under mpirun without the launcher (ranks
# from OMPI_COMM_WORLD_*, the store from MASTER_ADDR/MASTER_PORT exported with -x).
set -uo pipefail
launch=$1
script=$(realpath "$2")
example=$(realpath "$3")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/engines.XXXXXX")
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
port() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)

timeout 120 "$launch" --nproc=2 "$script" >"$work/torch_launch.out" 2>&1 ||
  fail "torch DDP under the launcher: $(tail -5 "$work/torch_launch.out")"
for r in 0 1; do
  grep -q "^\[rank $r\] torch_ddp rank $r/2 ok" "$work/torch_launch.out" ||
    fail "torch rank $r under the launcher: $(tail -5 "$work/torch_launch.out")"
done

timeout 120 "${mpi[@]}" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(port)" /usr/bin/python3 \
  "$script" >"$work/torch_mpi.out" 2>&1 || fail "torch DDP under mpirun: $(tail -5 "$work/torch_mpi.out")"
[[ $(grep -c "torch_ddp rank ./2 ok" "$work/torch_mpi.out") -eq 2 ]] ||
  fail "torch under mpirun: $(tail -5 "$work/torch_mpi.out")"

# The ranks and world size come from OMPI_COMM_WORLD_* through env://; no WORLD_SIZE needed.
timeout 180 "${mpi[@]}" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(port)" "$example" \
  --model=mlp --epochs=1 --train-samples=2000 --test-samples=500 >"$work/mpi.out" 2>&1 ||
  fail "fashion_mnist under mpirun: $(tail -5 "$work/mpi.out")"
[[ $(grep -c '^{"epoch": 1, .*"world_size": 2' "$work/mpi.out") -eq 1 ]] ||
  fail "no 2-rank result under mpirun: $(tail -5 "$work/mpi.out")"

[[ $failures -eq 0 ]] || exit 1
echo PASS
