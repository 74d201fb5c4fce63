#!/usr/bin/env bash
# sim-sweeps.sh: the allreduce sweeps that check tools/simulate at 2-8 ranks with a core per rank.
#
# This VM has 2 cores, so its 3- and 4-rank sweeps measure ranks taking turns on a core, and 8
# ranks cannot be measured at all (docs/simulator.md, "Validation"). A machine with more cores
# (the device machine has 16) runs this script from a GPU bundle (tools/gpu-bundle carries it and
# bench:collectives); the JSON comes back, and here:
#   tools/simulate fit OUT/sim/r1/*.json --cores=N > params.json
#   tools/simulate validate OUT/sim/r2/*.json --params=params.json --cores=N
# Rounds take turns over every transport x ranks x algorithm, so a slow spell of the machine
# lands in one round's rows instead of one configuration's. Sweeps that would start past the time
# budget are skipped and listed; ranks beyond the cores are skipped too, naming both counts.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=""
for b in "$HERE/bin/cpu__bench__collectives" "$HERE/../bazel-bin/bench/collectives"; do
  [[ -x "$b" ]] && BIN=$b && break
done
OUT_DIR=${OUT:-/tmp}/sim
RANKS=2,4,8
TRANSPORTS=shm,tcp
ALGOS=auto,ring,tree,hd
ROUNDS=2
MAX_BYTES=64M
ITERS=20
BUDGET_S=240

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'USAGE'

Usage: sim-sweeps.sh [--bin=COLLECTIVES] [--out=DIR] [--ranks=2,4,8] [--transports=shm,tcp]
                     [--algos=auto,ring,tree,hd] [--rounds=2] [--max-bytes=64M] [--iters=20]
                     [--budget-s=240]
  --bin   bench:collectives (default: the bundle's bin/cpu__bench__collectives, else bazel-bin)
  --out   where DIR/rN/TRANSPORT_nRANKS_ALGO.json go (default $OUT/sim, else /tmp/sim)
Exit status: 0 when every sweep that ran passed (skipped ones are listed), 1 otherwise, 2 on a
bad argument.
USAGE
}

for arg in "$@"; do
  case "$arg" in
    --bin=*) BIN="${arg#--bin=}" ;;
    --out=*) OUT_DIR="${arg#--out=}" ;;
    --ranks=*) RANKS="${arg#--ranks=}" ;;
    --transports=*) TRANSPORTS="${arg#--transports=}" ;;
    --algos=*) ALGOS="${arg#--algos=}" ;;
    --rounds=*) ROUNDS="${arg#--rounds=}" ;;
    --max-bytes=*) MAX_BYTES="${arg#--max-bytes=}" ;;
    --iters=*) ITERS="${arg#--iters=}" ;;
    --budget-s=*) BUDGET_S="${arg#--budget-s=}" ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "sim-sweeps: unknown argument '$arg'" >&2
      usage >&2
      exit 2
      ;;
  esac
done
for v in "ROUNDS=$ROUNDS" "ITERS=$ITERS" "BUDGET_S=$BUDGET_S"; do
  [[ "${v#*=}" =~ ^[1-9][0-9]*$ ]] || {
    echo "sim-sweeps: --$(echo "${v%%=*}" | tr 'A-Z_' 'a-z-') must be a positive integer, not '${v#*=}'" >&2
    exit 2
  }
done
if [[ -z "$BIN" || ! -x "$BIN" ]]; then
  echo "sim-sweeps: no bench:collectives binary ('${BIN}'); give --bin=PATH" >&2
  exit 2
fi

IFS=, read -ra rank_list <<<"$RANKS"
IFS=, read -ra transport_list <<<"$TRANSPORTS"
IFS=, read -ra algo_list <<<"$ALGOS"
for n in "${rank_list[@]}"; do
  if ! [[ "$n" =~ ^[0-9]+$ ]] || ((n < 2)); then
    echo "sim-sweeps: --ranks takes counts of 2 or more, not '$n'" >&2
    exit 2
  fi
done
cores=$(nproc)
mkdir -p "$OUT_DIR" || exit 2
START=$(date +%s)
echo "== sim-sweeps: $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   ranks $RANKS, transports $TRANSPORTS, algorithms $ALGOS, $ROUNDS round(s), 4K..$MAX_BYTES," \
  "--iters=$ITERS, budget ${BUDGET_S}s, into $OUT_DIR"

ran=0 failed=0 skipped=()
for ((round = 1; round <= ROUNDS; round++)); do
  mkdir -p "$OUT_DIR/r$round"
  for n in "${rank_list[@]}"; do
    if ((n > cores)); then
      skipped+=("r$round: $n ranks (this machine has $cores cores: ranks would share them)")
      continue
    fi
    for transport in "${transport_list[@]}"; do
      for algo in "${algo_list[@]}"; do
        name="${transport}_n${n}_${algo}"
        if (($(date +%s) - START >= BUDGET_S)); then
          skipped+=("r$round: $name (past the ${BUDGET_S}s budget)")
          continue
        fi
        json="$OUT_DIR/r$round/$name.json"
        log="$OUT_DIR/r$round/$name.log"
        t0=$(date +%s)
        algo_flag=()  # auto: the engine's own choice (the node workspace on shared memory)
        [[ $algo == auto ]] || algo_flag=(--algo="$algo")
        PADDLE_TRANSPORT=$transport timeout -k 5 120 "$BIN" --backend=native --nproc="$n" \
          "${algo_flag[@]}" --min-bytes=4K --max-bytes="$MAX_BYTES" --coarse-from=0 \
          --iters="$ITERS" --warmup=5 --budget-bytes=64M --json="$json" >"$log" 2>&1
        rc=$?
        ran=$((ran + 1))
        if ((rc != 0)); then
          failed=$((failed + 1))
          why="exit $rc"
          ((rc == 124 || rc == 137)) && why="no result within the sweep's 120s limit"
          echo "-- r$round $name: FAILED ($why) after $(($(date +%s) - t0))s; its log:"
          tail -n 5 "$log" | sed 's/^/   /'
        else
          echo "-- r$round $name: ok, $(($(date +%s) - t0))s"
        fi
      done
    done
  done
done
echo "== sim-sweeps: $ran sweep(s) ran, $failed failed, ${#skipped[@]} skipped; $(($(date +%s) - START))s"
for s in "${skipped[@]}"; do echo "   skipped $s"; done
((failed == 0))
