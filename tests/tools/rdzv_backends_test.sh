#!/usr/bin/env bash
# The launcher's etcd and file rendezvous backends (tools/paddlerun/kvstore.py EtcdStore,
# FileStore) end to end, with two launchers on this machine as two nodes training the example:
#  1. etcd: a real etcd server (free ports, killed on exit), --nnodes=2 --node-rank=0/1; both
#     launchers exit 0 in attempt 0, rank 0 reports world_size 2; the job wrote to etcd, and the
#     last launcher out removed its keys. Then the same --rdzv-id again, after a rendezvous of it
#     that failed (one node, --rdzv-timeout=1): the new job must neither see the old error nor
#     start as a restart (the stores outlive jobs; main.py's _linger clears them);
#  2. file: the same with --rdzv-endpoint=<a shared directory>; the job's folder is gone after;
#  3. etcd, elastic --nnodes=1:2 where the second node never comes: the first proceeds alone after
#     --rdzv-last-call with world_size 1;
#  4. etcd at a port where nothing listens: exit status 3 within --rdzv-timeout, with a message
#     naming the endpoint.
set -uo pipefail
launch=$(realpath "$1")
# Every node of a multi-node job needs the job's token (Note [Job token] in options.py).
export PADDLE_STORE_TOKEN="rdzv-test-$$-$RANDOM"
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/rdzv.XXXXXX")
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
etcd_pid=""
cleanup() {
  local pid
  [[ -n "$etcd_pid" ]] && kill -9 "$etcd_pid" 2>/dev/null
  for pid in $(jobs -p); do kill -9 "$pid" 2>/dev/null; done
}
trap cleanup EXIT
now() { date +%s.%N; }
py() { /usr/bin/python3 -c "$@"; }
# N distinct free loopback ports (all sockets stay bound until every port is known).
free_ports() {
  py "import socket, sys
socks = [socket.socket() for _ in range($1)]
for s in socks: s.bind(('127.0.0.1', 0))
print(' '.join(str(s.getsockname()[1]) for s in socks))"
}
# "REVISION KEY..." of the etcd at 127.0.0.1:$1: its revision (1 when nothing was ever written)
# and the keys under the prefix $2.
etcd_keys() {
  py "import base64, json, sys, urllib.request
p = '$2'.encode()
end = p[:-1] + bytes([p[-1] + 1])
body = json.dumps({'key': base64.b64encode(p).decode(),
                   'range_end': base64.b64encode(end).decode(), 'keys_only': True}).encode()
with urllib.request.urlopen('http://127.0.0.1:$1/v3/kv/range', body, timeout=5) as r:
    reply = json.loads(r.read())
print(reply['header']['revision'],
      *[base64.b64decode(kv['key']).decode() for kv in reply.get('kvs', [])])"
}
# A rendezvous of one node where --nnodes=2: it must fail (exit status 3) after --rdzv-timeout=1.
failed_rendezvous() {
  timeout 30 "$launch" --nnodes=2 --node-rank=0 --nproc=1 "$@" --rdzv-timeout=1 \
    //examples:fashion_mnist "${train[@]}" >"$work/failed.out" 2>&1
  local rc=$?
  [[ $rc -eq 3 ]] && grep -q "only 1 of 2 nodes joined" "$work/failed.out" ||
    fail "one of two nodes: exit status $rc, expected 3: $(cat "$work/failed.out")"
}
train=(--model=mlp --epochs=1 --train-samples=1200 --test-samples=200)
id="rdzv-test-$$-$RANDOM"

# Starts etcd on free ports; sets etcd_pid and etcd_port. Retries when another process took a
# port first (then etcd exits, or whatever answers does not call itself by our member name).
start_etcd() {
  local attempt ports client peer name
  for attempt in 1 2 3; do
    read -r client peer <<<"$(free_ports 2)"
    name="rdzv-test-$$-$client"
    etcd --name "$name" --data-dir "$work/etcd$attempt" \
      --listen-client-urls "http://127.0.0.1:$client" \
      --advertise-client-urls "http://127.0.0.1:$client" \
      --listen-peer-urls "http://127.0.0.1:$peer" \
      --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "$name=http://127.0.0.1:$peer" >"$work/etcd$attempt.log" 2>&1 &
    etcd_pid=$!
    for _ in $(seq 100); do
      kill -0 "$etcd_pid" 2>/dev/null || break
      if py "import json, sys, urllib.request
h = json.loads(urllib.request.urlopen('http://127.0.0.1:$client/health', timeout=1).read())
m = json.loads(urllib.request.urlopen('http://127.0.0.1:$client/v3/cluster/member/list',
               b'{}', timeout=1).read())
sys.exit(0 if h.get('health') == 'true' and
         [x.get('name') for x in m.get('members', [])] == ['$name'] else 1)" 2>/dev/null; then
        etcd_port=$client
        return 0
      fi
      sleep 0.1
    done
    kill -9 "$etcd_pid" 2>/dev/null
    wait "$etcd_pid" 2>/dev/null
    etcd_pid=""
  done
  echo "etcd did not become healthy: $(tail -5 "$work"/etcd*.log)" >&2
  return 1
}

# Runs two launchers as nodes 0 and 1 with the rendezvous options "$@"; checks both exit 0 and
# rank 0's result line says world_size 2. $1 is a name for the output files.
two_nodes() {
  local tag=$1 pids=() i start
  shift
  start=$(now)
  for i in 0 1; do
    timeout 60 "$launch" --nnodes=2 --node-rank=$i --nproc=1 "$@" --rdzv-timeout=30 \
      //examples:fashion_mnist "${train[@]}" >"$work/$tag$i.out" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || fail "$tag node $i failed: $(tail -5 "$work/$tag$i.out")"
  done
  grep -q '^\[rank 0\] {"epoch": 1, .*"world_size": 2' "$work/${tag}0.out" ||
    fail "$tag: no 2-worker result: $(tail -5 "$work/${tag}0.out")"
  grep -q "attempt 0: node 1 of 2, ranks 1..1 of world size 2" "$work/${tag}1.out" ||
    fail "$tag: node 1's ranks: $(grep paddlerun "$work/${tag}1.out")"
  echo "$tag: two nodes trained in $(echo "$(now) - $start" | bc) s"
}

# 1. etcd, static two nodes.
if start_etcd; then
  two_nodes etcd --rdzv-backend=etcd --rdzv-endpoint="127.0.0.1:$etcd_port" --rdzv-id="$id"
  read -r revision keys <<<"$(etcd_keys "$etcd_port" "/paddlerun/$id/")"
  ((revision > 20)) || fail "etcd's revision is ${revision:-?}: the launchers did not write there"
  [[ -z "$keys" ]] || fail "the job's keys were left in etcd: $keys"
  failed_rendezvous --rdzv-backend=etcd --rdzv-endpoint="127.0.0.1:$etcd_port" --rdzv-id="$id"
  two_nodes etcd-again --rdzv-backend=etcd --rdzv-endpoint="127.0.0.1:$etcd_port" --rdzv-id="$id"

  # 3. etcd, elastic 1:2: the second node never comes.
  start=$(now)
  timeout 60 "$launch" --nnodes=1:2 --nproc=1 --rdzv-backend=etcd \
    --rdzv-endpoint="127.0.0.1:$etcd_port" --rdzv-id="$id-elastic" --rdzv-timeout=30 \
    --rdzv-last-call=1 //examples:fashion_mnist "${train[@]}" >"$work/elastic.out" 2>&1 ||
    fail "elastic node failed: $(tail -5 "$work/elastic.out")"
  grep -q "attempt 0: node 0 of 1, ranks 0..0 of world size 1" "$work/elastic.out" ||
    fail "elastic: not alone in attempt 0: $(grep paddlerun "$work/elastic.out")"
  grep -q '^\[rank 0\] {"epoch": 1, .*"world_size": 1' "$work/elastic.out" ||
    fail "elastic: no 1-worker result: $(tail -5 "$work/elastic.out")"
  echo "etcd elastic 1:2 alone: $(echo "$(now) - $start" | bc) s (--rdzv-last-call=1)"
else
  fail "could not start etcd"
fi

# 2. file, static two nodes.
mkdir -p "$work/shared"
failed_rendezvous --rdzv-backend=file --rdzv-endpoint="$work/shared" --rdzv-id="$id"
two_nodes file --rdzv-backend=file --rdzv-endpoint="$work/shared" --rdzv-id="$id"
[[ -z "$(ls -A "$work/shared")" ]] || fail "the job's files were left: $(ls -R "$work/shared")"

# 4. etcd where nothing listens: a clear error naming the endpoint within --rdzv-timeout.
read -r dead <<<"$(free_ports 1)"
start=$(now)
timeout 30 "$launch" --nnodes=2 --node-rank=0 --nproc=1 --rdzv-backend=etcd \
  --rdzv-endpoint="127.0.0.1:$dead" --rdzv-id="$id" --rdzv-timeout=3 \
  //examples:fashion_mnist "${train[@]}" >"$work/dead.out" 2>&1
rc=$?
took=$(echo "$(now) - $start" | bc)
[[ $rc -eq 3 ]] || fail "unreachable etcd: exit status $rc, expected 3: $(cat "$work/dead.out")"
grep -q "error: cannot reach etcd at 127.0.0.1:$dead within 3 s" "$work/dead.out" ||
  fail "unreachable etcd: no message naming the endpoint: $(cat "$work/dead.out")"
(($(echo "$took < 8" | bc))) || fail "unreachable etcd: giving up took ${took}s (--rdzv-timeout=3)"
echo "unreachable etcd: exit status $rc after $took s (--rdzv-timeout=3)"

[[ $failures -eq 0 ]] || { tail -n 30 "$work"/*.out; exit 1; }
echo PASS
