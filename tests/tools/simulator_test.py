"""Tests of the collective simulator (tools/simulator, tools/simulate): every algorithm's
simulated bytes and messages against docs/algorithms.md, link sharing between hosts, the fitter on
synthetic data with known parameters, the fitted model against recorded measurements of this
machine (testdata/simulator_bench.json, and a shaped link's in testdata/simulator_netns_1gbit.json;
no live run), the composition of two hosts' links, the step model's overlap, the speed of
1024 x 8 ranks, and the command line's errors."""
import dataclasses
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import unittest
from contextlib import redirect_stdout

import numpy as np

HERE = os.path.dirname(os.path.realpath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
sys.path.insert(0, TOOLS)

from simulator import bench_io, cli, engine, fit, schedules, step_model  # noqa: E402
from simulator.cost_model import LinkParams, ParamSet  # noqa: E402

FIXTURE = os.path.join(HERE, "testdata", "simulator_bench.json")
# bench/micro/netns_sweep.sh at 1 Gbit/s (htb): 2 namespaces x 1 and x 2 ranks, per size the
# smaller p50 of three rounds (docs/simulator.md, "Shaped links").
NETNS_FIXTURE = os.path.join(HERE, "testdata", "simulator_netns_1gbit.json")
# 2 ranks on an idle machine, each algorithm over shared memory and TCP loopback, 4 KiB..256 MiB,
# per size the median p50 of six rounds (docs/simulator.md, "Validation").
QUIET_FIXTURE = os.path.join(HERE, "testdata", "simulator_quiet_n2.json")
MiB = 1 << 20
UNIT = LinkParams(alpha_us=10.0, overhead_us=1.0, beta_us_per_byte=1e-3, gamma_us_per_byte=5e-4)


def link_time(steps, msgs, nbytes, reduced, p=UNIT):
    return (steps * p.alpha_us + msgs * p.overhead_us + nbytes * p.beta_us_per_byte +
            reduced * p.gamma_us_per_byte)


class ScheduleBytesTest(unittest.TestCase):
    """docs/algorithms.md's tables: bytes sent and received per rank, and message counts."""

    def test_ring(self):
        for n in (2, 3, 5, 8):
            N = 3 * MiB
            sent, recv, red = schedules.per_rank_bytes(schedules.ring(n, N), n)
            np.testing.assert_allclose(sent, 2 * (n - 1) / n * N)
            np.testing.assert_allclose(recv, 2 * (n - 1) / n * N)
            np.testing.assert_allclose(red, (n - 1) / n * N)
            phases = schedules.ring(n, N)
            P = math.ceil(N / n / schedules.PIECE_BYTES)
            self.assertEqual(sum(p.repeat for p in phases), 2 * (n - 1))  # steps
            self.assertEqual(sum(p.repeat * p.pieces[0] for p in phases), 2 * (n - 1) * P)

    def test_tree_power_of_two_and_folded(self):
        N = 100 << 10  # one segment
        for n in (2, 4, 8, 16):
            sent, recv, _ = schedules.per_rank_bytes(schedules.tree(n, N), n)
            np.testing.assert_allclose(sent, math.log2(n) * N)
            np.testing.assert_allclose(recv, math.log2(n) * N)
            self.assertEqual(len(schedules.tree(n, N)), int(math.log2(n)))  # rounds
        n, p2 = 6, 4
        sent, recv, _ = schedules.per_rank_bytes(schedules.tree(n, N), n)
        rem = n - p2
        for r in range(n):
            if r < 2 * rem and r % 2 == 0:       # folds out: sends N, receives the result
                self.assertEqual((sent[r], recv[r]), (N, N))
            elif r < 2 * rem:                    # folds in: + N each way
                self.assertEqual((sent[r], recv[r]), (3 * N, 3 * N))
            else:
                self.assertEqual((sent[r], recv[r]), (2 * N, 2 * N))
        self.assertEqual(len(schedules.tree(n, N)), math.floor(math.log2(n)) + 2)

    def test_tree_segments(self):
        # Buffers above the piece size run the rounds once per segment.
        N = 5 * schedules.PIECE_BYTES // 2
        phases = schedules.tree(4, N)
        self.assertEqual(sum(p.repeat for p in phases), 2 * 3)  # 2 rounds x 3 segments
        sent, _, _ = schedules.per_rank_bytes(phases, 4)
        np.testing.assert_allclose(sent, 2 * N)

    def test_halving_doubling(self):
        for n in (2, 4, 8, 16):
            N = 7 * MiB
            sent, recv, red = schedules.per_rank_bytes(schedules.hd(n, N), n)
            np.testing.assert_allclose(sent, 2 * (n - 1) / n * N)
            np.testing.assert_allclose(recv, 2 * (n - 1) / n * N)
            np.testing.assert_allclose(red, (n - 1) / n * N)
        n, p2, N = 5, 4, 1 * MiB  # one segment (p2 x 256 KiB)
        phases = schedules.hd(n, N)
        self.assertEqual(len(phases), 2 * 2 + 2)  # 2 log2(p2) + fold and unfold
        sent, recv, _ = schedules.per_rank_bytes(phases, n)
        self.assertEqual(sent[0], N)                                   # folded out
        self.assertAlmostEqual(sent[1], 2 * (p2 - 1) / p2 * N + N)     # folds in, unfolds
        self.assertAlmostEqual(recv[1], 2 * (p2 - 1) / p2 * N + N)
        self.assertAlmostEqual(sent[4], 2 * (p2 - 1) / p2 * N)

    def test_node_workspace(self):
        # Per rank: (L-1)N/L copied in, (L-1)N/L reduced, N/L published, (L-1)N/L copied out.
        for L in (2, 4, 8):
            N = 8 * MiB
            phases = schedules.shm(L, N)
            copied = sum(p.bytes[0] * p.repeat for p in phases)
            reduced = sum(p.reduce_bytes[0] * p.repeat for p in phases)
            self.assertAlmostEqual(copied, (2 * (L - 1) + 1) * N / L)
            self.assertAlmostEqual(reduced, (L - 1) * N / L)
            rounds = math.ceil(N / schedules.SLOT_BYTES)
            self.assertEqual(sum(p.repeat for p in phases), 3 * rounds)  # 3 syncs a round
            self.assertTrue(all((p.src == p.dst).all() for p in phases))  # nothing on a wire
        small = schedules.shm(4, 4096)
        self.assertEqual(len(small), 1)
        self.assertEqual(small[0].reduce_bytes[0], 3 * 4096)

    def test_hierarchical_bytes_leaving_each_host(self):
        # 2 (H-1)/H N leave each host, against 2 (N-1)/N n for the flat ring over all ranks.
        for H, L, algo in ((4, 2, "ring"), (8, 4, "hd"), (2, 2, "ring")):
            N = 4 * MiB
            _, cross, chunks = schedules.hierarchical_parts(H, L, N, algo)
            out = np.zeros(H)
            for p in cross:
                wire = (p.src // L) != (p.dst // L)
                np.add.at(out, p.src[wire] // L, p.bytes[wire] * p.repeat)
            np.testing.assert_allclose(out * chunks, 2 * (H - 1) / H * N)

    def test_hierarchical_chunks(self):
        _, _, chunks = schedules.hierarchical_parts(2, 2, 64 * MiB, "ring")
        self.assertEqual(chunks, 16)  # 4 MiB chunks from 8 MiB up
        _, _, chunks = schedules.hierarchical_parts(2, 2, 4 * MiB, "ring")
        self.assertEqual(chunks, 1)
        _, _, chunks = schedules.hierarchical_parts(2, 2, 4096 * MiB, "ring")
        self.assertEqual(chunks, 200)  # at most 200 chunks

    def test_single_rank_and_empty_send_nothing(self):
        for algo in schedules.FLAT_ALGOS:
            self.assertEqual(schedules.flat_schedule(algo, 1, MiB), [])
            self.assertEqual(schedules.flat_schedule(algo, 4, 0), [])


class EngineTest(unittest.TestCase):

    def test_ring_time_is_its_closed_form_on_one_host(self):
        n, N = 4, 8 * MiB
        c = engine.Cluster(1, n, intra=UNIT)
        P = math.ceil(N / n / schedules.PIECE_BYTES)
        want = link_time(2 * (n - 1), 2 * (n - 1) * (P - 1), 2 * (n - 1) / n * N,
                         (n - 1) / n * N)
        self.assertAlmostEqual(engine.simulate(c, "ring", N), want, places=6)

    def test_nic_shared_by_the_ranks_of_a_host(self):
        # Recursive doubling on 2 hosts x 4 ranks: rounds d=1,2 stay in the host, in round d=4
        # all 4 ranks of a host cross at once and share its NIC: beta x 4 there.
        N = 64 << 10
        inter = LinkParams(0.0, 0.0, 1e-3, 0.0)
        intra = LinkParams(0.0, 0.0, 1e-6, 0.0)
        c = engine.Cluster(2, 4, intra=intra, inter=inter)
        t = engine.simulate(c, "tree", N)
        self.assertAlmostEqual(t, 2 * N * 1e-6 + 4 * N * 1e-3, places=6)
        # The ring crosses each host boundary once per step: no sharing.
        r = engine.simulate(c, "ring", N)
        self.assertAlmostEqual(r, 2 * 7 * (N / 8) * 1e-3, places=6)

    def test_rendezvous_beyond_the_eager_limit(self):
        # Note [Eager and rendezvous]: a 2-rank tree step is one message of the whole segment.
        link = dataclasses.replace(UNIT, eager_bytes=64 << 10, rendezvous_us=7.0,
                                   rendezvous_beta_us_per_byte=2e-4)
        c = engine.Cluster(1, 2, intra=link)
        small, large = 64 << 10, 128 << 10
        self.assertAlmostEqual(engine.simulate(c, "tree", small),
                               engine.simulate(engine.Cluster(1, 2, intra=UNIT), "tree", small))
        self.assertAlmostEqual(engine.simulate(c, "tree", large),
                               UNIT.alpha_us + 7.0 + (2e-4 + UNIT.gamma_us_per_byte) * large)

    def test_cache_knee(self):
        # Note [Cache knee]: beyond the knee the share 1 - K/N of every byte moved and reduced
        # pays the memory term.
        link = dataclasses.replace(UNIT, memory_us_per_byte=1e-3, cache_bytes=MiB)
        n, N = 4, 4 * MiB
        plain = engine.simulate(engine.Cluster(1, n, intra=UNIT), "ring", N)
        moved, reduced = 2 * (n - 1) / n * N, (n - 1) / n * N
        self.assertAlmostEqual(engine.simulate(engine.Cluster(1, n, intra=link), "ring", N),
                               plain + 1e-3 * 0.75 * (moved + reduced), places=6)
        self.assertAlmostEqual(engine.simulate(engine.Cluster(1, n, intra=link), "ring", MiB),
                               engine.simulate(engine.Cluster(1, n, intra=UNIT), "ring", MiB))

    def test_shared_cores(self):
        # Note [Shared cores]: 3 ranks on 2 cores. Every ring step keeps all 3 busy (x1.5); the
        # tree's fold and unfold keep 2 busy (x1), its exchange between the 2 members too.
        N = 64 << 10
        c = engine.Cluster(1, 3, intra=UNIT)
        self.assertAlmostEqual(engine.simulate(c, "ring", N, cores=2, share_cores=True),
                               1.5 * engine.simulate(c, "ring", N), places=6)
        self.assertAlmostEqual(engine.simulate(c, "tree", N, cores=2, share_cores=True),
                               engine.simulate(c, "tree", N), places=6)
        self.assertAlmostEqual(engine.simulate(c, "ring", N, cores=3, share_cores=True),
                               engine.simulate(c, "ring", N), places=6)
        self.assertAlmostEqual(engine.simulate(c, "ring", N, cores=2),  # off unless asked
                               engine.simulate(c, "ring", N), places=6)

    def test_missing_link_parameters_are_an_error(self):
        with self.assertRaisesRegex(schedules.ScheduleError, "inter links"):
            engine.simulate(engine.Cluster(2, 1, intra=UNIT), "ring", MiB)

    def test_auto_follows_the_communicator(self):
        one = engine.Cluster(1, 4)
        self.assertEqual(engine.resolve_algo("auto", one, MiB, workspace=True), "shm")
        self.assertEqual(engine.resolve_algo("auto", engine.Cluster(4, 8), MiB, True), "hier")
        self.assertEqual(engine.resolve_algo("auto", one, 64 << 10, False), "tree")
        self.assertEqual(engine.resolve_algo("auto", one, 2 * MiB, False), "hd")
        self.assertEqual(engine.resolve_algo("auto", one, 64 * MiB, False), "ring")
        self.assertEqual(engine.resolve_algo("auto", one, 64 * MiB, False, cores=2), "hd")
        self.assertEqual(engine.resolve_algo("auto", engine.Cluster(1, 3), 64 * MiB, False,
                                             cores=2), "ring")

    def test_1024_hosts_x_8_in_seconds(self):
        c = engine.Cluster(1024, 8, workspace=UNIT, intra=UNIT,
                           inter=UNIT.with_bandwidth(25))
        start = time.monotonic()
        times = {}
        for algo in ("ring", "tree", "hd", "hier"):
            times[algo] = engine.simulate(c, algo, 100 * MiB)
        self.assertLess(time.monotonic() - start, 20.0)
        # 100 MiB over 25 Gbit/s: the ring is bandwidth-bound near 2N/B; the tree moves
        # log2(8192) N through every NIC shared by 8 ranks.
        bound = 2 * 100 * MiB / (25 * 125.0)
        self.assertGreater(times["ring"], bound)
        self.assertLess(times["hier"], times["tree"])


def synthetic_rows(params_by_link, cores=64, shm_flat=False):
    """Rows timed by the model itself; with shm_flat also ring, tree and hd over shared memory
    (the "shm" link)."""
    rows = []
    links = [("shm", ("auto",), "workspace"), ("tcp", ("ring", "tree", "hd"), "tcp")]
    if shm_flat:
        links.append(("shm", ("ring", "tree", "hd"), "shm"))
    for transport, algos, link in links:
        for n in (2, 4):
            for algo in algos:
                for k in range(12, 27):
                    row = {"op": "allreduce", "backend": "native", "algo": algo,
                           "transport": transport, "nproc": n, "bytes": 1 << k, "time_us": 1.0}
                    _, _, feats = fit.row_features(row, cores)
                    want = params_by_link[link]
                    feats[4] *= want.miss_fraction(row["bytes"])
                    row["time_us"] = float(np.dot(feats, want.vector()))
                    rows.append(row)
    return rows


class FitTest(unittest.TestCase):

    def test_recovers_known_parameters(self):
        truth = {"workspace": LinkParams(3.0, 0.0, 2e-4, 4e-4),  # no messages there
                 "tcp": LinkParams(25.0, 4.0, 8e-4, 3e-4)}
        got = fit.fit(synthetic_rows(truth), cores=64)
        for link, want in truth.items():
            for name, w, g in zip(("alpha", "overhead", "beta", "gamma"), want.vector(),
                                  got.get(link).vector()):
                self.assertAlmostEqual(g, w, delta=0.02 * w + 1e-12, msg=f"{link} {name}")
            self.assertLess(got.extra[link]["fit"]["max_error_pct"], 1.0)

    def test_recovers_the_cache_knee_and_the_rendezvous(self):
        # Note [Cache knee] on the workspace, Notes [Eager and rendezvous] and [Small pages] on
        # shared memory's 64 KiB and 2 MiB limits: the knee is found on its grid and every
        # coefficient within 2%.
        truth = {"workspace": LinkParams(3.0, 0.0, 2e-4, 4e-4, memory_us_per_byte=3e-4,
                                         cache_bytes=8 << 20),
                 "tcp": LinkParams(25.0, 4.0, 8e-4, 3e-4),
                 "shm": LinkParams(2.0, 1.0, 1e-4, 2e-4, rendezvous_us=6.0,
                                   rendezvous_beta_us_per_byte=5e-5, eager_bytes=64 << 10,
                                   small_page_us_per_byte=1e-4, huge_page_bytes=2 << 20)}
        got = fit.fit(synthetic_rows(truth, shm_flat=True), cores=64)
        self.assertEqual(got.get("workspace").cache_bytes, 8 << 20)
        self.assertEqual(got.get("shm").eager_bytes, 64 << 10)
        self.assertEqual(got.get("shm").huge_page_bytes, 2 << 20)
        self.assertEqual(got.get("tcp").huge_page_bytes, 0)
        self.assertEqual(got.get("tcp").cache_bytes, 0)  # no knee in its data: none fitted
        for link, want in truth.items():
            np.testing.assert_allclose(got.get(link).vector(), want.vector(), rtol=0.02,
                                       atol=1e-9, err_msg=link)
            self.assertLess(got.extra[link]["fit"]["max_error_pct"], 1.0)
        # Without the terms the same rows are fitted far worse: they are what the data show.
        plain = fit.fit(synthetic_rows(truth, shm_flat=True), cores=64, knee=False)
        self.assertGreater(plain.extra["workspace"]["fit"]["max_error_pct"], 10.0)

    def test_fixed_gamma(self):
        truth = {"workspace": LinkParams(3.0, 0.0, 2e-4, 1e-4),
                 "tcp": LinkParams(25.0, 4.0, 8e-4, 1e-4)}
        got = fit.fit(synthetic_rows(truth), cores=64, gamma=1e-4)
        for link, want in truth.items():
            np.testing.assert_allclose(got.get(link).vector(), want.vector(), rtol=0.02,
                                       atol=1e-9)

    def test_robust_fit_ignores_a_disturbed_size(self):
        truth = {"workspace": LinkParams(3.0, 0.0, 2e-4, 4e-4),
                 "tcp": LinkParams(25.0, 4.0, 8e-4, 3e-4)}
        rows = synthetic_rows(truth)
        rows[5]["time_us"] *= 20   # another process ran during these sizes
        rows[31]["time_us"] *= 20  # (the first 30 rows are the workspace's)
        self.assertEqual(rows[31]["transport"], "tcp")
        got = fit.fit(rows, cores=64)
        self.assertAlmostEqual(got.get("tcp").alpha_us, 25.0, delta=0.02)
        self.assertAlmostEqual(got.get("workspace").alpha_us, 3.0, delta=0.02)
        plain = fit.fit(rows, cores=64, robust=False)  # what it protects from
        self.assertGreater(abs(plain.get("tcp").alpha_us - 25.0), 0.05)

    def test_too_few_rows(self):
        rows = synthetic_rows({"workspace": UNIT, "tcp": UNIT})[:3]
        with self.assertRaisesRegex(ValueError, "need at least 4"):
            fit.fit(rows, cores=64)

    def test_recorded_measurements_within_tolerance(self):
        """The model fitted on this machine's sweeps (2 and 4 ranks, shared memory and TCP
        loopback, 4 KiB..64 MiB, each algorithm; per size the smaller p50 of two rounds)
        reproduces them within the tolerances below, which are the fit's figures rounded up
        (docs/simulator.md, "Validation": the machine was shared, so they are loose)."""
        rows = cli._stat_rows(bench_io.load_rows([FIXTURE]), "p50")
        params = fit.fit(rows, cores=2)
        table = fit.validate(params, rows, cores=2)
        errors = np.abs([e["error"] for e in table])
        self.assertEqual(len(errors), 240)  # 2 transports x 4 algos x 2 sizes of group x 15
        self.assertLess(np.median(errors), MEDIAN_TOLERANCE)
        self.assertLess(np.exp(np.mean(np.log(np.maximum(errors, 1e-4)))), GEOMEAN_TOLERANCE)
        self.assertLess(np.percentile(errors, 90), P90_TOLERANCE)
        self.assertLess(errors.max(), MAX_TOLERANCE)
        # Per link the fit stays as good (no group traded away for the others).
        for link in ("workspace", "shm", "tcp"):
            mine = [abs(e["error"]) for e in table if e["link"] == link]
            self.assertLess(np.median(mine), 0.40, link)


    def test_quiet_measurements_and_what_the_terms_add(self):
        """On the quiet sweeps the model meets the issue's bar over TCP (geomean <= 10%, no point
        beyond 25%, as fitted), and the cache knee, rendezvous and small-page terms are what gets
        it there: without them far more sizes are off."""
        rows = cli._stat_rows(bench_io.load_rows([QUIET_FIXTURE]), "p50")
        self.assertEqual(len(rows), 136)

        def errors(params, link=None):
            return np.abs([e["error"] for e in fit.validate(params, rows, cores=2)
                           if link is None or e["link"] == link])

        def geomean(e):
            return float(np.exp(np.mean(np.log(np.maximum(e, 1e-4)))))

        params = fit.fit(rows, cores=2)
        tcp = errors(params, "tcp")
        self.assertLess(geomean(tcp), 0.10)
        self.assertLess(tcp.max(), 0.30)
        every = errors(params)
        self.assertLess(geomean(every), 0.06)
        self.assertGreater(params.get("shm").rendezvous_us, 0)  # the 64 KiB switch is seen
        self.assertGreater(params.get("workspace").cache_bytes, 0)  # and the knee
        self.assertGreater(params.get("shm").small_page_us_per_byte, 0)  # and the small pages
        fit.HUGE_PAGE_BYTES, saved_pages = {}, fit.HUGE_PAGE_BYTES
        try:
            paged = errors(fit.fit(rows, cores=2), "shm")
        finally:
            fit.HUGE_PAGE_BYTES = saved_pages
        shm = errors(params, "shm")
        self.assertGreater((paged > 0.25).sum(), 1.5 * (shm > 0.25).sum())  # 9 against 4
        self.assertGreater(geomean(paged), 1.2 * geomean(shm))  # 5.6% against 4.1%
        fit.EAGER_BYTES, saved = {}, fit.EAGER_BYTES
        fit.HUGE_PAGE_BYTES = {}
        try:
            plain = errors(fit.fit(rows, cores=2, knee=False))
        finally:
            fit.EAGER_BYTES, fit.HUGE_PAGE_BYTES = saved, saved_pages
        self.assertGreater((plain > 0.25).sum(), 1.5 * (every > 0.25).sum())  # 21 against 6
        self.assertGreater(plain.max(), 2 * every.max())  # 133% against 38%
        self.assertGreater(geomean(plain), 1.2 * geomean(every))  # 5.3% against 3.5%

    def test_shaped_link_has_its_own_entries(self):
        """The 1 Gbit/s sweep fitted under its own name reproduces itself within the tolerances
        below (the fit's figures rounded up), and the link's rate is what the shaper set."""
        rows = cli._stat_rows(bench_io.load_rows([NETNS_FIXTURE]), "p50")
        # 2 ranks per namespace on 2 cores: the engine's core-per-rank table, which the single-
        # host view gives with a core per rank.
        params = fit.fit(rows, cores=4, tcp_link="tcp_1gbit")
        self.assertEqual(sorted(params.links), ["tcp_1gbit", "tcp_1gbit@2", "tcp_1gbit@4"])
        table = fit.validate(params, rows, cores=4, tcp_link="tcp_1gbit")
        errors = np.abs([e["error"] for e in table])
        self.assertEqual(len(errors), 120)  # 2 rank counts x 4 algos x 15 sizes
        self.assertLess(np.exp(np.mean(np.log(np.maximum(errors, 1e-4)))), NETNS_GEOMEAN)
        self.assertLess(errors.max(), NETNS_MAX)
        # A 64 MiB ring on 2 ranks sends 64 MiB each way over its shaper: 537 ms at 1 Gbit/s
        # (125 bytes/us); the fit may add a little for the protocol, never beat the wire.
        t, link, _ = fit.predict_row(params, {"transport": "tcp", "algo": "ring", "nproc": 2,
                                              "bytes": 64 * MiB}, cores=4, tcp_link="tcp_1gbit")
        self.assertEqual(link, "tcp_1gbit")
        self.assertGreaterEqual(t / (64 * MiB / 125.0), 1.0)
        self.assertLess(t / (64 * MiB / 125.0), 1.15)

    def test_two_hosts_compose_their_links(self):
        # predict_on_hosts is the engine's 2 hosts x 2 ranks: loopback within, the link between.
        inter = LinkParams(50.0, 2.0, 8e-3, 1e-4)
        params = ParamSet({"tcp@2": UNIT, "tcp_1gbit@2": inter})
        row = {"transport": "tcp", "algo": "hd", "nproc": 4, "bytes": 4 * MiB}
        t, _, algo = fit.predict_on_hosts(params, row, 2, 2, "tcp_1gbit")
        want = engine.simulate(engine.Cluster(2, 2, intra=UNIT, inter=inter), "hd", 4 * MiB)
        self.assertEqual((t, algo), (want, "hd"))
        with self.assertRaisesRegex(ValueError, "cannot run on 3 hosts"):
            fit.predict_on_hosts(params, row, 3, 2, "tcp_1gbit")


# Tolerances of the shaped-link test (measured: geomean 3.6%, max 88%, a 4 KiB row: exchanges
# of a few KiB took ~30 us in some rounds and ~260 us in others).
NETNS_GEOMEAN = 0.06
NETNS_MAX = 1.0

# Tolerances of the recorded-measurements test (measured: median 20.7%, geomean 14.0%, 90th
# percentile 67%, max 434%, a 4 KiB TCP row whose quieter round took 34 us against ~200 us in
# most rows).
MEDIAN_TOLERANCE = 0.25
GEOMEAN_TOLERANCE = 0.18
P90_TOLERANCE = 0.75
MAX_TOLERANCE = 5.0


def trace(steps, buckets, backward_us=1000, comm_us=100, pid=0, forward_us=500):
    """A timeline with `steps` steps; bucket i of `buckets` (bytes) launches evenly in backward.
    forward_us may be a list, one per step."""
    events, t = [], 0
    for k in range(steps):
        fwd = forward_us[k] if isinstance(forward_us, list) else forward_us
        for name, dur in (("data", 10), ("forward", fwd), ("backward", None), ("optimizer", 50)):
            if name != "backward":
                events.append({"name": name, "ph": "X", "pid": pid, "tid": 0, "ts": t, "dur": dur})
                t += dur
                continue
            end = t + backward_us
            free = t
            for i, b in enumerate(buckets):
                launch = t + backward_us * (i + 1) // len(buckets)
                start = max(launch, free)
                free = start + comm_us
                events.append({"name": f"allreduce bucket {i}", "ph": "X", "pid": pid, "tid": 1,
                               "ts": launch, "dur": free - launch, "args": {"bytes": b}})
            end = max(end, free)
            events.append({"name": name, "ph": "X", "pid": pid, "tid": 0, "ts": t, "dur": end - t})
            t = end
    return events


class StepModelTest(unittest.TestCase):

    def load(self, events):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(events, f)
        self.addCleanup(os.unlink, f.name)
        return step_model.load_timeline(f.name)

    def test_profile_from_a_trace(self):
        prof = self.load(trace(5, [MiB] * 4))
        self.assertEqual(prof.steps, 3)  # the first two are skipped
        self.assertEqual(prof.grad_bytes, 4 * MiB)
        self.assertEqual(prof.backward_us, 1000)
        self.assertEqual(prof.measured_step_us, 10 + 500 + 1100 + 50)
        self.assertEqual(prof.ready_at(2 * MiB), 500)

    def test_overlap(self):
        prof = self.load(trace(4, [MiB] * 4))
        # Fast allreduces hide behind backward but the last one.
        fast = step_model.predict(prof, lambda b: 10.0, MiB, MiB)
        self.assertAlmostEqual(fast["exposed_comm_us"], 10.0)
        # Slow ones queue: 4 x 400 us starting at 250 us.
        slow = step_model.predict(prof, lambda b: 400.0, MiB, MiB)
        self.assertAlmostEqual(slow["backward_us"], 250 + 4 * 400)
        # One bucket: nothing overlaps.
        one = step_model.predict(prof, lambda b: 400.0, 64 * MiB, 64 * MiB)
        self.assertAlmostEqual(one["backward_us"], 1000 + 400)
        # Replaying the measured durations reproduces the measured step.
        durs = [d for _, d in prof.measured_buckets]
        again = step_model.predict(prof, None, MiB, MiB, durations=durs)
        self.assertAlmostEqual(again["step_us"], prof.measured_step_us)

    def test_the_slowest_rank_sets_the_pace(self):
        # Note [The slowest rank sets the pace]: 3 ranks, and in each step after the skipped
        # two a different one computes 300 us longer (its forward).
        fwd = [[500, 500, 800, 500, 500], [500, 500, 500, 800, 500], [500, 500, 500, 500, 800]]
        events = []
        for r in range(3):
            events += trace(5, [MiB] * 2, pid=r, forward_us=fwd[r])
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(events, f)
        self.addCleanup(os.unlink, f.name)
        slow = step_model.load_timeline(f.name)
        self.assertEqual(slow.steps, 3)
        self.assertEqual(slow.forward_us, 800)
        self.assertEqual(slow.median_compute_us, 10 + 500 + 1000 + 50)
        self.assertEqual(slow.straggle_us, 300)
        typical = step_model.load_timeline(f.name, pace="median")
        self.assertEqual(typical.forward_us, 500)
        self.assertEqual(typical.straggle_us, 0)
        cost = lambda b: 10.0
        self.assertAlmostEqual(step_model.predict(slow, cost, MiB, MiB)["step_us"] -
                               step_model.predict(typical, cost, MiB, MiB)["step_us"], 300)
        with self.assertRaisesRegex(ValueError, "pace"):
            step_model.load_timeline(f.name, pace="fastest")

    def test_best_bucket_trades_latency_for_overlap(self):
        prof = step_model.synthetic_profile(64 * MiB, 1000, 10000)
        cost = lambda b: 500.0 + b * 1e-4  # 500 us a call, 10 GB/s
        best, t, _ = step_model.best_bucket(prof, cost)
        self.assertGreater(best, 64 << 10)   # not the smallest: latency dominates there
        self.assertLess(best, 64 * MiB)      # not one bucket: no overlap there
        self.assertLess(t, step_model.predict(prof, cost, 64 * MiB, 64 * MiB)["step_us"])

    def test_bad_timeline(self):
        with self.assertRaisesRegex(step_model.TimelineError, "no complete step"):
            self.load(trace(2, [MiB]))


class CommandLineTest(unittest.TestCase):

    def run_cli(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out):
            from contextlib import redirect_stderr
            with redirect_stderr(err):
                rc = cli.main(list(args))
        return rc, out.getvalue(), err.getvalue()

    def params_file(self):
        ps = ParamSet({"workspace": UNIT, "tcp": UNIT, "shm": UNIT})
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(ps.to_json(), f)
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_run_prints_the_bench_table_and_json(self):
        params = self.params_file()
        out_json = tempfile.mktemp(suffix=".json")
        rc, out, _ = self.run_cli("run", "--hosts=4", "--ranks-per-host=2", "--params=" + params,
                                  "--min-bytes=4K", "--max-bytes=1M", "--algo=ring",
                                  "--inter-gbps=10", "--json=" + out_json)
        self.assertEqual(rc, 0)
        self.assertIn("busbw(GB/s)", out)
        rows = json.load(open(out_json))
        os.unlink(out_json)
        self.assertEqual(len(rows), 9)
        self.assertEqual(set(rows[0]), set(bench_io.KEYS))
        self.assertEqual(rows[0]["nproc"], 8)
        for r in rows:
            self.assertAlmostEqual(r["busbw_gbs"], r["algbw_gbs"] * 2 * 7 / 8)

    def test_errors_name_the_file_and_field(self):
        bad = tempfile.mktemp(suffix=".json")
        with open(bad, "w") as f:
            json.dump({"version": 1, "transports": {"tcp": {"alpha_us": -1}}}, f)
        self.addCleanup(os.unlink, bad)
        rc, _, err = self.run_cli("run", "--params=" + bad)
        self.assertEqual(rc, 2)
        self.assertIn("transports.tcp.alpha_us", err)
        rc, _, err = self.run_cli("fit", "/nonexistent/bench.json")
        self.assertEqual(rc, 2)
        self.assertIn("cannot read benchmark file /nonexistent/bench.json", err)
        with open(bad, "w") as f:
            json.dump([{"op": "allreduce", "algo": "ring", "transport": "tcp", "nproc": 2,
                        "bytes": 4096, "time_us": 5.0, "wrong": 3}], f)
        rc, _, err = self.run_cli("fit", bad)
        self.assertIn("3 wrong elements", err)
        with self.assertRaises(SystemExit):
            self.run_cli("run", "--params=x", "--min-bytes=lots")
        rc, _, err = self.run_cli("run", "--params=" + self.params_file(), "--hosts=2",
                                  "--transport=shm")
        self.assertIn("--transport=shm needs --hosts=1", err)
        rc, _, err = self.run_cli("run", "--params=" + self.params_file(), "--hosts=2",
                                  "--transport=tcp", "--algo=hier")
        self.assertEqual(rc, 2)
        self.assertIn("needs --transport=auto", err)

    def test_the_default_transport_is_one_the_params_have(self):
        # Fitted from TCP sweeps alone: an entry tcp, no node workspace.
        rows = [{"op": "allreduce", "backend": "native", "algo": algo, "transport": "tcp",
                 "nproc": 2, "bytes": (4 << 10) << i, "dtype": "float32", "wrong": 0,
                 "time_us": 50.0 + 3 * k + 2 ** i, "p50_us": 50.0 + 3 * k + 2 ** i}
                for k, algo in enumerate(("ring", "tree")) for i in range(8)]
        bench = tempfile.mktemp(suffix=".json")
        with open(bench, "w") as f:
            json.dump(rows, f)
        self.addCleanup(os.unlink, bench)
        rc, out, err = self.run_cli("fit", bench)
        self.assertEqual(rc, 0, err)
        params = tempfile.mktemp(suffix=".json")
        with open(params, "w") as f:
            f.write(out)
        self.addCleanup(os.unlink, params)
        self.assertNotIn("workspace", json.loads(out)["transports"])
        rc, out, err = self.run_cli("run", "--params=" + params, "--max-bytes=64K")
        self.assertEqual(rc, 0, err)
        self.assertIn("transport tcp", out)
        rc, out, err = self.run_cli("step", "--params=" + params, "--grad-mb=4",
                                    "--backward-ms=10")
        self.assertEqual(rc, 0, err)
        # Asked for one it lacks: the error says which --transport values the file has.
        for transport, missing in (("auto", "workspace"), ("shm", "shm")):
            rc, _, err = self.run_cli("run", "--params=" + params, "--transport=" + transport)
            self.assertEqual(rc, 2)
            self.assertIn(f"{params} has no {missing} entry for --transport={transport}; it has "
                          "parameters for --transport=tcp", err)
        rc, _, err = self.run_cli("run", "--params=" + params, "--hosts=2", "--inter=tcp_1gbit")
        self.assertEqual(rc, 2)
        self.assertIn("has parameters for no --transport --hosts=2 (its entries: tcp; "
                      "--transport=auto needs workspace and tcp_1gbit; --transport=tcp needs tcp "
                      "and tcp_1gbit)", err)

    def test_step_emit_sets_the_bucket_line_and_keeps_the_links(self):
        # Note [Tuned bucket caps]: `step --emit` writes the caps DDP reads; `tune --emit` the links.
        params = self.params_file()
        tuning = tempfile.mktemp(suffix=".tuning")
        self.addCleanup(lambda: os.path.exists(tuning) and os.unlink(tuning))
        rc, _, err = self.run_cli("tune", "--params=" + params, "--nproc=2", "--emit=" + tuning)
        self.assertEqual(rc, 0, err)
        links = [ln for ln in open(tuning).read().splitlines() if ln.startswith("link ")]
        self.assertTrue(links)
        step = ["step", "--params=" + params, "--ranks-per-host=2", "--grad-mb=97.66",
                "--forward-ms=60", "--backward-ms=120", "--emit=" + tuning]
        for _ in range(2):  # the second run replaces the line
            rc, out, err = self.run_cli(*step)
            self.assertEqual(rc, 0, err)
        best = json.loads(out)["best_bucket_bytes"]
        lines = open(tuning).read().splitlines()
        self.assertEqual(lines[0], "paddle_tuning_params 1")
        self.assertEqual([ln for ln in lines if ln.startswith("link ")], links)
        self.assertEqual([ln for ln in lines if ln.startswith("bucket ")],
                         [f"bucket {1 << 20} {best}"])
        # A file that is not a tuning file is refused, not overwritten.
        with open(tuning, "w") as f:
            f.write("my notes\n")
        rc, _, err = self.run_cli(*step)
        self.assertEqual(rc, 2)
        self.assertIn("is not a tuning file", err)
        self.assertEqual(open(tuning).read(), "my notes\n")

    def test_tcp_link_names_the_entries(self):
        rows = [{"op": "allreduce", "backend": "native", "algo": "ring", "transport": "tcp",
                 "nproc": 2, "bytes": (4 << 10) << i, "dtype": "float32", "wrong": 0,
                 "time_us": 100.0 + 2 ** i, "p50_us": 100.0 + 2 ** i} for i in range(8)]
        bench = tempfile.mktemp(suffix=".json")
        with open(bench, "w") as f:
            json.dump(rows, f)
        self.addCleanup(os.unlink, bench)
        rc, out, err = self.run_cli("fit", bench, "--tcp-link=tcp_1gbit")
        self.assertEqual(rc, 0, err)
        self.assertEqual(list(json.loads(out)["transports"]), ["tcp_1gbit"])
        shaped = tempfile.mktemp(suffix=".json")
        with open(shaped, "w") as f:
            f.write(out)
        self.addCleanup(os.unlink, shaped)
        # Entries of several files together: loopback within hosts, the shaped link between.
        rc, out, err = self.run_cli("validate", bench, "--params=" + self.params_file(),
                                    "--params=" + shaped, "--tcp-link=tcp_1gbit", "--hosts=2")
        self.assertEqual(rc, 0, err)
        self.assertIn("tcp_1gbit/ring/2", out)
        rc, _, err = self.run_cli("validate", bench, "--params=" + shaped, "--hosts=3",
                                  "--tcp-link=tcp_1gbit")
        self.assertEqual(rc, 2)
        self.assertIn("cannot run on 3 hosts", err)
        with self.assertRaises(SystemExit):
            self.run_cli("fit", bench, "--tcp-link=tcp@2")

    def test_merge_rounds(self):
        base = {"op": "allreduce", "backend": "native", "algo": "ring", "transport": "tcp",
                "nproc": 2, "bytes": 4096, "dtype": "float32", "wrong": 0, "max_us": 9.0}
        files = []
        for t in (5.0, 3.0, 4.0):
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump([dict(base, time_us=t, p50_us=t - 1)], f)
            self.addCleanup(os.unlink, f.name)
            files.append(f.name)
        for stat, want in (("median", 4.0), ("min", 3.0)):
            rc, out, _ = self.run_cli("merge", "--stat=" + stat, *files)
            self.assertEqual(rc, 0)
            row, = json.loads(out)
            self.assertEqual((row["time_us"], row["p50_us"]), (want, want - 1))
            self.assertAlmostEqual(row["algbw_gbs"], 4096 / (want * 1e3))

    def test_entry_script(self):
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, "simulate"), "tune",
                               "--params=" + self.params_file(), "--nproc=2,4"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("tree <= (model)", proc.stdout)


if __name__ == "__main__":
    unittest.main()
