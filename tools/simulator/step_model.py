"""Data-parallel step model: the reducer's buckets and their overlap with the backward pass.

Inputs come from a real run's timeline (paddle/parallel/timeline.h, PADDLE_TIMELINE=FILE): per
step the compute lane's "data", "forward", "backward" and "optimizer" spans, and the allreduce
lane's "allreduce bucket i" spans (launch to completion, with bytes). From them:

  ready(x)   when the first x bytes of gradients (in bucket order) are ready, measured from the
             start of backward: a piecewise-linear curve through (bytes up to the end of bucket
             i, launch time of bucket i). Launch is when the reducer saw the bucket's last
             gradient (Note [Bucket order] makes it no earlier than the previous launch).
  backward   the compute part of backward: the last bucket's launch.

A prediction cuts the gradient bytes into buckets (the first capped at first_bucket_bytes, the
rest at bucket_bytes), and runs their allreduces one after another on the communicator's queue:
bucket i starts at max(ready(end of i), end of bucket i-1) and takes the simulator's allreduce
time. The step is data + forward + max(backward, last allreduce's end) + optimizer.
Ignored: compute slowed by communication on shared cores, and bucket boundaries falling on
parameter boundaries (the reducer never splits a parameter).

Note [The slowest rank sets the pace]
An allreduce ends on every rank only once the last rank has launched it, so in steady state
every rank's step lasts as long as the compute of that step's slowest rank plus what of the
communication is left after its last launch. A timeline's profile is therefore the slowest
rank's, step by step (pace="slowest"): for each step, the rank whose data + forward + backward
compute + optimizer is longest, and the medians over those. pace="median" takes the median over
every rank's steps instead, which leaves out the time the others wait for it: on 4 workers
sharing 2 cores that wait was 11-17% of the epoch. A synthetic profile has no ranks and no
stragglers.
"""
import dataclasses
import json

import numpy as np

PHASES = ("data", "forward", "backward", "optimizer")


class TimelineError(ValueError):
    pass


@dataclasses.dataclass
class StepProfile:
    """Per-step averages of one run (median over the steps used)."""
    data_us: float
    forward_us: float
    backward_us: float         # compute only: the last bucket's launch after backward starts
    optimizer_us: float
    ready_bytes: np.ndarray    # cumulative gradient bytes at the end of each measured bucket
    ready_us: np.ndarray       # their launch times after backward starts
    measured_step_us: float    # data + forward + backward span + optimizer, as measured
    measured_buckets: list     # (bytes, duration us) of the measured buckets
    steps: int
    ranks: int
    # Compute (data + forward + backward compute + optimizer) of the median rank, and how much
    # longer the profile's is (Note [The slowest rank sets the pace]); 0 for pace="median".
    median_compute_us: float = 0.0
    straggle_us: float = 0.0

    @property
    def grad_bytes(self):
        return float(self.ready_bytes[-1]) if self.ready_bytes.size else 0.0

    def ready_at(self, nbytes):
        xs = np.concatenate([[0.0], self.ready_bytes])
        ys = np.concatenate([[0.0], self.ready_us])
        return float(np.interp(nbytes, xs, ys))


def synthetic_profile(grad_bytes, forward_us, backward_us, data_us=0.0, optimizer_us=0.0):
    """A model with gradients ready at a uniform rate over backward (no timeline needed)."""
    return StepProfile(data_us, forward_us, backward_us, optimizer_us,
                       np.array([float(grad_bytes)]), np.array([float(backward_us)]),
                       0.0, [], 0, 0)


def _rank_steps(events, rank, path):
    compute = sorted((e for e in events if e.get("pid") == rank and e.get("tid") == 0),
                     key=lambda e: e["ts"])
    buckets = sorted((e for e in events if e.get("pid") == rank and e.get("tid") == 1),
                     key=lambda e: e["ts"])
    steps, current = [], {}
    for e in compute:
        if e["name"] not in PHASES:
            continue
        if e["name"] == "data" and current:
            steps.append(current)
            current = {}
        current[e["name"]] = e
    if current:
        steps.append(current)
    out = []
    for s in steps:
        if any(p not in s for p in PHASES):
            continue
        b = s["backward"]
        mine = [e for e in buckets if b["ts"] <= e["ts"] <= b["ts"] + b["dur"]]
        for e in mine:
            if "bytes" not in e.get("args", {}):
                raise TimelineError(f"{path}: bucket span at ts {e['ts']} has no bytes")
        out.append((s, mine))
    return out


def _compute_us(step, buckets, b0):
    """One rank's compute in one step: what it does before its last bucket can start."""
    return (step["data"]["dur"] + step["forward"]["dur"] + (buckets[-1]["ts"] - b0) +
            step["optimizer"]["dur"])


def load_timeline(path, skip_steps=2, pace="slowest"):
    """The run's StepProfile over every rank's steps after the first `skip_steps` (the first
    synced step rebuilds the buckets, Note [Bucket rebuild]): medians over each step's slowest
    rank (pace="slowest", Note [The slowest rank sets the pace]) or over every rank's steps
    (pace="median")."""
    if pace not in ("slowest", "median"):
        raise ValueError(f"pace must be slowest or median, not {pace!r}")
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise TimelineError(f"cannot read timeline {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise TimelineError(f"{path}: not JSON ({e}); expected a PADDLE_TIMELINE trace") from e
    events = doc.get("traceEvents", doc) if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TimelineError(f"{path}: expected a Chrome trace (a list of events)")
    events = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    ranks = sorted({e.get("pid") for e in events if isinstance(e.get("pid"), int)})
    if not ranks:
        raise TimelineError(f"{path}: no spans")
    per_step, layouts = [], {}
    for rank in ranks:
        for index, (s, buckets) in enumerate(_rank_steps(events, rank, path)):
            if index < skip_steps or not buckets:
                continue
            b0 = s["backward"]["ts"]
            sizes = tuple(e["args"]["bytes"] for e in buckets)
            layouts[sizes] = layouts.get(sizes, 0) + 1
            per_step.append((s, buckets, sizes, b0, index, _compute_us(s, buckets, b0)))
    if not per_step:
        raise TimelineError(f"{path}: no complete step with bucket allreduces after the first "
                            f"{skip_steps} (run with a DDP group and PADDLE_TIMELINE set, for more "
                            "steps)")
    layout = max(layouts, key=layouts.get)  # the layout most steps used
    every = [p for p in per_step if p[2] == layout]
    use = every
    if pace == "slowest":
        slowest = {}  # step index -> that step's slowest rank
        for p in every:
            if p[4] not in slowest or p[5] > slowest[p[4]][5]:
                slowest[p[4]] = p
        use = [slowest[k] for k in sorted(slowest)]
    med = lambda xs: float(np.median(xs))
    launches = np.array([[e["ts"] - p[3] for e in p[1]] for p in use])
    durations = np.array([[e["dur"] for e in p[1]] for p in every])
    ready_us = np.maximum.accumulate(np.median(launches, axis=0))
    median_compute = med([p[5] for p in every])
    prof = StepProfile(
        data_us=med([s["data"]["dur"] for s, *_ in use]),
        forward_us=med([s["forward"]["dur"] for s, *_ in use]),
        backward_us=float(ready_us[-1]),
        optimizer_us=med([s["optimizer"]["dur"] for s, *_ in use]),
        ready_bytes=np.cumsum(np.array(layout, dtype=np.float64)),
        ready_us=ready_us,
        measured_step_us=med([sum(s[p]["dur"] for p in PHASES) for s, *_ in every]),
        measured_buckets=list(zip(layout, np.median(durations, axis=0).tolist())),
        steps=len(use), ranks=len(ranks), median_compute_us=median_compute)
    if pace == "slowest":
        prof.straggle_us = (prof.data_us + prof.forward_us + prof.backward_us +
                            prof.optimizer_us - median_compute)
    return prof


def cut_buckets(total, first_bucket_bytes, bucket_bytes):
    ends, pos, cap = [], 0.0, float(first_bucket_bytes)
    while pos < total:
        pos = min(total, pos + cap)
        ends.append(pos)
        cap = float(bucket_bytes)
    return ends


def predict(profile, allreduce_us, first_bucket_bytes, bucket_bytes, durations=None,
            sizes=None):
    """Step time (us) and its parts. allreduce_us(bytes) is the collective model; `durations`
    replaces it with given per-bucket times (to check the overlap model alone); `sizes` gives
    the buckets' bytes instead of cutting them by the caps (the measured layout, in which a
    parameter larger than the cap has a bucket of its own)."""
    if sizes is not None:
        ends = np.cumsum(np.asarray(sizes, dtype=np.float64)).tolist()
    else:
        ends = cut_buckets(profile.grad_bytes, first_bucket_bytes, bucket_bytes)
    free = 0.0
    for i, end in enumerate(ends):
        size = end - (ends[i - 1] if i else 0.0)
        start = max(profile.ready_at(end), free)
        free = start + (durations[i] if durations is not None else allreduce_us(size))
    backward = max(profile.backward_us, free)
    step = profile.data_us + profile.forward_us + backward + profile.optimizer_us
    return {"step_us": step, "backward_us": backward, "exposed_comm_us":
            backward - profile.backward_us, "buckets": len(ends)}


def best_bucket(profile, allreduce_us, first_bucket_bytes=None, candidates=None):
    """The bucket size (powers of two, 64 KiB..512 MiB) with the least predicted step time."""
    candidates = candidates or [1 << k for k in range(16, 30)]
    results = []
    for cap in candidates:
        first = first_bucket_bytes if first_bucket_bytes is not None else cap
        results.append((predict(profile, allreduce_us, first, cap)["step_us"], cap))
    # Among caps within 0.5% of the least time, the largest: fewer allreduces cost less in what
    # the model leaves out (per-call bookkeeping), and a flat curve should not pick the extreme.
    least = min(t for t, _ in results)
    best = max((c, t) for t, c in results if t <= least * 1.005)
    return best[0], best[1], results
