"""Entry point: parse the options, open the rendezvous store, run the agent.

Used by tools/launch.py (`bazel run //tools:launch`) and by the installed `paddlerun` wrapper.
"""
import os
import socket
import sys
import time

from paddlerun import agent, dashboard, elastic, kvstore, labels, options, rendezvous


def _is_local(host, wait_s=0.0, say=None):
    """Whether this machine has the address `host` resolves to (so it can host the store). A
    name that does not resolve yet (a new pod's DNS record) is asked again for up to wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            break
        except OSError as e:
            if time.monotonic() >= deadline:
                return False
            if say is not None:
                say(f"{host} does not resolve ({e.strerror or e}); trying again for up to "
                    f"{wait_s:g} s (--rdzv-timeout)")
                say = None
            time.sleep(0.5)
    for family, _, _, _, addr in infos:
        with socket.socket(family) as s:
            try:
                s.bind((addr[0], 0))
                return True
            except OSError:
                continue
    return False


def open_store(opts, token, say):
    """(store, server or None) for the options' rendezvous backend; raises StoreError.

    A tcp store listens only on the endpoint's address (127.0.0.1 without one), never on every
    interface, and serves only clients that know `token` (Note [Job token] in options.py)."""
    if opts.rdzv_backend == "file":
        return kvstore.FileStore(opts.rdzv_endpoint or "/tmp/paddlerun", opts.rdzv_id), None
    if opts.rdzv_backend == "etcd":
        host, port = opts.endpoint
        return kvstore.EtcdStore(host, port, opts.rdzv_id, opts.rdzv_timeout), None

    def serve(host, port):
        return kvstore.TcpStoreServer(host, port, token, log=lambda m: say(f"store: {m}"))

    server = None
    if opts.endpoint is None:
        server = serve("127.0.0.1", 0)
        host, port = "127.0.0.1", server.port
    else:
        host, port = opts.endpoint
        hosts = opts.node_rank == 0 or (opts.max_nodes == 1 and opts.node_rank < 0)
        local = _is_local(host, opts.rdzv_timeout if hosts else 0.0, say)
        if hosts:
            if not local:
                raise kvstore.StoreError(
                    f"this launcher hosts the rendezvous store at --rdzv-endpoint={host}:{port}, "
                    f"but {host} is not an address of this machine (or does not resolve); start "
                    "node rank 0 on the machine it names, or give this machine's address there")
            server = serve(host, port)
        elif opts.node_rank < 0 and local:
            try:  # elastic: the first launcher on the endpoint's machine hosts the store
                server = serve(host, port)
            except kvstore.StoreError:
                pass
        if server is not None:
            say(f"hosting the rendezvous store on {host}:{port}")
    return kvstore.TcpStore(host, port, opts.rdzv_timeout, token), server


def main(argv=None, script=None):
    t0 = time.monotonic()
    argv = sys.argv[1:] if argv is None else argv
    script = script or sys.argv[0]

    def say(message):
        sys.stderr.write(f"paddlerun: {message}\n")
        sys.stderr.flush()

    cwd = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    try:
        opts = options.parse(argv)
        token = options.job_token(opts, os.environ)
        options.LABELS = labels.Resolver(build=not opts.no_build, say=say)
        command = options.resolve_program(opts.program, script, cwd) + opts.args
    except options.UsageError as e:
        say(f"error: {e}")
        return 2
    except KeyboardInterrupt:  # during a label's build: nothing started yet
        say("interrupted")
        return 130
    hub = board = None
    if opts.dashboard is not None:  # Note [Metrics hub]
        try:
            hub = dashboard.MetricsHub(opts.rdzv_id, log=say)
            board = dashboard.Dashboard(hub, opts.dashboard_host, opts.dashboard, token)
        except OSError as e:
            if hub is not None:
                hub.close()
            say(f"error: --dashboard={opts.dashboard} on {opts.dashboard_host}: "
                f"{e.strerror or e}; pick another port (0: a free one) or --dashboard-host")
            return 2
        say(f"dashboard at {board.url} (Prometheus metrics: {board.url}metrics)")
    try:
        return _run(opts, command, cwd, token, script, say, t0, hub)
    finally:
        if board is not None:
            board.close()
            hub.close()


def _run(opts, command, cwd, token, script, say, t0, hub):
    if opts.min_nproc:  # Note [Elastic launcher]
        code = elastic.ElasticAgent(opts, command, cwd, token, script, sys.stderr, hub).run()
        say(f"exit status {code} after {time.monotonic() - t0:.2f} s")
        return code
    server = None
    store = None
    try:
        store, server = open_store(opts, token, say)
        local_addr = opts.local_addr or store.local_addr
        if not local_addr:
            local_addr = "127.0.0.1" if opts.max_nodes == 1 else socket.gethostbyname(
                socket.gethostname())
        rdzv = rendezvous.NodeRendezvous(
            store, min_nodes=opts.min_nodes, max_nodes=opts.max_nodes, nnodes=opts.nnodes,
            node_rank=opts.node_rank, nproc=opts.nproc, local_addr=local_addr,
            timeout=opts.rdzv_timeout, last_call=opts.rdzv_last_call,
            master_addr=opts.master_addr or ("127.0.0.1" if opts.max_nodes == 1 else ""),
            first_master_port=opts.master_port)
        a = agent.Agent(opts, command, rdzv, store, cwd, token=token, hub=hub)
        a.install_signal_handlers()
        code = a.run()
    except (kvstore.StoreError, rendezvous.RendezvousError) as e:
        say(f"error: {e}")
        code = agent.EXIT_RENDEZVOUS
    finally:
        if store is not None:
            _linger(store, server)
        if server is not None:
            server.close()
    say(f"exit status {code} after {time.monotonic() - t0:.2f} s")
    return code


def _linger(store, server):
    """Every launcher counts itself out of the last round; the store's host then waits (at most
    3 s) until the others have, so none of them mistakes the end of the job for a lost store.

    The last of the round's launchers to leave clears the job's keys: etcd and file stores outlive
    the job, and a later job with the same --rdzv-id (by default "default") would otherwise find
    this one's round as closed (and start as a restart), or its error and fail at once with it."""
    try:
        r = int(store.get("round") or 0)
        joined = int(store.get(f"r{r}/joined") or 1)
        size = int(store.get(f"r{r}/size") or joined)  # no size: the round failed to form
        if store.add(f"r{r}/exited", 1) >= joined:
            store.clear()
            return
        deadline = time.monotonic() + 3.0
        while (server is not None and time.monotonic() < deadline and
               int(store.get(f"r{r}/exited") or 0) < size):
            time.sleep(0.05)
    except kvstore.StoreError:
        pass
