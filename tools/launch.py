#!/usr/bin/env python3
"""A minimal torchrun-style launcher for one machine (the launcher issue makes it complete).

    bazel run //tools:launch -- --nproc=4 //examples:fashion_mnist --model=cnn --epochs=3
    bazel-bin/tools/launch --nproc=2 ./my_program --flag

Options come first; the first positional argument is the program and everything after it is
passed to the program untouched. A Bazel label (//pkg:name) runs that binary from the
launcher's runfiles (the labels listed in tools/BUILD.bazel); anything else runs as a
program (a .py file with /usr/bin/python3).

Each child gets the torchrun environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT. Lines of output are prefixed
with "[rank R]". When a child fails (non-zero exit or a signal) the others get SIGTERM, then
SIGKILL after --grace-s; the launcher reports the rank and its exit status and exits with it.
SIGINT/SIGTERM to the launcher reach every child, and children die with the launcher
(PR_SET_PDEATHSIG), so none outlives it.
"""
import argparse
import ctypes
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runfiles_dir():
    """The .runfiles folder this script runs from (bazel run / bazel-bin), else next to it."""
    if os.environ.get("RUNFILES_DIR"):
        return os.environ["RUNFILES_DIR"]
    d = os.path.abspath(__file__)
    while d != "/":
        if d.endswith(".runfiles"):
            return d
        d = os.path.dirname(d)
    return os.path.abspath(sys.argv[0]) + ".runfiles"


def resolve(program):
    """A Bazel label -> its binary in our runfiles; a path stays a path."""
    if not program.startswith("//"):
        if program.endswith(".py"):
            return ["/usr/bin/python3", program]
        return [program]
    package, _, name = program[2:].partition(":")
    name = name or package.rsplit("/", 1)[-1]
    path = os.path.join(runfiles_dir(), "paddle", package, name)
    if not os.path.exists(path):
        sys.exit(f"launch: {program} is not among the launcher's runfiles ({path}); add it to "
                 "the data of //tools:launch or pass the built binary's path")
    return [path]


def die_with_parent():
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgid(0, 0)


def describe(code):
    if code < 0:
        return f"killed by signal {-code} ({signal.Signals(-code).name})"
    return f"exit status {code}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", "--nproc-per-node", type=int, default=1,
                    help="worker processes (default 1)")
    ap.add_argument("--master-addr", default="127.0.0.1", help="MASTER_ADDR (127.0.0.1)")
    ap.add_argument("--master-port", type=int, default=0,
                    help="MASTER_PORT (default: a free port)")
    ap.add_argument("--grace-s", type=float, default=5.0,
                    help="seconds between SIGTERM and SIGKILL when stopping workers (5)")
    ap.add_argument("program", help="a Bazel label, a .py file or a program")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="passed to the program untouched")
    opts = ap.parse_args()
    if opts.nproc < 1:
        ap.error(f"--nproc must be at least 1, got {opts.nproc}")
    command = resolve(opts.program) + opts.args
    port = opts.master_port or free_port()
    cwd = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()

    children = []
    for rank in range(opts.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(opts.nproc),
                   LOCAL_WORLD_SIZE=str(opts.nproc), GROUP_RANK="0",
                   MASTER_ADDR=opts.master_addr, MASTER_PORT=str(port),
                   TORCHELASTIC_RESTART_COUNT="0")
        children.append(subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, preexec_fn=die_with_parent))

    def stop_all(sig=signal.SIGTERM):
        for c in children:
            if c.poll() is None:
                try:
                    os.killpg(c.pid, sig)
                except ProcessLookupError:
                    pass

    def on_signal(signum, _frame):
        stop_all(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    sel = selectors.DefaultSelector()
    partial = {}
    for rank, c in enumerate(children):
        os.set_blocking(c.stdout.fileno(), False)
        sel.register(c.stdout, selectors.EVENT_READ, rank)
        partial[rank] = b""
    failed = None  # (rank, code)
    deadline = None
    open_streams = len(children)
    while open_streams:
        for key, _ in sel.select(timeout=0.2):
            rank = key.data
            chunk = key.fileobj.read()
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                if partial[rank]:
                    sys.stdout.write(f"[rank {rank}] {partial[rank].decode(errors='replace')}\n")
                continue
            lines = (partial[rank] + chunk).split(b"\n")
            partial[rank] = lines.pop()
            for line in lines:
                sys.stdout.write(f"[rank {rank}] {line.decode(errors='replace')}\n")
            sys.stdout.flush()
        for rank, c in enumerate(children):
            code = c.poll()
            if code not in (None, 0) and failed is None:
                failed = (rank, code)
                sys.stderr.write(f"launch: rank {rank} failed ({describe(code)}); stopping "
                                 "the other workers\n")
                stop_all()
                deadline = time.monotonic() + opts.grace_s
        if deadline is not None and time.monotonic() > deadline:
            stop_all(signal.SIGKILL)
            deadline = None
    for c in children:
        c.wait()
    if failed is not None:
        rank, code = failed
        sys.stderr.write(f"launch: job failed: rank {rank} {describe(code)}\n")
        return code if code > 0 else 128 - code
    return 0


if __name__ == "__main__":
    sys.exit(main())
