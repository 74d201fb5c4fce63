"""The node-level rendezvous: which launchers form an attempt, and how they rank their workers.

Note [Node rendezvous]
Every attempt of a job is a numbered round r (0, 1, 2, ...; r is also the restart count the
workers see). All keys of round r live under "r<r>/" in the job's store:
  a) Each launcher joins with idx = add("r<r>/joined", 1) - 1 and publishes its description
     (address, --nproc, --node-rank, --nnodes) as "r<r>/node<idx>".
  b) The first to join (idx 0) coordinates: it waits until MAX launchers have joined, or until MIN
     have and --rdzv-last-call seconds passed without reaching MAX, then closes the round by
     setting "r<r>/size" = N. Launchers that joined as idx >= N are late: they wait in round r+1,
     and the running ones restart to admit them (if the job has room). A launcher that disagrees
     on --nnodes, or too few launchers within --rdzv-timeout, sets "r<r>/error" instead, which
     every waiting launcher reports and exits on.
  c) Everyone reads the N descriptions and computes the same order: launchers that gave
     --node-rank by it, the others by arrival. That order is GROUP_RANK; a node's workers get the
     ranks after those of the lower group ranks.
  d) Group rank 0 picks a fresh MASTER_PORT on its own address (the one the others reach the store
     from) and publishes "r<r>/master"; the others wait for it. A fresh port per round means a
     restarted rank 0 never finds its predecessor's port in TIME_WAIT or still held.
While the round runs, each launcher bumps "r<r>/hb<group rank>", sets "r<r>/failed" (first cause
wins) when one of its workers fails, and adds to "r<r>/done" when all of its workers succeeded.
All launchers see the same "failed" key, so they agree on the next round and on the number of
restarts used. Every wait is bounded by --rdzv-timeout; nothing here can hang.
"""
import json
import time

from paddlerun import options


class RendezvousError(Exception):
    """The rendezvous cannot complete; the message says what was expected and what happened."""


class Late(Exception):
    """This launcher joined a round after it closed; it waits for the next one."""


class Assignment:
    """This node's place in one round."""

    def __init__(self, **kw):
        self.round = kw["round"]
        self.group_rank = kw["group_rank"]
        self.group_world_size = kw["group_world_size"]
        self.rank_offset = kw["rank_offset"]
        self.world_size = kw["world_size"]
        self.master_addr = kw["master_addr"]
        self.master_port = kw["master_port"]
        self.nodes = kw["nodes"]  # descriptions in group-rank order

    def __repr__(self):
        return (f"Assignment(round={self.round}, group_rank={self.group_rank}/"
                f"{self.group_world_size}, ranks {self.rank_offset}.. of {self.world_size}, "
                f"master {self.master_addr}:{self.master_port})")


def order_nodes(nodes, max_nodes):
    """Indexes of `nodes` (descriptions in arrival order) in group-rank order; raises
    RendezvousError for duplicate or out-of-range --node-rank values."""
    given = {}
    for i, n in enumerate(nodes):
        r = n["node_rank"]
        if r < 0:
            continue
        if r >= len(nodes) and len(nodes) == max_nodes:
            raise RendezvousError(f"node {n['host']} has --node-rank={r}, but only "
                                  f"{len(nodes)} nodes form the job (ranks 0..{len(nodes) - 1})")
        if r in given:
            raise RendezvousError(
                f"two launchers were started with --node-rank={r} ({nodes[given[r]]['host']} "
                f"and {n['host']}); give each node its own rank 0..{max_nodes - 1}")
        given[r] = i
    return sorted(range(len(nodes)),
                  key=lambda i: (nodes[i]["node_rank"] if nodes[i]["node_rank"] >= 0
                                 else max_nodes + i))


class NodeRendezvous:
    """Runs rounds of Note [Node rendezvous] on `store` for one launcher."""

    def __init__(self, store, *, min_nodes, max_nodes, nnodes, node_rank, nproc, local_addr,
                 timeout, last_call, master_addr="", first_master_port=0, log=print):
        self.store = store
        self.min_nodes, self.max_nodes, self.nnodes = min_nodes, max_nodes, nnodes
        self.node_rank, self.nproc = node_rank, nproc
        self.local_addr = local_addr
        self.timeout, self.last_call = timeout, last_call
        self.master_addr, self.first_master_port = master_addr, first_master_port
        self.log = log

    def current_round(self):
        return int(self.store.get("round") or 0)

    def _wait(self, key, deadline, what):
        """The value of `key` once set; RendezvousError at `deadline` or on r<r>/error."""
        error_key = key.split("/", 1)[0] + "/error"
        while True:
            value = self.store.get(key)
            if value is not None:
                return value
            error = self.store.get(error_key)
            if error is not None:
                raise RendezvousError(error)
            if time.monotonic() >= deadline:
                raise RendezvousError(f"timed out after {self.timeout:g} s (--rdzv-timeout) "
                                      f"waiting for {what}")
            time.sleep(0.05)

    def _fail(self, r, message):
        self.store.set(f"r{r}/error", message)
        raise RendezvousError(message)

    def _coordinate(self, r, deadline):
        """Step b) of the note: decide the round's size."""
        seen = {}
        min_reached = None
        while True:
            n = int(self.store.get(f"r{r}/joined") or 0)
            for i in range(n):
                if i in seen:
                    continue
                text = self.store.get(f"r{r}/node{i}")
                if text is None:
                    continue
                seen[i] = json.loads(text)
                if seen[i]["nnodes"] != self.nnodes:
                    self._fail(r, f"launchers disagree on --nnodes: {seen[i]['host']} has "
                                  f"--nnodes={seen[i]['nnodes']}, {seen[0]['host']} has "
                                  f"--nnodes={self.nnodes}; start every node with the same value")
            now = time.monotonic()
            if len(seen) == n and n >= self.max_nodes:
                size = self.max_nodes
                break
            if len(seen) == n and n >= self.min_nodes:
                min_reached = min_reached or now
                if now - min_reached >= self.last_call:
                    size = n
                    break
            if now >= deadline:
                want = (f"{self.min_nodes}" if self.min_nodes == self.max_nodes
                        else f"at least {self.min_nodes} (of up to {self.max_nodes})")
                self._fail(r, f"only {n} of {want} nodes joined the rendezvous at "
                              f"{self.store.endpoint} within {self.timeout:g} s (--rdzv-timeout); "
                              f"start a launcher on every node with the same --rdzv-endpoint "
                              f"and --rdzv-id, or check --nnodes={self.nnodes}")
            time.sleep(0.05)
        self.store.set(f"r{r}/size", str(size))
        self.store.set("round", str(r))

    def join(self, r):
        """Joins round r; returns this node's Assignment, or raises Late / RendezvousError."""
        deadline = time.monotonic() + self.timeout
        idx = self.store.add(f"r{r}/joined", 1) - 1
        me = {"host": self.local_addr, "nproc": self.nproc, "node_rank": self.node_rank,
              "nnodes": self.nnodes}
        self.store.set(f"r{r}/node{idx}", json.dumps(me))
        if idx == 0:
            self._coordinate(r, deadline)
        size = int(self._wait(f"r{r}/size", deadline + 1.0, f"round {r} of the rendezvous to "
                              f"close (this launcher joined as number {idx + 1})"))
        if idx >= size:
            raise Late(f"round {r} closed with {size} nodes before this launcher joined")
        nodes = [json.loads(self._wait(f"r{r}/node{i}", deadline + 1.0, f"node {i}'s "
                                       "description")) for i in range(size)]
        if nodes[idx]["nnodes"] != nodes[0]["nnodes"]:
            raise RendezvousError(f"launchers disagree on --nnodes: this one has "
                                  f"--nnodes={self.nnodes}, {nodes[0]['host']} has "
                                  f"--nnodes={nodes[0]['nnodes']}")
        order = order_nodes(nodes, self.max_nodes)
        group_rank = order.index(idx)
        ordered = [nodes[i] for i in order]
        offset = sum(n["nproc"] for n in ordered[:group_rank])
        world = sum(n["nproc"] for n in ordered)
        if group_rank == 0:
            addr = self.master_addr or self.local_addr or "127.0.0.1"
            port = (self.first_master_port if r == 0 and self.first_master_port
                    else options.free_port("0.0.0.0" if ":" not in addr else "::"))
            if r == 0 and self.first_master_port:
                check_port_free(addr, port)
            self.store.set(f"r{r}/master", f"{addr} {port}")
        addr, port = self._wait(f"r{r}/master", deadline + 1.0,
                                "node rank 0 to publish MASTER_ADDR/MASTER_PORT").split()
        return Assignment(round=r, group_rank=group_rank, group_world_size=size,
                          rank_offset=offset, world_size=world, master_addr=addr,
                          master_port=int(port), nodes=ordered)


def check_port_free(addr, port):
    """RendezvousError when `port` cannot be listened on here (--master-port in use)."""
    import socket
    with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as s:
        try:
            s.bind(("", port))
        except OSError as e:
            raise RendezvousError(f"--master-port={port} cannot be used on this node: "
                                  f"{e.strerror}; rank 0 hosts the workers' store there. Pick "
                                  "a free port or leave --master-port out") from None
