#!/usr/bin/env python3
"""tools/paddlerun/dashboard.py: the hub keeps each worker's newest snapshot from UDP, renders
the Prometheus text format (labels, cumulative histogram buckets, escaping), serves /metrics,
/api/workers and /, and asks for the job's token when not on loopback; --dashboard's options."""
import json
import os
import socket
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))

from paddlerun import dashboard, options  # noqa: E402


def snapshot(pid, rank, steps, generation=None, events=(), step_sum=9.5, wait=0.0):
    gauges = {"paddle_loss": 0.5}
    if generation is not None:
        gauges.update(paddle_generation=generation, paddle_rank=rank)
    counts = [1, 2, steps - 3] if steps >= 3 else [steps, 0, 0]
    return json.dumps({
        "pid": pid, "rank": rank, "host": 'h"1', "time": time.time(),
        "metrics": {"counters": {"paddle_steps_total": steps,
                                 "paddle_allreduce_wait_seconds_total": wait},
                    "gauges": gauges,
                    "histograms": {"paddle_step_seconds": {"bounds": [0.1, 1], "counts": counts,
                                                           "sum": step_sum}},
                    "events": list(events)}}).encode()


class HubTest(unittest.TestCase):
    def setUp(self):
        self.hub = dashboard.MetricsHub("job1")
        host, port = self.hub.address.rsplit(":", 1)
        self.send_to = (host, int(port))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def tearDown(self):
        self.sock.close()
        self.hub.close()

    def send(self, data, expect):
        self.sock.sendto(data, self.send_to)
        deadline = time.monotonic() + 5
        while self.hub.received < expect and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(self.hub.received, expect)

    def test_keeps_the_newest_snapshot_per_worker(self):
        self.hub.spawned(100, 0, 2)
        self.send(snapshot(100, 0, 5), 1)
        self.send(b"not json", 1)  # ignored
        self.send(snapshot(100, 0, 7), 2)
        self.send(snapshot(101, 1, 3), 3)
        workers = self.hub.workers()
        self.assertEqual([(w["rank"], w["metrics"]["counters"]["paddle_steps_total"])
                          for w in workers], [(1, 3), (0, 7)])  # generation 0 first, then 2
        self.assertEqual(workers[1]["generation"], 2)  # from spawned()

    def test_prometheus_text(self):
        self.send(snapshot(100, 0, 6), 1)
        text = self.hub.prometheus_text()
        labels = 'job="job1",rank="0",host="h\\"1",generation="0"'
        self.assertIn("# TYPE paddle_steps_total counter\n"
                      f"paddle_steps_total{{{labels}}} 6\n", text)
        self.assertIn(f"paddle_loss{{{labels}}} 0.5\n", text)
        self.assertIn("# TYPE paddle_step_seconds histogram\n"
                      f'paddle_step_seconds_bucket{{{labels},le="0.1"}} 1\n'
                      f'paddle_step_seconds_bucket{{{labels},le="1"}} 3\n'
                      f'paddle_step_seconds_bucket{{{labels},le="+Inf"}} 6\n'
                      f"paddle_step_seconds_sum{{{labels}}} 9.5\n"
                      f"paddle_step_seconds_count{{{labels}}} 6\n", text)
        self.assertIn(f"paddle_up{{{labels}}} 1\n", text)

    def test_names_the_rank_the_others_wait_for(self):
        lines = []
        self.hub.log = lines.append
        # 10 steps of 100 ms on each rank; ranks 0 and 2 waited 80 ms of each in allreduce,
        # rank 1 waited none: it computed 100 ms against the others' 20 ms.
        self.send(snapshot(100, 0, 10, step_sum=0.0, wait=0.0), 1)
        self.send(snapshot(101, 1, 10, step_sum=0.0, wait=0.0), 2)
        self.send(snapshot(102, 2, 10, step_sum=0.0, wait=0.0), 3)
        self.send(snapshot(100, 0, 20, step_sum=1.0, wait=0.8), 4)
        self.send(snapshot(101, 1, 20, step_sum=1.0, wait=0.0), 5)
        self.send(snapshot(102, 2, 20, step_sum=1.0, wait=0.8), 6)
        for _ in range(dashboard.STRAGGLER_CHECKS - 1):
            self.hub._check_stragglers()
        self.assertIsNone(self.hub.straggler())  # not yet: it must persist
        self.hub._check_stragglers()
        verdict = self.hub.straggler()
        self.assertEqual(verdict["rank"], 1)
        self.assertAlmostEqual(verdict["compute_s"], 0.1)
        self.assertAlmostEqual(verdict["median_s"], 0.02)
        self.assertEqual(lines, [verdict["text"]])
        self.assertIn("rank 1 is the straggler: 100.0 ms of compute per step against a median "
                      "of 20.0 ms", lines[0])

    def test_worker_gauges_name_rank_and_generation_and_events_are_kept_once(self):
        event = {"seq": 1, "time": 1.0, "kind": "membership", "text": "rank 2 died"}
        self.send(snapshot(100, 0, 5, generation=3, events=[event]), 1)
        self.send(snapshot(100, 0, 6, generation=3, events=[event]), 2)
        text = self.hub.prometheus_text()
        self.assertIn('generation="3"', text)
        self.assertNotIn("paddle_rank", text)
        self.assertEqual([e["text"] for e in self.hub.events()], ["rank 2 died"])


class ServerTest(unittest.TestCase):
    def get(self, url, headers=None):
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()

    def test_serves_metrics_api_and_page(self):
        hub = dashboard.MetricsHub("job1")
        board = dashboard.Dashboard(hub, "127.0.0.1", 0, token="secret")
        try:
            status, kind, body = self.get(board.url + "metrics")
            self.assertEqual((status, kind), (200, "text/plain; version=0.0.4; charset=utf-8"))
            _, kind, body = self.get(board.url + "api/workers")
            self.assertEqual(json.loads(body)["job"], "job1")
            _, kind, body = self.get(board.url)
            self.assertTrue(kind.startswith("text/html"))
            with self.assertRaises(urllib.error.HTTPError) as e:
                self.get(board.url + "nothing")
            self.assertEqual(e.exception.code, 404)
        finally:
            board.close()
            hub.close()

    def test_elsewhere_than_loopback_needs_the_token(self):
        hub = dashboard.MetricsHub("job1")
        board = dashboard.Dashboard(hub, "0.0.0.0", 0, token="secret")
        url = f"http://127.0.0.1:{board.port}/metrics"
        try:
            with self.assertRaises(urllib.error.HTTPError) as e:
                self.get(url)
            self.assertEqual(e.exception.code, 401)
            self.assertEqual(self.get(url, {"Authorization": "Bearer secret"})[0], 200)
        finally:
            board.close()
            hub.close()


class OptionsTest(unittest.TestCase):
    def test_dashboard_is_off_by_default_and_checks_its_port(self):
        self.assertIsNone(options.parse(["prog"]).dashboard)
        self.assertEqual(options.parse(["--dashboard=0", "prog"]).dashboard, 0)
        self.assertEqual(options.parse(["prog"]).dashboard_host, "127.0.0.1")
        with self.assertRaisesRegex(options.UsageError, "--dashboard is 70000"):
            options.parse(["--dashboard=70000", "prog"])


if __name__ == "__main__":
    unittest.main()
