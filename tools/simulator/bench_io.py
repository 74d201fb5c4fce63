"""Rows of bench:collectives (bench/collectives/report.h): reading its --json files and printing
the same nccl-tests table and JSON keys for simulated rows."""
import json
import math
import statistics

KEYS = ("op", "backend", "algo", "transport", "nproc", "bytes", "dtype", "time_us", "p50_us",
        "max_us", "algbw_gbs", "busbw_gbs", "wrong")


class BenchError(ValueError):
    pass


def busbw_factor(op, n):
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def make_row(op, backend, algo, transport, nproc, nbytes, time_us, dtype="float32"):
    algbw = nbytes / (time_us * 1e3) if time_us > 0 else 0.0
    return {"op": op, "backend": backend, "algo": algo, "transport": transport, "nproc": nproc,
            "bytes": int(nbytes), "dtype": dtype, "time_us": time_us, "p50_us": time_us,
            "max_us": time_us, "algbw_gbs": algbw, "busbw_gbs": algbw * busbw_factor(op, nproc),
            "wrong": 0}


def load_rows(paths):
    """Every row of every file, each checked for the fields the fit needs."""
    rows = []
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
        except OSError as e:
            raise BenchError(f"cannot read benchmark file {path}: {e.strerror}") from e
        except json.JSONDecodeError as e:
            raise BenchError(f"{path}: not JSON ({e}); expected bench:collectives --json output")
        if not isinstance(doc, list):
            raise BenchError(f"{path}: expected a JSON array of rows (bench:collectives --json)")
        for i, row in enumerate(doc):
            where = f"{path}: row {i}"
            if not isinstance(row, dict):
                raise BenchError(f"{where}: not an object")
            for key, kind in (("op", str), ("algo", str), ("transport", str), ("nproc", int),
                              ("bytes", int), ("time_us", (int, float))):
                if not isinstance(row.get(key), kind):
                    raise BenchError(f"{where}: field \"{key}\" missing or not a "
                                     f"{getattr(kind, '__name__', 'number')}")
            if row["nproc"] < 1 or row["bytes"] <= 0 or not (math.isfinite(row["time_us"])
                                                             and row["time_us"] > 0):
                raise BenchError(f"{where}: needs nproc >= 1, bytes > 0 and time_us > 0, got "
                                 f"{row['nproc']}, {row['bytes']}, {row['time_us']}")
            if row.get("wrong", 0):
                raise BenchError(f"{where}: {row['wrong']} wrong elements; a run with wrong "
                                 "results cannot calibrate anything")
            rows.append(dict(row, source=path))
    if not rows:
        raise BenchError("no rows in " + ", ".join(paths))
    return rows


def print_table(out, title, rows):
    """bench/collectives/report.cc PrintTable's columns."""
    out.write(f"# {title}\n")
    out.write("#%12s %12s %9s %11s %11s %11s %8s %10s %10s\n" % (
        "size(B)", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
        "p50(us)", "max(us)"))
    for r in rows:
        out.write(" %12d %12d %9s %11.1f %11.3f %11.3f %8d %10.1f %10.1f\n" % (
            r["bytes"], r["bytes"] // 4, r["dtype"], r["time_us"], r["algbw_gbs"],
            r["busbw_gbs"], r["wrong"], r["p50_us"], r["max_us"]))


def write_json(path, rows):
    try:
        with open(path, "w") as f:
            f.write("[\n" + ",\n".join("  " + json.dumps({k: r[k] for k in KEYS})
                                        for r in rows) + "\n]\n")
    except OSError as e:
        raise BenchError(f"cannot write --json file {path}: {e.strerror}") from e


def merge_rounds(rows, stat="median"):
    """Rows of several rounds of the same sweeps as one: per (op, backend, algo, transport,
    nproc, bytes) the median (as report.h's MedianOfRounds) or the minimum (the round least
    disturbed by other processes) of the rounds' time_us and p50_us, and the largest max_us."""
    groups = {}
    for r in rows:
        key = tuple(r.get(k) for k in ("op", "backend", "algo", "transport", "nproc", "bytes"))
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0][:5]) +
                          (kv[0][5],)):
        def med(k):
            values = [x.get(k, 0.0) for x in rs]
            return min(values) if stat == "min" else statistics.median(values)

        row = make_row(key[0], key[1], key[2], key[3], key[4], key[5], med("time_us"),
                       rs[0].get("dtype", "float32"))
        row["p50_us"] = med("p50_us")
        row["max_us"] = max(x.get("max_us", 0.0) for x in rs)
        out.append(row)
    return out
