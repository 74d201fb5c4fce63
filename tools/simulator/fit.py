"""Fits the cost model's parameters (cost_model.py) to measured sweeps of bench:collectives.

Every measured row (one host, n ranks, an algorithm, N bytes) is replayed through its schedule
(schedules.py), which gives the counts the time is linear in: steps, messages, bytes on the
critical path and bytes reduced on it. Rows are grouped by the link they exercise: "workspace"
(the node workspace's direct allreduce: algo auto on shared memory), "shm" (ring, tree and hd over
the shared-memory transport), "tcp" (any algorithm over TCP loopback); each group gets the
non-negative parameters minimizing the sum of squared relative errors, so a 4 KiB row counts as
much as a 64 MiB one. Groups are fitted once over every rank count ("tcp") and once per rank
count ("tcp@4"), because ranks that outnumber the cores change the costs (context switches per
wait) in ways no per-message term captures. A sweep over another TCP link than loopback (network
namespaces shaped with tc, bench/micro/netns_sweep.sh) is fitted under a name of its own
(`tcp_link`, e.g. "tcp_1gbit"), so one params.json can hold loopback and each shaped rate.
"""
import dataclasses
import math

import numpy as np

from . import engine, schedules
from .cost_model import LINEAR_NAMES, LinkParams, ParamSet, PARAM_NAMES

_GUESS = LinkParams(20.0, 1.0, 1e-3, 1e-3)  # picks the critical flow; any positive values do

# The transports' eager limits (Note [Eager and rendezvous] in engine.py): kShmEagerMaxBytes;
# and where the pages read by rendezvous turn huge (Note [Small pages]): the host allocator's
# kHugePage.
EAGER_BYTES = {"shm": float(64 << 10)}
HUGE_PAGE_BYTES = {"shm": float(2 << 20)}


def row_link_and_algo(row, cores, tcp_link="tcp"):
    """(link name, algorithm run) for a measured row (Note [Transport choice]); TCP rows are
    named `tcp_link`."""
    transport, algo, n = row["transport"], row["algo"], row["nproc"]
    backend = row.get("backend", "native")
    if backend not in ("native", "sim"):
        raise ValueError(f"{row.get('source', '?')}: backend \"{backend}\" rows cannot be fitted "
                         "(only the native engine's algorithms are modelled)")
    workspace = transport in ("auto", "shm", "ucx")
    cluster = engine.Cluster(1, n)
    run = engine.resolve_algo(algo, cluster, row["bytes"], workspace, cores)
    if run == "shm":
        return "workspace", run
    if run not in schedules.FLAT_ALGOS:
        raise ValueError(f"{row.get('source', '?')}: algo \"{algo}\" is not one of auto, "
                         f"{', '.join(schedules.FLAT_ALGOS)}")
    return (tcp_link if transport == "tcp" else "shm"), run


def row_features(row, cores, tcp_link="tcp", share_cores=False):
    """(link name, algorithm, the features of LinkParams.vector() for one row, engine.evaluate's
    columns); the memory column holds every byte moved and reduced, to be scaled by the cache
    miss fraction (Note [Cache knee]). With share_cores, steps on more busy ranks than `cores`
    cost more (Note [Shared cores])."""
    link, algo = row_link_and_algo(row, cores, tcp_link)
    guess = dataclasses.replace(_GUESS, eager_bytes=EAGER_BYTES.get(link, 0.0),
                                huge_page_bytes=HUGE_PAGE_BYTES.get(link, 0.0))
    cluster = engine.Cluster(1, row["nproc"], guess, guess, guess)
    if algo == "shm":
        phases = schedules.shm(row["nproc"], row["bytes"], engine.slot_bytes_for(row["nproc"],
                                                                                 cores))
    else:
        phases = schedules.flat_schedule(algo, row["nproc"], row["bytes"])
    _, feats = engine.evaluate(cluster, phases, with_features=True, working_set=row["bytes"],
                               cores=cores if share_cores else None)
    feats = feats.sum(axis=0)
    feats[4] = feats[2] + feats[3] + feats[6]
    return link, algo, feats


def nnls(a, b):
    """min |a x - b| with x >= 0, by dropping the most negative coefficient until none is
    (exact for the few, well-separated columns here)."""
    active = list(range(a.shape[1]))
    x = np.zeros(a.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
        if (sol >= 0).all():
            x[active] = sol
            return x
        del active[int(np.argmin(sol))]
    return x


def relative_errors(predicted, measured):
    return (np.asarray(predicted) - np.asarray(measured)) / np.asarray(measured)


def error_summary(errors):
    e = np.abs(np.asarray(errors))
    if e.size == 0:
        return {}
    return {"rows": int(e.size), "median_error_pct": round(float(np.median(e)) * 100, 2),
            "geomean_error_pct": round(float(np.exp(np.mean(np.log(np.maximum(e, 1e-4))))) * 100,
                                       2),
            "max_error_pct": round(float(e.max()) * 100, 2)}


# Note [Robust fit]
# Sweeps on a shared 2-core machine have sizes where another process ran: a p50 twice its
# neighbours'. Least squares would bend every parameter towards them; least absolute error
# (IRLS, weights 1/sqrt(|relative error|), floored at 2%) fits the undisturbed majority and leaves
# the outliers as outliers, which the validation then reports.
ROBUST_ITERATIONS = 30


def _solve(f, y, known, robust):
    """Non-negative coefficients for the columns of `f` minimizing the relative error (IRLS
    towards the least absolute relative error, Note [Robust fit])."""
    # Columns scaled to similar magnitudes so the solve is well conditioned; a feature no row
    # has (messages on the node workspace) gets 0.
    scale = np.abs(f).max(axis=0)
    used = scale > 0
    a = (f[:, used] / scale[used]) / y[:, None]
    b = 1.0 - known / y  # what the fitted terms must explain, relative to each row
    x = np.zeros(f.shape[1])
    w = np.ones_like(y)
    for _ in range(ROBUST_ITERATIONS if robust else 1):
        sol = nnls(a * w[:, None], b * w)
        w = 1.0 / np.sqrt(np.maximum(np.abs(a @ sol - b), 0.02))
    x[used] = sol / scale[used]
    return x


# The knees fit() tries (Note [Cache knee]): 256 KiB .. 128 MiB.
CACHE_KNEES = tuple(1 << k for k in range(18, 28))


def fit_group(features, times, robust=True, gamma=None, sizes=None, eager=0.0, huge=0.0):
    """LinkParams and the relative errors; `gamma` (us per byte) fixes the reduction cost
    instead of fitting it (Note [Fixed gamma]). With `sizes` (each row's allreduce bytes) the
    memory term of Note [Cache knee] is fitted too, its knee the one of CACHE_KNEES with the
    least absolute relative error; without, it is 0."""
    f0 = np.asarray(features, dtype=np.float64)
    y = np.asarray(times, dtype=np.float64)
    known = np.zeros_like(y) if gamma is None else gamma * f0[:, 3]
    best = None
    for knee in ([0] if sizes is None else [0, *CACHE_KNEES]):
        f = f0.copy()
        if gamma is not None:
            f[:, 3] = 0.0  # an unused column: fitted as 0, replaced below
        miss = (np.zeros_like(y) if not knee else
                np.maximum(0.0, 1.0 - knee / np.asarray(sizes, dtype=np.float64)))
        f[:, 4] *= miss
        x = _solve(f, y, known, robust)
        if gamma is not None:
            x[3] = gamma
        errors = relative_errors(f @ x + known, y)
        score = float(np.abs(errors).sum())
        if best is None or score < best[0] - 1e-12:
            best = (score, knee if x[4] > 0 else 0, x, errors)
    _, knee, x, errors = best
    if not knee:
        x[4] = 0.0
    params = LinkParams(**{name: float(v) for name, v in zip(LINEAR_NAMES, x)},
                        cache_bytes=float(knee), eager_bytes=eager, huge_page_bytes=huge)
    return params, errors


# Note [Fixed gamma]
# In every schedule the bytes reduced are a fixed share of the bytes moved (ring and hd N/2 of
# N, the tree all of it, the workspace (L-1)/(2L-1) of its copies), so beta and gamma are nearly
# collinear and a free fit trades one for the other. `fit --gamma-gbs` takes the reduction
# kernel's speed from its own benchmark (bench/micro:reduction_bench) instead, which
# leaves beta, alpha and the per-message overhead to the sweeps.


def fit(rows, cores, per_ranks=True, robust=True, gamma=None, tcp_link="tcp", knee=True,
        share_cores=False):
    """A ParamSet with one entry per link (and per link@ranks), each with its fit statistics;
    `knee` fits the memory term (Note [Cache knee]), `share_cores` Note [Shared cores]."""
    groups = {}
    for row in rows:
        link, algo, feats = row_features(row, cores, tcp_link, share_cores)
        keys = [link] + ([f"{link}@{row['nproc']}"] if per_ranks else [])
        for key in keys:
            groups.setdefault(key, []).append((feats, row["time_us"], algo, row))
    links, extra = {}, {}
    for key, items in sorted(groups.items()):
        if "@" in key and len({r["nproc"] for *_, r in groups[key.split("@")[0]]}) == 1:
            continue  # one rank count only: the pooled fit is the same
        if len(items) < len(PARAM_NAMES):
            raise ValueError(f"link {key}: {len(items)} rows, need at least {len(PARAM_NAMES)} "
                             "to fit 4 parameters (sweep more sizes)")
        params, errors = fit_group([i[0] for i in items], [i[1] for i in items], robust, gamma,
                                   [i[3]["bytes"] for i in items] if knee else None,
                                   EAGER_BYTES.get(key.split("@")[0], 0.0),
                                   HUGE_PAGE_BYTES.get(key.split("@")[0], 0.0))
        links[key] = params
        extra[key] = {"fit": error_summary(errors),
                      "algos": sorted({i[2] for i in items}),
                      "nproc": sorted({i[3]["nproc"] for i in items}),
                      "bytes": [min(i[3]["bytes"] for i in items),
                                max(i[3]["bytes"] for i in items)],
                      "summary": params.describe()}
    return ParamSet(links, extra)


def predict_row(params, row, cores, tcp_link="tcp", share_cores=False):
    """The model's time (us) for a measured row, with the parameters for its rank count."""
    link, algo, feats = row_features(row, cores, tcp_link, share_cores)
    p = params.get(link, row["nproc"])
    feats[4] *= p.miss_fraction(row["bytes"])
    return float(np.dot(feats, p.vector())), link, algo


def predict_on_hosts(params, row, hosts, cores, tcp_link, share_cores=False):
    """The model's time (us) for a TCP row whose ranks ran on `hosts` hosts, host-major (network
    namespaces, bench/micro/netns_sweep.sh): the `tcp` entry (loopback) between the ranks of a
    host, `tcp_link` between hosts, each as fitted on its own sweeps ("tcp@R" at R ranks, the
    link's "@H" from the sweep with one rank per host). Nothing is fitted to the row itself: it
    checks how the engine composes the two links, NIC sharing included."""
    n = row["nproc"]
    if row["transport"] != "tcp" or n % hosts:
        raise ValueError(f"{row.get('source', '?')}: a row of {n} ranks over {row['transport']} "
                         f"cannot run on {hosts} hosts (TCP rows, nproc a multiple of hosts)")
    cluster = engine.Cluster(hosts, n // hosts)
    cluster.inter = params.get(tcp_link, hosts)
    if n > hosts:
        cluster.intra = params.get("tcp", n // hosts)
    # The engine's table as the communicator chose it: ranks per host against cores per host.
    algo = engine.resolve_algo(row["algo"], cluster, row["bytes"], False, cores)
    return (engine.simulate(cluster, algo, row["bytes"], cores, share_cores=share_cores), tcp_link,
            algo)


def validate(params, rows, cores, tcp_link="tcp", hosts=1, share_cores=False):
    """Per (link, algo, nproc) and overall: the error of the model against each measured row;
    with `hosts` > 1 the rows ran over that many hosts (predict_on_hosts). `share_cores` as the
    parameters were fitted."""
    table = []
    for row in rows:
        if hosts > 1:
            t, link, algo = predict_on_hosts(params, row, hosts, cores, tcp_link, share_cores)
        else:
            t, link, algo = predict_row(params, row, cores, tcp_link, share_cores)
        table.append({"link": link, "algo": algo, "nproc": row["nproc"], "bytes": row["bytes"],
                      "measured_us": row["time_us"], "predicted_us": t,
                      "error": (t - row["time_us"]) / row["time_us"]})
    return table


def summarize(table, by=("link", "algo", "nproc")):
    groups = {}
    for entry in table:
        groups.setdefault(tuple(entry[k] for k in by), []).append(entry["error"])
    out = [(key, error_summary(errs)) for key, errs in sorted(groups.items())]
    out.append((("all",), error_summary([e["error"] for e in table])))
    return out


def format_summary(summary, by=("link", "algo", "nproc")):
    lines = ["%-28s %5s %10s %11s %8s" % ("/".join(by), "rows", "median %", "geomean %",
                                         "max %")]
    for key, s in summary:
        lines.append("%-28s %5d %10.1f %11.1f %8.1f" % ("/".join(map(str, key)), s["rows"],
                                                      s["median_error_pct"],
                                                      s["geomean_error_pct"], s["max_error_pct"]))
    return "\n".join(lines)


def is_finite_params(params):
    return all(math.isfinite(v) for link in params.links.values() for v in link.vector())
