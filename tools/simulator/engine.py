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


def core_share(cluster, phase, cores):
    """Per flow: by how much the ranks busy in this phase outnumber their host's cores, >= 1
    (Note [Shared cores]); all 1 when `cores` is None or not exceeded."""
    R = cluster.ranks_per_host
    if cores is None or R <= cores:
        return np.ones(phase.src.shape[0])
    busy = np.unique(np.concatenate([phase.src, phase.dst]))
    load = np.maximum(1.0, np.bincount(busy // R, minlength=cluster.hosts) / cores)
    return np.maximum(load[phase.src // R], load[phase.dst // R])


def phase_features(cluster, phase, cores=None):
    """Per flow: link class index (0 workspace, 1 intra, 2 inter), the bytes on the wire (times
    the NIC share), and the columns of link_features that do not depend on the link."""
    R = cluster.ranks_per_host
    src_host, dst_host = phase.src // R, phase.dst // R
    kind = np.where(phase.src == phase.dst, 0, np.where(src_host == dst_host, 1, 2))
    share = np.ones_like(phase.bytes)
    cross = (kind == 2) & (phase.bytes > 0)
    if cross.any():
        out_count = np.bincount(src_host[cross], minlength=cluster.hosts)
        in_count = np.bincount(dst_host[cross], minlength=cluster.hosts)
        share[cross] = np.maximum(out_count[src_host[cross]], in_count[dst_host[cross]])
    return kind, phase.bytes * share, core_share(cluster, phase, cores)


def link_features(link, phase, sel, wire, cores_share, working_set):
    """The features of the flows `sel` of `phase` on `link`, one row each, whose dot product with
    link.vector() is the flow's time: [1, pieces - 1, eager bytes, reduced bytes, bytes missing
    the cache, rendezvous messages, rendezvous bytes, rendezvous bytes on small pages] (Notes
    [Cache knee], [Eager and rendezvous], [Small pages]), all times the flow's core share (Note
    [Shared cores])."""
    pieces = phase.pieces[sel]
    wire = wire[sel]
    reduce_bytes = phase.reduce_bytes[sel]
    # A step's first message is its latency (alpha); overhead is paid by each further piece.
    if link.eager_bytes > 0:
        large = (phase.bytes[sel] / np.maximum(pieces, 1)) > link.eager_bytes
    else:
        large = np.zeros(pieces.shape[0], dtype=bool)
    feats = np.stack([np.ones_like(wire), np.maximum(pieces - 1, 0),
                      np.where(large, 0.0, wire), reduce_bytes,
                      (wire + reduce_bytes) * link.miss_fraction(working_set),
                      np.where(large, np.maximum(pieces, 1), 0.0), np.where(large, wire, 0.0),
                      np.where(large, wire, 0.0) * link.small_pages(working_set)],
                     axis=1)
    return feats * cores_share[sel][:, None]


# Note [Cache knee]
# A copy or a reduction streams from cache while the operation's buffers fit there and from
# memory beyond: on the development VM the node workspace moves 25 GB/s up to 8 MiB and 15 GB/s
# from 32 MiB, TCP loopback 5.9 and 4.6. Each link may carry a knee K (cache_bytes) and an extra
# cost per byte (memory_us_per_byte) paid by the share 1 - K/N of the bytes a step moves and
# reduces when the allreduce is of N > K bytes: smooth, and linear in the extra cost, so the fit
# searches K over powers of two and solves the rest as before.

# Note [Eager and rendezvous]
# A transport may send small messages one way and large ones another: the shared-memory channel
# copies a message of up to 64 KiB whole through the ring (two copies, no reply) and pulls a
# larger one with one process_vm_readv after a descriptor, answered by an acknowledgement.
# A link with eager_bytes > 0 costs each larger message rendezvous_us more (the descriptor and
# the reply) and its bytes rendezvous_beta_us_per_byte instead of beta: at 2 ranks on shared
# memory the ring's 256 KiB allreduce (blocks of 128 KiB) takes 2.7 times the 128 KiB one.
# The threshold is the transport's constant (kShmEagerMaxBytes), not fitted.

# Note [Small pages]
# The host allocator (paddle/core/allocator.cc) asks for huge pages from 2 MiB. A rendezvous
# message is read from the peer's buffer with process_vm_readv, which walks that buffer's pages:
# at 2 ranks over shared memory an allreduce of 1 MiB took about as long as one of 2 MiB, and
# with the threshold at 512 KiB in a trial build 512 KiB-1 MiB ran 1.7-2x faster
# (docs/performance-notes.md, "Huge pages and process_vm_readv"). So a link with
# huge_page_bytes > 0 (the allocator's constant, not fitted) costs each rendezvous byte of an
# allreduce of fewer bytes small_page_us_per_byte more.

# Note [Shared cores]
# When a host's ranks outnumber its cores, the ranks busy in a step take turns on them: a step
# costs max(1, busy / cores) times its time on a core of its own (processor sharing). Busy ranks
# are those sending or receiving in the step: all of them in every ring step, two in the fold of
# recursive doubling. It tells the ring at 3 ranks (every rank busy) from the tree's fold (two
# busy); one set of parameters for 2, 3 and 4 ranks on 2 cores still fits badly (median 34% on
# the idle machine's sweeps: waiting for a core costs more than the share), so the fit keeps its
# entries per rank count. Optional (`fit --share-cores`, `validate --share-cores`): tune and the
# engine's C++ model leave it out, and take what sharing costs from the per-rank-count entries
# (tcp@3) fitted without it, so a file for tuning is fitted without it too.


FEATURES = 8  # the columns of link_features, the length of LinkParams.vector()


def evaluate(cluster, phases, with_features=False, working_set=0.0, cores=None):
    """Total time (us) of `phases` for an allreduce of `working_set` bytes; with_features also
    the per-class feature sums of the critical flows (a 3 x FEATURES array, rows in CLASSES
    order)."""
    links = {}
    total = 0.0
    features = np.zeros((3, FEATURES))
    for phase in phases:
        if phase.src.size == 0 or phase.repeat <= 0:
            continue
        kind, wire, cores_share = phase_features(cluster, phase, cores)
        times = np.empty(kind.shape[0])
        feats = np.empty((kind.shape[0], FEATURES))
        for k in np.unique(kind):
            if k not in links:
                link = cluster.link(CLASSES[k])
                links[k] = (link, np.asarray(link.vector()))
            sel = kind == k
            feats[sel] = link_features(links[k][0], phase, sel, wire, cores_share, working_set)
            times[sel] = feats[sel] @ links[k][1]
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


def simulate(cluster, algo, nbytes, cores=None, cross_algo="auto", piece_bytes=None,
             share_cores=False):
    """Time (us) of one allreduce of `nbytes` with `algo` (a name from schedules.ALGOS); with
    share_cores, steps with more busy ranks than `cores` cost more (Note [Shared cores])."""
    piece = piece_bytes or schedules.PIECE_BYTES
    slot = slot_bytes_for(cluster.ranks_per_host, cores)
    if cluster.ranks == 1 or nbytes <= 0:
        return 0.0
    ev = lambda phases: evaluate(cluster, phases, working_set=nbytes,
                                 cores=cores if share_cores else None)
    if algo in schedules.FLAT_ALGOS:
        return ev(schedules.flat_schedule(algo, cluster.ranks, nbytes, piece))
    if algo == "shm":
        if cluster.hosts != 1:
            raise schedules.ScheduleError("the node workspace allreduce runs on one host; use "
                                          "--algo=hier for several")
        return ev(schedules.shm(cluster.ranks_per_host, nbytes, slot))
    if algo == "hier":
        L, H = cluster.ranks_per_host, cluster.hosts
        if H == 1:
            return simulate(cluster, "shm", nbytes, cores, share_cores=share_cores)
        chunk_guess = nbytes if nbytes < schedules.HIER_PIPELINE_MIN_BYTES else max(
            schedules.HIER_CHUNK_BYTES, nbytes / schedules.HIER_MAX_CHUNKS)
        xalgo = flat_choice(chunk_guess / L, H) if cross_algo == "auto" else cross_algo
        intra, cross, chunks = schedules.hierarchical_parts(H, L, nbytes, xalgo, slot, piece)
        t_intra, t_cross = ev(intra), ev(cross)
        # Chunk k's cross-host step overlaps chunk k+1's intra-host steps (and k-1's gather).
        return t_intra + t_cross + (chunks - 1) * max(t_intra, t_cross)
    raise schedules.ScheduleError(f"unknown algorithm \"{algo}\"; expected auto or one of "
                                  f"{', '.join(schedules.ALGOS)}")
