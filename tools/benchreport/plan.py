"""The steps of a bench-report run, in the order it runs them, and how long each should take.

A step is one benchmark process tree (a collectives sweep of ours and some peers, one MPICH
sweep, one training or time-to-accuracy run): a dict with "kind" (collectives, mpich, training,
tta), "what" (its progress line), "round" and the parameters its runner takes. main.py runs
exactly this list, so `--plan` and a real run cannot disagree on what is run.

Note [Step estimates]: `--plan=OLD/results.json` prints each step's expected seconds without
running anything. A collectives step costs, per implementation, the sum over its sizes of
(warmups + iterations, plus 1 check for runs recorded before Note [Checked first run] in
bench/collectives/bench_inputs.h) x the time of one operation recorded in OLD (interpolated
log-log between recorded sizes, scaled by size past the largest, taken from the same op at
another world size or from allreduce through the bus bandwidth when OLD lacks the figure), plus
a start-up cost. Training costs samples / recorded samples/s plus start-up; time to accuracy the
recorded epochs to the target x the recorded epoch time. What the model leaves out (checking
results, process start, evaluation) is learned from OLD's own "steps": per kind, the median of
actual seconds over the model's estimate of the same step, applied as a factor. The machine's
load changes every figure alike, so the plan is for a machine as loaded as OLD's was.
"""
import math
import statistics

from benchreport import runners

# Seconds to start one implementation's processes (python3 + torch import, mpirun, ...) before
# calibration (Note [Step estimates]).
STARTUP_S = {"ours": 0.5, "torch": 3.0, "openmpi": 1.0, "mpich": 1.0}
TRAIN_STARTUP_S = {"ours": 1.0, "torch": 4.0}
DEFAULT_SAMPLES_PER_S = {"mlp": 50000.0, "cnn": 1000.0}
# Our CNN at 2 workers reached 0.90 in its 3rd epoch of 6 (0.876, 0.898, 0.907; 2026-12-02).
DEFAULT_EPOCHS_TO_TARGET = 3


def collective_impls(op, peers, transport):
    if not peers:
        return [f"ours/{transport}"]
    impls = ["ours/auto", "torch/tcp", "openmpi/tcp", "openmpi/default-shm"]
    return [i for i in impls if not (op == "reduce_scatter" and i.startswith("torch"))]


def steps(p, mpich, parts):
    """Every step of a run of plan `p` (main.plan), `mpich` True when that peer runs."""
    out = []
    sweep = {k: p[k] for k in ("min_bytes", "max_bytes", "iters", "warmup", "coarse_from",
                               "budget_bytes")}
    sweep["checked_first"] = True  # Note [Checked first run]: the check is the first warm-up
    sweep["min_iters"] = p.get("min_iters", runners.MIN_BUDGET_ITERS)  # what the steps run with
    if "collectives" in parts:
        for rnd in range(p["rounds"]):
            for nproc in p["nprocs"]:
                for op in p["ops"]:
                    base = dict(sweep, round=rnd, nproc=nproc, op=op,
                                figure=f"{op} n={nproc}")
                    caps = p.get("round_max_bytes")
                    if caps:
                        base["max_bytes"] = min(p["max_bytes"], caps[min(rnd, len(caps) - 1)])
                    out.append(dict(base, kind="collectives", peers=True, transport="auto",
                                    impls=collective_impls(op, True, "auto"),
                                    what=f"{op}: ours (auto) + PyTorch + OpenMPI"))
                    out.append(dict(base, kind="collectives", peers=False, transport="tcp",
                                    impls=["ours/tcp"], what=f"{op}: ours (tcp)"))
                    if mpich:
                        for tcp in (False, True):
                            impl = "mpich/tcp" if tcp else "mpich/default-shm"
                            out.append(dict(base, kind="mpich", tcp=tcp, impls=[impl],
                                            what=f"{op}: MPICH ({'tcp' if tcp else 'shm'})"))
    if "training" in parts:
        for rnd in range(p["rounds"]):
            for figure, model, workers, no_sync in training_configs(p):
                for impl in ("ours", "torch"):  # interleaved: the same weather for both
                    samples = p["cnn_samples"] if model == "cnn" else p["samples"]
                    out.append(dict(kind="training", round=rnd, figure=figure, model=model,
                                    workers=workers, no_sync=no_sync, impls=[impl],
                                    samples=samples, batch=p["batch"],
                                    what=f"{figure}, {workers} worker(s), {impl}"))
    if "tta" in parts:
        for rnd in range(p["rounds"]):
            for model in p["tta_models"]:
                target = p["tta_targets"][model]
                for workers in p["tta_workers"]:
                    for impl in ("ours", "torch"):
                        figure = tta_figure(p, model)
                        out.append(dict(kind="tta", round=rnd, figure=figure, model=model,
                                        workers=workers, impls=[impl], target=target,
                                        epochs=p["tta_epochs"], batch=p["batch"],
                                        test_samples=p["tta_test_samples"],
                                        what=f"{figure}, {workers} worker(s), {impl}"))
    for s in out:
        s["what"] = (f"round {s['round'] + 1}, "
                     + (f"n={s['nproc']}, " if "nproc" in s else "") + s["what"])
    return out


def training_configs(p):
    """(figure, model, workers, no_sync) in the order a round runs them."""
    configs = []
    for model in p["models"]:
        for w in p["workers"]:
            configs.append((f"train {model}", model, w, False))
        if 2 in p["workers"] and p["no_sync"]:
            configs.append((f"train {model} no-sync", model, 2, True))
    return configs


def tta_figure(p, model):
    return f"time to {p['tta_targets'][model]:.2f} {model}"


class Estimator:
    """Seconds per step from a recorded results.json (Note [Step estimates])."""

    def __init__(self, ref):
        self.by = {}
        for m in ref.get("measurements", []):
            self.by.setdefault((m["figure"], m["impl"]), {})[m["x"]] = m
        self.factor = {}
        recorded = [s for s in ref.get("steps", []) if s.get("seconds") and "kind" in s]
        for kind in {s["kind"] for s in recorded}:
            ratios = [s["seconds"] / e for s in recorded if s["kind"] == kind
                      for e in [self.model(s)] if e > 0]
            if ratios:
                self.factor[kind] = statistics.median(ratios)

    def estimate(self, step):
        return self.model(step) * self.factor.get(step["kind"], 1.0)

    def model(self, step):
        if step["kind"] in ("collectives", "mpich"):
            return sum(self.sweep_s(step, impl) for impl in step["impls"])
        impl = step["impls"][0]
        if step["kind"] == "training":
            return step["samples"] / self.samples_per_s(step, impl) + TRAIN_STARTUP_S[impl]
        return self.tta_s(step, impl)

    # Collectives.
    def sweep_s(self, step, impl):
        total = STARTUP_S[impl.split("/")[0]]
        for nbytes in runners.sweep_sizes(step["min_bytes"], step["max_bytes"],
                                          step.get("coarse_from", 0)):
            budget = step.get("budget_bytes", 0)
            # Steps recorded before kMinBudgetIters was 2 ran with 5.
            floor = step.get("min_iters", 5)
            warmups = runners.iterations_for(step["warmup"], nbytes, budget, warmup=True)
            if step.get("checked_first"):
                warmups = max(warmups, 1)
            else:
                warmups += 1  # recorded before the check was the first warm-up
            ops = runners.iterations_for(step["iters"], nbytes, budget, floor=floor) + warmups
            total += ops * self.op_us(step["op"], step["nproc"], impl, nbytes) / 1e6
        return total

    def op_us(self, op, nproc, impl, nbytes):
        """One operation's time: recorded, or from a like figure through the bus bandwidth."""
        table = self.times(f"{op} n={nproc}", impl)
        if table:
            return interpolate(table, nbytes)
        candidates = [(o, n) for o in (op, "allreduce") for n in (nproc, 2, 4, 8)]
        if impl.startswith("torch/") or impl.startswith("mpich/"):  # a peer we never recorded
            candidates += [(o, n, "openmpi/" + impl.split("/")[1]) for o, n in candidates]
        for c in candidates:
            o, n = c[0], c[1]
            table = self.times(f"{o} n={n}", c[2] if len(c) > 2 else impl)
            if table:
                # Same busbw: time scales with the bus factor; more ranks than 2 cores share.
                us = interpolate(table, nbytes)
                us *= runners.bus_factor(op, nproc) / runners.bus_factor(o, n)
                return us * max(nproc / max(n, 2), 1.0)
        return 50 + nbytes / 1e3  # nothing like it recorded: 1 GB/s and 50 us

    def times(self, figure, impl):
        xs = self.by.get((figure, impl), {})
        return {x: statistics.median(r["time_us"] for r in m["raw"])
                for x, m in xs.items() if m.get("raw")}

    # Training.
    def samples_per_s(self, step, impl):
        for figure in (step["figure"], f"train {step['model']}"):
            xs = self.by.get((figure, impl))
            if xs:
                w = min(xs, key=lambda x: abs(x - step["workers"]))
                return statistics.median(xs[w]["reps"])
        return DEFAULT_SAMPLES_PER_S[step["model"]]

    def tta_s(self, step, impl):
        xs = self.by.get((step["figure"], impl), {})
        m = xs.get(step["workers"])
        if m and m.get("raw"):
            epochs = statistics.median(r["epochs_to_target"] for r in m["raw"])
            epoch_s = statistics.median(t for r in m["raw"] for t in r["epoch_train_s"])
        else:
            epochs = DEFAULT_EPOCHS_TO_TARGET
            samples = dict(step, figure=f"train {step['model']}")
            epoch_s = 60000 / self.samples_per_s(samples, impl)
        return epochs * epoch_s * 1.1 + TRAIN_STARTUP_S[impl]  # 1.1: the test set after each


def interpolate(table, x):
    """log-log between recorded sizes; linear in size past the largest, flat below the least."""
    xs = sorted(table)
    if x >= xs[-1]:
        return table[xs[-1]] * x / xs[-1]
    if x <= xs[0]:
        return table[xs[0]]
    for lo, hi in zip(xs, xs[1:]):
        if lo <= x <= hi:
            if x == lo:
                return table[lo]
            f = math.log(x / lo) / math.log(hi / lo)
            return math.exp(math.log(table[lo]) * (1 - f) + math.log(table[hi]) * f)
    return table[xs[-1]]


def format_plan(step_list, estimator, source):
    """The --plan table: every step's expected seconds, subtotals per kind and the total."""
    lines = [f"bench-report plan: {len(step_list)} steps, seconds estimated from {source}"
             + "".join(f"; {k} x{f:.2f}" for k, f in sorted(estimator.factor.items()))]
    by_kind, total = {}, 0.0
    for i, s in enumerate(step_list, 1):
        seconds = estimator.estimate(s)
        total += seconds
        by_kind[s["kind"]] = by_kind.get(s["kind"], 0.0) + seconds
        lines.append(f"{i:4d} {seconds:8.1f} s  {s['what']}")
    lines.append("  " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in by_kind.items()))
    lines.append(f"total {total:.0f} s ({total / 60:.1f} min) on a machine as loaded as that run's")
    return "\n".join(lines)
