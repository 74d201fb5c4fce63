"""Evaluates schedules (schedules.py) on a cluster: H hosts x R ranks, three kinds of link.

  workspace  src == dst: copies through the node workspace (shared memory)
  intra      two ranks of one host (the group's transport between them)
  inter      two hosts (each host has one NIC, shared by every flow that leaves or enters it)

Each phase is bulk-synchronous: it takes as long as its slowest flow, and the algorithm's time
is the sum of its phases (times their repeat counts). A cross-host flow's bytes go at the NIC's
bandwidth divided by its share, the larger of the number of flows leaving its source host and
entering its destination host in that phase (max-min fair sharing of one bottleneck link);
flows inside a host do not slow each other. What this leaves out: pipelining across steps of
one algorithm (the ring's pieces overlap reduction with the wire, which the fit folds into
beta), switch and core-network contention, stragglers and OS noise.
"""
import dataclasses

import numpy as np

from . import schedules
from .cost_model import LinkParams

CLASSES = ("workspace", "intra", "inter")


@dataclasses.dataclass
class Cluster:
    hosts: int
    ranks_per_host: int
    workspace: LinkParams = None
    intra: LinkParams = None
    inter: LinkParams = None

    @property
    def ranks(self):
        return self.hosts * self.ranks_per_host

    def link(self, kind):
        link = getattr(self, kind)
        if link is None:
            raise schedules.ScheduleError(f"the schedule uses {kind} links but no parameters "
                                          f"were given for them")
        return link


def phase_features(cluster, phase):
    """Per flow: link class index (0 workspace, 1 intra, 2 inter) and the features
    [1, pieces - 1, bytes * share, reduce_bytes] whose dot product with the class's parameters is
    the flow's time."""
    R = cluster.ranks_per_host
    src_host, dst_host = phase.src // R, phase.dst // R
    kind = np.where(phase.src == phase.dst, 0, np.where(src_host == dst_host, 1, 2))
    share = np.ones_like(phase.bytes)
    cross = (kind == 2) & (phase.bytes > 0)
    if cross.any():
        out_count = np.bincount(src_host[cross], minlength=cluster.hosts)
        in_count = np.bincount(dst_host[cross], minlength=cluster.hosts)
        share[cross] = np.maximum(out_count[src_host[cross]], in_count[dst_host[cross]])
    # A step's first message is its latency (alpha); overhead is paid by each further piece.
    feats = np.stack([np.ones_like(phase.bytes), np.maximum(phase.pieces - 1, 0),
                      phase.bytes * share, phase.reduce_bytes], axis=1)
    return kind, feats


def evaluate(cluster, phases, with_features=False):
    """Total time (us) of `phases`; with_features also the per-class feature sums of the
    critical flows (a 3 x 4 array, rows in CLASSES order)."""
    params = {}
    total = 0.0
    features = np.zeros((3, 4))
    for phase in phases:
        if phase.src.size == 0 or phase.repeat <= 0:
            continue
        kind, feats = phase_features(cluster, phase)
        times = np.empty(kind.shape[0])
        for k in np.unique(kind):
            if k not in params:
                params[k] = np.asarray(cluster.link(CLASSES[k]).vector())
            sel = kind == k
            times[sel] = feats[sel] @ params[k]
        i = int(np.argmax(times))
        total += times[i] * phase.repeat
        features[kind[i]] += feats[i] * phase.repeat
    return (total, features) if with_features else total


# The algorithm table (algorithm_selector.cc), mirrored so `--algo=auto` picks what the engine
# would. shared_cores: the ranks of a host outnumber its cores (AllreduceTable::kSharedCores).
def tree_max_bytes(n):
    return (256 << 10) if n <= 8 else (64 << 10)


def flat_choice(nbytes, n, shared_cores=False):
    if nbytes <= tree_max_bytes(n):
        return "tree"
    if shared_cores:
        return "ring" if n == 3 else "hd"
    power_of_two = n & (n - 1) == 0
    if nbytes <= (4 << 20):
        return "hd" if power_of_two else "ring"
    return "ring"


def slot_bytes_for(ranks_per_host, cores):
    """AutomaticTuning's slot size (communicator_settings.cc)."""
    if cores is None or ranks_per_host <= cores:
        return schedules.SLOT_BYTES
    per_rank = (8 << 20) // ranks_per_host // 4096 * 4096
    return min(max(per_rank, schedules.SLOT_BYTES), 2 << 20)


def resolve_algo(algo, cluster, nbytes, workspace, cores=None):
    """The algorithm `algo` ("auto" or a name) means for this cluster: what the native
    communicator runs (Note [Transport choice]): the node workspace on one host, hierarchical over
    uniform hosts, else the table."""
    shared = cores is not None and cluster.ranks_per_host > cores
    if algo != "auto":
        return algo
    if workspace and cluster.ranks_per_host > 1:
        return "shm" if cluster.hosts == 1 else "hier"
    return flat_choice(nbytes, cluster.ranks, shared)


def simulate(cluster, algo, nbytes, cores=None, cross_algo="auto", piece_bytes=None):
    """Time (us) of one allreduce of `nbytes` with `algo` (a name from schedules.ALGOS)."""
    piece = piece_bytes or schedules.PIECE_BYTES
    slot = slot_bytes_for(cluster.ranks_per_host, cores)
    if cluster.ranks == 1 or nbytes <= 0:
        return 0.0
    if algo in schedules.FLAT_ALGOS:
        return evaluate(cluster, schedules.flat_schedule(algo, cluster.ranks, nbytes, piece))
    if algo == "shm":
        if cluster.hosts != 1:
            raise schedules.ScheduleError("the node workspace allreduce runs on one host; use "
                                          "--algo=hier for several")
        return evaluate(cluster, schedules.shm(cluster.ranks_per_host, nbytes, slot))
    if algo == "hier":
        L, H = cluster.ranks_per_host, cluster.hosts
        if H == 1:
            return simulate(cluster, "shm", nbytes, cores)
        chunk_guess = nbytes if nbytes < schedules.HIER_PIPELINE_MIN_BYTES else max(
            schedules.HIER_CHUNK_BYTES, nbytes / schedules.HIER_MAX_CHUNKS)
        xalgo = flat_choice(chunk_guess / L, H) if cross_algo == "auto" else cross_algo
        intra, cross, chunks = schedules.hierarchical_parts(H, L, nbytes, xalgo, slot, piece)
        t_intra, t_cross = evaluate(cluster, intra), evaluate(cluster, cross)
        # Chunk k's cross-host step overlaps chunk k+1's intra-host steps (and k-1's gather).
        return t_intra + t_cross + (chunks - 1) * max(t_intra, t_cross)
    raise schedules.ScheduleError(f"unknown algorithm \"{algo}\"; expected auto or one of "
                                  f"{', '.join(schedules.ALGOS)}")
