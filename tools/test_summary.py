#!/usr/bin/python3
"""Counts test cases from Bazel's build event stream and the test.xml files it names.

Usage: test_summary.py [--failed CHECK | --counts NAME=P,F,S]... BEP_JSON [BEP_JSON ...]
--failed names a check outside Bazel (tools/lint) that failed; it counts as one failed case.
--counts adds the passed, failed and skipped cases of one (tools/doc-test's blocks).
Prints one line per failing target and, last, "N passed, N failed, N skipped" summed over all
the given Bazel runs. A test case is a gtest TEST / pytest function; a target that produced no
parseable XML (a crash, a timeout, a build failure) counts as one failed case. Exit code 1 if
anything failed.
"""
import json
import sys
import urllib.parse
import xml.etree.ElementTree as ET


def count_xml(path):
    """(passed, failed, skipped) of one JUnit XML file, or None if unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif (case.find("skipped") is not None or case.get("result") == "skipped"
              or case.get("status") == "notrun"):
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def summarize(bep_path, totals, failures):
    results = {}  # label -> list of (status, xml path)
    broken = set()  # test targets that did not build
    with open(bep_path) as f:
        for line in f:
            event = json.loads(line)
            eid = event.get("id", {})
            if "testResult" in eid:
                label = eid["testResult"]["label"]
                res = event.get("testResult", {})
                xml = None
                for out in res.get("testActionOutput", []):
                    if out.get("name") == "test.xml":
                        xml = urllib.parse.urlparse(out["uri"]).path
                results.setdefault(label, []).append((res.get("status", "NO_STATUS"), xml))
            elif "targetCompleted" in eid:
                done = event.get("completed")
                if event.get("aborted") or (done is not None and not done.get("success", False)):
                    broken.add(eid["targetCompleted"]["label"])
    for label in sorted(broken - set(results)):
        totals[1] += 1
        failures.append(f"{label}: did not build")
    for label, runs in sorted(results.items()):
        for status, xml in runs:
            counts = count_xml(xml) if xml else None
            if counts is None or (status != "PASSED" and counts[1] == 0):
                # No usable XML, or the runner failed outside any test case (crash at exit,
                # timeout, leak report): one failed case for the target.
                passed, failed, skipped = (counts or (0, 0, 0))
                failed += 1
                counts = (passed, failed, skipped)
            for i in range(3):
                totals[i] += counts[i]
            if counts[1]:
                failures.append(f"{label}: {counts[1]} failed ({status})")


def main(argv):
    totals = [0, 0, 0]
    failures = []
    args = argv[1:]
    while args and args[0] in ("--failed", "--counts"):
        if args[0] == "--failed":
            failures.append(args[1])
            totals[1] += 1
        else:  # --counts NAME=P,F,S: the cases of a check outside Bazel (tools/doc-test)
            name, counts = args[1].split("=", 1)
            p, f, sk = (int(x) for x in counts.split(","))
            totals[0] += p
            totals[1] += f
            totals[2] += sk
            if f:
                failures.append(f"{name}: {f} failed")
        args = args[2:]
    for path in args:
        summarize(path, totals, failures)
    for f in failures:
        print(f"FAILED {f}")
    line = f"{totals[0]} passed, {totals[1]} failed"
    if totals[2]:
        line += f", {totals[2]} skipped"
    print(line)
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
