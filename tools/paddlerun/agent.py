"""The agent of one node: spawns its workers, watches them and the other nodes, restarts.

Agent.run() loops over rounds (Note [Node rendezvous] in rendezvous.py):
  1. rendezvous for round r (a Late launcher waits in round r+1 instead);
  2. spawn --nproc workers, each in its own process group with PR_SET_PDEATHSIG=SIGKILL, so none
     outlives the launcher even when the launcher is killed with SIGKILL;
  3. monitor every --monitor-interval: the workers (a non-zero exit or a signal is a failure),
     the round's "failed" key (another node's failure), the other nodes' heartbeats, a launcher
     waiting to join (elastic jobs with room), and SIGINT/SIGTERM sent to the launcher (forwarded
     to every worker at once);
  4. on a failure stop every worker (SIGTERM to its group, SIGKILL after --grace-s), report the
     rank, its exit status or signal and the tail of its output, and either go to round r+1
     (restarts left) or exit with the failure. When all of this node's workers succeeded it waits
     until every node's did (or one failed, which restarts this node too).

Note [One verdict]: the launcher usually sees a worker die before the others do (it waits on
every child), and stops them within the grace period, so their own output often ends with no
error at all. Each worker it stopped therefore gets the verdict as the last line of its output
("paddlerun: stopped this worker (SIGTERM): rank 2 (...) was killed by SIGKILL"), the same
words as the launcher's `job failed:` line; a node stopped for another node's failure names
that rank and node. A user reading one worker's log, or one pod's, learns the culprit there.
The culprit is not always the first worker to exit: a rank that fails on its own cause (a full
disk) aborts its communicator first, and its peers may exit before it does. Such a rank writes
its cause, with the time, to its PADDLE_ERROR_FILE before aborting (paddle/core/error_file.h),
so when a worker fails the launcher names the worker whose error file is the earliest, if any.
"""
import ctypes
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from paddlerun import logs, options, rendezvous
from paddlerun.kvstore import StoreError

PR_SET_PDEATHSIG = 1
EXIT_RENDEZVOUS = 3


_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)  # loaded before any fork, not in the child


def _die_with_parent(launcher_pid):
    """Runs in the child between fork and exec. The death signal only covers a launcher that
    dies after prctl: one that died between the fork and here has already left this child to
    init, which the parent pid tells."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher_pid:
        os._exit(1)
    os.setpgid(0, 0)


def _process_state(pid):
    """The state letter of /proc/PID/stat ("T" stopped, "D" in I/O...), "" if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def describe(code):
    """Popen.returncode -> words."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        return f"killed by signal {-code} ({name})"
    return f"exited with status {code}"


def exit_status(code):
    return code if code > 0 else 128 - code


class Failure:
    """Why a round ended badly."""

    def __init__(self, message, code=1, rank=None, local=False):
        self.message = message
        self.code = code
        self.rank = rank
        self.local = local


class Agent:
    def __init__(self, opts, command, rdzv, store, cwd, err=None, token=None, hub=None):
        self.opts = opts
        self.command = command
        self.rdzv = rdzv
        self.store = store
        self.cwd = cwd
        self.token = token  # the job's secret, for the workers' store (Note [Job token])
        self.hub = hub  # --dashboard: where the workers send metrics (Note [Metrics hub])
        self.err = err or sys.stderr
        self.workers = []  # (rank, local_rank, Popen)
        # Each worker's PADDLE_ERROR_FILE, per round (Note [One verdict]).
        self._errors = tempfile.TemporaryDirectory(prefix="paddlerun-errors-")
        self.signal = None
        self.failures = 0

    def say(self, message):
        self.err.write(f"paddlerun: {message}\n")
        self.err.flush()

    # Signals: forwarded to every worker at once; the loop then stops the job.
    def _on_signal(self, signum, _frame):
        self.signal = signum
        self._kill_all(signum)

    def _kill_all(self, sig):
        for _, _, p in self.workers:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass

    def install_signal_handlers(self):
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _spawn(self, a, mux):
        self.workers = []
        for local in range(self.opts.nproc):
            rank = a.rank_offset + local
            env = options.worker_env(
                os.environ, rank=rank, local_rank=local, world_size=a.world_size,
                local_world_size=self.opts.nproc, group_rank=a.group_rank,
                group_world_size=a.group_world_size, master_addr=a.master_addr,
                master_port=a.master_port, restart_count=a.round,
                max_restarts=self.opts.max_restarts, run_id=self.opts.rdzv_id,
                nnodes=self.opts.nnodes, token=self.token)
            if a.group_world_size > 1 and not os.environ.get("PADDLE_SOCKET_IFNAME"):
                # Our transports listen where the host name points, else on loopback; with
                # several nodes they must use the address the other nodes reach this one at.
                env["PADDLE_SOCKET_IFNAME"] = a.nodes[a.group_rank]["host"]
            if self.hub is not None:
                env["PADDLE_METRICS_ADDR"] = self.hub.address
            env["PADDLE_ERROR_FILE"] = self._error_file(a.round, rank)
            p = subprocess.Popen(self.command, env=env, cwd=self.cwd, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 preexec_fn=functools.partial(_die_with_parent, os.getpid()))
            if self.hub is not None:
                self.hub.spawned(p.pid, rank, a.round)
            self.workers.append((rank, local, p))
            mux.add(rank, local, p.stdout)

    def _error_file(self, round_, rank):
        folder = os.path.join(self._errors.name, f"r{round_}")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, f"error_{rank}")

    def _culprit(self, a, failed):
        """The Failure to report when the workers `failed` [(rank, local, Popen, code)] have
        exited with an error (Note [One verdict]): one killed by a signal without writing an
        error file (it could not tell anyone: the peers' errors follow from it), else the
        worker whose error file is the earliest, else the first that exited."""
        def where(rank, local, p):
            return f"rank {rank} (local rank {local} on node {a.group_rank}, pid {p.pid})"

        errors = {}
        for rank, local, p in self.workers:
            try:
                with open(self._error_file(a.round, rank)) as f:
                    head, _, message = f.read().partition("\n")
                errors[rank] = (int(head.split()[0]), local, p,
                                (message.strip().splitlines() or ["?"])[0][:400])
            except (OSError, ValueError, IndexError):
                continue
        for rank, local, p, code in failed:
            if code < 0 and rank not in errors:
                return Failure(f"{where(rank, local, p)} {describe(code)}", exit_status(code),
                               rank, local=True)
        if errors:
            rank = min(errors, key=lambda r: errors[r][0])
            _, local, p, message = errors[rank]
            code = p.poll()
            return Failure(f"{where(rank, local, p)} failed: {message}",
                           exit_status(code) if code not in (None, 0) else 1, rank, local=True)
        rank, local, p, code = failed[0]
        return Failure(f"{where(rank, local, p)} {describe(code)}", exit_status(code), rank,
                       local=True)

    def _stop_workers(self, mux, why=None, culprit=None):
        """SIGTERM to every worker's group, SIGKILL after --grace-s; reads their last output.
        With `why`, the output of each worker this stopped, `culprit` excepted, ends with a line
        saying why, so a user reading only that worker's log sees the cause (Note [One
        verdict])."""
        running = [rank for rank, _, p in self.workers if p.poll() is None]
        how = "SIGTERM"
        self._kill_all(signal.SIGTERM)
        deadline = time.monotonic() + self.opts.grace_s
        while any(p.poll() is None for _, _, p in self.workers):
            mux.pump(0.02)
            if time.monotonic() >= deadline:
                self._kill_all(signal.SIGKILL)
                how = f"SIGTERM, then SIGKILL after --grace-s={self.opts.grace_s:g}"
                break
        for _, _, p in self.workers:
            p.wait()
        # A worker's own children are in its process group: make sure none is left.
        for _, _, p in self.workers:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        mux.drain(1.0)
        if why:
            for rank in running:
                if rank != culprit:
                    mux.note(rank, f"stopped this worker ({how}): {why}")

    def _check_nodes(self, a, beats):
        """A Failure when another node failed or stopped heartbeating; "join" when a launcher
        waits to join and there is room; else None."""
        r = a.round
        self.store.add(f"r{r}/hb{a.group_rank}", 1)
        failed = self.store.get(f"r{r}/failed")
        if failed is not None:
            info = json.loads(failed)
            return Failure(f"rank {info['rank']} on node {info['node']} ({info['host']}) "
                           f"{info['what']}", rank=info["rank"])
        now = time.monotonic()
        for g in range(a.group_world_size):
            if g == a.group_rank:
                continue
            value = self.store.get(f"r{r}/hb{g}")
            if g not in beats or beats[g][0] != value:
                beats[g] = (value, now)
            elif now - beats[g][1] > self.opts.node_timeout:
                return Failure(f"node {g} ({a.nodes[g]['host']}) sent no heartbeat for "
                               f"{self.opts.node_timeout:g} s (--node-timeout)")
        if (a.group_world_size < self.opts.max_nodes and
                int(self.store.get(f"r{r + 1}/joined") or 0) > 0):
            return "join"
        return None

    def _monitor(self, a, mux):
        """Until the round ends: None (every node succeeded), a Failure, "join" or "signal"."""
        beats = {}
        done = False
        next_check = 0.0
        first_success = None  # when a worker of this node first exited 0
        while True:
            mux.pump(self.opts.monitor_interval)
            if self.signal is not None:
                return "signal"
            if not done:
                failed = [(rank, local, p, p.poll()) for rank, local, p in self.workers
                          if p.poll() not in (None, 0)]
                if failed:
                    return self._blame_stopped(self._culprit(a, failed))
                if all(p.poll() == 0 for _, _, p in self.workers):
                    done = True
                    self.store.add(f"r{a.round}/done", 1)
                elif any(p.poll() == 0 for _, _, p in self.workers):
                    first_success = first_success or time.monotonic()
                    if time.monotonic() - first_success > self.opts.exit_timeout:
                        return self._stuck_after_success(a)
            now = time.monotonic()
            if now >= next_check or done:
                next_check = now + max(self.opts.monitor_interval, 0.05)
                status = self._check_nodes(a, beats)
                if status == "join" and done:
                    status = None  # this node is finished; the newcomer waits for a next job
                if status is not None:
                    return status
                if done:
                    if int(self.store.get(f"r{a.round}/done") or 0) >= a.group_world_size:
                        return None
                    time.sleep(0.05)

    def _blame_stopped(self, failure):
        """A worker that fails usually timed out on a peer; a peer of this node that is stopped
        (SIGSTOP, a debugger) is the cause, so the verdict names that one, with the failure."""
        for rank, _, p in self.workers:
            if rank != failure.rank and p.poll() is None and _process_state(p.pid) in ("T", "t"):
                return Failure(f"rank {rank} (pid {p.pid}) is stopped (SIGSTOP?) and "
                               f"{failure.message}, likely waiting for it", failure.code, rank,
                               local=True)
        return failure

    def _stuck_after_success(self, a):
        """A Failure naming the workers still running --exit-timeout after another one of this
        node succeeded (a stopped or hung worker would otherwise hold the job forever)."""
        stuck = []
        for rank, local, p in self.workers:
            if p.poll() is None:
                state = _process_state(p.pid)
                how = {"T": "stopped (SIGSTOP?)", "t": "stopped by a debugger",
                       "D": "in uninterruptible I/O", "Z": "a zombie"}.get(state, "still running")
                stuck.append((rank, f"rank {rank} (pid {p.pid}) is {how}"))
        return Failure(f"{'; '.join(s for _, s in stuck)} {self.opts.exit_timeout:g} s after "
                       f"another worker of node {a.group_rank} exited successfully "
                       "(--exit-timeout)", 1, stuck[0][0] if stuck else None, local=True)

    def _report_local(self, f, a, mux):
        """Publishes a local failure to the other nodes and prints the worker's last lines."""
        info = {"rank": f.rank, "node": a.group_rank, "host": a.nodes[a.group_rank]["host"],
                "what": f.message.split(") ", 1)[-1]}
        if self.store.get(f"r{a.round}/failed") is None:
            self.store.set(f"r{a.round}/failed", json.dumps(info))
        tail = mux.tail(f.rank)
        where = f" (full log: {mux.log_path(f.rank)})" if mux.log_path(f.rank) else ""
        self.say(f"last {len(tail)} lines of rank {f.rank}'s output{where}:\n" +
                 "".join(f"  [rank {f.rank}] {line}\n" for line in tail).rstrip("\n"))

    def run(self):
        """The whole job on this node; returns the launcher's exit status."""
        r = self.rdzv.current_round()
        while True:
            started = time.monotonic()
            try:
                a = self.rdzv.join(r)
            except rendezvous.Late as late:
                self.say(f"{late}; waiting to be admitted in round {r + 1}")
                r += 1
                continue
            self.say(f"attempt {a.round}: node {a.group_rank} of {a.group_world_size}, ranks "
                     f"{a.rank_offset}..{a.rank_offset + self.opts.nproc - 1} of world size "
                     f"{a.world_size}, master {a.master_addr}:{a.master_port} (rendezvous "
                     f"{time.monotonic() - started:.2f} s)")
            mux = logs.LogMux(self.opts.log_dir, a.round, self.opts.tee, self.opts.ranks_filter)
            if self.signal is not None:
                return 128 + self.signal
            self._spawn(a, mux)
            try:
                outcome = self._monitor(a, mux)
            except StoreError:
                self._stop_workers(mux)
                raise
            died_at = time.monotonic()
            if outcome is None:
                mux.drain(5.0)
                self.say(f"all {a.world_size} workers succeeded")
                return 0
            if outcome == "signal":
                name = signal.Signals(self.signal).name
                self.say(f"got {name}; stopping the workers")
                info = {"rank": "-", "node": a.group_rank, "host": a.nodes[a.group_rank]["host"],
                        "what": f"was stopped: its launcher got {name}"}
                try:
                    self.store.set(f"r{a.round}/failed", json.dumps(info))
                except StoreError:
                    pass
                self._stop_workers(mux, why=f"the launcher got {name}")
                return 128 + self.signal
            if outcome == "join":
                self.say(f"a node waits to join; restarting with it (round {a.round + 1})")
                self._stop_workers(mux, why="a node joins; every worker restarts with it")
                r += 1
                continue
            f = outcome
            self.say(f"{f.message}; stopping the other workers")
            if self.hub is not None:
                self.hub.event("failure", f.message, f.rank)
            if f.local:
                self._report_local(f, a, mux)
            self._stop_workers(mux, why=f.message, culprit=f.rank)
            self.say(f"workers stopped {time.monotonic() - died_at:.2f} s after the failure "
                     "was seen")
            self.failures += 1
            if self.failures > self.opts.max_restarts:
                self.say(f"job failed: {f.message} (after {self.failures - 1} of "
                         f"--max-restarts={self.opts.max_restarts} restarts)")
                return f.code if f.local else 1
            self.say(f"restarting every worker: restart {self.failures} of "
                     f"--max-restarts={self.opts.max_restarts}")
            r += 1
