"""The report's environment header: the machine, its load, the library versions and the two
bounds the collectives are drawn against (memcpy bandwidth for shared memory, loopback TCP
bandwidth for sockets), measured here and now."""
import os
import platform
import re
import shutil
import socket
import subprocess
import time

import numpy as np

# Debian packages whose versions the header prints: (label, package).
PACKAGES = [("Gloo", "libgloo-dev"), ("UCX", "libucx0"), ("OpenMPI", "openmpi-bin"),
            ("MPICH", "mpich"), ("PyTorch", "python3-torch"), ("OpenBLAS", "libopenblas0-pthread"),
            ("NumPy", "python3-numpy")]


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def cpu_model():
    m = re.search(r"^model name\s*:\s*(.+)$", _read("/proc/cpuinfo"), re.M)
    return m.group(1).strip() if m else platform.processor() or "unknown"


def memory_gib():
    m = re.search(r"^MemTotal:\s*(\d+) kB", _read("/proc/meminfo"), re.M)
    return round(int(m.group(1)) / 2**20, 1) if m else None


def package_version(package):
    """The installed Debian version of `package`, or None when it is not installed."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", package],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    status, _, version = out.stdout.partition("|")
    return version if out.returncode == 0 and status.endswith(" installed") else None


def git_describe(root):
    try:
        out = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty", "--tags"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def memcpy_gbs(nbytes=64 << 20, repeats=5):
    """Best copy rate of `nbytes` between two buffers (GB/s of bytes copied, 1e9 bytes)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_tcp_gbs(seconds=2.0):
    """Loopback TCP bandwidth (GB/s): iperf3 when installed, else one socket pair of our own.
    Returns (GB/s, tool)."""
    if shutil.which("iperf3"):
        port = _free_port()
        server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            out = None
            for _ in range(20):  # until the server listens (a probe connection would use up -1)
                time.sleep(0.25)
                out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t",
                                      str(seconds), "-f", "g"], capture_output=True, text=True,
                                     timeout=seconds + 20)
                if out.returncode == 0:
                    break
            m = re.search(r"([\d.]+) Gbits/sec.*receiver", out.stdout)
            if m:
                return float(m.group(1)) / 8, "iperf3"
        except subprocess.TimeoutExpired:
            pass
        finally:
            server.kill()
            server.wait()
    return _own_loopback_gbs(seconds), "python socket pair"


def _own_loopback_gbs(seconds):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)
    pid = os.fork()
    if pid == 0:  # the sender
        try:
            with socket.create_connection(listener.getsockname(), timeout=10) as s:
                chunk = b"\0" * (1 << 20)
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    s.sendall(chunk)
        finally:
            os._exit(0)
    conn, _ = listener.accept()
    conn.settimeout(10)
    received = 0
    start = time.perf_counter()
    buf = bytearray(1 << 20)
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        received += n
    elapsed = time.perf_counter() - start
    conn.close()
    listener.close()
    os.waitpid(pid, 0)
    return received / elapsed / 1e9


def collect(root, measure=True):
    """The header's fields (a dict, stored in results.json as "environment")."""
    env = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": memory_gib(),
        "kernel": platform.release(),
        "host": socket.gethostname(),
        "load_before": list(os.getloadavg()),
        "versions": {"Paddle Collective": git_describe(root)},
    }
    for label, package in PACKAGES:
        env["versions"][label] = package_version(package) or "not installed"
    if measure:
        env["memcpy_gbs"] = memcpy_gbs()
        env["loopback_tcp_gbs"], env["loopback_tcp_tool"] = loopback_tcp_gbs()
    return env
