"""The report's figures as PNGs (matplotlib, Agg backend: no display needed).

Per collective and rank count: bus bandwidth vs size (log x) with the machine's bounds as
horizontal lines, latency vs size (log-log), and our bandwidth over each peer's. Per model:
training samples/s vs workers, and the scaling efficiency of both. Every point is a median with
its min-max range as an error bar (Note [Within noise] in stats.py).
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchreport import stats  # noqa: E402


def ours_for(peer_impl):
    """The implementation of ours a peer is compared with: ours over TCP against a peer over
    TCP, ours by default (shared memory on one host) against a peer's default."""
    return "ours/tcp" if peer_impl.endswith("/tcp") else "ours/auto"


def series(measurements, figure, metric="busbw_gbs", value=None):
    """{impl: [(x, Summary)]} of one figure, x ascending. `value` picks a field of the raw
    repetitions instead of the measurement's own metric."""
    out = {}
    for m in measurements:
        if m["figure"] != figure or m["metric"] != metric:
            continue
        reps = [r[value] for r in m["raw"]] if value else m["reps"]
        if reps:
            out.setdefault(m["impl"], []).append((m["x"], stats.Summary(reps)))
    for points in out.values():
        points.sort(key=lambda p: p[0])
    return out


def _errorbar(ax, points, label):
    xs = [x for x, _ in points]
    med = [s.median for _, s in points]
    lo = [s.median - s.min for _, s in points]
    hi = [s.max - s.median for _, s in points]
    ax.errorbar(xs, med, yerr=[lo, hi], marker="o", markersize=3, capsize=2, label=label)


def _size_axis(ax):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.grid(True, which="both", alpha=0.3)


def _save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return name


def collective_figures(doc, figure, out_dir):
    ms = doc["measurements"]
    env = doc["environment"]
    slug = figure.replace(" ", "_").replace("=", "")
    names = []
    bw = series(ms, figure)
    if not bw:
        return names
    fig, ax = plt.subplots(figsize=(7, 4))
    for impl in sorted(bw):
        _errorbar(ax, bw[impl], impl)
    if env.get("memcpy_gbs"):
        ax.axhline(env["memcpy_gbs"], color="gray", linestyle="--",
                   label=f"memcpy {env['memcpy_gbs']:.1f} GB/s (shm bound)")
    if env.get("loopback_tcp_gbs"):
        ax.axhline(env["loopback_tcp_gbs"], color="gray", linestyle=":",
                   label=f"loopback TCP {env['loopback_tcp_gbs']:.2f} GB/s")
    _size_axis(ax)
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{figure}: bus bandwidth (median, min-max of rounds)")
    ax.legend(fontsize=7)
    names.append(_save(fig, out_dir, f"{slug}_busbw.png"))

    lat = series(ms, figure, value="time_us")
    fig, ax = plt.subplots(figsize=(7, 4))
    for impl in sorted(lat):
        _errorbar(ax, lat[impl], impl)
    _size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("time per operation (us, mean)")
    ax.set_title(f"{figure}: latency")
    ax.legend(fontsize=7)
    names.append(_save(fig, out_dir, f"{slug}_latency.png"))

    peers = [impl for impl in bw if not impl.startswith("ours/")]
    if peers:
        fig, ax = plt.subplots(figsize=(7, 4))
        for peer in sorted(peers):
            ours = dict(bw.get(ours_for(peer), []))
            xs, ratios = [], []
            for x, s in bw[peer]:
                if x in ours and s.median > 0:
                    xs.append(x)
                    ratios.append(ours[x].median / s.median)
            if xs:
                ax.plot(xs, ratios, marker="o", markersize=3,
                        label=f"{ours_for(peer)} over {peer}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        _size_axis(ax)
        ax.set_yscale("log", base=2)
        ax.set_ylabel("our busbw / peer busbw (medians)")
        ax.set_title(f"{figure}: our ratio over each peer (> 1: ours faster)")
        ax.legend(fontsize=7)
        names.append(_save(fig, out_dir, f"{slug}_ratio.png"))
    return names


def training_figures(doc, out_dir):
    ms = doc["measurements"]
    models = sorted({m["figure"] for m in ms if m["figure"].startswith("train ")
                     and "no-sync" not in m["figure"]})
    names = []
    if not models:
        return names
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, figure in zip(axes[0], models):
        s = series(ms, figure, metric="samples_per_s")
        for impl in sorted(s):
            _errorbar(ax, s[impl], impl)
        ax.set_xlabel("workers (1 thread each)")
        ax.set_ylabel("samples/s")
        ax.set_title(figure)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    names.append(_save(fig, out_dir, "training_throughput.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for figure in models:
        for impl, points in sorted(series(ms, figure, metric="samples_per_s").items()):
            one = dict(points).get(1)
            if not one or len(points) < 2:
                continue
            xs = [w for w, _ in points]
            ax.plot(xs, [p.median / (w * one.median) for w, p in points], marker="o",
                    label=f"{figure[6:]} {impl}")
    if not ax.lines:
        plt.close(fig)
        return names  # no 1-worker figure to scale from
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("workers")
    ax.set_ylabel("scaling efficiency (samples/s over workers x 1-worker samples/s)")
    ax.set_title("data-parallel scaling efficiency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    names.append(_save(fig, out_dir, "training_scaling.png"))
    return names


def collective_figure_names(doc):
    """The collectives' figures ("allreduce n=2", ...), allreduce first."""
    figures = {m["figure"] for m in doc["measurements"] if m["metric"] == "busbw_gbs"}
    return sorted(figures, key=lambda f: (not f.startswith("allreduce"), f))


def write_all(doc, out_dir):
    """Writes every PNG into `out_dir`; returns their file names, in report order."""
    names = []
    for figure in collective_figure_names(doc):
        names += collective_figures(doc, figure, out_dir)
    names += training_figures(doc, out_dir)
    return names
