"""tools/simulate's commands: fit, run, validate, step, tune (`tools/simulate CMD --help`)."""
import argparse
import dataclasses
import functools
import json
import os
import sys

from . import bench_io, engine, fit, schedules, step_model, tune
from .cost_model import OPTIONAL_NAMES, PARAM_NAMES, ParamSet, ParamsError


def parse_bytes(text):
    """"4K", "64M", "1G" or a plain number of bytes."""
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip()
    mult = scale.get(t[-1:].lower(), 1)
    num = t[:-1] if mult != 1 else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"\"{text}\" is not a size (e.g. 4096, 4K, 64M, 1G)")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size \"{text}\" must be > 0")
    return value


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"\"{text}\" is not an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"\"{text}\" is not a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be > 0")
    return value


def _stat_rows(rows, stat):
    """Rows whose time_us is the chosen statistic: p50 (the median operation; robust to the
    rare stalls of a shared machine) or the mean."""
    if stat == "mean":
        return rows
    out = []
    for r in rows:
        if not r.get("p50_us", 0) > 0:
            raise bench_io.BenchError(f"{r['source']}: a row of {r['bytes']} bytes has no p50_us; "
                                      "use --stat=mean")
        out.append(dict(r, time_us=r["p50_us"]))
    return out


def cmd_fit(a):
    rows = _stat_rows(bench_io.load_rows(a.bench), a.stat)
    gamma = 1.0 / (a.gamma_gbs * 1e3) if a.gamma_gbs else None
    params = fit.fit(rows, a.cores, gamma=gamma, tcp_link=a.tcp_link, share_cores=a.share_cores)
    doc = params.to_json()
    doc["fitted_from"] = {"files": [os.path.basename(p) for p in a.bench], "stat": a.stat,
                          "cores": a.cores, "gamma_gbs": a.gamma_gbs, "tcp_link": a.tcp_link,
                          "share_cores": a.share_cores}
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    for name, extra in sorted(params.extra.items()):
        f = extra["fit"]
        sys.stderr.write(f"{name:14s} {extra['summary']}; {f['rows']} rows, error median "
                         f"{f['median_error_pct']}%, max {f['max_error_pct']}%\n")


def cmd_merge(a):
    rows = bench_io.load_rows(a.bench)
    merged = bench_io.merge_rounds(rows, a.stat)
    sys.stdout.write("[\n" + ",\n".join("  " + json.dumps({k: r[k] for k in bench_io.KEYS})
                                         for r in merged) + "\n]\n")


TRANSPORTS = ("auto", "tcp", "shm")  # --transport, as PADDLE_TRANSPORT


def transport_entries(transport, hosts, inter):
    """The params entries --transport needs: the node workspace's for auto, the link's own for
    tcp and shm, and with several hosts --inter's between them."""
    return [{"auto": "workspace"}.get(transport, transport)] + ([inter] if hosts > 1 else [])


def choose_transport(a, params):
    """Sets a.transport: the one asked for, which the params must have, or else the first of
    TRANSPORTS they have (a file fitted from TCP sweeps alone has no node workspace)."""
    if a.transport == "shm" and a.hosts > 1:
        raise ParamsError("--transport=shm needs --hosts=1 (shared memory spans one host)")
    have = [t for t in TRANSPORTS if not (t == "shm" and a.hosts > 1)
            and all(params.has(e) for e in transport_entries(t, a.hosts, a.inter))]
    if a.transport is not None and a.transport in have:
        return
    if a.transport is None and have:
        a.transport = have[0]
        return
    hosts = f" --hosts={a.hosts}" if a.hosts > 1 else ""
    if not have:
        needs = "; ".join(
            f"--transport={t} needs {' and '.join(transport_entries(t, a.hosts, a.inter))}"
            for t in TRANSPORTS if not (t == "shm" and a.hosts > 1))
        raise ParamsError(f"{params.path} has parameters for no --transport{hosts} (its entries: "
                          f"{', '.join(sorted(params.links))}; {needs})")
    missing = [e for e in transport_entries(a.transport, a.hosts, a.inter) if not params.has(e)]
    raise ParamsError(f"{params.path} has no {' and '.join(missing)} entry for --transport="
                      f"{a.transport}{hosts}; it has parameters for "
                      f"{' or '.join('--transport=' + t for t in have)}")


def build_cluster(a, params):
    H = a.hosts
    R = a.params_ranks or a.ranks_per_host  # which "@R" fits to use
    workspace = a.transport == "auto"
    intra_name = "shm" if a.transport == "shm" or (a.transport == "auto" and H == 1) else "tcp"
    cluster = engine.Cluster(H, a.ranks_per_host)
    cluster.workspace = params.get("workspace", R) if workspace and R > 1 else None
    if a.ranks_per_host > 1 and (getattr(a, "algo", "auto") not in ("auto", "shm", "hier")
                                 or not workspace):
        cluster.intra = params.get(intra_name, R)
    if H > 1:
        inter = params.get(a.inter, R)
        if a.inter_gbps:
            inter = inter.with_bandwidth(a.inter_gbps)
        cluster.inter = inter
    return cluster, workspace


def sweep(a, params, algo):
    if algo in ("shm", "hier") and a.transport != "auto":
        raise ParamsError(f"--algo={algo} runs on the node workspace: it needs --transport=auto "
                          f"(got --transport={a.transport})")
    cluster, workspace = build_cluster(a, params)
    rows, nbytes = [], a.min_bytes
    while nbytes <= a.max_bytes:
        run = engine.resolve_algo(algo, cluster, nbytes, workspace, a.cores)
        if run in schedules.FLAT_ALGOS and cluster.intra is None and cluster.ranks_per_host > 1:
            cluster.intra = params.get("shm" if a.transport == "shm" else "tcp",
                                       a.params_ranks or a.ranks_per_host)
        t = engine.simulate(cluster, run, nbytes, a.cores)
        row = bench_io.make_row(a.op, "sim", run if algo == "auto" else algo, a.transport,
                                cluster.ranks, nbytes, t)
        rows.append(row)
        nbytes *= 2
    return rows


def load_params(a):
    """params.json with the --set overrides applied."""
    params = ParamSet.load(a.params)
    for item in getattr(a, "set", []):
        key, _, value = item.partition("=")
        entry, _, field = key.rpartition(".")
        if not entry or field not in PARAM_NAMES + OPTIONAL_NAMES:
            raise ParamsError(f"--set={item}: expected ENTRY.FIELD=VALUE with FIELD one of "
                              f"{', '.join(PARAM_NAMES + OPTIONAL_NAMES)}")
        try:
            number = float(value)
        except ValueError:
            raise ParamsError(f"--set={item}: \"{value}\" is not a number")
        if not number >= 0:
            raise ParamsError(f"--set={item}: the value must be >= 0")
        names = [n for n in params.links if n == entry or n.startswith(entry + "@")]
        if not names:
            raise ParamsError(f"--set={item}: {params.path} has no entry \"{entry}\"")
        for n in names:
            params.links[n] = dataclasses.replace(params.links[n], **{field: number})
    return params


def cmd_run(a):
    params = load_params(a)
    choose_transport(a, params)
    algos = list(schedules.ALGOS) if a.algo == "all" else [a.algo]
    if a.algo == "all":
        algos = [x for x in algos if not (x == "shm" and a.hosts > 1)
                 and not (x in ("shm", "hier") and a.transport != "auto")]
    all_rows = []
    for algo in algos:
        a_one = argparse.Namespace(**dict(vars(a), algo=algo))
        rows = sweep(a_one, params, algo)
        link = f", inter {a.inter}" + (f" at {a.inter_gbps:g} Gbit/s" if a.inter_gbps else "")
        bench_io.print_table(sys.stdout, f"{a.op}, simulated (algo {algo}, transport "
                             f"{a.transport}{link if a.hosts > 1 else ''}), {a.hosts} hosts x "
                             f"{a.ranks_per_host} ranks, params {os.path.basename(a.params)}",
                             rows)
        all_rows += rows
    if a.json:
        bench_io.write_json(a.json, all_rows)


def cmd_validate(a):
    params = ParamSet.load(a.params[0])
    for path in a.params[1:]:  # later files add entries (loopback and a shaped link's fits)
        more = ParamSet.load(path)
        params.links.update(more.links)
        params.extra.update(more.extra)
    rows = _stat_rows(bench_io.load_rows(a.bench), a.stat)
    table = fit.validate(params, rows, a.cores, a.tcp_link, a.hosts, a.share_cores)
    print(fit.format_summary(fit.summarize(table)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": table, "summary": [
                {"group": "/".join(map(str, k)), **s} for k, s in fit.summarize(table)]}, f,
                indent=1)
    if a.max_error_pct is not None:
        worst = max(abs(e["error"]) for e in table) * 100
        if worst > a.max_error_pct:
            print(f"FAIL: worst error {worst:.1f}% > {a.max_error_pct}%", file=sys.stderr)
            return 1
    return 0


def _allreduce_fn(a, params):
    cluster, workspace = build_cluster(a, params)

    @functools.lru_cache(maxsize=None)  # buckets repeat sizes; 8192 ranks cost ~0.1 s a call
    def allreduce_us(nbytes):
        run = engine.resolve_algo("auto", cluster, nbytes, workspace, a.cores)
        if run in schedules.FLAT_ALGOS and cluster.intra is None and cluster.ranks_per_host > 1:
            cluster.intra = params.get("tcp", a.params_ranks or a.ranks_per_host)
        return engine.simulate(cluster, run, nbytes, a.cores)
    return allreduce_us, cluster


def _profile(a):
    if a.timeline:
        return step_model.load_timeline(a.timeline, pace=a.pace)
    if not (a.grad_mb and a.backward_ms is not None):
        raise step_model.TimelineError("give --timeline=FILE, or --grad-mb, --forward-ms and "
                                       "--backward-ms for a synthetic model")
    return step_model.synthetic_profile(a.grad_mb * (1 << 20), a.forward_ms * 1e3,
                                        a.backward_ms * 1e3)


def cmd_step(a):
    params = load_params(a)
    choose_transport(a, params)
    prof = _profile(a)
    allreduce_us, cluster = _allreduce_fn(a, params)
    first = a.first_bucket_mb * (1 << 20)
    # No --bucket-mb with a timeline: the run's own bucket layout.
    layout = [b for b, _ in prof.measured_buckets] if a.bucket_mb is None else None
    cap = (a.bucket_mb or 1.0) * (1 << 20)
    if layout is None and not a.timeline and a.bucket_mb is None:
        cap = 1 << 20
    p = step_model.predict(prof, allreduce_us, first, cap, sizes=layout or None)
    compute = prof.data_us + prof.forward_us + prof.backward_us + prof.optimizer_us
    out = {"hosts": a.hosts, "ranks_per_host": a.ranks_per_host, "ranks": cluster.ranks,
           "grad_bytes": prof.grad_bytes, "compute_step_us": compute,
           "predicted_step_us": p["step_us"], "exposed_comm_us": p["exposed_comm_us"],
           "buckets": p["buckets"], "scaling_efficiency": compute / p["step_us"]}
    if prof.measured_step_us:
        out["measured_step_us"] = prof.measured_step_us
        out["error_pct"] = 100 * (p["step_us"] / prof.measured_step_us - 1)
        # The overlap model alone, fed the measured bucket durations.
        out["model_bucket_us"] = [allreduce_us(b) for b, _ in prof.measured_buckets]
        out["measured_buckets"] = prof.measured_buckets
        out["steps_used"] = prof.steps
        out["pace"] = a.pace
        out["median_rank_compute_us"] = prof.median_compute_us
        out["straggle_us"] = prof.straggle_us
    if a.search or a.emit:
        best, t, results = step_model.best_bucket(prof, allreduce_us, first)
        out["best_bucket_bytes"] = best
        out["best_step_us"] = t
        out["bucket_sweep"] = [{"bucket_bytes": c, "step_us": s} for s, c in results]
        if a.emit:
            tune.emit_bucket(a.emit, first, best,
                             f"{cluster.ranks} ranks ({a.hosts} x {a.ranks_per_host}), "
                             f"{prof.grad_bytes} gradient bytes, predicted step {t:.0f} us")
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


def cmd_tune(a):
    params = ParamSet.load(a.params)
    ns = [int(x) for x in a.nproc.split(",")]

    def cluster_of(n):
        c = engine.Cluster(1, n)
        c.intra = params.get(a.link, n)
        return c
    rows = tune.table_for(cluster_of, ns=ns, shared_cores=a.shared_cores)
    th = tune.thresholds(rows)
    print(f"# allreduce table from the model ({a.link}{', shared cores' if a.shared_cores else ''})"
          ": the largest size per algorithm, against today's (algorithm_selector.cc)")
    print("%6s %16s %16s %16s %10s %14s" % ("nproc", "tree <= (model)", "tree <= (today)",
                                            "hd <= (model)", "mismatch", "worst loss %"))
    for n, t in th.items():
        print("%6d %16d %16d %16d %10d %14.1f" % (n, t["tree_max_bytes"],
                                                  t["today_tree_max_bytes"], t["hd_max_bytes"],
                                                  t["mismatches"], t["worst_loss_pct"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"thresholds": th, "rows": rows}, f, indent=1)
    if a.emit:
        tune.emit(params, a.emit, {a.link: th})


def tcp_link_name(text):
    # "@" separates the rank count of a per-R entry (cost_model.py); the other names are the
    # links of the other rows.
    if not text or "@" in text or text in ("shm", "workspace"):
        raise argparse.ArgumentTypeError(f"\"{text}\" cannot name a TCP link: give a name "
                                         "without \"@\", other than shm and workspace (e.g. "
                                         "tcp_1gbit)")
    return text


def add_tcp_link_flag(p):
    p.add_argument("--tcp-link", type=tcp_link_name, default="tcp",
                   help="params entry of the TCP rows (default tcp, loopback); a shaped link's "
                        "sweep gets its own, e.g. tcp_1gbit (then `run --inter=tcp_1gbit`)")


def add_share_cores_flag(p):
    p.add_argument("--share-cores", action="store_true",
                   help="steps with more busy ranks than --cores cost more (Note [Shared cores]); "
                        "fit and validate alike, and not for a file `tune --emit` is to read")


def add_cluster_flags(p):
    p.add_argument("--params", required=True, help="params.json from `fit`")
    p.add_argument("--hosts", type=positive_int, default=1)
    p.add_argument("--ranks-per-host", type=positive_int, default=2)
    p.add_argument("--transport", choices=TRANSPORTS,
                   help="as PADDLE_TRANSPORT: auto = node workspace in a host, TCP between "
                        "(default: auto if --params has the workspace's entries, else tcp, "
                        "else shm)")
    p.add_argument("--inter", default="tcp", help="params entry for links between hosts")
    p.add_argument("--inter-gbps", type=positive_float,
                   help="host link bandwidth in Gbit/s (replaces the entry's beta)")
    p.add_argument("--set", action="append", default=[], metavar="ENTRY.FIELD=VALUE",
                   help="override a parameter, e.g. --set=tcp.alpha_us=20 (repeatable; ENTRY "
                        "as in params.json, or ENTRY@R)")
    p.add_argument("--params-ranks", type=positive_int,
                   help="use the entries fitted at this many ranks per host (\"tcp@2\"); "
                        "default: --ranks-per-host's, else the pooled fit")
    p.add_argument("--cores", type=positive_int,
                   help="cores per host (ranks beyond them share cores: bigger slots, the "
                        "shared-cores table); default: one per rank")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tools/simulate", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("fit", help="fit params.json from bench:collectives --json files")
    p.add_argument("bench", nargs="+")
    p.add_argument("--cores", type=positive_int, default=os.cpu_count(),
                   help="cores of the machine the sweeps ran on (default: this one's)")
    p.add_argument("--stat", choices=("p50", "mean"), default="p50")
    p.add_argument("--gamma-gbs", type=positive_float,
                   help="reduction kernel GB/s (reduction_bench) instead of fitting gamma")
    add_share_cores_flag(p)
    add_tcp_link_flag(p)
    p.set_defaults(fn=cmd_fit)

    p = sub.add_parser("merge", help="several rounds of the same sweeps as one (per-size "
                       "median), in bench:collectives' JSON")
    p.add_argument("bench", nargs="+")
    p.add_argument("--stat", choices=("median", "min"), default="median")
    p.set_defaults(fn=cmd_merge)

    p = sub.add_parser("run", help="simulate an allreduce sweep (nccl-tests table)")
    add_cluster_flags(p)
    p.add_argument("--op", choices=("allreduce",), default="allreduce")
    p.add_argument("--min-bytes", type=parse_bytes, default=4 << 10)
    p.add_argument("--max-bytes", type=parse_bytes, default=256 << 20)
    p.add_argument("--algo", choices=("auto", "all") + schedules.ALGOS, default="auto")
    p.add_argument("--json")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("validate", help="model against measured bench:collectives rows")
    p.add_argument("bench", nargs="+")
    p.add_argument("--params", required=True, action="append",
                   help="params.json from `fit`; repeat to add the entries of another file")
    p.add_argument("--hosts", type=positive_int, default=1,
                   help="the rows ran over this many hosts, host-major (netns_sweep.sh): "
                        "predict them from the `tcp` entry within a host and --tcp-link's "
                        "between hosts")
    p.add_argument("--cores", type=positive_int, default=os.cpu_count())
    p.add_argument("--stat", choices=("p50", "mean"), default="p50")
    p.add_argument("--json")
    p.add_argument("--max-error-pct", type=positive_float,
                   help="exit 1 when any row is off by more")
    add_share_cores_flag(p)
    add_tcp_link_flag(p)
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("step", help="data-parallel step time, efficiency and best bucket size")
    add_cluster_flags(p)
    p.add_argument("--timeline", help="PADDLE_TIMELINE trace of a real run")
    p.add_argument("--pace", choices=("slowest", "median"), default="slowest",
                   help="a timeline's profile: each step's slowest rank (default; Note [The "
                        "slowest rank sets the pace] in step_model.py) or the median rank")
    p.add_argument("--grad-mb", type=positive_float, help="synthetic: gradient MiB")
    p.add_argument("--forward-ms", type=float, default=0.0)
    p.add_argument("--backward-ms", type=float)
    p.add_argument("--bucket-mb", type=positive_float,
                   help="bucket cap after the first (default: the timeline's own layout, else 1)")
    p.add_argument("--first-bucket-mb", type=positive_float, default=1.0)
    p.add_argument("--search", action="store_true", help="also find the best bucket size")
    p.add_argument("--emit", metavar="FILE",
                   help="search, and set the bucket line of tuning file FILE (PADDLE_TUNING_PARAMS"
                        "; DDP takes caps left unset from it)")
    p.set_defaults(fn=cmd_step)

    p = sub.add_parser("tune", help="allreduce thresholds the model prefers vs today's; "
                       "--emit writes them for the engine")
    p.add_argument("--params", required=True)
    p.add_argument("--link", default="tcp", help="params entry (tcp, shm)")
    p.add_argument("--nproc", default="2,3,4,8,16,64")
    p.add_argument("--shared-cores", action="store_true")
    p.add_argument("--json")
    p.add_argument("--emit", metavar="FILE",
                   help="write the tuning file the engine reads (PADDLE_TUNING_PARAMS)")
    p.set_defaults(fn=cmd_tune)

    a = ap.parse_args(argv)
    try:
        return a.fn(a) or 0
    except (ParamsError, bench_io.BenchError, step_model.TimelineError,
            schedules.ScheduleError, ValueError) as e:
        print(f"tools/simulate {a.cmd}: {e}", file=sys.stderr)
        return 2
