"""Elastic jobs (--min-nproc, on one node or with --nnodes=MIN:MAX): workers that die are
restarted and rejoin the running job instead of restarting it.

Note [Elastic launcher]
The workers regroup among themselves (paddle/parallel/elastic.h, Note [Elastic rendezvous]) in
the job's store, so the store must outlive every worker: the launcher starts it as a process of
its own (tools/paddle_store_server.cc, authenticated with the job token, on 127.0.0.1) and gives
every worker its address as MASTER_ADDR/MASTER_PORT, with PADDLE_ELASTIC=1 and the bounds
PADDLE_ELASTIC_MIN_SIZE/PADDLE_ELASTIC_MAX_SIZE. Then, every --monitor-interval:
  - a worker that exits 0 is done (it finished training, or left after SIGTERM): its slot stays
    empty;
  - a worker that fails (non-zero status or a signal) is started again in its slot, which counts
    against --max-restarts; the new process joins the running job at its next step (or, when
    the job has finished meanwhile, sees so in the store and exits 0);
  - the job fails when a failure finds no restart left and fewer than --min-nproc workers are
    still running, or when SIGINT/SIGTERM reaches the launcher (forwarded to every worker);
  - a worker stopped (SIGSTOP, a debugger) for --exit-timeout seconds is killed: the others
    have dropped it by then, and it would hold the job open forever; it then fails like any
    other worker (started again, or counted against --min-nproc);
  - the job fails at once when the store this launcher hosts exits: every worker would fail on
    it only after its own timeouts, and each restart would wait for a store that is gone;
  - the job succeeds when every slot is empty and at least one worker exited 0.

With --nnodes=MIN:MAX every node runs such a launcher and all their workers regroup in one store,
at --rdzv-endpoint: the first launcher on the machine that has that address (and finds its port
free) starts paddle_store_server there; every other launcher, and a launcher started again after
its node was lost, uses the one that answers. The workers get PADDLE_ELASTIC_MIN_SIZE = MIN x
--min-nproc and PADDLE_ELASTIC_MAX_SIZE = MAX x --nproc, so a whole node may go away (its
workers' generation fails, the others regroup without them) and come back (its fresh workers
join at the next step). The store lives as long as the launcher that hosts it: to survive the
loss of any node, run paddle_store_server on a machine of its own (as one would run etcd) and
give its address as --rdzv-endpoint.
"""
import errno
import functools
import os
import signal
import socket
import subprocess
import time

from paddlerun import agent as agent_mod
from paddlerun import logs, options

STORE_SERVER = "//tools:paddle_store_server"


def store_server_command(script):
    """The paddle_store_server to run: the one installed beside this package (the wheel puts it in
    paddlerun/bin/, tools/wheel/stage_and_build.py), else the label's binary in the launcher's
    runfiles or a workspace's bazel-bin (options.resolve_program). Raises UsageError."""
    packaged = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin",
                            "paddle_store_server")
    if os.path.isfile(packaged) and os.access(packaged, os.X_OK):
        return [packaged]
    return options.resolve_program(STORE_SERVER, script)


def start_store(script, token, say, host="127.0.0.1", port=0):
    """(Popen, port) of a paddle_store_server on host:port; raises RuntimeError."""
    command = store_server_command(script) + [f"--host={host}", f"--port={port}"]
    env = dict(os.environ)
    if token:
        env[options.TOKEN_ENV] = token
    else:
        env.pop(options.TOKEN_ENV, None)
    p = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         preexec_fn=functools.partial(agent_mod._die_with_parent, os.getpid()))
    line = p.stdout.readline().decode(errors="replace").split()
    if len(line) != 2 or line[0] != "port":
        p.kill()
        p.wait()
        raise RuntimeError(f"{command[0]} did not start (it printed {' '.join(line)!r}, exit "
                           f"status {p.poll()})")
    say(f"elastic: hosting the workers' store on {host}:{line[1]} (pid {p.pid})")
    return p, int(line[1])


def _may_host(host, port):
    """Whether this machine has `host` and nothing listens on its `port` yet."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
            return True
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                return False
            raise


def wait_for_store(host, port, timeout, say):
    """Waits until something accepts connections on host:port and returns this machine's address
    on that connection (where the other nodes reach it); raises RuntimeError."""
    deadline = time.monotonic() + timeout
    said = False
    while True:
        try:
            with socket.create_connection((host, port), timeout=2) as s:
                return s.getsockname()[0]
        except OSError as e:
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"the workers' store at --rdzv-endpoint={host}:{port} did not answer within "
                    f"{timeout:g} s (--rdzv-timeout): {e.strerror or e}; start the launcher on "
                    f"the machine that has {host}, or paddle_store_server there") from None
            if not said:
                say(f"waiting for the workers' store at {host}:{port} ({e.strerror or e})")
                said = True
            time.sleep(0.2)


class ElasticAgent:
    def __init__(self, opts, command, cwd, token, script, err, hub=None):
        self.opts = opts
        self.hub = hub  # --dashboard (Note [Metrics hub] in dashboard.py)
        self.command = command
        self.cwd = cwd
        self.token = token
        self.script = script
        self.err = err
        self.signal = None
        self.slots = [None] * opts.nproc  # Popen or None
        self.starts = [0] * opts.nproc
        self.restarts = 0
        self.successes = 0
        self.stopped_since = [None] * opts.nproc  # monotonic time a worker was first seen stopped
        self.local_addr = ""  # with several nodes: where the others reach this one

    def say(self, message):
        self.err.write(f"paddlerun: {message}\n")
        self.err.flush()

    def _on_signal(self, signum, _frame):
        self.signal = signum
        for p in self.slots:
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signum)
                except ProcessLookupError:
                    pass

    def _spawn(self, slot, addr, port, mux):
        o = self.opts
        env = options.worker_env(
            os.environ, rank=slot, local_rank=slot, world_size=o.nproc * o.max_nodes,
            local_world_size=o.nproc, group_rank=max(o.node_rank, 0),
            group_world_size=o.max_nodes, master_addr=addr, master_port=port,
            restart_count=self.starts[slot], max_restarts=o.max_restarts, run_id=o.rdzv_id,
            nnodes=o.nnodes, token=self.token)
        env.update(PADDLE_ELASTIC="1",
                   PADDLE_ELASTIC_MIN_SIZE=str(o.min_nproc * o.min_nodes),
                   PADDLE_ELASTIC_MAX_SIZE=str(o.nproc * o.max_nodes))
        if self.local_addr and not os.environ.get("PADDLE_SOCKET_IFNAME"):
            env["PADDLE_SOCKET_IFNAME"] = self.local_addr  # where our transports listen
        if self.hub is not None:
            env["PADDLE_METRICS_ADDR"] = self.hub.address
        p = subprocess.Popen(self.command, env=env, cwd=self.cwd, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             preexec_fn=functools.partial(agent_mod._die_with_parent,
                                                          os.getpid()))
        if self.hub is not None:
            self.hub.spawned(p.pid, slot, 0)
        label = str(slot) if self.starts[slot] == 0 else f"{slot}.{self.starts[slot]}"
        mux.add(label, slot, p.stdout)
        self.starts[slot] += 1
        self.slots[slot] = p
        self.stopped_since[slot] = None

    def _kill_long_stopped(self):
        """SIGKILLs a worker stopped for --exit-timeout (Note [Elastic launcher])."""
        now = time.monotonic()
        for slot, p in enumerate(self.slots):
            if p is None or p.poll() is not None:
                continue
            if agent_mod._process_state(p.pid) not in ("T", "t"):
                self.stopped_since[slot] = None
                continue
            if self.stopped_since[slot] is None:
                self.stopped_since[slot] = now
            elif now - self.stopped_since[slot] >= self.opts.exit_timeout:
                self.say(f"worker {slot} (pid {p.pid}) has been stopped (SIGSTOP?) for "
                         f"{now - self.stopped_since[slot]:.0f} s (--exit-timeout="
                         f"{self.opts.exit_timeout:g}); killing it")
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def _stop_all(self, mux):
        for p in self.slots:
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + self.opts.grace_s
        while any(p is not None and p.poll() is None for p in self.slots):
            mux.pump(0.02)
            if time.monotonic() >= deadline:
                for p in self.slots:
                    if p is not None and p.poll() is None:
                        try:
                            os.killpg(p.pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                break
        for p in self.slots:
            if p is not None:
                p.wait()
        mux.drain(1.0)

    def run(self):
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        store = None
        addr, port = "127.0.0.1", 0
        try:
            if self.opts.max_nodes > 1:  # Note [Elastic launcher]: one store for every node
                addr, port = self.opts.endpoint
                if _may_host(addr, port):
                    try:
                        store, port = start_store(self.script, self.token, self.say, addr, port)
                    except RuntimeError as e:  # another launcher took the port first
                        self.say(f"not hosting the store: {e}")
                seen_as = wait_for_store(addr, port, self.opts.rdzv_timeout, self.say)
                self.local_addr = self.opts.local_addr or seen_as
            else:
                store, port = start_store(self.script, self.token, self.say)
        except (RuntimeError, OSError, options.UsageError) as e:
            self.say(f"error: {e}")
            return agent_mod.EXIT_RENDEZVOUS
        mux = logs.LogMux(self.opts.log_dir, 0, self.opts.tee, self.opts.ranks_filter)
        try:
            return self._run(addr, port, mux, store)
        finally:
            if store is not None:
                store.stdin.close()  # the server exits when its stdin closes
                try:
                    store.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    store.kill()
                    store.wait()

    def _run(self, addr, port, mux, store):
        nodes = f", --nnodes={self.opts.nnodes}" if self.opts.max_nodes > 1 else ""
        self.say(f"elastic job: {self.opts.nproc} workers (at least {self.opts.min_nproc}){nodes}"
                 f", --max-restarts={self.opts.max_restarts}")
        for slot in range(self.opts.nproc):
            self._spawn(slot, addr, port, mux)
        while True:
            mux.pump(self.opts.monitor_interval)
            if self.signal is not None:
                name = signal.Signals(self.signal).name
                self.say(f"got {name}; stopping the workers")
                self._stop_all(mux)
                return 128 + self.signal
            if store is not None and store.poll() is not None:
                self.say(f"job failed: the workers' store (paddle_store_server, pid {store.pid}) "
                         f"{agent_mod.describe(store.returncode)}; the workers cannot regroup "
                         f"without it")
                self._stop_all(mux)
                return agent_mod.EXIT_RENDEZVOUS
            self._kill_long_stopped()
            for slot, p in enumerate(self.slots):
                if p is None or p.poll() is None:
                    continue
                code = p.returncode
                self.slots[slot] = None
                if code == 0:
                    self.successes += 1
                    continue
                what = f"worker {slot} (pid {p.pid}) {agent_mod.describe(code)}"
                if self.hub is not None:
                    self.hub.event("failure", what, self.hub.rank_of(p.pid))
                running = sum(q is not None and q.poll() is None for q in self.slots)
                if self.restarts < self.opts.max_restarts:
                    self.restarts += 1
                    self.say(f"{what}; starting it again (restart {self.restarts} of "
                             f"--max-restarts={self.opts.max_restarts}); it rejoins the job")
                    self._spawn(slot, addr, port, mux)
                elif running < self.opts.min_nproc:
                    self.say(f"job failed: {what}, no restart left and {running} workers "
                             f"running, fewer than --min-nproc={self.opts.min_nproc}")
                    self._stop_all(mux)
                    return agent_mod.exit_status(code)
                else:
                    self.say(f"{what}; no restart left, {running} workers go on")
            if all(p is None for p in self.slots):
                mux.drain(5.0)
                if self.successes == 0:
                    self.say("job failed: no worker finished successfully")
                    return 1
                self.say(f"elastic job finished: {self.successes} workers exited 0 "
                         f"({self.restarts} restarts)")
                return 0
