#!/usr/bin/env bash
# Misconfigurations end the launcher quickly with a message that says what to fix, never a hang:
# a rendezvous port already in use, a --master-port in use, launchers that disagree on --nnodes,
# too few nodes for --nnodes, an unreachable endpoint, a node with another job token, a
# multi-node job without a token, a bad option value.
set -uo pipefail
launch=$1
# Every node of a multi-node job needs the job's token (Note [Job token] in options.py).
export PADDLE_STORE_TOKEN=errors-test-token
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/errors.XXXXXX")
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# expect NAME STATUS MAX_SECONDS NEEDLE -- launcher arguments...
expect() {
  local name=$1 want=$2 max_s=$3 needle=$4
  shift 5
  local start rc elapsed
  start=$(date +%s)
  timeout 60 "$launch" "$@" >"$work/$name.out" 2>&1
  rc=$?
  elapsed=$(($(date +%s) - start))
  [[ $rc -eq $want ]] || fail "$name: exit status $rc, expected $want: $(cat "$work/$name.out")"
  ((elapsed <= max_s)) || fail "$name: took ${elapsed}s (at most ${max_s}s)"
  grep -qF -- "$needle" "$work/$name.out" || fail "$name: no \"$needle\" in: $(cat "$work/$name.out")"
}

# A port in use: a listener we hold for the test's duration.
/usr/bin/python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True)
time.sleep(120)' >"$work/port" &
holder=$!
trap 'kill $holder 2>/dev/null' EXIT
for _ in $(seq 50); do [[ -s "$work/port" ]] && break; sleep 0.1; done
port=$(cat "$work/port")
expect port_in_use 3 10 "cannot host the rendezvous store on 127.0.0.1:$port: the port is already in use" -- \
  --nnodes=2 --node-rank=0 --rdzv-endpoint="127.0.0.1:$port" /bin/true
expect master_port_in_use 3 10 "--master-port=$port cannot be used on this node" -- \
  --master-port="$port" /bin/true

# Unreachable: nothing listens on a port we just freed.
free=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
expect unreachable 3 10 "cannot reach the rendezvous store at 127.0.0.1:$free within 3 s" -- \
  --nnodes=2 --node-rank=1 --rdzv-endpoint="127.0.0.1:$free" --rdzv-timeout=3 /bin/true

# --nnodes=2 but one launcher: it names how many joined.
expect too_few_nodes 3 10 "only 1 of 2 nodes joined the rendezvous" -- \
  --nnodes=2 --node-rank=0 --rdzv-endpoint="127.0.0.1:$free" --rdzv-timeout=3 /bin/true

# Two launchers that disagree on --nnodes: both stop with the same message.
"$launch" --nnodes=2 --node-rank=0 --rdzv-endpoint="127.0.0.1:$free" --rdzv-timeout=20 /bin/true \
  >"$work/disagree0.out" 2>&1 &
first=$!
sleep 0.5
expect disagree1 3 15 "launchers disagree on --nnodes" -- \
  --nnodes=3 --node-rank=1 --rdzv-endpoint="127.0.0.1:$free" --rdzv-timeout=10 /bin/true
wait $first
[[ $? -eq 3 ]] && grep -q "launchers disagree on --nnodes: 127.0.0.1 has --nnodes=3" "$work/disagree0.out" ||
  fail "node 0 did not report the disagreement: $(cat "$work/disagree0.out")"

# A node with another token: it is refused by node 0's store and says to check the token; node 0
# logs the refused launcher's address.
"$launch" --nnodes=2 --node-rank=0 --rdzv-endpoint="127.0.0.1:$free" --rdzv-timeout=5 /bin/true \
  >"$work/token0.out" 2>&1 &
first=$!
sleep 0.5
wrong="the rendezvous store at 127.0.0.1:$free refused this launcher: wrong job token; check"
PADDLE_STORE_TOKEN=another-token expect wrong_token 3 10 "$wrong" -- \
  --nnodes=2 --node-rank=1 --rdzv-endpoint="127.0.0.1:$free" --rdzv-timeout=5 /bin/true
wait $first
grep -Eq "store: refused 127\.0\.0\.1:[0-9]+: wrong job token" "$work/token0.out" ||
  fail "node 0 did not log the refused launcher: $(cat "$work/token0.out")"

PADDLE_STORE_TOKEN= expect no_token 2 5 "--nnodes=2 needs the job's token on every node" -- \
  --nnodes=2 --node-rank=0 --rdzv-endpoint="127.0.0.1:$free" /bin/true
grep -qF -- "--no-auth" "$work/no_token.out" || fail "no_token: --no-auth not named"
expect nan_timeout 2 5 "--rdzv-timeout is nan; it must be a number of seconds above 0" -- \
  --rdzv-timeout=nan /bin/true
expect bad_nnodes 2 5 "--nnodes is '2:1'; need 1 <= MIN <= MAX" -- --nnodes=2:1 /bin/true
expect no_endpoint 2 5 "--nnodes=2 needs --rdzv-endpoint" -- --nnodes=2 /bin/true
expect bad_rank 2 5 "--node-rank is 2, but --nnodes=2 allows node ranks 0..1" -- \
  --nnodes=2 --node-rank=2 --rdzv-endpoint=127.0.0.1:1 /bin/true

[[ $failures -eq 0 ]] || exit 1
echo PASS
