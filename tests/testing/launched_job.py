"""A job a test starts (usually the launcher, paddlerun) with its output lines kept beside the
monotonic time each arrived, so a test can wait for a line after an event it caused and time
the gap; and the /proc walk that finds the job's workers. Shared by the elastic tests
(tests/tools/elastic*_test.py) and the data master's (tests/data/elastic_tasks_test.py).
"""
import os
import re
import signal
import subprocess
import threading
import time


class LaunchedJob:
    """`cmd` started with stdout and stderr merged into lines. `label` prefixes text()'s lines
    (a test with several jobs); `new_session` puts the job in a process group of its own, which
    finish() kills on a timeout."""

    def __init__(self, cmd, env=None, label=None, new_session=True):
        self.label = label
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=new_session)
        self._new_session = new_session
        self.lines = []  # (monotonic time, line)
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.p.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))

    def find(self, pattern, after=0.0):
        """(time, match) of the first line since `after` that matches, or (None, None)."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        with self.lock:
            for t, line in self.lines:
                if t >= after:
                    m = rx.search(line)
                    if m:
                        return t, m
        return None, None

    def wait_line(self, pattern, after=0.0, timeout=120.0):
        """find() until it matches, the job has ended and said all, or `timeout` passes."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            t, m = self.find(rx, after)
            if m or time.monotonic() >= deadline:
                return t, m
            if self.p.poll() is not None and not self.reader.is_alive():
                return self.find(rx, after)
            time.sleep(0.02)

    def last(self, pattern):
        """The time of the last line that matches, 0 when none does."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        with self.lock:
            return max((t for t, line in self.lines if rx.search(line)), default=0.0)

    def text(self):
        with self.lock:
            if self.label:
                return "\n".join(f"[{self.label}] {line}" for _, line in self.lines)
            return "\n".join(line for _, line in self.lines)

    def finish(self, timeout):
        """The exit status, or None when the job did not end within `timeout` (it is then
        killed, with its process group when it has one of its own)."""
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            if self._new_session:
                os.killpg(self.p.pid, signal.SIGKILL)
            else:
                self.p.kill()
            self.p.wait()
            return None
        finally:
            self.reader.join(5)

    def workers(self, name=b"fashion_mnist"):
        """{pid: RANK} of the processes below the job whose command line holds `name`."""
        out = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if name not in f.read():
                        continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            except (OSError, ValueError):
                continue
            if descends(int(pid), self.p.pid):
                out[int(pid)] = int(env.get(b"RANK", b"-1"))
        return out


def descends(pid, ancestor):
    """Whether `ancestor` is among the parents of `pid` (False once either is gone)."""
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
    return False


def wait_any(jobs, pattern, after, timeout=60.0):
    """(time, match, job) of the first line since `after` in any of `jobs`, or Nones."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job in jobs:
            t, m = job.find(rx, after)
            if m:
                return t, m, job
        time.sleep(0.02)
    return None, None, None
