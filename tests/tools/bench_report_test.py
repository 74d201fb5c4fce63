"""tools/bench-report's parser, statistics, report and plot code on recorded results
(tests/tools/testdata/bench_report_results.json): no benchmark runs here.

The fixture holds allreduce n=2 for ours (auto, tcp), PyTorch gloo and OpenMPI (tcp, shm) at
4 KiB and 1 MiB, and training figures, three rounds each, with MPICH recorded as not installed.
"""
import copy
import json
import os
import stat
import statistics
import sys
import tempfile
import time
import unittest

from benchreport import main, plan, plots, report, runners, stats

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "testdata", "bench_report_results.json")


def load_fixture():
    with open(FIXTURE) as f:
        return json.load(f)


def verdicts(doc):
    return {(c["figure"], c["peer"], c["x"]): c["verdict"] for c in report.comparisons(doc)}


class StatsTest(unittest.TestCase):
    def test_summary(self):
        s = stats.Summary([3, 1, 2])
        self.assertEqual((s.median, s.min, s.max, s.n, s.spread), (2, 1, 3, 3, 2))
        self.assertEqual(s.text(1), "2.0 (1.0-3.0)")
        self.assertEqual(stats.Summary([5]).text(0), "5")
        with self.assertRaises(ValueError):
            stats.Summary([])

    def test_within_noise_when_spread_exceeds_difference(self):
        a, b = stats.Summary([10, 11, 12]), stats.Summary([11, 13, 20])
        self.assertTrue(stats.within_noise(a, b))  # 10-12 and 11-20 overlap
        c = stats.compare(a, b)
        self.assertEqual(c["verdict"], "within noise")
        self.assertAlmostEqual(c["ratio"], 11 / 13)

    def test_ahead_and_behind(self):
        fast, slow = stats.Summary([100, 101, 102]), stats.Summary([50, 51, 52])
        self.assertEqual(stats.compare(fast, slow)["verdict"], "ahead")
        self.assertEqual(stats.compare(slow, fast)["verdict"], "behind")
        # Lower is better (a time): the faster time is ahead, its ratio above 1.
        c = stats.compare(slow, fast, higher_is_better=False)
        self.assertEqual(c["verdict"], "ahead")
        self.assertAlmostEqual(c["ratio"], 101 / 51)

    def test_one_round_is_never_a_win(self):
        c = stats.compare(stats.Summary([100]), stats.Summary([50, 51]))
        self.assertEqual(c["verdict"], "within noise (1 round)")
        self.assertTrue(c["noise"])

    def test_diff_marks_only_regressions_beyond_noise(self):
        old = load_fixture()
        new = copy.deepcopy(old)
        for m in new["measurements"]:
            if m["figure"] == "train mlp" and m["impl"] == "ours" and m["x"] == 2:
                m["reps"] = [v * 0.5 for v in m["reps"]]  # a clear regression
            if m["figure"] == "train cnn" and m["impl"] == "ours":
                m["reps"] = [v * 0.99 for v in m["reps"]]  # 1% slower: inside its spread
        rows = stats.diff_results(old, new)
        self.assertEqual(len(rows), len(old["measurements"]))
        bad = [(r["figure"], r["impl"], r["x"]) for r in rows if r["regression"]]
        self.assertEqual(bad, [("train mlp", "ours", 2)])
        key = ("train mlp", "ours", 2)
        mlp = next(r for r in rows if (r["figure"], r["impl"], r["x"]) == key)
        self.assertAlmostEqual(mlp["change_pct"], -50.0)
        text = stats.format_diff(rows)
        self.assertIn("REGRESSION", text)
        self.assertIn("1 regression(s) beyond noise", text)

    def test_diff_skips_measurements_missing_from_either_run(self):
        old = load_fixture()
        new = copy.deepcopy(old)
        new["measurements"] = new["measurements"][:3]
        self.assertEqual(len(stats.diff_results(old, new)), 3)
        self.assertEqual(stats.diff_results({}, new), [])


class ParseTest(unittest.TestCase):
    OUTPUT = "noise line\n" + "".join(
        f"ROW rank={r} bytes={b} count={b // 4} time_us={t} p50_us={p} max_us={m} wrong={w}\n"
        for r, b, t, p, m, w in ((0, 4096, 10.0, 9.0, 30.0, 0), (1, 4096, 12.0, 8.0, 20.0, 2),
                                 (1, 8192, 20.0, 19.0, 40.0, 0), (0, 8192, 16.0, 15.0, 50.0, 0)))

    def test_rows_take_the_slowest_rank(self):
        rows = runners.rows_from_output(self.OUTPUT, "allreduce", 2)
        self.assertEqual([r["bytes"] for r in rows], [4096, 8192])
        r = rows[0]
        self.assertEqual((r["time_us"], r["p50_us"], r["max_us"], r["wrong"]), (12, 9, 30, 2))
        self.assertAlmostEqual(r["algbw_gbs"], 4096 / 12 / 1e3)
        self.assertAlmostEqual(r["busbw_gbs"], r["algbw_gbs"])  # 2(n-1)/n = 1 at n = 2

    def test_min_and_p99_are_read_when_every_rank_prints_them(self):
        text = ("ROW rank=0 bytes=64 count=16 time_us=2.0 p50_us=1.5 max_us=30.0 min_us=1.0 "
                "p99_us=20.0 wrong=0\n"
                "ROW rank=1 bytes=64 count=16 time_us=4.0 p50_us=1.0 max_us=9.0 min_us=0.5 "
                "p99_us=8.0 wrong=1\n")
        r = runners.rows_from_output(text, "alltoall", 2)[0]
        self.assertEqual((r["min_us"], r["p99_us"], r["wrong"]), (1.0, 20.0, 1))
        self.assertAlmostEqual(r["busbw_gbs"], r["algbw_gbs"] * 0.5)
        self.assertNotIn("p99_us", runners.rows_from_output(self.OUTPUT, "allreduce", 2)[0])

    def test_time_to_accuracy_from_either_output(self):
        ours = ("[rank 0] epoch 1/3  train_loss 0.5164  test_accuracy 0.8451  samples/s 24313  "
                "epoch_time 2.47s\n"
                "epoch 2/3  train_loss 0.3413  test_accuracy 0.8713  samples/s 25465  "
                "epoch_time 2.36s  comm_wait 3.0%\n"
                "epoch 3/3  train_loss 0.2819  test_accuracy 0.8802  samples/s 21558  "
                "epoch_time 2.78s\n{\"epoch\": 3}\n")
        acc, secs = runners.accuracy_curve("ours", ours)
        self.assertEqual((acc, secs), ([0.8451, 0.8713, 0.8802], [2.47, 2.36, 2.78]))
        seconds, epochs = runners.time_to_accuracy(acc, secs, 0.88)
        self.assertAlmostEqual(seconds, 2.47 + 2.36 + 2.78)
        self.assertEqual(epochs, 3)
        self.assertEqual(runners.time_to_accuracy(acc, secs, 0.9), (None, None))
        torch_out = '{"peer": "torch", "epoch_accuracy": [0.88], "epoch_train_s": [1.5]}\n'
        self.assertEqual(runners.accuracy_curve("torch", torch_out), ([0.88], [1.5]))
        with self.assertRaisesRegex(runners.BenchError, "no epoch lines"):
            runners.accuracy_curve("ours", "nothing\n")

    def test_a_missing_rank_is_an_error(self):
        with self.assertRaisesRegex(runners.BenchError, r"size 4096: ROW lines from ranks \[0, 1\]"
                                                        r", expected 3"):
            runners.rows_from_output(self.OUTPUT, "allreduce", 3)
        with self.assertRaisesRegex(runners.BenchError, "no ROW lines"):
            runners.rows_from_output("nothing\n", "allreduce", 2)

    def test_bus_factor_and_iterations(self):
        self.assertAlmostEqual(runners.bus_factor("allreduce", 4), 1.5)
        self.assertAlmostEqual(runners.bus_factor("allgather", 4), 0.75)
        self.assertEqual(runners.bus_factor("broadcast", 4), 1.0)
        self.assertEqual(runners.iterations_for(10, 4096), 160)
        self.assertEqual(runners.iterations_for(10, 1 << 20), 10)

    def test_last_json_reads_the_launchers_prefixed_lines(self):
        out = '[rank 0] {"samples_per_s": 5}\n[rank 0] done\n'
        self.assertEqual(runners.last_json(out), {"samples_per_s": 5})
        with self.assertRaises(runners.BenchError):
            runners.last_json("no json\n")

    def test_run_names_the_failure_and_kills_what_hangs(self):
        with self.assertRaisesRegex(runners.BenchError, r"exited with 3; its output ends:\nboom"):
            runners.run(["sh", "-c", "echo boom; exit 3"], dict(os.environ), 10)
        with self.assertRaisesRegex(runners.BenchError, r"did not finish in 0.5 s \(killed\)"):
            runners.run(["sh", "-c", "sleep 30 & wait"], dict(os.environ), 0.5)
        self.assertEqual(runners.run(["echo", "ok"], dict(os.environ), 10), "ok\n")

    def test_thread_env_sets_every_variable(self):
        env = runners.thread_env(3, {"OMP_NUM_THREADS": "8", "PATH": "/bin"})
        self.assertEqual(env, {"OMP_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3",
                               "MKL_NUM_THREADS": "3", "PATH": "/bin",
                               "GLIBC_TUNABLES": runners.MALLOC_TUNABLES})
        self.assertEqual(runners.thread_env(1, {"GLIBC_TUNABLES": "x"})["GLIBC_TUNABLES"], "x")

    def test_missing_mpich_is_named(self):
        why = runners.mpich_missing("/nonexistent/mpiexec.mpich", "/bin/true")
        self.assertIn("not installed", why)
        why = runners.mpich_missing("/bin/true", "/nonexistent/mpich_collectives")
        self.assertIn("not built", why)


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.doc = load_fixture()
        self.dir = tempfile.mkdtemp(prefix="bench_report_test_")

    def test_comparisons_pair_like_transports_and_flag_noise(self):
        v = verdicts(self.doc)
        self.assertEqual(v[("allreduce n=2", "openmpi/default-shm", 4096)], "behind")
        self.assertEqual(v[("allreduce n=2", "openmpi/default-shm", 1048576)], "ahead")
        self.assertEqual(v[("allreduce n=2", "torch/tcp", 4096)], "ahead")
        self.assertEqual(v[("allreduce n=2", "openmpi/tcp", 4096)], "behind")
        # OpenMPI's 1 MiB rounds spread over 2x: the 1% difference is noise, not a win.
        self.assertEqual(v[("allreduce n=2", "openmpi/tcp", 1048576)], "within noise")
        self.assertEqual(v[("train mlp", "torch", 1)], "within noise")
        self.assertEqual(v[("train mlp", "torch", 2)], "ahead")
        self.assertEqual(v[("train cnn", "torch", 2)], "behind")
        c = next(c for c in report.comparisons(self.doc)
                 if (c["peer"], c["x"]) == ("openmpi/tcp", 4096))
        self.assertEqual(c["ours"], "ours/tcp")  # TCP against TCP

    def test_report_lists_every_weak_figure_and_the_missing_peer(self):
        images = plots.write_all(self.doc, self.dir)
        report.write(self.doc, images, self.dir)
        with open(os.path.join(self.dir, "report.md")) as f:
            md = f.read()
        weak = md.split("### Where we are behind a peer or within noise of it")[1]
        weak = weak.split("## Environment")[0]
        self.assertEqual(weak.count("| within noise |"), 2)
        self.assertEqual(weak.count("| behind |"), 3)
        self.assertNotIn("| ahead |", weak)
        self.assertIn("| MPICH | not installed (mpiexec.mpich not found", md)
        self.assertIn("| memcpy bandwidth (shared-memory bound) | 13.70 GB/s |", md)
        self.assertIn("| OPENBLAS_NUM_THREADS | threads per process |", md)
        self.assertIn("| 4 KiB | ours/tcp | openmpi/tcp |", md)
        self.assertIn("| train mlp no-sync | 2 | 71000 (70000-72000) |", md)
        self.assertIn("| train mlp | ours | 2 | 0.60 |", md)  # 61000 / (2 x 51000)
        self.assertIn("| train mlp | ours | 2 | 1.16 |", md)  # no-sync / sync 71000 / 61000
        for name in images:
            self.assertIn(f"![{name}]({name})", md)

    def test_pngs_and_a_self_contained_html(self):
        images = plots.write_all(self.doc, self.dir)
        self.assertEqual(images, ["allreduce_n2_busbw.png", "allreduce_n2_latency.png",
                                  "allreduce_n2_ratio.png", "training_throughput.png",
                                  "training_scaling.png"])
        for name in images:
            with open(os.path.join(self.dir, name), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)
        report.write(self.doc, images, self.dir)
        with open(os.path.join(self.dir, "report.html")) as f:
            page = f.read()
        self.assertEqual(page.count("src='data:image/png;base64,iVBOR"), len(images))
        self.assertNotIn("src='allreduce", page)

    def test_time_to_accuracy_table_reads_lower_as_better(self):
        for impl, reps in (("ours", [6.0, 5.0, 7.0]), ("torch", [9.0, 10.0, 11.0])):
            self.doc["measurements"].append(
                {"figure": "time to 0.88 mlp", "impl": impl, "x": 1,
                 "metric": "seconds_to_accuracy", "higher_is_better": False, "reps": reps,
                 "raw": [{"epochs_to_target": 3, "epoch_accuracy": [0.85, 0.87, 0.881],
                          "epoch_train_s": [2, 2, 2]}] * 3})
        self.doc["plan"].update(tta_epochs=6, tta_test_samples=10000)
        v = verdicts(self.doc)
        self.assertEqual(v[("time to 0.88 mlp", "torch", 1)], "ahead")
        report.write(self.doc, [], self.dir)
        with open(os.path.join(self.dir, "report.md")) as f:
            md = f.read()
        self.assertIn("## Time to accuracy", md)
        self.assertIn("| time to 0.88 mlp | 1 | 6.0 (5.0-7.0) | 10.0 (9.0-11.0) | 1.67x | ahead |",
                      md)
        self.assertIn("| time to 0.88 mlp | 1 | ours | 3, 3, 3 |", md)

    def test_a_run_with_no_measurements_still_reports(self):
        self.doc["measurements"] = []
        self.doc["errors"] = ["round 1, n=2, allreduce: ours (tcp): exited with 1"]
        images = plots.write_all(self.doc, self.dir)
        self.assertEqual(images, [])
        report.write(self.doc, images, self.dir)
        with open(os.path.join(self.dir, "report.md")) as f:
            md = f.read()
        self.assertIn("0 comparisons with a peer", md)
        self.assertIn("Runs that failed", md)


def script(directory, name, text):
    """An executable shell script `name` in `directory` with `text` as its body."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


# What a 2-rank MPI peer prints for one size (bench_inputs.h PrintRowLine) and at its end.
MPI_ROWS = "".join(f"echo 'ROW rank={r} bytes=4096 count=1024 time_us=10.0 p50_us=9.0 "
                   f"max_us=20.0 min_us=8.0 p99_us=19.0 wrong=0'\n" for r in (0, 1))
MPI_DONE = "echo 'FINALIZE rank=0'; echo 'FINALIZE rank=1'\n"


class TimeoutTest(unittest.TestCase):
    """A peer that hangs: killed, its columns marked, the report completed (recorded data and
    stand-in scripts; no benchmark runs)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bench_report_timeout_")
        self.grace = runners.FINALIZE_GRACE_S
        runners.FINALIZE_GRACE_S = 0.2

    def tearDown(self):
        runners.FINALIZE_GRACE_S = self.grace

    def test_stop_when_ends_a_run_after_its_grace(self):
        started = time.monotonic()
        out, stopped = runners.run_until(["sh", "-c", "echo done; sleep 30"], dict(os.environ),
                                         20, stop_when=lambda text: "done" in text, grace=0.2)
        self.assertTrue(stopped)
        self.assertEqual(out, "done\n")
        self.assertLess(time.monotonic() - started, 10)
        with self.assertRaises(runners.BenchError) as e:
            runners.run_until(["sleep", "30"], dict(os.environ), 0.3)
        self.assertTrue(e.exception.timed_out)

    def test_a_timeout_kills_processes_in_sessions_of_their_own(self):
        # As MPICH's hydra starts its ranks: setsid, out of the launcher's process group.
        pid_file = os.path.join(self.dir, "pid")
        cmd = ["sh", "-c", f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 30' & sleep 30"]
        with self.assertRaisesRegex(runners.BenchError, "did not finish in 1 s"):
            runners.run(cmd, dict(os.environ), 1)
        with open(pid_file) as f:
            pid = int(f.read())
        time.sleep(0.2)
        try:  # gone, or a zombie waiting for init to reap it
            with open(f"/proc/{pid}/stat") as f:
                self.assertEqual(f.read().rsplit(")", 1)[1].split()[0], "Z")
        except FileNotFoundError:
            pass

    def test_mpich_rows_survive_a_hang_in_finalize(self):
        mpiexec = script(self.dir, "mpiexec", MPI_ROWS + MPI_DONE + "exec sleep 30\n")
        started = time.monotonic()
        rows = runners.mpich_round(mpiexec, "/bin/true", 2, 4096, 4096, 20, 5, tcp=True,
                                   timeout=20)
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual([(r["bytes"], r["transport"], r["finalize_hang"]) for r in rows],
                         [(4096, "tcp", True)])

    def test_a_hanging_peer_is_marked_timed_out_and_the_report_completes(self):
        # Rows out but no FINALIZE: a hang inside the sweep, killed at the timeout.
        mpiexec = script(self.dir, "mpiexec", MPI_ROWS + "exec sleep 30\n")
        p = main.plan(main.parse_args(["--quick", "--max-bytes=4K"]))
        p["mpich"] = mpiexec
        steps = [s for s in plan.steps(p, True, {"collectives"}) if s["kind"] == "mpich"]
        self.assertEqual(len(steps), 2 * p["rounds"])  # shm and tcp, every round
        results, errors, failures = main.Results(), [], []
        timeouts = dict(main.MPICH_TIMEOUT_S)
        main.MPICH_TIMEOUT_S.update(quick=0.5)
        try:
            records = main.run_steps(steps[:2], p, {"mpich_collectives": "/bin/true"}, results,
                                     errors, failures, main.Progress(2))
        finally:
            main.MPICH_TIMEOUT_S.update(timeouts)
        self.assertEqual([(f["impl"], f["status"]) for f in failures],
                         [("mpich/default-shm", "timed out"), ("mpich/tcp", "timed out")])
        self.assertEqual(len(errors), 2)
        self.assertTrue(all(r["seconds"] < 10 for r in records))
        # Recorded: the fixture with every round of OpenMPI over TCP timed out, and one round of
        # PyTorch's.
        doc = load_fixture()
        doc["measurements"] = [m for m in doc["measurements"] if m["impl"] != "openmpi/tcp"]
        doc["failures"] = [{"figure": "allreduce n=2", "impl": "openmpi/tcp", "round": r,
                            "status": "timed out", "what": "x"} for r in (1, 2, 3)]
        doc["failures"].append({"figure": "allreduce n=2", "impl": "torch/tcp", "round": 2,
                                "status": "failed", "what": "y"})
        images = plots.write_all(doc, self.dir)
        report.write(doc, images, self.dir)
        with open(os.path.join(self.dir, "report.md")) as f:
            md = f.read()
        header = next(line for line in md.splitlines() if line.startswith("| size | ours/auto"))
        self.assertIn("openmpi/tcp", header)
        row = next(line for line in md.splitlines() if line.startswith("| 4 KiB | "))
        self.assertEqual(row.count("timed out"), 1)
        self.assertIn("| allreduce n=2 | openmpi/tcp | 2 | timed out |", md)
        self.assertIn("openmpi/tcp: round 1 timed out, round 2 timed out, round 3 timed out", md)
        self.assertIn("torch/tcp: round 2 failed", md)
        # A run whose MPICH hung in MPI_Finalize says so where its figures are.
        doc = load_fixture()
        m = next(m for m in doc["measurements"] if m["impl"] == "openmpi/tcp")
        m["raw"][0]["finalize_hang"] = True
        report.write(doc, [], self.dir)
        with open(os.path.join(self.dir, "report.md")) as f:
            self.assertIn("openmpi/tcp: 1 of its runs hung in MPI_Finalize", f.read())


    def test_an_implementation_the_benchmark_killed_is_named(self):
        # bench:collectives kills a peer at --timeout-s and writes the others' rows: here only
        # ours and OpenMPI's TCP rows come back.
        rows = [{"op": "allreduce", "nproc": 2, "bytes": 4096, "backend": b, "transport": t,
                 "time_us": 10.0, "p50_us": 9.0, "max_us": 20.0, "busbw_gbs": 0.4, "wrong": 0}
                for b, t in (("native", "shm"), ("openmpi", "tcp"))]
        bench = script(self.dir, "collectives",
                       'for a; do case "$a" in --json=*) out="${a#--json=}";; esac; done\n'
                       f"echo '{json.dumps(rows)}' > \"$out\"\n")
        p = main.plan(main.parse_args(["--quick", "--max-bytes=4K"]))
        step = plan.steps(p, False, {"collectives"})[0]
        results, errors, failures = main.Results(), [], []
        main.run_steps([step], p, {"collectives": bench}, results, errors, failures,
                       main.Progress(1))
        self.assertEqual([(f["impl"], f["status"]) for f in failures],
                         [("torch/tcp", "no result"), ("openmpi/default-shm", "no result")])
        self.assertEqual({m["impl"] for m in results.list()}, {"ours/auto", "openmpi/tcp"})


class PlanTest(unittest.TestCase):
    def test_sweep_budget_rules_match_bench_inputs(self):
        sizes = runners.sweep_sizes(4096, 256 << 20, 1 << 20)
        self.assertEqual(sizes[8:], [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20])
        self.assertEqual(len(runners.sweep_sizes(4096, 256 << 20)), 17)
        budget = 4 << 20
        self.assertEqual(runners.iterations_for(20, 4 << 20, budget), 20)
        self.assertEqual(runners.iterations_for(20, 16 << 20, budget), 5)
        self.assertEqual(runners.iterations_for(20, 64 << 20, budget), 2)
        self.assertEqual(runners.iterations_for(20, 256 << 20, budget), 2)
        self.assertEqual(runners.iterations_for(5, 256 << 20, budget, warmup=True), 1)
        self.assertEqual(runners.iterations_for(1, 256 << 20, budget), 1)  # never above iters
        self.assertEqual(runners.iterations_for(20, 4096, budget), 320)
        # The report's iterations column follows the rule the run recorded.
        doc = {"plan": {"iters": 20, "budget_bytes": budget, "min_iters": 2}}
        self.assertEqual(report.plan_iters(doc, 256 << 20), 2)
        del doc["plan"]["min_iters"]  # runs before the floor was recorded ran with 5
        self.assertEqual(report.plan_iters(doc, 256 << 20), 5)
        self.assertEqual(report.plan_iters({"plan": {"iters": 20}}, 256 << 20), 20)

    def test_steps_are_what_the_issue_asks_for(self):
        p = main.plan(main.parse_args([]))
        steps = plan.steps(p, True, {"collectives", "training", "tta"})
        self.assertEqual(len(steps), 180)
        coll = [s for s in steps if s["kind"] in ("collectives", "mpich")]
        self.assertEqual({s["op"] for s in coll},
                         {"allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"})
        self.assertEqual({s["nproc"] for s in coll}, {2, 4})
        self.assertEqual({i for s in coll for i in s["impls"]},
                         {"ours/auto", "ours/tcp", "torch/tcp", "openmpi/tcp",
                          "openmpi/default-shm", "mpich/tcp", "mpich/default-shm"})
        self.assertEqual((p["min_bytes"], p["max_bytes"]), (4096, 256 << 20))
        # 256 MiB in the first round, 64 MiB in the second, 16 MiB from the third on; the
        # report's tables say so.
        self.assertEqual({s["round"]: s["max_bytes"] for s in coll},
                         {0: 256 << 20, 1: 64 << 20, 2: 16 << 20})
        self.assertEqual(report.rounds_by_size_text({"plan": p}),
                         " Above 16 MiB: 2 rounds; above 64 MiB: 1 round (no range).")
        self.assertEqual(report.rounds_by_size_text({"plan": dict(p, max_bytes=16 << 20)}), "")
        self.assertEqual({s["workers"] for s in steps if s["kind"] == "training"}, {1, 2, 4})
        self.assertEqual(len(plan.steps(p, False, {"collectives"})), 60)

    def test_estimates_follow_the_recorded_run_and_calibrate_on_its_steps(self):
        doc = load_fixture()
        p = main.plan(main.parse_args(["--quick"]))
        steps = plan.steps(p, False, {"collectives", "training"})
        est = plan.Estimator(doc)
        seconds = [est.estimate(s) for s in steps]
        self.assertTrue(all(t > 0 for t in seconds))
        # Ours over TCP at 1 MiB is recorded: that point costs what its times say.
        ours = next(s for s in steps if s["impls"] == ["ours/tcp"])
        one = dict(ours, min_bytes=1 << 20, max_bytes=1 << 20)
        us = statistics.median([r["time_us"] for m in doc["measurements"]
                                if (m["impl"], m["x"]) == ("ours/tcp", 1 << 20)
                                for r in m["raw"]])
        ops = p["iters"] + p["warmup"]  # the checked run is the first warm-up
        self.assertAlmostEqual(est.estimate(one), plan.STARTUP_S["ours"] + ops * us / 1e6, 4)
        # A recorded run whose collectives took twice the model: the factor says so.
        doc["steps"] = [dict(s, seconds=2 * est.model(s)) for s in steps]
        calibrated = plan.Estimator(doc)
        self.assertAlmostEqual(calibrated.factor["collectives"], 2.0)
        self.assertAlmostEqual(calibrated.estimate(ours), 2 * est.estimate(ours))
        text = plan.format_plan(steps, calibrated, "old.json")
        self.assertIn(f"{len(steps)} steps", text)
        self.assertRegex(text.splitlines()[-1], r"^total \d+ s")

    def test_plan_flag_prints_without_running(self):
        tmp = tempfile.mkdtemp(prefix="bench_report_plan_")
        out = os.path.join(tmp, "plan.txt")
        saved = sys.stdout
        with open(out, "w") as sys.stdout:
            code = main.main([f"--plan={FIXTURE}", "--quick"])
        sys.stdout = saved
        self.assertEqual(code, 0)
        with open(out) as f:
            text = f.read()
        self.assertIn("round 3, train cnn, 2 worker(s), torch", text)


def load_torch_peer():
    """bench/peers/torch_collectives.py as a module, or None where torch or numpy is missing."""
    import importlib.util
    path = os.path.join(HERE, "..", "..", "bench", "peers", "torch_collectives.py")
    spec = importlib.util.spec_from_file_location("torch_collectives", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:
        return None
    return module


class TorchPeerInputsTest(unittest.TestCase):
    """The PyTorch peer makes its inputs and expected outputs in chunks, once per sweep (Note
    [Peer input cost] in bench/peers/torch_collectives.py); they must still be the very numbers
    bench_inputs.cc makes."""

    def setUp(self):
        self.peer = load_torch_peer()
        if self.peer is None:
            self.skipTest("python3-torch or python3-numpy not installed")
        self.peer._CHUNK_WORDS = 64  # small chunks: the boundaries come at small sizes

    def test_philox_matches_the_reference_and_any_range_matches_the_prefix(self):
        p = self.peer
        # Random123's known answer for Philox4x32-10, key 0 and counter 0.
        self.assertEqual([int(w) for w in p.philox_words(0, 0, 0, 4)],
                         [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8])
        chunk = p._CHUNK_WORDS
        whole = p.philox_words(7, 3, 0, chunk + 40)
        for begin, count in [(1, 6), (chunk - 5, 30), (chunk + 3, 9)]:
            self.assertEqual(p.philox_words(7, 3, begin, count).tolist(),
                             whole[begin:begin + count].tolist(), (begin, count))
        for dtype, low in [("float32", -8), ("uint8", 0)]:
            made = p.values(7, 3, chunk - 10, 25, dtype)  # crosses a chunk boundary
            want = (whole[chunk - 10:chunk + 15] % 17).astype("int64") + low
            self.assertEqual(made.tolist(), want.tolist(), dtype)

    def test_large_inputs_are_sparse_as_bench_inputs_makes_them(self):
        # Note [Sparse large inputs]: past 2^22 elements only every 16th chunk of 4096 is drawn.
        p = self.peer
        self.assertEqual((p._INPUT_CHUNK, p._DENSE_ELEMENTS, p._SPARSE_STRIDE),
                         (4096, 1 << 22, 16))
        begin = (1 << 22) - 10
        count = 17 * 4096 + 30
        made = p.values(7, 3, begin, count, "float32")
        words = p.philox_words(7, 3, begin, count)
        for k in range(count):
            i = begin + k
            drawn = i < (1 << 22) or (i // 4096) % 16 == 0
            want = int(words[k] % 17) - 8 if drawn else 0
            if int(made[k]) != want:
                self.fail(f"element {i}: {int(made[k])}, want {want} (drawn: {drawn})")

    def test_expected_outputs_follow_the_definitions(self):
        p = self.peer
        size, count = 3, p._CHUNK_WORDS + 9
        inputs = p.Inputs(5, "float32")
        fresh = lambda r, b, n: p.values(5, r, b, n, "float32").astype("int64").tolist()
        for smaller in (count // 4, count):  # the second extends the kept prefixes
            n = smaller - smaller % size
            b = n // size
            ranks = [fresh(r, 0, n) for r in range(size)]
            sums = [sum(v) for v in zip(*ranks)]
            for rank in range(size):
                self.assertEqual(p.expected("allreduce", inputs, rank, size, n).tolist(), sums)
                self.assertEqual(p.expected("broadcast", inputs, rank, size, n).tolist(),
                                 ranks[0])
                self.assertEqual(p.expected("allgather", inputs, rank, size, n).tolist(),
                                 sum((ranks[r][:b] for r in range(size)), []))
                self.assertEqual(p.expected("alltoall", inputs, rank, size, n).tolist(),
                                 sum((fresh(j, rank * b, b) for j in range(size)), []))
        self.assertEqual(len(inputs.prefix[2]), count - count % size)

    def test_count_wrong_counts_each_differing_element(self):
        p = self.peer
        want = p.expected("allreduce", p.Inputs(2, "float32"), 0, 2, 200)
        for dtype in (p.torch.float32, p.torch.bfloat16, p.torch.int32):
            out = p.torch.from_numpy(want).to(dtype)
            self.assertEqual(p.count_wrong(out, want), 0, dtype)
            out[3] += 1
            out[150] = 99  # past the first chunk of 64
            self.assertEqual(p.count_wrong(out, want), 2, dtype)


class TimeToAccuracyStopTest(unittest.TestCase):
    def test_a_run_ends_at_its_target(self):
        tmp = tempfile.mkdtemp(prefix="bench_report_tta_")
        peer = os.path.join(tmp, "peer.py")
        with open(peer, "w") as f:
            f.write("import json, time\n"
                    "for e, a in ((1, 0.80), (2, 0.885), (3, 0.90)):\n"
                    "    print(json.dumps({'epoch': e, 'accuracy': a, 'train_s': 1.5}), "
                    "flush=True)\n"
                    "time.sleep(30)\n")
        started = time.monotonic()
        seconds, curve = runners.tta_run("torch", "mlp", 1, 6, 0.88, 128, 100,
                                         {"torch_script": peer}, timeout=20)
        self.assertLess(time.monotonic() - started, 15)
        self.assertEqual((seconds, curve["epochs_to_target"]), (3.0, 2))


class CommandLineTest(unittest.TestCase):
    def test_bad_flags_are_usage_errors(self):
        for argv in (["--fail-on-regression"], ["--rounds=0"], ["--parts=collectives,gpu"],
                     ["--max-bytes=4Q"], ["--models=resnet"], ["--workers=1,x"],
                     ["--tta-models=vgg"], ["--ops=gather"], ["--nprocs=1"], ["--nprocs=x"]):
            with self.assertRaises(SystemExit, msg=argv) as e:
                main.parse_args(argv)
            self.assertEqual(e.exception.code, 2)

    def test_render_and_compare_exit_status(self):
        tmp = tempfile.mkdtemp(prefix="bench_report_cli_")
        out = os.path.join(tmp, "out")
        # The same run against itself: nothing regressed.
        self.assertEqual(main.main([f"--render={FIXTURE}", f"--out={out}",
                                    f"--compare={FIXTURE}", "--fail-on-regression"]), 0)
        self.assertTrue(os.path.exists(os.path.join(out, "report.html")))
        # An older run that was twice as fast at the CNN: a regression, exit 1 when asked.
        old = load_fixture()
        for m in old["measurements"]:
            if m["figure"] == "train cnn":
                m["reps"] = [v * 2 for v in m["reps"]]
        old_path = os.path.join(tmp, "old.json")
        with open(old_path, "w") as f:
            json.dump(old, f)
        argv = [f"--render={FIXTURE}", f"--out={out}", f"--compare={old_path}"]
        self.assertEqual(main.main(argv), 0)
        self.assertEqual(main.main(argv + ["--fail-on-regression"]), 1)
        with open(old_path, "w") as f:
            f.write("[]")
        with self.assertRaisesRegex(SystemExit, "old.json is not a bench-report results.json"):
            main.main(argv)

    def test_plan(self):
        args = main.parse_args(["--quick", "--max-bytes=8K", "--workers=2"])
        p = main.plan(args)
        self.assertEqual((p["max_bytes"], p["nprocs"], p["workers"]), (8192, [2], [2]))
        full = main.plan(main.parse_args([]))
        self.assertEqual((full["nprocs"], full["workers"]), ([2, 4], [1, 2, 4]))
        self.assertIn("broadcast", full["ops"])
        self.assertIn("alltoall", full["ops"])
        self.assertEqual((full["tta_models"], p["tta_models"]), (["mlp"], []))


if __name__ == "__main__":
    unittest.main()
