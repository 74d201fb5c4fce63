#!/usr/bin/env bash
# Multi-node launches over real network namespaces (needs root; tagged local + exclusive).
# Three namespaces joined by a bridge, 10.77.S.1-3 (S random per run), are the nodes:
#  1. static: --nnodes=3 --node-rank=i --rdzv-endpoint=<node 0>:PORT, one worker each, train the
#     example to the end over the namespaces' own addresses (prints launch-to-first-step time);
#  2. elastic: --nnodes=2:3 --max-restarts=1; node 2's launcher is killed by SIGKILL mid-training,
#     nodes 0 and 1 restart with world size 2 and complete.
set -uo pipefail
launch=$(realpath "$1")
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/netns.XXXXXX")
tag=$(printf '%04x' $((RANDOM % 65536)))
subnet="10.77.$((RANDOM % 250 + 1))"
br="pbr$tag"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
cleanup() {
  local pid
  for pid in $(jobs -p); do kill -9 "$pid" 2>/dev/null; done
  for i in 0 1 2; do
    ip netns pids "pn$tag-$i" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "pn$tag-$i" 2>/dev/null
    ip link del "pv$tag-$i" 2>/dev/null
  done
  ip link del "$br" 2>/dev/null
}
trap cleanup EXIT
now() { date +%s.%N; }

ip link add "$br" type bridge && ip link set "$br" up || { echo "cannot make a bridge (root?)"; exit 1; }
for i in 0 1 2; do
  ns="pn$tag-$i"
  ip netns add "$ns"
  ip link add "pv$tag-$i" type veth peer name eth0 netns "$ns"
  ip link set "pv$tag-$i" master "$br" up
  ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done
node0="$subnet.1"
export PADDLE_CONNECT_TIMEOUT_S=20
# Every node of a multi-node job needs the job's token (Note [Job token] in options.py).
export PADDLE_STORE_TOKEN="netns-test-$tag-$RANDOM"
train=(--model=mlp --batch=120 --epochs=2 --train-samples=6000 --test-samples=1000)

# 1. Static: three nodes, node ranks given.
start=$(now)
for i in 0 1 2; do
  ip netns exec "pn$tag-$i" "$launch" --nnodes=3 --node-rank=$i --rdzv-endpoint="$node0:29400" \
    --rdzv-timeout=60 --nproc=1 //examples:fashion_mnist "${train[@]}" >"$work/static$i.out" 2>&1 &
  eval "static$i=\$!"
done
first_step=""
while kill -0 "$static0" 2>/dev/null; do
  [[ -z "$first_step" ]] && grep -q "fashion_mnist: model" "$work/static0.out" && first_step=$(now)
  sleep 0.05
done
for i in 0 1 2; do
  eval "pid=\$static$i"
  wait "$pid" || fail "static node $i failed: $(tail -5 "$work/static$i.out")"
done
grep -q '^\[rank 0\] {"epoch": 2, .*"world_size": 3' "$work/static0.out" ||
  fail "no 3-worker result: $(tail -5 "$work/static0.out")"
grep -q "master $node0:" "$work/static2.out" || fail "node 2 did not get node 0's address as master"
grep -q "node 2 of 3, ranks 2..2 of world size 3" "$work/static2.out" || fail "node 2's ranks"
[[ -n "$first_step" ]] && echo "3 namespace nodes: launch -> first step $(echo "$first_step - $start" | bc) s"

# 2. Elastic 2:3, node 2 dies. Longer training so the kill lands mid-training.
long=(--model=mlp --batch=120 --epochs=3 --train-samples=30000 --test-samples=1000)
for i in 0 1 2; do
  ip netns exec "pn$tag-$i" "$launch" --nnodes=2:3 --rdzv-endpoint="$node0:29401" \
    --rdzv-timeout=60 --rdzv-last-call=2 --max-restarts=1 --grace-s=2 --nproc=1 \
    //examples:fashion_mnist "${long[@]}" >"$work/elastic$i.out" 2>&1 &
  eval "elastic$i=\$!"
  sleep 0.3  # arrival order = node order, so node 0 (the store's host) is group rank 0
done
for _ in $(seq 600); do grep -q "step\|epoch 1/3" "$work/elastic0.out" && break; sleep 0.1; done
grep -q "world size 3" "$work/elastic2.out" || fail "the elastic job did not start with 3 nodes: $(cat "$work/elastic2.out")"
kill -9 "$elastic2"
killed_at=$(now)
wait "$elastic0" || fail "elastic node 0 failed: $(tail -8 "$work/elastic0.out")"
wait "$elastic1" || fail "elastic node 1 failed: $(tail -8 "$work/elastic1.out")"
grep -q "attempt 1: node . of 2, .* world size 2" "$work/elastic0.out" ||
  fail "no restart with 2 nodes: $(grep paddlerun "$work/elastic0.out")"
# After the restart the survivors may renumber (node 0 may become node 1): rank 0 is on either.
cat "$work/elastic0.out" "$work/elastic1.out" | grep -q '^\[rank 0\] {"epoch": 3, .*"world_size": 2' ||
  fail "no 2-worker result: $(tail -5 "$work/elastic0.out" "$work/elastic1.out")"
echo "elastic: node killed -> survivors finished $(echo "$(now) - $killed_at" | bc) s later"
for i in 0 1 2; do
  [[ -z "$(ip netns pids "pn$tag-$i")" ]] || fail "processes left in namespace $i"
done

[[ $failures -eq 0 ]] || { tail -n 30 "$work"/*.out; exit 1; }
echo PASS
