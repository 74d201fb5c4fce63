#!/usr/bin/env bash
# bench:collectives' allreduce sweep with the ranks spread over shaped network namespaces: the
# measurements tools/simulate fits and validates a shaped TCP link from (docs/simulator.md,
# "Validation").
#
#   bench/micro/netns_sweep.sh --out=DIR [--rate=1gbit|none] [--qdisc=htb|tbf] [--nodes=2]
#       [--ranks-per-node=1,2] [--algos=auto,ring,tree,hd] [--min-bytes=4K] [--max-bytes=64M]
#       [--iters=10] [--warmup=3] [--budget-bytes=4M] [--bench=bazel-bin/bench/collectives]
#       [--store=bazel-bin/tools/paddle_store_server]
#   (needs root: ip netns, a bridge, tc; bench/micro/netns_lib.sh sets them up)
#
# For each ranks-per-node R and algorithm, one job of NODES x R ranks, host-major (ranks
# 0..R-1 in the first namespace), each namespace's egress shaped to RATE: with R = 1 every
# exchange crosses a shaper, with R = 2 the flat algorithms mix shaped and loopback hops. The
# ranks are bench:collectives workers (its --worker mode, started here in their namespaces rather
# than by the benchmark, which can only start them on one host), PADDLE_TRANSPORT=tcp, the
# workers' store a paddle_store_server in the first namespace. Each job writes
# DIR/bench_tcp_RATE_nN_ALGO.json in bench:collectives' --json format (per size the slowest
# rank's figures, as the benchmark reports them) and a line of DIR/loadavg.txt with /proc/loadavg
# before and after it. --budget-bytes bounds the largest sizes (Note [Sweep budget] in
# bench/collectives/bench_inputs.h): at 1 Gbit/s a 64 MiB allreduce takes about a second.
# Exits non-zero when a job fails or a result element is wrong.
set -uo pipefail
root=$(dirname "$0")/../..
bench=$root/bazel-bin/bench/collectives
store=$root/bazel-bin/tools/paddle_store_server
rate=1gbit
qdisc=htb
nodes=2
per_node=1,2
algos=auto,ring,tree,hd
min_bytes=4K
max_bytes=64M
iters=10
warmup=3
budget=4M
out=
for arg in "$@"; do
  case $arg in
    --out=*) out=${arg#--out=} ;;
    --rate=*) rate=${arg#--rate=} ;;
    --qdisc=*) qdisc=${arg#--qdisc=} ;;
    --nodes=*) nodes=${arg#--nodes=} ;;
    --ranks-per-node=*) per_node=${arg#--ranks-per-node=} ;;
    --algos=*) algos=${arg#--algos=} ;;
    --min-bytes=*) min_bytes=${arg#--min-bytes=} ;;
    --max-bytes=*) max_bytes=${arg#--max-bytes=} ;;
    --iters=*) iters=${arg#--iters=} ;;
    --warmup=*) warmup=${arg#--warmup=} ;;
    --budget-bytes=*) budget=${arg#--budget-bytes=} ;;
    --bench=*) bench=${arg#--bench=} ;;
    --store=*) store=${arg#--store=} ;;
    *) echo "unknown argument $arg (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
[[ -n $out ]] || { echo "--out=DIR is required" >&2; exit 2; }
bench=$(realpath "$bench") && store=$(realpath "$store") || exit 2
mkdir -p "$out" && out=$(realpath "$out") || exit 2
PADDLE_STORE_TOKEN=${PADDLE_STORE_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export PADDLE_STORE_TOKEN
work=$(mktemp -d "${TMPDIR:-/tmp}/netns_sweep.XXXXXX")
source "$(dirname "$0")/netns_lib.sh"
netns_on_exit() { rm -rf "$work"; }
netns_up "$nodes" "$rate" "$qdisc" || exit 1

# The benchmark's rows from the workers' "ROW rank=.. bytes=.." lines (bench/collectives/
# report.cc CollectRows: per size the largest of the ranks' figures).
collect() {  # JSON ALGO NPROC OUTPUT...
  python3 - "$@" <<'EOF'
import json, sys
path, algo, nproc, outputs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
sizes = {}
for name in outputs:
    for line in open(name):
        if not line.startswith("ROW "):
            continue
        f = dict(kv.split("=", 1) for kv in line.split()[1:])
        s = sizes.setdefault(int(f["bytes"]), {"ranks": set(), "wrong": 0})
        s["ranks"].add(int(f["rank"]))
        s["wrong"] += int(f["wrong"])
        for k in ("time_us", "p50_us", "max_us"):
            s[k] = max(s.get(k, 0.0), float(f[k]))
rows = []
for b, s in sorted(sizes.items()):
    if len(s["ranks"]) != nproc:
        sys.exit(f"{path}: size {b} has results from {len(s['ranks'])} of {nproc} ranks")
    algbw = b / (s["time_us"] * 1e3)
    rows.append({"op": "allreduce", "backend": "native", "algo": algo, "transport": "tcp",
                 "nproc": nproc, "bytes": b, "dtype": "float32", "time_us": s["time_us"],
                 "p50_us": s["p50_us"], "max_us": s["max_us"], "algbw_gbs": algbw,
                 "busbw_gbs": algbw * 2 * (nproc - 1) / nproc, "wrong": s["wrong"]})
if not rows:
    sys.exit(f"{path}: no result rows")
with open(path, "w") as f:
    f.write("[\n" + ",\n".join("  " + json.dumps(r) for r in rows) + "\n]\n")
wrong = sum(r["wrong"] for r in rows)
sys.exit(f"{path}: {wrong} wrong elements" if wrong else 0)
EOF
}

run_job() {  # ALGO RANKS_PER_NODE
  local algo=$1 rpn=$2 n=$((nodes * $2)) port=$((30000 + RANDOM % 20000)) r pids=() status=0
  local name="tcp_${rate}_n${n}_${algo}" load_before
  load_before=$(cat /proc/loadavg)
  ip netns exec "${NETNS_NAMES[0]}" "$store" --host=0.0.0.0 --port="$port" --until-signal \
    >"$work/store.out" 2>&1 &
  local helpers=($!)
  netns_store_relay "$port"
  helpers+=("${NETNS_RELAY_PIDS[@]}")
  for ((r = 0; r < n; r++)); do
    ip netns exec "${NETNS_NAMES[$((r / rpn))]}" env PADDLE_TRANSPORT=tcp \
      PADDLE_SOCKET_IFNAME=eth0 timeout 900 "$bench" --backend=native --op=allreduce \
      --algo="${algo/auto/}" --timeout-s=600 --worker --rank=$r --store-port="$port" \
      --nproc=$n --min-bytes="$min_bytes" --max-bytes="$max_bytes" --iters="$iters" \
      --warmup="$warmup" --budget-bytes="$budget" >"$work/$name.$r.out" 2>"$work/$name.$r.err" &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || status=1; done
  kill "${helpers[@]}" 2>/dev/null
  wait "${helpers[@]}" 2>/dev/null
  echo "$name before: $load_before after: $(cat /proc/loadavg)" >>"$out/loadavg.txt"
  if [[ $status -ne 0 ]]; then
    echo "$name failed:" >&2
    tail -n 5 "$work/$name".*.err "$work/$name".*.out >&2
    return 1
  fi
  collect "$out/bench_$name.json" "$algo" "$n" "$work/$name".*.out || return 1
  echo "$name: $(grep -c '"bytes"' "$out/bench_$name.json") sizes, ${SECONDS}s so far"
}

failed=0
for rpn in ${per_node//,/ }; do
  for algo in ${algos//,/ }; do
    run_job "$algo" "$rpn" || failed=1
  done
done
exit $failed
