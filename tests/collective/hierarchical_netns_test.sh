#!/usr/bin/env bash
# The hierarchical allreduce across real network namespaces (needs root; tagged local +
# exclusive): two namespaces joined by a bridge, egress shaped with tc tbf, each running the
# launcher with two workers, so the communicators see 2 hosts x 2 ranks. Runs
# bench/micro/netns_hierarchical.sh with an 8 MiB allreduce: every element is checked by
# allreduce_env_bench in both the hierarchical and the flat-ring run, and the script fails unless
# the communicators saw the topology and built the node workspace. The speed ratio is printed,
# not asserted (timed assertions flake; the figure lives in the bench).
set -uo pipefail
script=$1
launch=$2
bench=$3
out=$("$script" "$launch" "$bench" --bytes=8M --rate=4gbit 2>&1)
status=$?
echo "$out"
[[ $status -eq 0 ]] || { echo "FAIL: netns_hierarchical.sh exited $status"; exit 1; }
grep -q '"ranks": 4, "algo": "auto"' <<<"$out" || { echo "FAIL: no hierarchical result"; exit 1; }
grep -q '"ranks": 4, "algo": "ring"' <<<"$out" || { echo "FAIL: no flat-ring result"; exit 1; }
echo PASS
