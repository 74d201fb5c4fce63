"""What the fitted model would choose: the allreduce table's crossovers per group size and the
reducer's bucket size, beside today's hand-set values (algorithm_selector.cc)."""
import os

from . import engine
from .cost_model import OPTIONAL_NAMES, PARAM_NAMES

SIZES = [1 << k for k in range(12, 29)]  # 4 KiB .. 256 MiB


def current_choice(nbytes, n, shared_cores):
    return engine.flat_choice(nbytes, n, shared_cores)


def model_choice(cluster, nbytes, algos=("tree", "hd", "ring")):
    """The fastest algorithm; times within a relative 1e-9 of the best tie, and then the first in
    `algos` wins (allreduce_cost_model.cc ModelAllreduceChoice does the same)."""
    times = {a: engine.simulate(cluster, a, nbytes) for a in algos}
    best = min(times.values())
    return next(a for a in algos if times[a] <= best * (1 + 1e-9)), times


TRANSPORTS = ("tcp", "shm", "ucx")  # the entries the engine's selector can follow
# A link line's values, in allreduce_cost_model.cc's kFields order.
EMITTED = PARAM_NAMES + OPTIONAL_NAMES


def emit(params, path, thresholds_by_link):
    """The tuning file PADDLE_TUNING_PARAMS reads (allreduce_cost_model.h): every tcp, shm and ucx
    entry of `params`, exact to the last bit, and the choices they make as comments."""
    lines = [HEADER,
             f"# from {params.path} by `tools/simulate tune --emit`; read by PADDLE_TUNING_PARAMS",
             "# link NAME " + " ".join(EMITTED)]
    names = sorted(n for n in params.links if n.split("@")[0] in TRANSPORTS)
    if not names:
        raise ValueError(f"{params.path} has no {', '.join(TRANSPORTS)} entries to emit")
    for name in names:
        link = params.links[name]
        lines.append("link " + name + " " +
                     " ".join(repr(float(getattr(link, f))) for f in EMITTED))
    for link, th in thresholds_by_link.items():
        for n, t in th.items():
            lines.append(f"# {link}, {n} ranks: tree up to {t['tree_max_bytes']} bytes, hd up to "
                         f"{t['hd_max_bytes']} (0: never), the ring above")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


HEADER = "paddle_tuning_params 1"


def emit_bucket(path, first_bytes, bucket_bytes, why):
    """Sets the "bucket FIRST_BYTES BUCKET_BYTES" line of tuning file `path` (Note [Tuned bucket
    caps] in paddle/parallel/distributed_data_parallel.cc): replaces the file's bucket line and
    keeps its links, or starts a file with the header when there is none."""
    lines = []
    if os.path.exists(path):
        with open(path) as f:
            lines = f.read().splitlines()
        if not lines or lines[0].split("#")[0].split() != HEADER.split():
            raise ValueError(f"{path} is not a tuning file (its first line is not {HEADER!r}); "
                             "give a new file or one `tools/simulate tune --emit` wrote")
        lines = [ln for ln in lines
                 if ln.split("#")[0].split()[:1] != ["bucket"] and not ln.startswith("# bucket")]
    else:
        lines = [HEADER]
    lines += [f"# bucket caps from `tools/simulate step --search`: {why}",
              f"bucket {int(first_bytes)} {int(bucket_bytes)}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def table_for(cluster_of_n, sizes=SIZES, ns=(2, 3, 4, 8, 16, 64), shared_cores=False):
    """Per n: the model's best algorithm per size, today's choice, and the predicted loss of
    today's choice against the best (percent)."""
    rows = []
    for n in ns:
        cluster = cluster_of_n(n)
        for nbytes in sizes:
            best, times = model_choice(cluster, nbytes)
            today = current_choice(nbytes, n, shared_cores)
            rows.append({"nproc": n, "bytes": nbytes, "model": best, "today": today,
                         "loss_pct": 100.0 * (times[today] / times[best] - 1.0),
                         "times_us": times})
    return rows


def thresholds(rows):
    """Per n: the largest size the model gives the tree, and the largest it gives hd."""
    out = {}
    for n in sorted({r["nproc"] for r in rows}):
        mine = [r for r in rows if r["nproc"] == n]
        tree = [r["bytes"] for r in mine if r["model"] == "tree"]
        hd = [r["bytes"] for r in mine if r["model"] == "hd"]
        out[n] = {"tree_max_bytes": max(tree) if tree else 0,
                  "hd_max_bytes": max(hd) if hd else 0,
                  "today_tree_max_bytes": engine.tree_max_bytes(n),
                  "mismatches": sum(r["model"] != r["today"] for r in mine),
                  "worst_loss_pct": max(r["loss_pct"] for r in mine)}
    return out
