"""tools/bench-report: runs the benchmarks against their peers and writes one report
(report.md, report.html, PNGs, results.json). main.py drives it; each module holds one part."""
