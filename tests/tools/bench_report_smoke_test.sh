#!/usr/bin/env bash
# tools/bench-report --quick on the smallest sizes, end to end: real benchmark processes (ours,
# PyTorch gloo, OpenMPI; MPICH pointed at a launcher that does not exist, to check a missing peer
# is reported and the report still completes), then every output file checked.
set -euo pipefail

RUNFILES="${TEST_SRCDIR}/paddle"
OUT="${TEST_TMPDIR}/report"
fail() { echo "FAIL: $*" >&2; exit 1; }

/usr/bin/python3 "${RUNFILES}/tools/bench-report" --quick --rounds=2 --max-bytes=8K \
  --models=mlp --workers=2 --samples=512 --bin-dir="${RUNFILES}" \
  --mpich=/nonexistent/mpiexec.mpich --out="${OUT}" || fail "bench-report exited with $?"

for f in report.md report.html results.json allreduce_n2_busbw.png allreduce_n2_latency.png \
         allreduce_n2_ratio.png training_throughput.png; do
  [[ -s "${OUT}/${f}" ]] || fail "${f} missing or empty"
done
grep -q "| MPICH | not installed (/nonexistent/mpiexec.mpich not found" "${OUT}/report.md" ||
  fail "report.md does not say MPICH is not installed"
grep -q "data:image/png;base64," "${OUT}/report.html" || fail "report.html has no inlined PNG"

/usr/bin/python3 - "${OUT}/results.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert not doc["errors"], doc["errors"]
got = {(m["figure"], m["impl"], m["x"]): m["reps"] for m in doc["measurements"]}
for impl in ("ours/auto", "ours/tcp", "torch/tcp", "openmpi/tcp", "openmpi/default-shm"):
    for size in (4096, 8192):
        reps = got.get(("allreduce n=2", impl, size))
        assert reps and len(reps) == 2 and all(r > 0 for r in reps), (impl, size, reps)
for figure in ("train mlp",):
    for impl in ("ours", "torch"):
        reps = got.get((figure, impl, 2))
        assert reps and len(reps) == 2 and all(r > 0 for r in reps), (figure, impl, reps)
assert all(r["wrong"] == 0 for m in doc["measurements"] for r in m["raw"])
assert doc["missing_peers"]["MPICH"].startswith("not installed")
assert doc["environment"]["memcpy_gbs"] > 0 and doc["environment"]["loopback_tcp_gbs"] > 0
print("bench_report_smoke_test: OK in", doc["seconds"], "s")
PY
