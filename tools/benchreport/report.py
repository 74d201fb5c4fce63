"""report.md and report.html from one results.json document.

Both come from the same list of blocks (headings, paragraphs, tables, images), so they say the
same thing: Markdown that renders on a Git forge (PNGs beside it) and one self-contained HTML page
(the PNGs inlined as base64). Every figure is "median (min-max)" of the interleaved rounds; a
comparison with a peer says "ahead", "behind" or "within noise" (Note [Within noise], stats.py).
"""
import base64
import html
import os

from benchreport import plots, runners, stats


def fmt_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def comparisons(doc):
    """Every (ours, peer) pair at one x: dicts with figure, x, ours, peer (impl names),
    a, b (Summaries), and stats.compare's ratio, noise and verdict."""
    ms = doc["measurements"]
    by = {(m["figure"], m["impl"], m["x"], m["metric"]): m for m in ms}
    out = []
    for m in ms:
        impl = m["impl"]
        if impl.startswith("ours") or not m["reps"]:
            continue
        ours_impl = "ours" if m["metric"] != "busbw_gbs" else plots.ours_for(impl)
        ours = by.get((m["figure"], ours_impl, m["x"], m["metric"]))
        if ours is None or not ours["reps"]:
            continue
        a, b = stats.Summary(ours["reps"]), stats.Summary(m["reps"])
        c = stats.compare(a, b, m.get("higher_is_better", True))
        out.append(dict(c, figure=m["figure"], x=m["x"], ours=ours_impl, peer=impl, a=a, b=b,
                        metric=m["metric"]))
    out.sort(key=lambda c: (c["figure"], c["peer"], c["x"]))
    return out


def x_text(c):
    return fmt_bytes(c["x"]) if c["metric"] == "busbw_gbs" else f"{c['x']} worker(s)"


def digits(c):
    """Decimals for a comparison's values: samples/s are whole, seconds need one, GB/s three."""
    return {"samples_per_s": 0, "seconds_to_accuracy": 1}.get(c["metric"], 3)


def ratio_text(c):
    return "-" if c["ratio"] is None else f"{c['ratio']:.2f}x"


def environment_blocks(doc):
    env = doc["environment"]
    rows = [["date", doc["date"]], ["command", f"`{doc['command']}`"],
            ["host", env.get("host", "?")], ["CPU", env["cpu"]],
            ["cores", f"{env['cores']} ({env['cores_usable']} usable)"],
            ["memory", f"{env['memory_gib']} GiB"], ["kernel", env["kernel"]],
            ["load average before", " ".join(f"{v:.2f}" for v in env["load_before"])],
            ["load average during", "; ".join(" ".join(f"{v:.2f}" for v in load)
                                              for load in env.get("load_during", []))]]
    if "memcpy_gbs" in env:
        rows.append(["memcpy bandwidth (shared-memory bound)", f"{env['memcpy_gbs']:.2f} GB/s"])
        rows.append(["loopback TCP bandwidth", f"{env['loopback_tcp_gbs']:.2f} GB/s "
                     f"({env['loopback_tcp_tool']})"])
    for name, version in env["versions"].items():
        rows.append([name, version])
    rows.append(["run time", f"{doc['seconds']:.0f} s; interleaved rounds: "
                 f"{doc['plan']['rounds']}"])
    return [("h2", "Environment"), ("table", ["", ""], rows)]


def fairness_blocks(doc):
    t = doc["threads"]
    rows = [[var, how] for var, how in t["variables"].items()]
    rows.append(["collectives", t["collectives"]])
    rows.append(["training", t["training"]])
    return [("h2", "Thread settings (every peer at its best)"),
            ("p", "Every process, ours and each peer's, runs with these set; OpenBLAS, OpenMP "
                  "and MKL otherwise start one thread per core beside torch.set_num_threads and "
                  "oversubscribe the cores."),
            ("table", ["setting", "value"], rows)]


def summary_blocks(doc, cs):
    blocks = [("h2", "Summary")]
    missing = doc.get("missing_peers", {})
    if missing:
        blocks.append(("table", ["peer", "status"], [[k, v] for k, v in missing.items()]))
    if doc.get("failures"):
        blocks.append(("p", "Runs that failed or timed out (killed; their columns say so and "
                            "their figures come from the other rounds, if any):"))
        blocks.append(("table", ["figure", "impl", "round", "status"],
                       [[f["figure"], f["impl"], str(f["round"]), f["status"]]
                        for f in doc["failures"]]))
    if doc.get("errors"):
        blocks.append(("p", "Runs that failed (their figures are missing): " +
                       "; ".join(e.splitlines()[0] for e in doc["errors"])))
    ahead = sum(c["verdict"] == "ahead" for c in cs)
    blocks.append(("p", f"{len(cs)} comparisons with a peer: {ahead} ahead, "
                        f"{sum(c['verdict'] == 'behind' for c in cs)} behind, "
                        f"{sum(c['verdict'].startswith('within') for c in cs)} within noise."))
    weak = [c for c in cs if c["verdict"] != "ahead"]
    if weak:
        blocks.append(("h3", "Where we are behind a peer or within noise of it"))
        blocks.append(("table", ["figure", "at", "ours", "peer", "ours/peer", "verdict"],
                       [[c["figure"], x_text(c), f"{c['ours']} {c['a'].text(digits(c))}",
                         f"{c['peer']} {c['b'].text(digits(c))}", ratio_text(c), c["verdict"]]
                        for c in weak]))
    return blocks


def collective_blocks(doc, figure, cs, images):
    ms = [m for m in doc["measurements"] if m["figure"] == figure]
    failed = failed_rounds(doc, figure)
    impls = sorted({m["impl"] for m in ms} | set(failed),
                   key=lambda i: (not i.startswith("ours"), i))
    sizes = sorted({m["x"] for m in ms})
    by = {(m["impl"], m["x"]): m for m in ms}
    bw_rows, lat_rows = [], []
    for x in sizes:
        bw, lat = [fmt_bytes(x)], [fmt_bytes(x), str(plan_iters(doc, x))]
        for impl in impls:
            m = by.get((impl, x))
            if m is None:
                # Every round of this implementation failed: say how, not just "-".
                status = failed[impl][0][1] if impl in failed else "-"
                bw.append(status)
                lat.append(status)
                continue
            bw.append(stats.Summary(m["reps"]).text())
            fastest = min(r.get("min_us", r["time_us"]) for r in m["raw"])
            p50 = stats.Summary([r["p50_us"] for r in m["raw"]])
            p99s = [r["p99_us"] for r in m["raw"] if "p99_us" in r]
            p99 = f"{stats.Summary(p99s).median:.0f}" if p99s else "-"
            worst = max(r["max_us"] for r in m["raw"])
            lat.append(f"{fastest:.0f} / {p50.median:.0f} / {p99} / {worst:.0f}")
        bw_rows.append(bw)
        lat_rows.append(lat)
    blocks = [("h3", figure),
              ("p", "Bus bandwidth, GB/s: median (min-max) of the rounds (nccl-tests' busbw)."
               + rounds_by_size_text(doc)),
              ("table", ["size"] + impls, bw_rows)]
    for peer, label in (("MPICH", "mpich"),):
        if peer in doc.get("missing_peers", {}):
            blocks.append(("p", f"{peer}: {doc['missing_peers'][peer]}."))
    for impl, rounds in sorted(failed.items()):
        blocks.append(("p", f"{impl}: " + ", ".join(f"round {r} {status}"
                                                    for r, status in rounds) +
                       " (killed; the report went on without it)."))
    hung = sorted({m["impl"] for m in ms for r in m["raw"] if r.get("finalize_hang")})
    for impl in hung:
        runs = max(sum(bool(r.get("finalize_hang")) for r in m["raw"])
                   for m in ms if m["impl"] == impl)
        blocks.append(("p", f"{impl}: {runs} of its runs hung in MPI_Finalize after printing "
                            "every result (MPICH over UCX's TCP transport); each was killed "
                            "and its results kept."))
    if figure.startswith("reduce_scatter"):
        blocks.append(("p", "PyTorch: no column, its gloo backend (1.13) has no reduce_scatter."))
    blocks.append(("p", "Latency, us, OSU-style min / p50 / p99 / max: the fastest single "
                        "operation of all rounds / the median operation and the 99th percentile "
                        "(medians of the rounds) / the slowest single operation of all rounds "
                        "(\"-\": not recorded by that run)."))
    blocks.append(("table", ["size", "iterations"] + impls, lat_rows))
    mine = [c for c in cs if c["figure"] == figure]
    if mine:
        blocks.append(("table", ["size", "ours", "peer", "ours/peer busbw", "verdict"],
                       [[x_text(c), c["ours"], c["peer"], ratio_text(c), c["verdict"]]
                        for c in mine]))
    slug = figure.replace(" ", "_").replace("=", "")
    blocks += [("img", name) for name in images if name.startswith(slug + "_")]
    return blocks


def plan_iters(doc, nbytes):
    """Timed operations per round at `nbytes` (bench_inputs.h BudgetedIterations)."""
    plan = doc["plan"]
    return runners.iterations_for(plan["iters"], nbytes, plan.get("budget_bytes", 0),
                                  floor=plan.get("min_iters", 5))


def rounds_by_size_text(doc):
    """" Above 16 MiB: 2 rounds; above 64 MiB: 1 round (no range)." from the plan's per-round
    size caps (main.plan "round_max_bytes"), or "" when every size ran in every round."""
    p = doc["plan"]
    caps = p.get("round_max_bytes")
    if not caps and p.get("late_round_max_bytes"):  # reports before 2026-12-03: round 3 capped
        caps = [p["max_bytes"], p["max_bytes"], p["late_round_max_bytes"]]
    if not caps:
        return ""
    caps = [min(p["max_bytes"], caps[min(r, len(caps) - 1)]) for r in range(p["rounds"])]
    parts = []
    for limit in sorted(set(caps)):
        if limit >= p["max_bytes"]:
            continue
        n = sum(1 for c in caps if c > limit)
        parts.append(f"above {fmt_bytes(limit)}: {n} round{'s' if n != 1 else ''}"
                     + (" (no range)" if n == 1 else ""))
    text = "; ".join(parts)
    return f" {text[:1].upper()}{text[1:]}." if parts else ""


def failed_rounds(doc, figure):
    """{impl: [(round, "timed out" | "failed"), ...]} of `figure`'s failed runs."""
    out = {}
    for f in doc.get("failures", []):
        if f["figure"] == figure:
            out.setdefault(f["impl"], []).append((f["round"], f["status"]))
    return out


def training_blocks(doc, cs, images):
    ms = [m for m in doc["measurements"] if m["metric"] == "samples_per_s"]
    if not ms:
        return []
    summary = {(m["figure"], m["impl"], m["x"]): stats.Summary(m["reps"]) for m in ms}
    rows = []
    for c in [c for c in cs if c["metric"] == "samples_per_s"]:
        rows.append([c["figure"], str(c["x"]), c["a"].text(0), c["b"].text(0), ratio_text(c),
                     c["verdict"]])
    blocks = [("h2", "Training (Fashion-MNIST, 1 thread per worker)"),
              ("p", f"samples/s over {doc['plan']['samples']} training samples (CNN: "
                    f"{doc['plan'].get('cnn_samples', doc['plan']['samples'])}), global batch "
                    f"{doc['plan']['batch']}, median (min-max) of the rounds; ours is "
                    "examples/fashion_mnist, the peer bench/training/torch_fashion_mnist.py "
                    "(PyTorch DDP over gloo past 1 worker), both started by tools/launch.py."),
              ("table", ["figure", "workers", "ours", "PyTorch", "ours/PyTorch", "verdict"],
               rows)]
    eff_rows = []
    for (figure, impl, x), s in sorted(summary.items()):
        one = summary.get((figure, impl, 1))
        if x > 1 and one and "no-sync" not in figure:
            eff_rows.append([figure, impl, str(x), f"{s.median / (x * one.median):.2f}"])
    if eff_rows:
        blocks.append(("p", "Scaling efficiency: samples/s at W workers over W x the 1-worker "
                            "samples/s (medians). On a host with fewer cores than workers it "
                            "falls by construction."))
        blocks.append(("table", ["figure", "impl", "workers", "efficiency"], eff_rows))
    sync_rows = []
    for (figure, impl, x), s in sorted(summary.items()):
        if figure.endswith(" no-sync"):
            synced = summary.get((figure[:-len(" no-sync")], impl, x))
            if synced:
                sync_rows.append([figure[:-len(" no-sync")], impl, str(x),
                                  f"{s.median / synced.median:.2f}"])
    if sync_rows:
        blocks.append(("p", "Gradient-sync overhead: step time with sync over step time without "
                            "(no-sync samples/s over sync samples/s; 1.00 = fully hidden)."))
        blocks.append(("table", ["figure", "impl", "workers", "sync/no-sync"], sync_rows))
    blocks += [("img", name) for name in images if name.startswith("training_")]
    return blocks


def tta_blocks(doc, cs):
    """Time to accuracy (MLPerf's figure): seconds of training until the test accuracy reaches the
    target, lower is better."""
    ms = [m for m in doc["measurements"] if m["metric"] == "seconds_to_accuracy"]
    if not ms:
        return []
    rows = [[c["figure"], str(c["x"]), c["a"].text(1), c["b"].text(1), ratio_text(c),
             c["verdict"]] for c in cs if c["metric"] == "seconds_to_accuracy"]
    epochs = []
    for m in sorted(ms, key=lambda m: (m["figure"], m["x"], m["impl"])):
        reached = [r["epochs_to_target"] for r in m["raw"]]
        epochs.append([m["figure"], str(m["x"]), m["impl"], ", ".join(map(str, reached))])
    plan = doc["plan"]
    return [("h2", "Time to accuracy"),
            ("p", f"Seconds of training (evaluation not counted) until the accuracy on the "
                  f"{plan.get('tta_test_samples', 10000)} test images reaches the target, over "
                  f"whole epochs of the 60000 training images (at most {plan.get('tta_epochs')}), "
                  f"global batch {plan['batch']}, SGD with momentum and the same cosine schedule "
                  "on both sides; median (min-max) of the rounds, lower is better (MLPerf trims "
                  "its fastest and slowest runs and averages the rest: for 3 runs, the median). "
                  "ours/PyTorch here is PyTorch's time over ours (> 1: ours sooner)."),
            ("table", ["figure", "workers", "ours (s)", "PyTorch (s)", "PyTorch/ours",
                       "verdict"], rows),
            ("p", "Epochs each round needed:"),
            ("table", ["figure", "workers", "impl", "epochs per round"], epochs)]


def blocks_for(doc, images):
    cs = comparisons(doc)
    blocks = [("h1", f"Paddle Collective benchmark report, {doc['date']}")]
    blocks += summary_blocks(doc, cs)
    blocks += environment_blocks(doc)
    blocks += fairness_blocks(doc)
    figures = plots.collective_figure_names(doc)
    if figures:
        blocks.append(("h2", "Collectives"))
        blocks.append(("p", "Ours (auto: shared memory on one host; tcp: PADDLE_TRANSPORT=tcp) "
                            "against PyTorch's gloo (TCP), OpenMPI (TCP and its default shared "
                            "memory) and MPICH (UCX TCP and its default shared memory), "
                            "interleaved in rounds; every result element is checked. Ours over "
                            "TCP is compared with peers over TCP, ours by default with their "
                            "defaults."))
        for figure in figures:
            blocks += collective_blocks(doc, figure, cs, images)
    blocks += training_blocks(doc, cs, images)
    blocks += tta_blocks(doc, cs)
    return blocks


def to_markdown(blocks):
    out = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + b[1] + "\n")
        elif kind == "p":
            out.append(b[1] + "\n")
        elif kind == "img":
            out.append(f"![{b[1]}]({b[1]})\n")
        elif kind == "table":
            header, rows = b[1], b[2]
            cells = lambda r: "| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |"
            out.append("\n".join([cells(header), "|" + "---|" * len(header)] +
                                 [cells(r) for r in rows]) + "\n")
    return "\n".join(out)


def to_html(blocks, out_dir):
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>Paddle Collective "
             "benchmark report</title><style>body{font-family:sans-serif;max-width:1100px;"
             "margin:auto}table{border-collapse:collapse;font-size:13px;margin:8px 0}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             "img{max-width:100%}</style></head><body>"]
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            parts.append(f"<{kind}>{html.escape(b[1])}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(b[1])}</p>")
        elif kind == "img":
            with open(os.path.join(out_dir, b[1]), "rb") as f:
                data = base64.b64encode(f.read()).decode()
            parts.append(f"<p><img alt='{html.escape(b[1])}' src='data:image/png;base64,{data}'>"
                         "</p>")
        elif kind == "table":
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>"
                                                 for h in b[1]) + "</tr>")
            for r in b[2]:
                parts.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) +
                             "</tr>")
            parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(doc, images, out_dir):
    """Writes report.md and report.html into `out_dir` (the PNGs must be there already)."""
    blocks = blocks_for(doc, images)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(to_markdown(blocks))
    with open(os.path.join(out_dir, "report.html"), "w") as f:
        f.write(to_html(blocks, out_dir))
