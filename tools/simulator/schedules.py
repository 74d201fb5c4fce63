"""Step schedules of the native engine's allreduce algorithms (docs/algorithms.md).

A schedule is a list of Phases. A phase is one step that every listed flow takes part in at
once, run `repeat` times in sequence; a flow is (src, dst, bytes, reduce_bytes, pieces): src
sends `bytes` to dst in `pieces` messages and dst reduces `reduce_bytes` of them. src == dst is
work on the node workspace (copies through shared memory, no message: each such step is one
synchronisation, costed as a latency, and has no pieces). Ranks are numbered
host-major (rank = host * ranks_per_host + local rank), as the launcher numbers them.

Regular steps (the ring's 2(n-1) identical steps, a tree segment repeated S times) are one phase
with a repeat count, so 1024 hosts x 8 ranks cost one evaluation per distinct step, each a numpy
pass over the flows (engine.py). Buffer sizes are real numbers of bytes: blocks are N/n, where the
engine cuts whole elements, which only moves a few bytes.
"""
import dataclasses
import math

import numpy as np

PIECE_BYTES = 256 << 10          # AlgorithmContext kDefaultPieceBytes
SLOT_BYTES = 512 << 10           # node_workspace.h kDefaultSlotBytes
SHM_SMALL_BYTES = 32 << 10       # shm_collectives.h kShmSmallMessageBytes
HIER_CHUNK_BYTES = 4 << 20       # shm_collectives.h kHierarchicalChunkBytes
HIER_MAX_CHUNKS = 200
HIER_PIPELINE_MIN_BYTES = 8 << 20

FLAT_ALGOS = ("ring", "tree", "hd")
ALGOS = FLAT_ALGOS + ("shm", "hier")


class ScheduleError(ValueError):
    pass


@dataclasses.dataclass
class Phase:
    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    reduce_bytes: np.ndarray
    pieces: np.ndarray
    repeat: int = 1
    name: str = ""


def _phase(src, dst, nbytes, reduce_bytes, pieces, repeat=1, name=""):
    src = np.asarray(src, dtype=np.int64)
    size = src.shape[0]
    full = lambda v: np.broadcast_to(np.asarray(v, dtype=np.float64), (size,)).copy()
    return Phase(src, np.asarray(dst, dtype=np.int64), full(nbytes), full(reduce_bytes),
                 full(pieces), int(repeat), name)


def largest_power_of_two(n):
    return 1 << (n.bit_length() - 1)


class PowerOfTwoGroup:
    """power_of_two_group.h: even ranks r < 2 rem fold into r + 1; members are the rest."""

    def __init__(self, n):
        self.n = n
        self.p2 = largest_power_of_two(n)
        self.rem = n - self.p2
        r = np.arange(n)
        # Member index of each member rank, rank of each member.
        self.member_rank = np.where(np.arange(self.p2) < self.rem,
                                    2 * np.arange(self.p2) + 1,
                                    np.arange(self.p2) + self.rem)
        self.folded = r[(r < 2 * self.rem) & (r % 2 == 0)]   # ranks that fold out

    def fold(self, nbytes, segments):
        f = self.folded
        return _phase(f, f + 1, nbytes, nbytes, 1, segments, "fold")

    def unfold(self, nbytes, segments):
        f = self.folded
        return _phase(f + 1, f, nbytes, 0, 1, segments, "unfold")

    def exchange(self, d, nbytes, reduce_bytes, segments, name):
        m = np.arange(self.p2)
        return _phase(self.member_rank[m], self.member_rank[m ^ d], nbytes, reduce_bytes, 1,
                      segments, name)


def _segments(total, segment):
    """[(segment bytes, how many)]: full segments, then the remainder."""
    if total <= 0:
        return []
    full = int(total // segment)
    rest = total - full * segment
    out = [(float(segment), full)] if full else []
    if rest > 0:
        out.append((float(rest), 1))
    return out


def ring(n, nbytes, piece_bytes=PIECE_BYTES):
    """Reduce-scatter then allgather, n-1 steps each of N/n bytes in P pieces."""
    if n == 1 or nbytes <= 0:
        return []
    block = nbytes / n
    pieces = max(1, math.ceil(math.ceil(block) / piece_bytes))
    r = np.arange(n)
    return [_phase(r, (r + 1) % n, block, block, pieces, n - 1, "reduce-scatter"),
            _phase(r, (r + 1) % n, block, 0, pieces, n - 1, "allgather")]  # P messages a step


def tree(n, nbytes, piece_bytes=PIECE_BYTES):
    """Recursive doubling on one segment (the piece size) at a time, folded when n is not 2^k."""
    if n == 1 or nbytes <= 0:
        return []
    g = PowerOfTwoGroup(n)
    phases = []
    for seg, count in _segments(nbytes, piece_bytes):
        per = []
        if g.rem:
            per.append(g.fold(seg, 1))
        d = 1
        while d < g.p2:
            per.append(g.exchange(d, seg, seg, 1, f"round d={d}"))
            d *= 2
        if g.rem:
            per.append(g.unfold(seg, 1))
        for p in per:  # each segment runs all rounds before the next: repeat each round
            p.repeat = count
        phases += per
    return phases


def hd(n, nbytes, piece_bytes=PIECE_BYTES):
    """Halving-doubling (Rabenseifner) on segments of p2 pieces, folded when n is not 2^k."""
    if n == 1 or nbytes <= 0:
        return []
    g = PowerOfTwoGroup(n)
    phases = []
    for seg, count in _segments(nbytes, piece_bytes * g.p2):
        if g.rem:
            phases.append(g.fold(seg, count))
        d = g.p2 // 2
        while d >= 1:
            half = seg * d / g.p2
            phases.append(g.exchange(d, half, half, count, f"halving d={d}"))
            d //= 2
        d = 1
        while d < g.p2:
            phases.append(g.exchange(d, seg * d / g.p2, 0, count, f"doubling d={d}"))
            d *= 2
        if g.rem:
            phases.append(g.unfold(seg, count))
    return phases


def _workspace_rounds(ranks, local, nbytes, slot_bytes, steps):
    """Steps of the node workspace's block rounds (shm_collectives.cc BlockRounds) for `ranks`
    (every host's ranks, `local` per host): per round of slot/L bytes per block, 1 copies the
    other blocks' pieces in, 2 reduces the own piece from each peer and publishes it, 3 copies
    the peers' reduced pieces out."""
    piece = slot_bytes / local
    block = nbytes / local
    rounds = max(1, math.ceil(block / piece))
    last = block - (rounds - 1) * piece
    phases = []
    for size, count in ((piece, rounds - 1), (last, 1)):
        if count <= 0 or size <= 0:
            continue
        if 1 in steps:
            phases.append(_phase(ranks, ranks, (local - 1) * size, 0, 0, count, "ws copy in"))
        if 2 in steps:
            phases.append(_phase(ranks, ranks, size, (local - 1) * size, 0, count, "ws reduce"))
        if 3 in steps:
            phases.append(_phase(ranks, ranks, (local - 1) * size, 0, 0, count, "ws copy out"))
    return phases


def shm(local, nbytes, slot_bytes=SLOT_BYTES, hosts=1):
    """The node workspace's direct allreduce on each host (ShmAllreduce)."""
    if local == 1 or nbytes <= 0:
        return []
    ranks = np.arange(hosts * local)
    if nbytes <= min(SHM_SMALL_BYTES, slot_bytes):
        # Copy into the own slot, one synchronisation, reduce every slot into the buffer.
        return [_phase(ranks, ranks, nbytes, (local - 1) * nbytes, 0, 1, "ws small")]
    return _workspace_rounds(ranks, local, nbytes, slot_bytes, (1, 2, 3))


def cross_host(hosts, local, nbytes, algo, piece_bytes=PIECE_BYTES):
    """`algo` over the H ranks of each local rank l at once (L groups sharing each host's links):
    the flat schedule for H ranks, mapped to ranks host * L + l for every l."""
    flat = flat_schedule(algo, hosts, nbytes, piece_bytes)
    out = []
    for p in flat:
        ls = np.arange(local)
        src = (p.src[:, None] * local + ls[None, :]).ravel()
        dst = (p.dst[:, None] * local + ls[None, :]).ravel()
        rep = lambda a: np.repeat(a, local)
        out.append(Phase(src, dst, rep(p.bytes), rep(p.reduce_bytes), rep(p.pieces), p.repeat,
                         "cross " + p.name))
    return out


def hierarchical_parts(hosts, local, nbytes, cross_algo, slot_bytes=SLOT_BYTES,
                       piece_bytes=PIECE_BYTES):
    """(intra-host phases, cross-host phases, chunks) of one chunk of the hierarchical allreduce
    (Note [Pipelined hierarchical allreduce]): buffers of 8 MiB and more go in chunks of
    max(4 MiB, N/200), the cross-host step of each chunk overlapping the intra-host steps of its
    neighbours."""
    if nbytes >= HIER_PIPELINE_MIN_BYTES:
        chunk = max(float(HIER_CHUNK_BYTES), nbytes / HIER_MAX_CHUNKS)
        chunks = math.ceil(nbytes / chunk)
        chunk = nbytes / chunks
    else:
        chunk, chunks = float(nbytes), 1
    ranks = np.arange(hosts * local)
    intra = _workspace_rounds(ranks, local, chunk, slot_bytes, (1, 2)) if local > 1 else []
    intra += _workspace_rounds(ranks, local, chunk, slot_bytes, (3,)) if local > 1 else []
    cross = cross_host(hosts, local, chunk / local, cross_algo, piece_bytes) if hosts > 1 else []
    return intra, cross, chunks


def flat_schedule(algo, n, nbytes, piece_bytes=PIECE_BYTES):
    if algo == "ring":
        return ring(n, nbytes, piece_bytes)
    if algo == "tree":
        return tree(n, nbytes, piece_bytes)
    if algo == "hd":
        return hd(n, nbytes, piece_bytes)
    raise ScheduleError(f"unknown flat algorithm \"{algo}\"; expected one of {FLAT_ALGOS}")


def per_rank_bytes(phases, n):
    """(sent, received, reduced) bytes per rank over the whole schedule (for the formula tests)."""
    sent, recv, red = np.zeros(n), np.zeros(n), np.zeros(n)
    for p in phases:
        wire = p.src != p.dst
        np.add.at(sent, p.src[wire], p.bytes[wire] * p.repeat)
        np.add.at(recv, p.dst[wire], p.bytes[wire] * p.repeat)
        np.add.at(red, p.dst, p.reduce_bytes * p.repeat)
    return sent, recv, red
