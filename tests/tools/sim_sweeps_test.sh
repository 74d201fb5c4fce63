#!/usr/bin/env bash
# tools/sim-sweeps.sh: its sweeps run and `tools/simulate fit` and `validate` read what they
# write; ranks beyond the cores are skipped and named; bad arguments stop it with exit status 2.
set -uo pipefail
sweeps=$1 bench=$2 simulate=$3
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/sim_sweeps.XXXXXX")
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# Two small rounds at 2 ranks, plus a rank count beyond this machine's cores.
too_many=$(($(nproc) + 1))
"$sweeps" --bin="$bench" --out="$work/sim" --ranks=2,$too_many --transports=shm,tcp \
  --algos=auto,ring,tree --rounds=2 --max-bytes=64K --iters=5 >"$work/out" 2>&1
rc=$?
cat "$work/out"
((rc == 0)) || fail "sweeps exited $rc"
for round in r1 r2; do
  for name in shm_n2_auto shm_n2_ring shm_n2_tree tcp_n2_auto tcp_n2_ring tcp_n2_tree; do
    [[ -s "$work/sim/$round/$name.json" ]] || fail "no $round/$name.json"
  done
done
grep -q "skipped r1: $too_many ranks (this machine has $(nproc) cores" "$work/out" ||
  fail "the $too_many-rank sweeps were not reported as skipped"
grep -q "12 sweep(s) ran, 0 failed, 2 skipped" "$work/out" || fail "wrong totals"

# What comes back is what the simulator fits and checks.
"$simulate" fit "$work"/sim/r1/*.json --cores=2 >"$work/params.json" 2>"$work/fit.err" ||
  fail "fit: $(cat "$work/fit.err")"
for link in '"workspace"' '"shm"' '"tcp"'; do
  grep -q "$link" "$work/params.json" || fail "no $link entry in the fit"
done
"$simulate" validate "$work"/sim/r2/*.json --params="$work/params.json" --cores=2 >"$work/val" 2>&1 ||
  fail "validate: $(cat "$work/val")"
grep -q "^all " "$work/val" || fail "validate printed no summary: $(cat "$work/val")"

# Bad arguments: exit status 2, naming what was wrong.
expect_bad() {  # needle, arguments...
  local needle=$1 out rc
  shift
  out=$("$sweeps" --bin="$bench" --out="$work/bad" "$@" 2>&1)
  rc=$?
  ((rc == 2)) || fail "$*: exit $rc, expected 2"
  [[ $out == *"$needle"* ]] || fail "$*: no \"$needle\" in: $out"
}
expect_bad "--ranks takes counts of 2 or more, not '1'" --ranks=1
expect_bad "--rounds must be a positive integer, not 'x'" --rounds=x
expect_bad "unknown argument '--nope'" --nope
out=$("$sweeps" --bin="$work/missing" 2>&1)
rc=$?
if ((rc != 2)) || [[ $out != *"no bench:collectives binary"* ]]; then
  fail "missing binary: exit $rc: $out"
fi

rm -rf "$work"
if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "sim_sweeps_test: ok"
