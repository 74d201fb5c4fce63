"""The launcher's command line: options first, then the program and its untouched arguments.

parse() returns an argparse.Namespace with two derived fields, min_nodes and max_nodes (from
--nnodes=N or MIN:MAX), and raises UsageError (exit status 2) for anything malformed, before any
process is started or any store contacted. job_token() then finds the job's secret (Note [Job
token]).

Note [Job token]
One secret per job authenticates every store of the job: the launchers' rendezvous store
(kvstore.py, Note [Store handshake]) and the workers' TCP store at MASTER_ADDR:MASTER_PORT, which
reads it from PADDLE_STORE_TOKEN. It comes from --token-file, else from $PADDLE_STORE_TOKEN; a
one-node job without either gets a fresh random one. The launchers of a multi-node job cannot
each make one up (they would not match), so there it must be given on every node, or
authentication turned off with --no-auth. The token is never a command-line argument: every
user of a machine can read those (ps).
"""
import argparse
import difflib
import math
import os
import re
import secrets
import shutil
import socket
import sys
import textwrap
import uuid

from paddlerun import labels

USAGE = "paddlerun [options] TARGET_OR_PROGRAM [args...]"

DESCRIPTION = """\
Starts the workers of a data-parallel job on this node, as torchrun does, and watches them.

  paddlerun --nproc=4 //examples:fashion_mnist --model=cnn          (one machine)
  bazel run //tools:launch -- --nproc=4 //examples:fashion_mnist   (the same, through Bazel)
  paddlerun --nnodes=2 --node-rank=0 --rdzv-endpoint=10.0.0.1:29400 --nproc=4 train.py
  paddlerun --nnodes=2:4 --rdzv-endpoint=10.0.0.1:29400 --max-restarts=3 prog   (elastic)
  paddlerun --nnodes=2:3 --nproc=4 --min-nproc=2 --rdzv-endpoint=10.0.0.1:29400 prog --elastic
                                               (elastic in process: survivors keep running)

The launcher's options come first; the first positional argument is the program and everything
after it goes to the program untouched. A Bazel label (//pkg:name) runs its optimized build: the
launcher runs `bazel build -c opt --config=opt LABEL` in the workspace first (see --no-build); a
.py file runs with the launcher's own Python (a venv's paddlerun: the venv's; /usr/bin/python3
otherwise); anything else runs as a program (searched in PATH)."""

ENVIRONMENT = """\
environment of every worker (the torchrun contract, plus paddle's names):
  RANK                      global rank, 0..WORLD_SIZE-1
  LOCAL_RANK                rank on this node, 0..LOCAL_WORLD_SIZE-1
  WORLD_SIZE                workers in the job (sum of every node's --nproc)
  LOCAL_WORLD_SIZE          workers on this node (--nproc)
  GROUP_RANK                this node's rank, 0..GROUP_WORLD_SIZE-1 (assigned at rendezvous)
  GROUP_WORLD_SIZE          nodes in this attempt (between MIN and MAX for --nnodes=MIN:MAX)
  ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME   as torchrun sets them (same as RANK, WORLD_SIZE; "default")
  MASTER_ADDR, MASTER_PORT  where rank 0 hosts the job's store (env://); a fresh port per attempt
  TORCHELASTIC_RESTART_COUNT, PADDLE_RESTART_COUNT   attempts before this one (0 on the first)
  TORCHELASTIC_MAX_RESTARTS --max-restarts
  TORCHELASTIC_RUN_ID, PADDLE_RUN_ID   --rdzv-id
  PADDLE_NNODES             --nnodes as given (N or MIN:MAX)
  PADDLE_SOCKET_IFNAME      with several nodes, unless already set: this node's address as the
                            other nodes reach it (--local-addr), where our transports listen
  PADDLE_STORE_TOKEN        the job's secret (--token-file, $PADDLE_STORE_TOKEN, or made up for a
                            one-node job); the workers' TCP store admits only ranks that know it.
                            Not set with --no-auth
  PADDLE_METRICS_ADDR       with --dashboard: HOST:PORT of this launcher's UDP socket the workers
                            send their metrics to (docs/observability.md)
Workers die with the launcher (PR_SET_PDEATHSIG) and run in their own process groups.

exit status: 0 when every worker of every node succeeded; else the failed worker's exit status
(128+N for signal N) on its node, 1 on the other nodes, 2 for a usage error, 3 for a rendezvous
error (unreachable endpoint, port in use, nodes that disagree or never arrive)."""


# The labels the launcher runs by name: the data of //tools:launch (tools/BUILD.bazel; a test keeps
# them equal). A program name that is not found is matched against them ("did you mean ...?").
LAUNCH_LABELS = ("//examples:fashion_mnist", "//examples:store_allreduce")

MAX_SECONDS = 1e6  # the longest timeout an option takes (11.6 days); sockets reject far longer
TOKEN_ENV = "PADDLE_STORE_TOKEN"


class UsageError(Exception):
    """A malformed command line; the message says which option and what to change."""


def parse_nnodes(text):
    """'N' or 'MIN:MAX' -> (min, max), 1 <= min <= max."""
    m = re.fullmatch(r"(\d+)(?::(\d+))?", text)
    if not m:
        raise UsageError(f"--nnodes is {text!r}; expected N or MIN:MAX (e.g. 2 or 1:4)")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) is not None else lo
    if lo < 1 or hi < lo:
        raise UsageError(f"--nnodes is {text!r}; need 1 <= MIN <= MAX")
    return lo, hi


def parse_endpoint(text, default_port=29400):
    """'HOST:PORT', 'HOST' or '[V6]:PORT' -> (host, port)."""
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:\[\]]+)(?::(\d+))?", text)
    if not m:
        raise UsageError(f"--rdzv-endpoint is {text!r}; expected HOST:PORT")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4) or default_port)
    if not 1 <= port <= 65535:
        raise UsageError(f"--rdzv-endpoint {text!r} has port {port}; a port is 1..65535")
    return host, port


def parse_ranks_filter(text):
    """'0,2,3' -> {0, 2, 3}; '' -> None (every local rank)."""
    if not text:
        return None
    try:
        ranks = {int(t) for t in text.split(",") if t.strip()}
    except ValueError:
        raise UsageError(f"--local-ranks-filter is {text!r}; expected local ranks like 0,1")
    if not ranks or min(ranks) < 0:
        raise UsageError(f"--local-ranks-filter is {text!r}; expected local ranks like 0,1")
    return ranks


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wraps an option's help between words only, so `--rdzv-endpoint` is never split over two
    lines and `paddlerun --help | grep -- --NAME` finds every mention."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def build_parser():
    """The launcher's options: this is their one table; --help is generated from it (and a test
    checks that it lists every option string the parser accepts)."""
    ap = argparse.ArgumentParser(
        prog="paddlerun", usage=USAGE, description=DESCRIPTION, epilog=ENVIRONMENT,
        formatter_class=_HelpFormatter, allow_abbrev=False)
    add = ap.add_argument
    add("--nproc", "--nproc-per-node", "--nproc_per_node", dest="nproc", type=int, default=1,
        help="workers on this node (default 1)")
    add("--min-nproc", dest="min_nproc", type=int, default=0,
        help="elastic job: the workers regroup in process when one dies or leaves, "
             "training goes on with at least MIN-NPROC of them per node (and at least MIN "
             "nodes of --nnodes=MIN:MAX), and dead workers are started again (up to "
             "--max-restarts) and rejoin it; a node started again joins the running job "
             "(default: not elastic)")
    add("--nnodes", default="1",
        help="nodes in the job: N, or MIN:MAX for an elastic job that runs with any number of "
             "nodes in that range and restarts with the survivors when one dies (default 1)")
    add("--node-rank", "--node_rank", dest="node_rank", type=int, default=-1,
        help="this node's rank, 0..N-1 (static jobs); by default nodes are ranked in the order "
             "they join. The launcher of node rank 0 hosts the tcp rendezvous store")
    add("--rdzv-backend", "--rdzv_backend", dest="rdzv_backend", default="tcp",
        choices=["tcp", "c10d", "etcd", "file"],
        help="where the node launchers meet: tcp (alias c10d: a store hosted by the launcher "
             "at --rdzv-endpoint), etcd (an etcd v3 server at --rdzv-endpoint) or file (a "
             "directory shared by every node, given as --rdzv-endpoint) (default tcp)")
    add("--rdzv-endpoint", "--rdzv_endpoint", dest="rdzv_endpoint", default="",
        help="HOST:PORT of the tcp store or etcd, or the directory for --rdzv-backend=file. "
             "Default with one node: a store on 127.0.0.1 at a free port")
    add("--rdzv-id", "--rdzv_id", dest="rdzv_id", default="",
        help="the job's id, the same on every node: keys live under it (default: a random id "
             "on one node; 'default' with several)")
    add("--rdzv-timeout", dest="rdzv_timeout", type=float, default=300.0,
        help="seconds a rendezvous may take: reaching the endpoint, waiting for the other "
             "nodes and for the master address (default 300)")
    add("--rdzv-last-call", dest="rdzv_last_call", type=float, default=5.0,
        help="MIN:MAX jobs: seconds to wait for more nodes once MIN have joined (default 5)")
    add("--standalone", action="store_true",
        help="one node, a store of its own at a free port on 127.0.0.1 (ignores --rdzv-*)")
    add("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=0,
        help="times a failed job is restarted (every worker of every node, after a new "
             "rendezvous) before the launcher gives up (default 0)")
    add("--monitor-interval", "--monitor_interval", dest="monitor_interval", type=float,
        default=0.1, help="seconds between checks of the workers and the store (default 0.1)")
    add("--node-timeout", dest="node_timeout", type=float, default=30.0,
        help="seconds without a heartbeat after which another node counts as dead (default 30)")
    add("--grace-s", dest="grace_s", type=float, default=5.0,
        help="seconds between SIGTERM and SIGKILL when stopping workers (default 5)")
    add("--exit-timeout", dest="exit_timeout", type=float, default=None,
        help="once a worker has exited successfully, seconds the others of this node get to "
             "exit too before they count as stuck and the job fails naming them (default: "
             "$PADDLE_TIMEOUT_S, the workers' collective timeout, else 300)"),
    add("--log-dir", "--log_dir", dest="log_dir", default="",
        help="write each worker's output to LOG_DIR/attempt_<restart>/rank_<RANK>.log; the "
             "console then shows only the launcher's own lines unless --tee is given")
    add("--tee", action="store_true",
        help="with --log-dir, also show the workers' lines on the console")
    add("--local-ranks-filter", "--local_ranks_filter", dest="local_ranks_filter", default="",
        help="show only these local ranks on the console, e.g. 0 or 0,3 (log files keep all)")
    add("--master-addr", "--master_addr", dest="master_addr", default="",
        help="MASTER_ADDR for the workers (default: node rank 0's address as the other nodes "
             "reach it; 127.0.0.1 on one node)")
    add("--master-port", "--master_port", dest="master_port", type=int, default=0,
        help="MASTER_PORT for the first attempt (default: a free port, fresh per attempt)")
    add("--local-addr", "--local_addr", dest="local_addr", default="",
        help="this node's address for the others (default: the address it reaches the "
             "endpoint from)")
    add("--token-file", dest="token_file", default="",
        help="a file (readable only by you) whose first line is the job's secret token; the "
             "launchers' store and the workers' store serve only those who prove they know it. "
             "Default: $PADDLE_STORE_TOKEN, else, on one node, a fresh random token per job. "
             "Several nodes must share one: give the same token to every node")
    add("--no-auth", dest="no_auth", action="store_true",
        help="no job token: anyone who can reach the rendezvous store or the workers' store "
             "can join the job and read or change its keys. Only for a network you trust")
    add("--dashboard", type=int, default=None, metavar="PORT",
        help="serve the job's metrics on PORT (0: a free one): Prometheus text at /metrics, "
             "a live page at /; the address is printed at start (default: off)")
    add("--dashboard-host", dest="dashboard_host", default="127.0.0.1",
        help="the address --dashboard listens on (default 127.0.0.1, this machine only); "
             "elsewhere it answers only requests carrying the job's token as "
             "'Authorization: Bearer TOKEN'")
    add("--no-build", dest="no_build", action="store_true",
        help="do not run bazel for a label: run its binary from the launcher's runfiles or a "
             "workspace's bazel-out/k8-opt/bin or bazel-bin as built (for machines without "
             "Bazel; by default a label's optimized build is brought up to date first)")
    add("program", help="a Bazel label (//pkg:name), a .py file or a program")
    add("args", nargs=argparse.REMAINDER, help="passed to the program untouched")
    return ap


def _argparse_message(ap, message):
    """argparse's words for a bad command line -> ours: the option as written, what to write."""
    m = re.fullmatch(r"unrecognized arguments: (\S+).*", message)
    if m:
        word = m.group(1).split("=", 1)[0]
        known = [o for a in ap._actions for o in a.option_strings]
        close = difflib.get_close_matches(word, known, n=1)
        hint = f"did you mean {close[0]}?" if close else "paddlerun --help lists the options"
        return (f"{m.group(1)} is not an option of paddlerun; {hint} (the launcher's options "
                "come before the program, the program's after it)")
    if message.startswith("the following arguments are required"):
        return ("no program given: write paddlerun [options] PROGRAM [args...], e.g. "
                "paddlerun --nproc=2 //examples:fashion_mnist")
    m = re.fullmatch(r"argument ([^/:]+)\S*: invalid (int|float) value: (.*)", message)
    if m:
        kind = "a whole number" if m.group(2) == "int" else "a number"
        return f"{m.group(1)} is {m.group(3)}; expected {kind}, e.g. {m.group(1)}=2"
    return re.sub(r"^argument ([^/:]+)\S*:", r"\1:", message)


def parse(argv):
    """Parses argv (without the program name); raises UsageError."""
    ap = build_parser()

    def error(message):
        raise UsageError(_argparse_message(ap, message))

    ap.error = error
    opts = ap.parse_args(argv)
    if opts.nproc < 1:
        raise UsageError(f"--nproc is {opts.nproc}; it must be at least 1")
    opts.min_nodes, opts.max_nodes = parse_nnodes(opts.nnodes)
    if opts.min_nproc and not 1 <= opts.min_nproc <= opts.nproc:
        raise UsageError(f"--min-nproc is {opts.min_nproc}; it must be 1..--nproc "
                         f"({opts.nproc})")
    if opts.min_nproc and opts.max_nodes > 1 and opts.rdzv_backend not in ("tcp", "c10d"):
        raise UsageError(f"--min-nproc with --nnodes={opts.nnodes}: the workers regroup in the "
                         "job's tcp store at --rdzv-endpoint, so --rdzv-backend must be tcp, not "
                         f"{opts.rdzv_backend}")
    if opts.standalone:
        if opts.max_nodes != 1:
            raise UsageError(f"--standalone runs one node, but --nnodes is {opts.nnodes}")
        opts.rdzv_backend, opts.rdzv_endpoint = "tcp", ""
    if opts.rdzv_backend == "c10d":
        opts.rdzv_backend = "tcp"
    if opts.node_rank >= opts.max_nodes:
        raise UsageError(f"--node-rank is {opts.node_rank}, but --nnodes={opts.nnodes} allows "
                         f"node ranks 0..{opts.max_nodes - 1}")
    if opts.max_nodes > 1 and not opts.rdzv_endpoint:
        raise UsageError(f"--nnodes={opts.nnodes} needs --rdzv-endpoint (HOST:PORT of node 0's "
                         "launcher, or of etcd; a shared directory for --rdzv-backend=file)")
    if opts.rdzv_backend == "file":
        if not opts.rdzv_endpoint:
            opts.rdzv_endpoint = ""
        opts.endpoint = (opts.rdzv_endpoint, 0)
    elif opts.rdzv_endpoint:
        opts.endpoint = parse_endpoint(opts.rdzv_endpoint,
                                       2379 if opts.rdzv_backend == "etcd" else 29400)
    else:
        opts.endpoint = None
    if opts.rdzv_backend == "etcd" and opts.endpoint is None:
        raise UsageError("--rdzv-backend=etcd needs --rdzv-endpoint=HOST:PORT of etcd")
    if opts.exit_timeout is None:
        # PADDLE_TIMEOUT_S as the settings table (docs/configuration.md) declares it: seconds
        # >= 0 or inf; blank is unset. Malformed is an error here, as the workers would reject it.
        text = os.environ.get("PADDLE_TIMEOUT_S", "").strip()
        try:
            opts.exit_timeout = float(text) if text else 300.0
        except ValueError:
            opts.exit_timeout = math.nan
        if math.isnan(opts.exit_timeout) or opts.exit_timeout < 0:
            raise UsageError(f"PADDLE_TIMEOUT_S={text!r} is not a number of seconds >= 0 or inf "
                             "(the collective timeout; paddlerun's default --exit-timeout); set "
                             "it to one or unset it for the default")
        if not math.isfinite(opts.exit_timeout) or opts.exit_timeout <= 0:
            opts.exit_timeout = 300.0  # also "0"/"inf", which mean no collective timeout
    for name in ("rdzv_timeout", "rdzv_last_call", "monitor_interval", "grace_s",
                 "node_timeout", "exit_timeout"):
        value = getattr(opts, name)
        may_be_zero = name == "rdzv_last_call"
        if not (math.isfinite(value) and 0 <= value <= MAX_SECONDS) or (
                value == 0 and not may_be_zero):
            raise UsageError(f"--{name.replace('_', '-')} is {value:g}; it must be a number of "
                             f"seconds {'from 0' if may_be_zero else 'above 0'} up to "
                             f"{MAX_SECONDS:.0f}")
    if opts.max_restarts < 0:
        raise UsageError(f"--max-restarts is {opts.max_restarts}; it must be at least 0")
    if opts.dashboard is not None and not 0 <= opts.dashboard <= 65535:
        raise UsageError(f"--dashboard is {opts.dashboard}; a port is 0..65535 (0: a free one)")
    if not 0 <= opts.master_port <= 65535:
        raise UsageError(f"--master-port is {opts.master_port}; a port is 1..65535")
    opts.ranks_filter = parse_ranks_filter(opts.local_ranks_filter)
    if opts.tee and not opts.log_dir:
        raise UsageError("--tee copies the workers' log files to the console; it needs --log-dir")
    if not opts.rdzv_id:
        opts.rdzv_id = "default" if opts.max_nodes > 1 or opts.endpoint else uuid.uuid4().hex[:12]
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", opts.rdzv_id) or opts.rdzv_id in (".", ".."):
        raise UsageError(f"--rdzv-id is {opts.rdzv_id!r}; use letters, digits, '_', '.', '-' "
                         "(not '.' or '..' alone: it names a folder for --rdzv-backend=file)")
    return opts


def job_token(opts, environ):
    """The job's secret (Note [Job token]), or None with --no-auth; raises UsageError."""
    given = environ.get(TOKEN_ENV, "")
    if opts.no_auth:
        if opts.token_file or given:
            raise UsageError(f"--no-auth turns the job token off, but "
                             f"{'--token-file' if opts.token_file else '$' + TOKEN_ENV} gives "
                             "one; drop one of them")
        return None
    if opts.token_file:
        try:  # relative to where `bazel run` was started, as the program's own paths are
            with open(os.path.join(environ.get("BUILD_WORKING_DIRECTORY", ""),
                                   opts.token_file)) as f:
                given = f.readline().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--token-file={opts.token_file} cannot be read: "
                             f"{getattr(e, 'strerror', None) or e}") from None
        if not given:
            raise UsageError(f"--token-file={opts.token_file} has no token on its first line")
    if given:
        return given
    if opts.max_nodes > 1:
        raise UsageError(
            f"--nnodes={opts.nnodes} needs the job's token on every node (the launchers and "
            f"workers of all nodes must share it, so none can make it up): set {TOKEN_ENV} to "
            f"the same secret on every node, e.g. from `python3 -c 'import secrets; "
            f"print(secrets.token_hex(16))'`, or give --token-file=PATH; or run with --no-auth "
            "on a network you trust")
    return secrets.token_hex(16)


def worker_env(base, *, rank, local_rank, world_size, local_world_size, group_rank,
               group_world_size, master_addr, master_port, restart_count, max_restarts, run_id,
               nnodes, token=None):
    """The environment of one worker: `base` plus the contract --help documents; with a token
    (Note [Job token]) PADDLE_STORE_TOKEN too."""
    env = dict(base)
    if token:
        env[TOKEN_ENV] = token
    env.update(
        RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(local_world_size), GROUP_RANK=str(group_rank),
        GROUP_WORLD_SIZE=str(group_world_size), ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(world_size), ROLE_NAME="default", MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port), TORCHELASTIC_RESTART_COUNT=str(restart_count),
        PADDLE_RESTART_COUNT=str(restart_count), TORCHELASTIC_MAX_RESTARTS=str(max_restarts),
        TORCHELASTIC_RUN_ID=run_id, PADDLE_RUN_ID=run_id, PADDLE_NNODES=nnodes)
    return env


def free_port(host="127.0.0.1"):
    """A port nothing listens on now (another process may still take it before we do)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# How labels become binaries (labels.py, Note [Optimized labels]). main() replaces it with one
# that follows the command line (--no-build) and prints which binary runs; elastic.py resolves the
# store server's label through it later.
LABELS = labels.Resolver()


def _did_you_mean(program):
    """' did you mean //pkg:name?' for a known label named like `program`, else ''."""
    stem = os.path.basename(program)
    stem = stem[:-3] if stem.endswith(".py") else stem
    names = {label.rsplit(":", 1)[-1]: label for label in LAUNCH_LABELS}
    close = difflib.get_close_matches(stem, list(names), n=1, cutoff=0.8)
    return f"; did you mean {names[close[0]]}?" if close else ""


def _resolve_file(program, cwd):
    """The command for a program that is not a label; raises UsageError naming what to write."""
    path = os.path.join(cwd, program)
    if program.endswith(".py"):
        if os.path.isfile(path):
            # The launcher's interpreter: a venv's paddlerun runs the venv's Python, which sees the
            # paddle installed there (under bazel run and tools/install-paddlerun: /usr/bin/python3).
            return [sys.executable or "/usr/bin/python3", program]
        raise UsageError(f"{program}: no such Python file (in {cwd}){_did_you_mean(program)}")
    if "/" in program:
        if not os.path.isfile(path):
            raise UsageError(f"{program}: no such file (in {cwd}){_did_you_mean(program)}")
        if not os.access(path, os.X_OK):
            raise UsageError(f"{program} is not executable: chmod +x it, or name its "
                             f"interpreter first (e.g. /bin/sh {program})")
        return [program]
    if shutil.which(program):
        return [program]
    hint = _did_you_mean(program)
    if not hint and os.path.isfile(path):
        hint = f"; for the file in {cwd} write ./{program}"
    raise UsageError(f"{program} is neither a Bazel label (//pkg:name), a file nor a program on "
                     f"PATH{hint or '; give a label, a path (./prog) or a command on PATH'}")


def resolve_program(program, script, cwd=None):
    """The command for `program`: a label's binary (LABELS), python3 for a .py file, else as
    given. Paths are relative to `cwd` (the workers' folder; default: this process's).

    Raises UsageError saying why a label cannot be built or found, or what to write instead of a
    program that is neither a label, a file nor on PATH."""
    if not program.startswith("//"):
        return _resolve_file(program, cwd or os.getcwd())
    try:
        return [LABELS.resolve(program, script)]
    except labels.LabelError as e:
        raise UsageError(str(e)) from None
