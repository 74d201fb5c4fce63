"""The workers' metrics, gathered by the launcher and served over HTTP (paddlerun --dashboard).

Note [Metrics hub]
Each worker sends a snapshot of its MetricsRegistry once a second as one UDP datagram to the
address in PADDLE_METRICS_ADDR (Note [Metrics push] in paddle/core/metrics_pusher.h). The hub
owns that socket, on 127.0.0.1 of this node, and a thread that keeps only the newest snapshot of
each worker: memory is bounded by the number of workers (and at most MAX_WORKERS of them, the
oldest forgotten first), never by the length of the job, and a worker never waits for the hub.
Counters are totals, so a lost datagram loses nothing but a second of freshness.

Note [Straggler verdict]
In synchronous data parallelism every rank's step takes about as long: the fast ranks wait in
the gradient allreduce for the slow one. So step time does not name a straggler; the time a
rank spends outside that wait does. From each worker's last WINDOW_S seconds of snapshots the
hub takes the step time and the allreduce wait per step, and their difference ("compute"). A
rank whose compute exceeds the median of the other ranks' by STRAGGLER_MARGIN (and by at least
STRAGGLER_MIN_S) in STRAGGLER_CHECKS checks in a row, one a second, is named in the launcher's
log and on the page, and named again as recovered when it no longer is. A rank that sent
nothing for STALE_S while others did (stopped, hung) is named too.

The HTTP server (stdlib http.server, one thread per request) serves:
  /metrics        the Prometheus text format (version 0.0.4), one series per worker with the
                  labels job (--rdzv-id), rank, host and generation (docs/observability.md);
  /api/workers    the same data as JSON, for the page;
  /               the live page (dashboard_page.py).
It listens on 127.0.0.1 unless --dashboard-host says otherwise; anywhere else it answers only
requests that carry the job's token (Note [Job token] in options.py) as a bearer token.
"""
import collections
import hmac
import http.server
import json
import math
import socket
import threading
import time
import urllib.parse

from paddlerun import dashboard_page

MAX_WORKERS = 4096
MAX_EVENTS = 256
STALE_S = 5.0  # a worker with no snapshot for this long is reported as down (paddle_up 0)
WINDOW_S = 5.0  # Note [Straggler verdict]
STRAGGLER_MARGIN = 0.3
STRAGGLER_MIN_S = 0.005
STRAGGLER_CHECKS = 3
SILENT_S = 3.0  # a rank silent this long while others report is named

# Metric name -> help line, for the names docs/observability.md promises. Other names a program
# reports are served too, with a generic help line.
HELP = {
    "paddle_steps_total": "Optimizer steps the worker has taken.",
    "paddle_samples_total": "Training samples the worker has processed.",
    "paddle_step_seconds": "Time of one training step on the worker.",
    "paddle_allreduce_wait_seconds_total":
        "Time the worker waited for gradient allreduces after its backward pass.",
    "paddle_allreduce_bytes_total": "Gradient bucket bytes the worker handed to allreduce.",
    "paddle_data_wait_seconds_total": "Time the worker's steps waited for their batches.",
    "paddle_last_allreduce_wait_seconds": "Allreduce wait of the worker's latest step.",
    "paddle_membership_changes_total":
        "Elastic membership changes (new generations after the first) the worker went through.",
    "paddle_loss": "Training loss of the worker's latest step.",
    "paddle_accuracy": "Latest test accuracy the worker reported.",
    "paddle_generation": "The worker's elastic generation (restart count for static jobs).",
    "paddle_world_size": "Workers in the worker's current generation.",
    "paddle_up": "1 while the worker sends snapshots, 0 once it stopped for 5 s.",
    "paddle_last_report_age_seconds": "Seconds since the worker's latest snapshot.",
}
LABEL_ONLY = ("paddle_rank",)  # gauges the labels carry instead


def _state(pid):
    """The state letter of /proc/PID/stat ("T" stopped, "Z" exited...), "" if gone. The workers
    that report to a hub run on its node."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _name(name):
    return name if name.startswith("paddle_") else "paddle_" + name


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v):
    if v is None:
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if isinstance(v, float) and not float(v).is_integer() else f"{v:.17g}"


class MetricsHub:
    """Receives the workers' snapshots (Note [Metrics hub])."""

    def __init__(self, job, host="127.0.0.1", log=None):
        self.job = job
        self.log = log  # a callable for the straggler lines (Note [Straggler verdict])
        self._history = {}  # (host, pid) -> deque of (monotonic, steps, step_s sum, wait sum)
        self._suspect = (None, 0)  # (rank, consecutive checks)
        self._straggler = None
        self._next_check = 0.0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.2)
        self.address = f"{host}:{self.sock.getsockname()[1]}"
        self._lock = threading.Lock()
        self._workers = collections.OrderedDict()  # (host, pid) -> worker dict, oldest first
        self._spawned = {}  # pid -> (rank, generation) as the agent started it
        self._events = collections.deque(maxlen=MAX_EVENTS)
        self._seen_events = set()
        self.received = 0
        self._stop = False
        self._thread = threading.Thread(target=self._receive, name="paddlerun-metrics",
                                        daemon=True)
        self._thread.start()

    def spawned(self, pid, rank, generation):
        """The agent started worker `pid` as `rank` in `generation` (its labels until the
        worker's own paddle_rank/paddle_generation gauges say otherwise)."""
        with self._lock:
            self._spawned[pid] = (rank, generation)
            while len(self._spawned) > MAX_WORKERS:
                self._spawned.pop(next(iter(self._spawned)))

    def rank_of(self, pid):
        """The rank the worker `pid` of this node last reported, or None."""
        with self._lock:
            for (_, p), w in reversed(self._workers.items()):
                if p == pid:
                    return w["rank"]
        return None

    def event(self, kind, text, rank=None):
        """Something the launcher saw (a worker's death, a restart), shown with the workers'."""
        with self._lock:
            self._events.append({"time": time.time(), "kind": kind, "text": text,
                                 "rank": rank, "source": "launcher"})

    def _receive(self):
        while not self._stop:
            if time.monotonic() >= self._next_check:
                self._next_check = time.monotonic() + 1.0
                self._check_stragglers()
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                msg = json.loads(data)
                key = (str(msg["host"]), int(msg["pid"]))
                metrics = msg["metrics"]
            except (ValueError, KeyError, TypeError):
                continue  # not ours, or cut short: the next one replaces it
            self._store(key, msg, metrics)

    def _store(self, key, msg, metrics):
        with self._lock:
            self.received += 1
            rank, generation = self._spawned.get(key[1], (msg.get("rank", -1), 0))
            gauges = metrics.get("gauges", {})
            rank = int(gauges.get("paddle_rank", rank))
            generation = int(gauges.get("paddle_generation", generation))
            now = time.monotonic()
            self._workers.pop(key, None)
            self._workers[key] = {"host": key[0], "pid": key[1], "rank": rank,
                                  "generation": generation, "received": now,
                                  "metrics": metrics, "recent": self._recent(key, now, metrics)}
            while len(self._workers) > MAX_WORKERS:
                gone, _ = self._workers.popitem(last=False)
                self._history.pop(gone, None)
            for e in metrics.get("events", []):
                seen = (key, e.get("seq"))
                if seen in self._seen_events:
                    continue
                self._seen_events.add(seen)
                self._events.append({"time": e.get("time"), "kind": e.get("kind"),
                                     "text": e.get("text"), "rank": rank,
                                     "source": f"{key[0]}:{key[1]}"})
            if len(self._seen_events) > 8 * MAX_EVENTS:
                self._seen_events = {(k, s) for k, s in self._seen_events if k in self._workers}

    def _recent(self, key, now, metrics):
        """Step time, allreduce wait and compute per step over the last WINDOW_S (or None)."""
        h = metrics.get("histograms", {}).get("paddle_step_seconds")
        c = metrics.get("counters", {})
        if h is None:
            return None
        point = (now, sum(h["counts"]), h["sum"], c.get("paddle_allreduce_wait_seconds_total", 0))
        history = self._history.setdefault(key, collections.deque(maxlen=64))
        history.append(point)
        while len(history) > 2 and history[1][0] <= now - WINDOW_S:
            history.popleft()
        steps = point[1] - history[0][1]
        if steps <= 0:
            return None
        step_s = (point[2] - history[0][2]) / steps
        wait_s = (point[3] - history[0][3]) / steps
        return {"step_s": step_s, "wait_s": wait_s, "busy_s": max(step_s - wait_s, 0.0)}

    def straggler(self):
        """The current verdict (Note [Straggler verdict]): a dict with rank and text, or None."""
        with self._lock:
            return self._straggler

    def _check_stragglers(self):
        workers = self.workers()
        fresh = [w for w in workers if w["age"] < STALE_S]
        if not fresh:
            return
        newest = max(w["generation"] for w in fresh)
        current = [w for w in workers if w["generation"] == newest]
        verdict = None
        silent = [(w, _state(w["pid"])) for w in current if w["age"] > SILENT_S]
        silent = [(w, state) for w, state in silent if state not in ("", "Z", "X")]  # not exited
        if silent and len(silent) < len(current):
            w, state = max(silent, key=lambda ws: ws[0]["age"])
            how = "is stopped (SIGSTOP?)" if state in ("T", "t") else "is hung?"
            verdict = {"rank": w["rank"], "text": (
                f"rank {w['rank']} (pid {w['pid']} on {w['host']}) sent nothing for "
                f"{w['age']:.1f} s while the others did: it {how}")}
        busy = {w["rank"]: w["recent"]["busy_s"] for w in current if w.get("recent")}
        if verdict is None and len(busy) >= 2:
            rank = max(busy, key=busy.get)
            others = sorted(v for r, v in busy.items() if r != rank)
            median = others[len(others) // 2] if len(others) % 2 else (
                others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
            slow = busy[rank]
            if slow > median * (1 + STRAGGLER_MARGIN) and slow - median > STRAGGLER_MIN_S:
                step = next(w["recent"]["step_s"] for w in current if w["rank"] == rank)
                verdict = {"rank": rank, "compute_s": slow, "median_s": median, "text": (
                    f"rank {rank} is the straggler: {slow * 1000:.1f} ms of compute per step "
                    f"against a median of {median * 1000:.1f} ms on the other ranks "
                    f"({slow / median if median > 0 else float('inf'):.2f}x; the others wait "
                    f"for it in allreduce; step {step * 1000:.1f} ms)")}
        rank, count = self._suspect
        if verdict is None:
            self._suspect = (None, 0)
        else:
            self._suspect = (verdict["rank"], count + 1 if rank == verdict["rank"] else 1)
        named = verdict if verdict is not None and self._suspect[1] >= STRAGGLER_CHECKS else None
        with self._lock:
            before, self._straggler = self._straggler, named
        if self.log is None:
            return
        if named is not None and (before is None or before["rank"] != named["rank"]):
            self.log(named["text"])
            self.event("straggler", named["text"], named["rank"])
        elif named is None and before is not None and verdict is None:
            self.log(f"rank {before['rank']} keeps pace again")

    def workers(self):
        """The newest snapshot of every worker, by rank then generation (copies)."""
        now = time.monotonic()
        with self._lock:
            out = [dict(w, age=now - w["received"]) for w in self._workers.values()]
        return sorted(out, key=lambda w: (w["generation"], w["rank"], w["pid"]))

    def events(self):
        with self._lock:
            return list(self._events)

    def close(self):
        self._stop = True
        self._thread.join()
        self.sock.close()

    def prometheus_text(self):
        """Every worker's metrics in the Prometheus text format."""
        families = collections.OrderedDict()  # name -> (type, [lines])

        def add(name, kind, line):
            families.setdefault(name, (kind, []))[1].append(line)

        for w in self.workers():
            labels = (f'job="{_escape(self.job)}",rank="{w["rank"]}",host="{_escape(w["host"])}",'
                      f'generation="{w["generation"]}"')
            m = w["metrics"]
            for name, v in sorted(m.get("counters", {}).items()):
                add(_name(name), "counter", f"{_name(name)}{{{labels}}} {_number(v)}")
            for name, v in sorted(m.get("gauges", {}).items()):
                if name not in LABEL_ONLY:
                    add(_name(name), "gauge", f"{_name(name)}{{{labels}}} {_number(v)}")
            for name, h in sorted(m.get("histograms", {}).items()):
                n, total = _name(name), 0
                for bound, count in zip(h["bounds"] + [math.inf], h["counts"]):
                    total += count
                    le = "+Inf" if math.isinf(bound) else _number(bound)
                    add(n, "histogram", f'{n}_bucket{{{labels},le="{le}"}} {total}')
                add(n, "histogram", f"{n}_sum{{{labels}}} {_number(h['sum'])}")
                add(n, "histogram", f"{n}_count{{{labels}}} {total}")
            add("paddle_up", "gauge", f"paddle_up{{{labels}}} {int(w['age'] < STALE_S)}")
            add("paddle_last_report_age_seconds", "gauge",
                f"paddle_last_report_age_seconds{{{labels}}} {w['age']:.3f}")
        out = []
        for name, (kind, lines) in families.items():
            out.append(f"# HELP {name} {HELP.get(name, 'Reported by the training program.')}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(lines)
        return "\n".join(out) + "\n"


class Dashboard:
    """The HTTP server of --dashboard, in a daemon thread; close() stops it."""

    def __init__(self, hub, host, port, token=None):
        self.hub = hub
        loopback = host in ("127.0.0.1", "localhost", "::1")
        self.token = None if loopback else token
        dashboard = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # no line per request on the job's console
                pass

            def _send(self, code, body, content_type):
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def _authorized(self):
                if dashboard.token is None:
                    return True
                given = self.headers.get("Authorization", "")
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                token = given[7:] if given.startswith("Bearer ") else query.get("token", [""])[0]
                return hmac.compare_digest(token.encode(), dashboard.token.encode())

            def do_GET(self):  # noqa: N802 (http.server's name)
                if not self._authorized():
                    self._send(401, b"the job's token is required (Authorization: Bearer)\n",
                               "text/plain")
                    return
                path = urllib.parse.urlparse(self.path).path
                if path == "/metrics":
                    self._send(200, dashboard.hub.prometheus_text().encode(),
                               "text/plain; version=0.0.4; charset=utf-8")
                elif path == "/api/workers":
                    body = {"job": dashboard.hub.job, "workers": dashboard.hub.workers(),
                            "events": dashboard.hub.events(),
                            "straggler": dashboard.hub.straggler()}
                    self._send(200, json.dumps(body).encode(), "application/json")
                elif path == "/":
                    self._send(200, dashboard_page.PAGE.encode(), "text/html; charset=utf-8")
                else:
                    self._send(404, b"not found; try /metrics or /\n", "text/plain")

        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        host_text = f"[{host}]" if ":" in host else host
        self.url = f"http://{host_text}:{self.port}/"
        self._thread = threading.Thread(target=self.server.serve_forever, name="paddlerun-http",
                                        daemon=True)
        self._thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
