"""Figures from repetitions: median with its min-max spread, our ratio over a peer with the
"within noise" flag, and the --compare diff of two results.json files.

Note [Within noise]: a figure is a median of interleaved rounds and its spread is its min-max
range over those rounds. Ours and a peer's differ "within noise" when the two ranges overlap: one
of our rounds was as slow as one of the peer's rounds was fast, so another round could have
reversed the order, and the figure is reported as a tie, never as a win or a loss. One round
has no range and is never more than "within noise (1 round)". --compare applies the same rule to
one measurement in two runs: a change is a regression only when it is worse and the two runs'
ranges do not overlap.
"""
import statistics


class Summary:
    """Median, min, max and count of one measurement's repetitions."""

    def __init__(self, reps):
        values = [float(v) for v in reps if v is not None]
        if not values:
            raise ValueError("no repetitions to summarize")
        self.n = len(values)
        self.median = statistics.median(values)
        self.min = min(values)
        self.max = max(values)

    @property
    def spread(self):
        return self.max - self.min

    def text(self, digits=2):
        """"12.3 (11.9-12.8)": the median and its range."""
        if self.n == 1:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.min:.{digits}f}-{self.max:.{digits}f})"


def within_noise(a, b):
    """Note [Within noise]: True when the min-max ranges of `a` and `b` overlap."""
    return a.min <= b.max and b.min <= a.max


def compare(ours, peer, higher_is_better=True):
    """Our figure against a peer's: {"ratio": ours/peer (>1 is better for us whichever way the
    metric points), "noise": bool, "verdict": "ahead" | "behind" | "within noise" |
    "within noise (1 round)"}."""
    if peer.median == 0 or ours.median == 0:
        return {"ratio": None, "noise": True, "verdict": "within noise"}
    ratio = ours.median / peer.median if higher_is_better else peer.median / ours.median
    if min(ours.n, peer.n) < 2:  # one round has no spread: its order proves nothing
        return {"ratio": ratio, "noise": True, "verdict": "within noise (1 round)"}
    noise = within_noise(ours, peer)
    verdict = "within noise" if noise else ("ahead" if ratio > 1 else "behind")
    return {"ratio": ratio, "noise": noise, "verdict": verdict}


def measurement_key(m):
    """What identifies one measurement across runs (results.json "measurements")."""
    return (m["figure"], m["impl"], str(m["x"]), m["metric"])


def diff_results(old, new):
    """Rows of the --compare table: every measurement present in both runs, with the change of
    its median in percent (positive = better) and whether it is a regression beyond the noise."""
    old_by_key = {measurement_key(m): m for m in old.get("measurements", [])}
    rows = []
    for m in new.get("measurements", []):
        before = old_by_key.get(measurement_key(m))
        if before is None:
            continue
        a, b = Summary(before["reps"]), Summary(m["reps"])
        if a.median == 0:
            continue
        sign = 1 if m.get("higher_is_better", True) else -1
        change = sign * (b.median - a.median) / a.median * 100
        regression = change < 0 and not within_noise(a, b)
        rows.append({"figure": m["figure"], "impl": m["impl"], "x": m["x"],
                     "metric": m["metric"], "old": a, "new": b, "change_pct": change,
                     "regression": regression})
    return rows


def format_diff(rows):
    """The --compare table as text (one line per measurement, regressions marked)."""
    lines = [f"{'figure':34} {'impl':22} {'x':>10} {'old':>12} {'new':>12} {'change':>8}"]
    for r in rows:
        mark = "  REGRESSION" if r["regression"] else ""
        lines.append(f"{r['figure'][:34]:34} {r['impl'][:22]:22} {str(r['x']):>10} "
                     f"{r['old'].median:12.4g} {r['new'].median:12.4g} "
                     f"{r['change_pct']:+7.1f}%{mark}")
    regressions = sum(r["regression"] for r in rows)
    lines.append(f"{len(rows)} measurements compared, {regressions} regression(s) beyond noise")
    return "\n".join(lines)
