# Network namespaces as "hosts" for the benchmarks of bench/micro (sourced, not run).
#
#   source bench/micro/netns_lib.sh
#   netns_up NODES RATE [QDISC]    # NODES namespaces on one bridge; RATE as tc writes it (2gbit)
#                                  # or "none"; QDISC tbf (default) or htb
#   ip netns exec "${NETNS_NAMES[1]}" ...   # reaches namespace 0 at ${NETNS_ADDRS[0]}
#   netns_store_relay PORT         # 127.0.0.1:PORT in namespaces 1.. forwards to namespace 0's;
#                                  # the relays' pids in NETNS_RELAY_PIDS
#
# Each namespace has one veth (eth0) to the bridge; its egress is shaped to RATE, so a flow from
# one namespace to another crosses exactly one shaper, as a host's NIC. Traffic between processes
# of one namespace stays on its loopback route, unshaped. netns_up installs an EXIT trap that kills
# what runs in the namespaces and removes them; callers that need their own cleanup too put it in
# netns_on_exit(). Needs root (ip netns, a bridge, tc).
export PATH="$PATH:/usr/sbin:/sbin"  # ip and tc (Bazel tests run with a minimal PATH)
NETNS_NAMES=()
NETNS_ADDRS=()
_netns_tag=$(printf '%04x' $((RANDOM % 65536)))
_netns_bridge="nbr$_netns_tag"

netns_on_exit() { :; }

netns_down() {
  local pid i pids
  netns_on_exit
  pids=$(jobs -p)
  disown -a  # no "Killed" notice per job
  for pid in $pids; do kill -9 "$pid" 2>/dev/null; done
  for ((i = 0; i < ${#NETNS_NAMES[@]}; i++)); do
    ip netns pids "${NETNS_NAMES[$i]}" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "${NETNS_NAMES[$i]}" 2>/dev/null
    ip link del "nv$_netns_tag-$i" 2>/dev/null
  done
  ip link del "$_netns_bridge" 2>/dev/null
}

# Bytes htb may send at once: 0.5 ms at RATE, at least 64 KiB (one TSO segment, which htb sends
# whole anyway). A real NIC has no burst allowance: 2 ms let whole 64 KiB-256 KiB allreduces pass
# at veth speed after a pause at 1 Gbit/s, and 100 us held htb to 2 Gbit/s at 10 Gbit/s.
_netns_burst() {
  local rate=$1 num unit scale
  num=${rate%%[a-zA-Z]*}
  unit=${rate#"$num"}
  case ${unit,,} in
    gbit) scale=1000000000 ;;
    mbit) scale=1000000 ;;
    kbit) scale=1000 ;;
    *) scale=1 ;;
  esac
  local bytes=$((num * scale / 8 / 2000))
  echo $((bytes > 65536 ? bytes : 65536))
}

netns_up() {
  local nodes=$1 rate=$2 qdisc=${3:-tbf} subnet="10.79.$((RANDOM % 250 + 1))" i ns
  trap netns_down EXIT
  ip link add "$_netns_bridge" type bridge && ip link set "$_netns_bridge" up ||
    { echo "cannot make a bridge (root?)" >&2; return 1; }
  for ((i = 0; i < nodes; i++)); do
    ns="nn$_netns_tag-$i"
    NETNS_NAMES+=("$ns")
    NETNS_ADDRS+=("$subnet.$((i + 1))")
    ip netns add "$ns" &&
      ip link add "nv$_netns_tag-$i" type veth peer name eth0 netns "$ns" &&
      ip link set "nv$_netns_tag-$i" master "$_netns_bridge" up &&
      ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up &&
      ip -n "$ns" link set lo up || { echo "cannot set up namespace $ns" >&2; return 1; }
    case $rate/$qdisc in
      none/*) ;;
      */tbf) ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 512kb \
               latency 100ms || { echo "tc tbf $rate failed" >&2; return 1; } ;;
      */htb) local burst
             burst=$(_netns_burst "$rate")
             ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 10 &&
               ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:10 htb rate "$rate" \
                 ceil "$rate" burst "$burst" cburst "$burst" quantum 60000 ||
               { echo "tc htb $rate failed" >&2; return 1; } ;;
      *) echo "unknown qdisc $qdisc (tbf or htb)" >&2; return 1 ;;
    esac
  done
}

# The benchmark workers reach their store at 127.0.0.1 (bench/collectives/sweep_worker.cc): in
# every namespace but the first, a relay on 127.0.0.1:PORT carries that to namespace 0's address.
# Only the rendezvous and barriers cross it, never the data.
netns_store_relay() {
  local port=$1 i
  NETNS_RELAY_PIDS=()
  for ((i = 1; i < ${#NETNS_NAMES[@]}; i++)); do
    ip netns exec "${NETNS_NAMES[$i]}" python3 -c '
import socket, sys, threading
port, target = int(sys.argv[1]), sys.argv[2]
server = socket.create_server(("127.0.0.1", port))

def pump(src, dst):
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

while True:
    client, _ = server.accept()
    upstream = socket.create_connection((target, port))
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
' "$port" "${NETNS_ADDRS[0]}" &
    NETNS_RELAY_PIDS+=($!)
  done
}
