"""tools/bench-report: builds the benchmarks, runs them in interleaved rounds against their peers
and writes DIR/report.md, DIR/report.html, one PNG per figure and DIR/results.json.

    tools/bench-report [--quick] [--out=DIR] [--compare=OLD/results.json] [--fail-on-regression]

Each round runs every implementation once, in turn (ours, then each peer), so the machine's
weather hits all of them alike; a figure is the median of its rounds with the min-max spread
(Note [Within noise] in stats.py). --compare prints the % change of every figure against an
older results.json and marks regressions beyond the noise; --fail-on-regression then exits 1.
The run is the list of steps plan.steps makes; --plan=OLD/results.json prints each step's
expected seconds and the total without running anything (Note [Step estimates] in plan.py). A
step that fails or passes its timeout marks its implementations' columns "failed" or "timed out"
and the report still completes.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from benchreport import environment, plan as planning, plots, report, runners, stats

# The workspace, or the runfiles tree of a test (abspath, not realpath: the runfiles' own files).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGETS = ["//bench:collectives", "//bench:mpi_collectives", "//bench:mpich_collectives",
           "//examples:fashion_mnist"]


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if text[-1:].upper() in units:
            return int(text[:-1]) * units[text[-1].upper()]
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (4096, 4K, 64M)") from None


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="2 ranks, allreduce up to 1 MiB, MLP and CNN at 1-2 workers (< 5 min)")
    ap.add_argument("--out", default="bench-report-out", help="the report's folder")
    ap.add_argument("--compare", help="an older results.json to diff against")
    ap.add_argument("--fail-on-regression", action="store_true",
                    help="with --compare: exit 1 when a figure regressed beyond its noise")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 3)")
    ap.add_argument("--max-bytes", type=parse_size, help="largest collective size")
    ap.add_argument("--ops", help="collectives to run (default: allreduce quick, else all five)")
    ap.add_argument("--nprocs", help="collectives' world sizes (default: 2 quick, else 2,4)")
    ap.add_argument("--samples", type=int, help="training samples per run")
    ap.add_argument("--models", default="mlp,cnn", help="training models (default mlp,cnn)")
    ap.add_argument("--workers", help="training worker counts (default 1,2 quick, else 1,2,4)")
    ap.add_argument("--parts", default="collectives,training,tta",
                    help="comma-separated: collectives, training, tta (time to accuracy; full "
                         "runs only); default all")
    ap.add_argument("--tta-models", default="mlp",
                    help="models timed to their target accuracy (mlp 0.88, cnn 0.90; the CNN "
                         "takes minutes per run here, so it is not in the default)")
    ap.add_argument("--bin-dir", help="where bench/collectives etc. are built (default: "
                    "`bazel build --config=opt` them and use its bazel-bin)")
    ap.add_argument("--mpich", default="mpiexec.mpich", help="MPICH's launcher")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="run nothing: write the report of a recorded results.json into --out")
    ap.add_argument("--plan", metavar="RESULTS_JSON[,...]",
                    help="run nothing: print every step of the run the other flags describe "
                         "with its expected seconds and the total, estimated from a recorded "
                         "results.json (Note [Step estimates] in plan.py)")
    ap.add_argument("--estimate-from", metavar="RESULTS_JSON",
                    help="record each step's estimate from a recorded results.json beside its "
                         "real seconds (results.json \"steps\") and print both totals")
    args = ap.parse_args(argv)
    if args.fail_on_regression and not args.compare:
        ap.error("--fail-on-regression needs --compare=OLD/results.json")
    if args.rounds is not None and not 1 <= args.rounds <= 50:
        ap.error(f"--rounds={args.rounds}: use 1..50")
    args.models = args.models.split(",")
    if not set(args.models) <= {"mlp", "cnn"}:
        ap.error(f"--models={','.join(args.models)}: choose from mlp, cnn")
    if args.workers is not None:
        try:
            args.workers = [int(w) for w in args.workers.split(",")]
        except ValueError:
            ap.error(f"--workers={args.workers}: a comma-separated list of counts (1,2,4)")
        if not all(1 <= w <= 16 for w in args.workers):
            ap.error(f"--workers={args.workers}: counts are 1..16")
    ops = ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]
    if args.ops is not None:
        args.ops = args.ops.split(",")
        if not set(args.ops) <= set(ops):
            ap.error(f"--ops={','.join(args.ops)}: choose from {', '.join(ops)}")
    if args.nprocs is not None:
        try:
            args.nprocs = [int(n) for n in args.nprocs.split(",")]
        except ValueError:
            ap.error(f"--nprocs={args.nprocs}: a comma-separated list of world sizes (2,4)")
        if not all(2 <= n <= 15 for n in args.nprocs):
            ap.error(f"--nprocs={args.nprocs}: world sizes are 2..15")
    args.parts = set(args.parts.split(","))
    known = {"collectives", "training", "tta"}
    if not args.parts <= known:
        ap.error(f"--parts: unknown part(s) {sorted(args.parts - known)}")
    args.tta_models = args.tta_models.split(",") if args.tta_models else []
    if not set(args.tta_models) <= {"mlp", "cnn"}:
        ap.error(f"--tta-models={','.join(args.tta_models)}: choose from mlp, cnn")
    return args


def plan(args):
    """What to run: the sweep's shape and the training configurations."""
    quick = args.quick
    p = {
        "rounds": args.rounds or 3,
        "nprocs": args.nprocs or ([2] if quick else [2, 4]),
        "min_bytes": 4 << 10,
        "max_bytes": args.max_bytes or ((1 << 20) if quick else (256 << 20)),
        "iters": 10 if quick else 20,
        "warmup": 3 if quick else 5,
        # Note [Sweep budget] (bench_inputs.h): 4x size steps from 1 MiB and fewer iterations
        # from 4 MiB keep the 256 MiB sweeps of the full run within its 30 minutes.
        "coarse_from": 1 << 20,
        "budget_bytes": 4 << 20,
        "min_iters": runners.MIN_BUDGET_ITERS,  # bench_inputs.h kMinBudgetIters, for the record
        # The largest size each round sweeps to (the last entry for later rounds): the 256 MiB
        # point, which costs the most (the MPI peers' above all), runs in the first round only
        # and the report says so; 64 MiB gets two rounds (a min-max spread), the rest three.
        # This keeps the full run inside its 30 minutes.
        "round_max_bytes": [256 << 20, 64 << 20, 16 << 20],
        # Every op runs against every peer that has it (PyTorch's gloo has no reduce_scatter).
        "ops": args.ops or (["allreduce"] if quick else
                            ["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"]),
        # Training samples per run; the CNN's steps cost ~50x the MLP's, so --quick gives it
        # fewer to stay under 5 minutes.
        "samples": args.samples or (2560 if quick else 6400),
        "cnn_samples": args.samples or (1024 if quick else 6400),
        "batch": 128,
        "models": args.models,
        "workers": args.workers or ([1, 2] if quick else [1, 2, 4]),
        "no_sync": not quick,  # the sync/no-sync overhead (2 workers): full runs only
        # Time to accuracy (MLPerf's figure): full runs only; each run trains whole epochs of
        # the 60000 training images and is judged on the 10000 test images.
        "tta_models": [] if quick else args.tta_models,
        "tta_workers": [1, 2],
        "tta_epochs": 6,
        "tta_targets": {"mlp": 0.88, "cnn": 0.90},
        "tta_test_samples": 10000,
    }
    p["min_bytes"] = min(p["min_bytes"], p["max_bytes"])
    return p


def bazel_bin():
    """Builds TARGETS optimized and returns that configuration's bazel-bin (not the bazel-bin
    symlink, which follows whatever was built last)."""
    subprocess.run(["bazel", "build", "--config=opt"] + TARGETS, cwd=ROOT, check=True)
    out = subprocess.run(["bazel", "info", "--config=opt", "bazel-bin"], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


class Progress:
    """A tqdm bar on a terminal, one line per step otherwise."""

    def __init__(self, total):
        self.bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="run", file=sys.stderr)
            except ImportError:
                pass
        self.total, self.done = total, 0
        self.last = time.monotonic()

    def step(self, what):
        self.done += 1
        now = time.monotonic()
        what = f"{what} ({now - self.last:.0f} s)"
        self.last = now
        if self.bar:
            self.bar.set_description(what[:40])
            self.bar.update(1)
        else:
            print(f"bench-report: [{self.done}/{self.total}] {what}", file=sys.stderr, flush=True)

    def close(self):
        if self.bar:
            self.bar.close()


class Results:
    """The measurements of a run, keyed as stats.measurement_key."""

    def __init__(self):
        self.by_key = {}

    def add(self, figure, impl, x, metric, value, raw=None, higher_is_better=True):
        m = {"figure": figure, "impl": impl, "x": x, "metric": metric,
             "higher_is_better": higher_is_better, "reps": [], "raw": []}
        m = self.by_key.setdefault(stats.measurement_key(m), m)
        m["reps"].append(value)
        if raw is not None:
            m["raw"].append(raw)

    def add_rows(self, rows):
        for row in rows:
            figure = f"{row['op']} n={row['nproc']}"
            impl = f"{'ours' if row['backend'] == 'native' else row['backend']}/{row['transport']}"
            self.add(figure, impl, row["bytes"], "busbw_gbs", row["busbw_gbs"], raw=row)

    def list(self):
        return list(self.by_key.values())


# A peer's sweep that takes longer than this is killed and its columns marked "timed out";
# MPICH's hang in MPI_Finalize is cut much sooner (Note [Finalize hang], runners.py).
COLLECTIVES_TIMEOUT_S = 600
MPICH_TIMEOUT_S = {"quick": 60, "full": 180}


def execute(step, p, paths, results):
    """Runs one step of plan.steps and adds its measurements to `results`; returns the
    implementations of the step that gave no rows without failing it (none but collectives)."""
    kind = step["kind"]
    sweep = {k: step[k] for k in ("nproc", "min_bytes", "max_bytes", "iters", "warmup",
                                  "coarse_from", "budget_bytes")} if "nproc" in step else {}
    if kind == "collectives":
        rows = runners.collectives_round(
            paths["collectives"], step["op"], peers=step["peers"], transport=step["transport"],
            timeout=COLLECTIVES_TIMEOUT_S, **sweep)
        results.add_rows(rows)
        # The benchmark kills an implementation that passes --timeout-s (or fails) and goes on
        # with the others: what is missing here is named by the caller.
        got = {f"{'ours' if r['backend'] == 'native' else r['backend']}/{r['transport']}"
               for r in rows}
        return [impl for impl in step["impls"] if impl not in got]
    elif kind == "mpich":
        timeout = MPICH_TIMEOUT_S["quick" if p["max_bytes"] <= (16 << 20) else "full"]
        results.add_rows(runners.mpich_round(p["mpich"], paths["mpich_collectives"],
                                             tcp=step["tcp"], op=step["op"], timeout=timeout,
                                             **sweep))
    elif kind == "training":
        value = runners.training_run(step["impls"][0], step["model"], step["workers"], 1,
                                     step["samples"], step["batch"], step["no_sync"], paths,
                                     timeout=900)
        results.add(step["figure"], step["impls"][0], step["workers"], "samples_per_s", value)
    else:
        # Time to accuracy, ours and PyTorch interleaved per round; MLPerf trims the fastest
        # and slowest of its runs and averages the rest, which for 3 rounds is the median.
        seconds, curve = runners.tta_run(step["impls"][0], step["model"], step["workers"],
                                         step["epochs"], step["target"], step["batch"],
                                         step["test_samples"], paths, timeout=1800)
        results.add(step["figure"], step["impls"][0], step["workers"], "seconds_to_accuracy",
                    seconds, raw=curve, higher_is_better=False)
    return []


def run_steps(step_list, p, paths, results, errors, failures, progress, estimator=None):
    """Runs every step; a failed step becomes an error line and a "failures" entry per
    implementation ("timed out" or "failed"), so the report still completes. Returns the steps'
    records for results.json."""
    records = []
    for step in step_list:
        started = time.monotonic()
        try:
            for impl in execute(step, p, paths, results):
                errors.append(f"{step['what']}: {impl} gave no results (timed out or failed; "
                              "the benchmark's output says which)")
                failures.append({"figure": step["figure"], "impl": impl,
                                 "round": step["round"] + 1, "status": "no result",
                                 "what": step["what"]})
        except runners.BenchError as e:
            errors.append(f"{step['what']}: {e}")
            status = "timed out" if e.timed_out else "failed"
            for impl in step["impls"]:
                failures.append({"figure": step["figure"], "impl": impl,
                                 "round": step["round"] + 1, "status": status,
                                 "what": step["what"]})
        record = dict(step, seconds=round(time.monotonic() - started, 2))
        if estimator is not None:
            record["estimate_s"] = round(estimator.estimate(step), 2)
        records.append(record)
        progress.step(step["what"])
    return records


def load_results(path):
    """A results.json written by this tool; SystemExit naming the file when it is not one."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"bench-report: cannot read {path}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("measurements"), list):
        raise SystemExit(f"bench-report: {path} is not a bench-report results.json "
                         "(no \"measurements\" list)")
    return doc


def reference(paths):
    """The Estimator of one or more recorded runs ("a.json,b.json": their measurements and steps
    together, a later file's measurement replacing an earlier one's)."""
    docs = [load_results(path) for path in paths.split(",")]
    return planning.Estimator({"measurements": [m for d in docs for m in d["measurements"]],
                               "steps": [s for d in docs for s in d.get("steps", [])]})


def write_report(doc, out):
    os.makedirs(out, exist_ok=True)
    images = plots.write_all(doc, out)
    report.write(doc, images, out)
    return images


def main(argv):
    # SIGTERM unwinds like Ctrl-C, so runners.run kills the benchmark it was waiting for.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    args = parse_args(argv)
    if args.render:
        doc = load_results(args.render)
        images = write_report(doc, args.out)
        print(f"bench-report: wrote {args.out}/report.md, report.html and {len(images)} PNGs",
              file=sys.stderr)
        return compare_with(doc, args, 0)
    p = plan(args)
    p["mpich"] = args.mpich
    if args.plan:
        mpich = "collectives" in args.parts and shutil.which(args.mpich) is not None
        step_list = planning.steps(p, mpich, args.parts)
        print(planning.format_plan(step_list, reference(args.plan), args.plan))
        return 0
    estimator = reference(args.estimate_from) if args.estimate_from else None
    started = time.monotonic()
    bin_dir = args.bin_dir or bazel_bin()
    paths = {
        "collectives": os.path.join(bin_dir, "bench/collectives"),
        "mpich_collectives": os.path.join(bin_dir, "bench/mpich_collectives"),
        "fashion_mnist": os.path.join(bin_dir, "examples/fashion_mnist"),
        "torch_script": os.path.join(ROOT, "bench/training/torch_fashion_mnist.py"),
        "launch": os.path.join(ROOT, "tools/launch.py"),
    }
    os.makedirs(args.out, exist_ok=True)
    env = environment.collect(ROOT)
    missing = {}
    if "collectives" in args.parts:
        why = runners.mpich_missing(args.mpich, paths["mpich_collectives"])
        if why:
            missing["MPICH"] = why
    step_list = planning.steps(p, "MPICH" not in missing, args.parts)
    progress = Progress(len(step_list))
    results, errors, failures, records = Results(), [], [], []
    loads = []
    for part in ("collectives", "training", "tta"):
        mine = [s for s in step_list
                if (s["kind"] if s["kind"] != "mpich" else "collectives") == part]
        if mine:
            records += run_steps(mine, p, paths, results, errors, failures, progress, estimator)
            loads.append(list(os.getloadavg()))
    progress.close()
    env["load_during"] = loads
    doc = {
        "schema": 1,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "tools/bench-report " + " ".join(argv),
        "quick": args.quick,
        "plan": {k: v for k, v in p.items() if k != "mpich"},
        "environment": env,
        "threads": {"variables": dict({v: "threads per process" for v in runners.THREAD_VARS},
                                      GLIBC_TUNABLES=runners.MALLOC_TUNABLES),
                    "collectives": "1 thread per rank; OpenMPI --bind-to none; PyTorch "
                                   "torch.set_num_threads(1)",
                    "training": "1 thread per worker (--threads=1, torch.set_num_threads(1)); "
                                "every thread variable 1"},
        "missing_peers": missing,
        "errors": errors,
        "failures": failures,
        "measurements": results.list(),
        "steps": records,
        "seconds": round(time.monotonic() - started, 1),
    }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    images = write_report(doc, args.out)
    print(f"bench-report: wrote {args.out}/report.md, report.html, results.json and "
          f"{len(images)} PNGs in {doc['seconds']:.0f} s", file=sys.stderr)
    if estimator is not None:
        print(f"bench-report: estimated {sum(r['estimate_s'] for r in records):.0f} s from "
              f"{args.estimate_from}, the steps took {sum(r['seconds'] for r in records):.0f} s",
              file=sys.stderr)
    for e in errors:
        print(f"bench-report: error: {e}", file=sys.stderr)
    return compare_with(doc, args, 1 if errors else 0)


def compare_with(doc, args, code):
    """With --compare, prints the diff against the older run; the exit status."""
    if args.compare:
        rows = stats.diff_results(load_results(args.compare), doc)
        print(stats.format_diff(rows))
        if args.fail_on_regression and any(r["regression"] for r in rows):
            code = 1
    return code
