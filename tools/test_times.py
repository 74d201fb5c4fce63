#!/usr/bin/python3
"""Where the time of a tools/test run went, from Bazel's build event streams.

Usage: test_times.py [--slowest=N] [--markdown] STAGE=BEP_JSON [STAGE=BEP_JSON ...]

For each stage (one `bazel test` of tools/test): its wall time from the stream's first to its last
event, the test targets it ran and those it took from the cache, and the sum of the tests' own run
times; then the N slowest test runs over all stages. Stages that are not Bazel (lint, the doc
test) can be given as STAGE=SECONDS. --markdown prints the same as tables for docs/building.md.
A stream cut short (a killed run) counts what it has.
"""
import json
import sys


def read_stage(path):
    """(wall seconds, tests run, tests cached, [(seconds, label)]) of one build event stream."""
    first = last = None
    ran, cached, durations = 0, 0, []
    try:
        f = open(path)
    except OSError:
        return 0.0, 0, 0, []
    with f:
        for line in f:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            eid = event.get("id", {})
            if "started" in eid:
                first = int(event["started"].get("startTimeMillis", 0))
            if "buildFinished" in eid:
                last = int(event.get("finished", {}).get("finishTimeMillis", 0)) or last
            if "testResult" in eid:
                res = event.get("testResult", {})
                if res.get("cachedLocally") or res.get("executionInfo", {}).get("cachedRemotely"):
                    cached += 1
                    continue
                ran += 1
                ms = int(res.get("testAttemptDurationMillis", 0))
                start = int(res.get("testAttemptStartMillisEpoch", 0))
                durations.append((ms / 1000.0, eid["testResult"]["label"]))
                if start:
                    last = max(last or 0, start + ms)
    wall = (last - first) / 1000.0 if first and last else 0.0
    return wall, ran, cached, durations


def main(argv):
    slowest, markdown, stages = 20, False, []
    for arg in argv[1:]:
        if arg.startswith("--slowest="):
            slowest = int(arg.split("=", 1)[1])
        elif arg == "--markdown":
            markdown = True
        elif "=" in arg:
            stages.append(arg.split("=", 1))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    rows, runs = [], []
    for name, source in stages:
        try:
            rows.append((name, float(source), 0, 0, 0.0))
            continue
        except ValueError:
            pass
        wall, ran, cached, durations = read_stage(source)
        rows.append((name, wall, ran, cached, sum(s for s, _ in durations)))
        runs += [(s, label, name) for s, label in durations]
    total = sum(r[1] for r in rows)
    if markdown:
        print("| stage | wall (min) | tests run | from cache | test time (min) |")
        print("|---|---:|---:|---:|---:|")
        for name, wall, ran, cached, test_s in rows:
            print(f"| {name} | {wall / 60:.1f} | {ran} | {cached} | {test_s / 60:.1f} |")
        print(f"| all | {total / 60:.1f} | | | |")
        print()
        print("| slowest test runs | stage | seconds |")
        print("|---|---|---:|")
        for s, label, name in sorted(runs, reverse=True)[:slowest]:
            print(f"| {label} | {name} | {s:.0f} |")
        return 0
    print("tools/test stages:")
    print(f"  {'stage':<14} {'wall':>8} {'tests run':>10} {'cached':>7} {'test time':>10}")
    for name, wall, ran, cached, test_s in rows:
        print(f"  {name:<14} {wall / 60:7.1f}m {ran:>10} {cached:>7} {test_s / 60:9.1f}m")
    print(f"  {'all':<14} {total / 60:7.1f}m")
    if runs:
        print(f"slowest {min(slowest, len(runs))} test runs:")
        for s, label, name in sorted(runs, reverse=True)[:slowest]:
            print(f"  {s:7.1f}s  {label}  ({name})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
