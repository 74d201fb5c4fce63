"""tools/bench-report's parser, statistics, report and plot code on recorded results
(tests/tools/testdata/bench_report_results.json): no benchmark runs here.

The fixture holds allreduce n=2 for ours (auto, tcp), PyTorch gloo and OpenMPI (tcp, shm) at
4 KiB and 1 MiB, and training figures, three rounds each, with MPICH recorded as not installed.
"""
import copy
import json
import os
import tempfile
import unittest

from benchreport import main, plots, report, runners, stats

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


class CommandLineTest(unittest.TestCase):
    def test_bad_flags_are_usage_errors(self):
        for argv in (["--fail-on-regression"], ["--rounds=0"], ["--parts=collectives,gpu"],
                     ["--max-bytes=4Q"], ["--models=resnet"], ["--workers=1,x"],
                     ["--tta-models=vgg"]):
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
        self.assertIn("broadcast", full["other_ops"])
        self.assertIn("alltoall", full["other_ops"])
        self.assertEqual((full["tta_models"], p["tta_models"]), (["mlp"], []))


if __name__ == "__main__":
    unittest.main()
