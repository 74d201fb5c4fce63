#!/usr/bin/env bash
# The hierarchical allreduce against the flat ring across "hosts" made of network namespaces.
#
#   bench/micro/netns_hierarchical.sh [LAUNCHER] [BENCH] [--rate=2gbit] [--bytes=64M] [--nodes=2]
#       (defaults: bazel-bin/tools/launch, bazel-bin/bench/micro/allreduce_env_bench;
#        needs root: ip netns, a bridge, tc)
#
# NODES namespaces joined by a bridge, each one's egress shaped with tc tbf to RATE, each running
# one launcher with two workers (so two ranks share each namespace's memory). The same 64 MiB
# float32 allreduce (every element checked by allreduce_env_bench) runs twice: with the algorithm
# table (PADDLE_ALGO unset: shared-memory reduce-scatter within each namespace, allreduce of each
# block across namespaces, shared-memory allgather) and with PADDLE_ALGO=ring (one flat ring over
# TCP through all ranks). Prints both JSON lines and the ratio of their median times; exits
# non-zero if a run failed or did not use the topology it should have. tests/collective/
# hierarchical_netns_test.sh runs it with a small size.
set -uo pipefail
launch=${1:-bazel-bin/tools/launch}
bench=${2:-bazel-bin/bench/micro/allreduce_env_bench}
shift 2 2>/dev/null || shift $#
rate=2gbit
bytes=64M
nodes=2
for arg in "$@"; do
  case $arg in
    --rate=*) rate=${arg#--rate=} ;;
    --bytes=*) bytes=${arg#--bytes=} ;;
    --nodes=*) nodes=${arg#--nodes=} ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done
launch=$(realpath "$launch")
bench=$(realpath "$bench")
# One job token shared by every node's launcher (a multi-node job needs one; docs/launch.md).
export PADDLE_STORE_TOKEN=${PADDLE_STORE_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/hier.XXXXXX")
lib=$(dirname "$0")/netns_lib.sh  # beside it in the source tree and in a test's runfiles
[[ -f $lib ]] || lib=$0.runfiles/paddle/bench/micro/netns_lib.sh  # bazel-bin/bench/micro/...
source "$lib"
netns_up "$nodes" "$rate" tbf || exit 1

run() {  # NAME [ENV...]: one job over all namespaces; prints rank 0's JSON line
  local name=$1 port=$((29500 + RANDOM % 1000)) i pids=() status=0
  shift
  for ((i = 0; i < nodes; i++)); do
    ip netns exec "${NETNS_NAMES[$i]}" env "$@" PADDLE_LOG_LEVEL=INFO "$launch" \
      --nnodes="$nodes" --node-rank=$i --nproc=2 --rdzv-endpoint="${NETNS_ADDRS[0]}:$port" \
      --rdzv-timeout=60 "$bench" --bytes="$bytes" --iters=5 >"$work/$name.$i.out" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  if [[ $status -ne 0 ]]; then
    echo "$name failed:" >&2
    tail -n 20 "$work/$name".*.out >&2
    return 1
  fi
  grep -h '^\[rank 0\] {' "$work/$name".*.out | sed 's/^\[rank 0\] //'
}

hier=$(run hierarchical) || exit 1
flat=$(run flat PADDLE_ALGO=ring) || exit 1
echo "$hier"
echo "$flat"
# The communicators must have seen NODES hosts x 2 ranks and used the node workspace.
grep -q "$nodes hosts x 2 ranks, tcp transport + node workspace" "$work"/hierarchical.0.out ||
  { echo "the hierarchical run did not see $nodes hosts x 2 ranks with a node workspace" >&2; exit 1; }
median() { sed 's/.*"median_s": \([0-9.]*\).*/\1/' <<<"$1"; }
# The byte bound: per namespace link, the flat ring's one crossing stream carries 2(2H-1)/(2H) of
# the buffer (H namespaces, 2H ranks), the hierarchical step 2 x 2(H-1)/H of half of it; on a slow
# link the ratio of the times tends to the ratio of these bytes, (2H-1)/(2(H-1)): 1.5x for H = 2.
python3 -c "import sys; h, f, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]); \
print(f'hierarchical {h*1e3:.1f} ms, flat ring {f*1e3:.1f} ms: {f/h:.2f}x ($nodes namespaces x 2 ranks, $bytes, tbf $rate; byte bound {(2*n-1)/(2*(n-1)):.2f}x)')" \
  "$(median "$hier")" "$(median "$flat")" "$nodes"
