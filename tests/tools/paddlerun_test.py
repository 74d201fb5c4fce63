"""Unit tests of the launcher library (tools/paddlerun) and the k8s manifest writer
(tools/k8s_manifest): option parsing and its errors, the job token, the workers' environment, label
resolution, the stores (and the tcp store against hostile clients over real sockets), the node
rendezvous (ranks, master, disagreements, timeouts) and the manifests' consistency."""
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest

TOOLS = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "tools")
sys.path.insert(0, TOOLS)

import k8s_manifest as k8s  # noqa: E402
from paddlerun import kvstore, labels, logs, main, options, rendezvous  # noqa: E402

# paddlerun in a process of its own, from this tree's tools/: PADDLERUN + [launcher flags...].
PADDLERUN = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from paddlerun "
             "import main; sys.exit(main.main(sys.argv[2:], 'paddlerun'))", TOOLS]


class OptionsTest(unittest.TestCase):
    def test_defaults_and_aliases(self):
        o = options.parse(["--nproc-per-node=4", "prog", "--x", "-y", "z"])
        self.assertEqual(o.nproc, 4)
        self.assertEqual((o.min_nodes, o.max_nodes), (1, 1))
        self.assertEqual(o.program, "prog")
        self.assertEqual(o.args, ["--x", "-y", "z"])  # untouched, even launcher-like flags
        self.assertIsNone(o.endpoint)
        o = options.parse(["--nproc=2", "prog", "--nproc=9"])
        self.assertEqual((o.nproc, o.args), (2, ["--nproc=9"]))

    def test_multi_node(self):
        o = options.parse(["--nnodes=2:4", "--rdzv-endpoint=10.0.0.1", "--rdzv-backend=c10d",
                           "--max-restarts=3", "--local-ranks-filter=0,2", "p"])
        self.assertEqual((o.min_nodes, o.max_nodes), (2, 4))
        self.assertEqual(o.endpoint, ("10.0.0.1", 29400))
        self.assertEqual(o.rdzv_backend, "tcp")
        self.assertEqual(o.ranks_filter, {0, 2})
        self.assertEqual(o.rdzv_id, "default")
        o = options.parse(["--nnodes=2", "--rdzv-endpoint=[::1]:5", "--rdzv-backend=etcd", "p"])
        self.assertEqual(o.endpoint, ("::1", 5))

    def test_errors_name_the_option(self):
        cases = {
            ("--nproc=0", "p"): "--nproc is 0",
            ("--nnodes=3:2", "p"): "--nnodes is '3:2'",
            ("--nnodes=x", "p"): "expected N or MIN:MAX",
            ("--nnodes=2", "p"): "--nnodes=2 needs --rdzv-endpoint",
            ("--nnodes=2", "--node-rank=2", "--rdzv-endpoint=h:1", "p"): "--node-rank is 2",
            ("--rdzv-endpoint=h:99999", "p"): "port 99999",
            ("--standalone", "--nnodes=2", "--rdzv-endpoint=h:1", "p"): "--standalone runs one",
            ("--tee", "p"): "--tee",
            ("--local-ranks-filter=a", "p"): "--local-ranks-filter is 'a'",
            ("--max-restarts=-1", "p"): "--max-restarts is -1",
            ("--rdzv-id=a/b", "p"): "--rdzv-id",
            ("--rdzv-id=..", "p"): "not '.' or '..' alone",
            ("--rdzv-backend=etcd", "p"): "needs --rdzv-endpoint",
            ("--no-such-option", "p"): "--no-such-option is not an option of paddlerun",
            ("--nprocs=2", "p"): "--nprocs=2 is not an option of paddlerun; did you mean --nproc?",
            ("--nproc=x", "p"): "--nproc is 'x'; expected a whole number",
            ("--grace-s=soon", "p"): "--grace-s is 'soon'; expected a number",
            ("--rdzv-backend=x", "p"): "--rdzv-backend: invalid choice: 'x' (choose from",
            (): "no program given: write paddlerun [options] PROGRAM",
            ("--rdzv-timeout=nan", "p"): "--rdzv-timeout is nan",
            ("--rdzv-timeout=inf", "p"): "--rdzv-timeout is inf",
            ("--rdzv-timeout=-1", "p"): "--rdzv-timeout is -1",
            ("--rdzv-timeout=0", "p"): "--rdzv-timeout is 0",
            ("--rdzv-timeout=1e300", "p"): "--rdzv-timeout is 1e+300",
            ("--rdzv-last-call=nan", "p"): "--rdzv-last-call is nan",
            ("--rdzv-last-call=-1", "p"): "--rdzv-last-call is -1",
            ("--node-timeout=inf", "p"): "--node-timeout is inf",
            ("--grace-s=nan", "p"): "--grace-s is nan",
            ("--monitor-interval=-inf", "p"): "--monitor-interval is -inf",
        }
        for argv, needle in cases.items():
            with self.assertRaises(options.UsageError, msg=argv) as cm:
                options.parse(list(argv))
            self.assertIn(needle, str(cm.exception), argv)

    def test_help_documents_every_option_and_variable(self):
        text = options.build_parser().format_help()
        for word in ["--nproc", "--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-backend",
                     "--rdzv-endpoint", "--rdzv-id", "--standalone", "--max-restarts",
                     "--monitor-interval", "--log-dir", "--tee", "--local-ranks-filter",
                     "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                     "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                     "TORCHELASTIC_RUN_ID", "PADDLE_RESTART_COUNT", "PADDLE_SOCKET_IFNAME",
                     "--token-file", "--no-auth", "PADDLE_STORE_TOKEN"]:
            self.assertIn(word, text)

    def test_help_lists_every_option_the_parser_accepts(self):
        ap = options.build_parser()
        accepted = {o for a in ap._actions for o in a.option_strings}
        self.assertTrue({"--min-nproc", "--exit-timeout", "--token-file", "--no-auth"} <= accepted)
        # The user's `paddlerun --help`, on a narrow terminal: no option name split by a wrap.
        r = subprocess.run(PADDLERUN + ["--help"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, COLUMNS="50"))
        self.assertEqual(r.returncode, 0, r.stderr)
        listed = set(re.findall(r"(?<![\w-])-{1,2}[A-Za-z][\w-]*", r.stdout))
        self.assertEqual(accepted - listed, set())
        self.assertNotRegex(r.stdout, r"-\w+-\n")  # a name wrapped at its hyphen
        # And every option an option's help mentions is one the parser accepts (not --rdzv-*).
        mentioned = {o for a in ap._actions if a.help
                     for o in re.findall(r"(?<![\w-])--[a-z][\w-]*\w(?![\w*-])", a.help)}
        self.assertEqual(mentioned - accepted, set())

    def test_launch_py_runs_as_a_program(self):
        # The docs run `tools/launch.py --nproc=2 ...` from a checkout.
        launch = os.path.join(TOOLS, "launch.py")
        with open(launch) as f:
            self.assertEqual(f.readline().rstrip("\n"), "#!/usr/bin/python3")
        self.assertTrue(os.access(launch, os.X_OK), f"{launch} is not executable")
        r = subprocess.run([launch, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--nproc", r.stdout)

    def test_worker_env(self):
        env = options.worker_env({"KEEP": "1", "RANK": "old"}, rank=5, local_rank=1,
                                 world_size=8, local_world_size=4, group_rank=1,
                                 group_world_size=2, master_addr="10.0.0.1", master_port=1234,
                                 restart_count=2, max_restarts=3, run_id="job", nnodes="1:2")
        want = {"KEEP": "1", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
                "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
                "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234",
                "TORCHELASTIC_RESTART_COUNT": "2", "PADDLE_RESTART_COUNT": "2",
                "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "job",
                "PADDLE_RUN_ID": "job", "ROLE_RANK": "5", "ROLE_WORLD_SIZE": "8"}
        for k, v in want.items():
            self.assertEqual(env[k], v, k)
        self.assertNotIn("PADDLE_STORE_TOKEN", env)
        env = options.worker_env({}, rank=0, local_rank=0, world_size=1, local_world_size=1,
                                 group_rank=0, group_world_size=1, master_addr="h",
                                 master_port=1, restart_count=0, max_restarts=0, run_id="j",
                                 nnodes="1", token="abc")
        self.assertEqual(env["PADDLE_STORE_TOKEN"], "abc")

    def test_rdzv_last_call_may_be_zero(self):
        self.assertEqual(options.parse(["--rdzv-last-call=0", "p"]).rdzv_last_call, 0)

    def test_exit_timeout_from_paddle_timeout_s(self):
        """Note [Settings table]: a malformed PADDLE_TIMEOUT_S is an error naming it."""
        old = os.environ.get("PADDLE_TIMEOUT_S")
        try:
            for value, want in (("", 300.0), (" 42 ", 42.0), ("0", 300.0), ("inf", 300.0)):
                os.environ["PADDLE_TIMEOUT_S"] = value
                self.assertEqual(options.parse(["p"]).exit_timeout, want, value)
            for value in ("30s", "nan", "-1", "abc"):
                os.environ["PADDLE_TIMEOUT_S"] = value
                with self.assertRaises(options.UsageError, msg=value) as cm:
                    options.parse(["p"])
                self.assertIn(f"PADDLE_TIMEOUT_S={value!r}", str(cm.exception))
        finally:
            if old is None:
                os.environ.pop("PADDLE_TIMEOUT_S", None)
            else:
                os.environ["PADDLE_TIMEOUT_S"] = old


class JobTokenTest(unittest.TestCase):
    """Note [Job token]: where the job's secret comes from, and when there is none."""

    def token(self, argv, environ=None):
        return options.job_token(options.parse(argv + ["p"]), environ or {})

    def test_one_node_makes_a_fresh_token_per_job(self):
        a, b = self.token([]), self.token(["--nproc=4"])
        self.assertRegex(a, r"^[0-9a-f]{32}$")
        self.assertNotEqual(a, b)
        self.assertEqual(self.token([], {"PADDLE_STORE_TOKEN": "given"}), "given")

    def test_token_file_and_env(self):
        with tempfile.NamedTemporaryFile("w") as f:
            f.write("from-file\n")
            f.flush()
            argv = ["--nnodes=2", "--rdzv-endpoint=h:1", f"--token-file={f.name}"]
            self.assertEqual(self.token(argv, {"PADDLE_STORE_TOKEN": "env"}), "from-file")
        self.assertEqual(self.token(["--nnodes=2", "--rdzv-endpoint=h:1"],
                                    {"PADDLE_STORE_TOKEN": "env"}), "env")

    def test_errors(self):
        with tempfile.NamedTemporaryFile("w") as empty:
            cases = [
                (["--nnodes=2", "--rdzv-endpoint=h:1"], {}, "--nnodes=2 needs the job's token on "
                 "every node"),
                (["--nnodes=1:3", "--rdzv-backend=etcd", "--rdzv-endpoint=h:1"], {},
                 "set PADDLE_STORE_TOKEN to the same secret on every node"),
                (["--nnodes=2", "--rdzv-endpoint=h:1", "--token-file=/no/such/file"], {},
                 "--token-file=/no/such/file cannot be read: No such file or directory"),
                ([f"--token-file={empty.name}"], {}, "has no token on its first line"),
                (["--no-auth"], {"PADDLE_STORE_TOKEN": "x"}, "--no-auth turns the job token off, "
                 "but $PADDLE_STORE_TOKEN gives one"),
            ]
            for argv, environ, needle in cases:
                with self.assertRaises(options.UsageError, msg=argv) as cm:
                    self.token(argv, environ)
                self.assertIn(needle, str(cm.exception), argv)
        self.assertIn("--no-auth", str(cm.exception))

    def test_no_auth(self):
        self.assertIsNone(self.token(["--no-auth"]))
        self.assertIsNone(self.token(["--no-auth", "--nnodes=2", "--rdzv-endpoint=h:1"]))

    def test_resolve_program(self):
        with tempfile.TemporaryDirectory() as d:
            runfiles = os.path.join(d, "launch.runfiles")
            binary = os.path.join(runfiles, "paddle", "examples", "train")
            os.makedirs(os.path.dirname(binary))
            with open(binary, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(binary, stat.S_IRWXU)
            script = os.path.join(d, "launch")
            saved = os.environ.pop("RUNFILES_DIR", None)
            try:
                self.assertEqual(options.resolve_program("//examples:train", script), [binary])
                with self.assertRaises(options.UsageError) as cm:
                    options.resolve_program("//examples:nothing", script)
                self.assertIn("not among the launcher's runfiles", str(cm.exception))
            finally:
                if saved is not None:
                    os.environ["RUNFILES_DIR"] = saved
        with tempfile.TemporaryDirectory() as d:
            for name, mode in (("a.py", 0o644), ("prog", 0o755), ("data", 0o644)):
                with open(os.path.join(d, name), "w") as f:
                    f.write("#!/bin/sh\n")
                os.chmod(os.path.join(d, name), mode)
            resolve = lambda program: options.resolve_program(program, "x", d)  # noqa: E731
            self.assertEqual(resolve("a.py"), [sys.executable, "a.py"])  # a venv's paddlerun: its Python
            self.assertEqual(resolve("./prog"), ["./prog"])
            self.assertEqual(resolve("sh"), ["sh"])  # on PATH
            cases = {  # program -> what the one-line usage error says
                "fashion_mnist": "fashion_mnist is neither a Bazel label (//pkg:name), a file nor "
                                 "a program on PATH; did you mean //examples:fashion_mnist?",
                "fashion_mnist.py": "no such Python file (in " + d + "); did you mean "
                                    "//examples:fashion_mnist?",
                "store_allreduc": "did you mean //examples:store_allreduce?",
                "prog": "for the file in " + d + " write ./prog",
                "no_such_program_here": "give a label, a path (./prog) or a command on PATH",
                "./missing": "./missing: no such file (in " + d + ")",
                "./data": "./data is not executable",
            }
            for program, needle in cases.items():
                with self.assertRaises(options.UsageError, msg=program) as cm:
                    resolve(program)
                self.assertIn(needle, str(cm.exception), program)
                self.assertNotIn("\n", str(cm.exception))

    def test_a_program_that_is_not_found_is_a_usage_error(self):
        # What the README once wrote: exit status 2 and one line, before anything is started.
        r = subprocess.run(PADDLERUN + ["--nproc=2", "fashion_mnist", "--elastic"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.splitlines(), [
            "paddlerun: error: fashion_mnist is neither a Bazel label (//pkg:name), a file nor a "
            "program on PATH; did you mean //examples:fashion_mnist?"])

    def test_launch_labels_are_the_data_of_launch(self):
        with open(os.path.join(TOOLS, "BUILD.bazel")) as f:
            build = f.read()
        launch = re.search(r'py_binary\(\s*name = "launch",.*?data = \[(.*?)\]', build, re.S)
        data = set(re.findall(r'"(//[^"]+)"', launch.group(1)))
        self.assertEqual(set(options.LAUNCH_LABELS), data)


# A stand-in for bazel (a test must not run the real one: the `bazel test` running it holds the
# lock): it records "cwd args" in $FAKE_LOG; `build` makes //examples:train's binary in $FAKE_BIN
# (after $FAKE_SLOW seconds) or fails with $FAKE_FAIL; `info` prints $FAKE_BIN.
FAKE_BAZEL = """#!/bin/sh
echo "$(pwd) $*" >>"$FAKE_LOG"
case "$1" in
  build)
    if [ -n "$FAKE_FAIL" ]; then echo "Loading: 0 packages" >&2; echo "$FAKE_FAIL" >&2; exit 1; fi
    sleep "${FAKE_SLOW:-0}"
    mkdir -p "$FAKE_BIN/examples"
    printf '#!/bin/sh\\necho opt build "$@"\\n' >"$FAKE_BIN/examples/train"
    chmod +x "$FAKE_BIN/examples/train" ;;
  info) echo "$FAKE_BIN" ;;
esac
"""


class LabelTest(unittest.TestCase):
    """Note [Optimized labels]: a label runs its -c opt --config=opt build, built by the launcher
    unless it must not (--no-build, a Bazel test, no workspace or no bazel)."""

    def setUp(self):
        d = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        self.ws = os.path.join(d, "ws")
        os.makedirs(os.path.join(d, "fake"))
        os.makedirs(self.ws)
        open(os.path.join(self.ws, "WORKSPACE"), "w").close()
        with open(os.path.join(d, "fake", "bazel"), "w") as f:
            f.write(FAKE_BAZEL)
        os.chmod(os.path.join(d, "fake", "bazel"), 0o755)
        self.log = os.path.join(d, "bazel.log")
        self.bin = os.path.join(d, "out", "bazel-out", "k8-opt", "bin")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("TEST_SRCDIR", "BUILD_WORKSPACE_DIRECTORY", "RUNFILES_DIR")}
        self.env.update(PATH=os.path.join(d, "fake") + ":/bin:/usr/bin", PADDLE_WORKSPACE=self.ws,
                        FAKE_LOG=self.log, FAKE_BIN=self.bin)
        self.script = os.path.join(d, "launch")  # no runfiles, no workspace around it

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return f.read().splitlines()

    def binary(self, path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\necho {text}\n")
        os.chmod(path, 0o755)

    def test_the_launcher_builds_the_label_optimized_and_names_the_binary(self):
        r = subprocess.run(PADDLERUN + ["--nproc=1", "//examples:train", "a"], env=self.env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[rank 0] opt build a", r.stdout)
        self.assertEqual(self.calls(), [f"{self.ws} build -c opt --config=opt //examples:train",
                                        f"{self.ws} info -c opt --config=opt bazel-bin"])
        self.assertRegex(r.stderr, rf"paddlerun: //examples:train runs {re.escape(self.bin)}/"
                                   r"examples/train \(k8-opt; bazel build -c opt --config=opt, "
                                   r"[0-9.]+ s\)\n")
        # The workspace `bazel run` was started in comes first.
        other = os.path.join(os.path.dirname(self.ws), "other")
        os.makedirs(other)
        open(os.path.join(other, "WORKSPACE"), "w").close()
        labels.Resolver(environ=dict(self.env, BUILD_WORKSPACE_DIRECTORY=other)).resolve(
            "//examples:train", self.script)
        self.assertEqual(self.calls()[-2], f"{other} build -c opt --config=opt //examples:train")

    def test_no_build_takes_the_opt_output_over_bazel_bin(self):
        self.binary(os.path.join(self.ws, "bazel-bin", "examples", "train"), "fastbuild")
        said = []
        resolver = labels.Resolver(build=False, say=said.append, environ=self.env)
        self.assertEqual(resolver.resolve("//examples:train", self.script),
                         os.path.join(self.ws, "bazel-bin", "examples", "train"))
        opt = os.path.join(self.ws, "bazel-out", "k8-opt", "bin", "examples", "train")
        self.binary(opt, "opt")
        resolver = labels.Resolver(build=False, say=said.append, environ=self.env)
        self.assertEqual(resolver.resolve("//examples:train", self.script), opt)
        self.assertEqual(said[-1], f"//examples:train runs {opt} (k8-opt; not built: --no-build)")
        self.assertEqual(self.calls(), [])
        # Inside a Bazel test nothing is built either (its bazel holds the lock), nor without bazel.
        for env, why in ((dict(self.env, TEST_SRCDIR="/x"), "in a Bazel test"),
                         (dict(self.env, PATH=os.path.dirname(self.log)), "no bazel on PATH")):
            labels.Resolver(say=said.append, environ=env).resolve("//examples:train", self.script)
            self.assertTrue(said[-1].endswith(f"(k8-opt; not built: {why})"), said[-1])
        self.assertEqual(self.calls(), [])

    def test_a_failed_build_is_a_one_line_usage_error(self):
        env = dict(self.env, FAKE_FAIL="ERROR: Skipping '//examples:nothing': no such target")
        r = subprocess.run(PADDLERUN + ["--nproc=1", "//examples:nothing"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.splitlines(), [
            f"paddlerun: error: `bazel build -c opt --config=opt //examples:nothing` in {self.ws} "
            "failed (exit 1): ERROR: Skipping '//examples:nothing': no such target; fix it, or "
            "give --no-build to run what is built already"])

    def test_a_slow_build_is_announced(self):
        said = []
        saved, labels.SLOW_BUILD_S = labels.SLOW_BUILD_S, 0.2
        try:
            labels.Resolver(say=said.append, environ=dict(self.env, FAKE_SLOW="1")).resolve(
                "//examples:train", self.script)
        finally:
            labels.SLOW_BUILD_S = saved
        self.assertIn("`bazel build -c opt --config=opt //examples:train` is taking a while",
                      said[0])
        self.assertIn("k8-opt; bazel build", said[1])


class StoreTest(unittest.TestCase):
    def check_store(self, store):
        self.assertIsNone(store.get("k"))
        store.set("k", "v")
        self.assertEqual(store.get("k"), "v")
        self.assertEqual(store.add("n", 2), 2)
        self.assertEqual(store.add("n", 3), 5)

    def test_tcp(self):
        for token in (None, "t0ken"):
            self.check_tcp(token)

    def check_tcp(self, token):
        server = kvstore.TcpStoreServer("127.0.0.1", 0, token)
        try:
            store = kvstore.TcpStore("127.0.0.1", server.port, 5, token)
            self.check_store(store)
            # Many clients adding at once: the counter is atomic.
            clients = [kvstore.TcpStore("127.0.0.1", server.port, 5, token) for _ in range(4)]
            threads = [threading.Thread(target=lambda c=c: [c.add("c", 1) for _ in range(50)])
                       for c in clients]
            [t.start() for t in threads]
            [t.join() for t in threads]
            self.assertEqual(store.get("c"), "200")
            with self.assertRaises(kvstore.StoreError) as cm:
                kvstore.TcpStoreServer("127.0.0.1", server.port)
            self.assertIn("already in use", str(cm.exception))
        finally:
            server.close()

    def test_tcp_unreachable_is_bounded(self):
        port = options.free_port()
        start = time.monotonic()
        with self.assertRaises(kvstore.StoreError) as cm:
            kvstore.TcpStore("127.0.0.1", port, 1.0)
        self.assertLess(time.monotonic() - start, 5)
        self.assertIn(f"cannot reach the rendezvous store at 127.0.0.1:{port} within 1 s",
                      str(cm.exception))

    def test_file(self):
        with tempfile.TemporaryDirectory() as d:
            self.check_store(kvstore.FileStore(d, "job"))

    def test_file_clear_removes_only_the_job(self):
        with tempfile.TemporaryDirectory() as d:
            job, other = kvstore.FileStore(d, "job"), kvstore.FileStore(d, "other")
            job.set("r0/size", "2")
            job.add("r0/joined", 1)
            other.set("round", "4")
            job.clear()
            self.assertEqual(os.listdir(d), ["other"])
            self.assertIsNone(kvstore.FileStore(d, "job").get("r0/size"))
            self.assertEqual(other.get("round"), "4")

    def test_file_clear_error_names_the_folder(self):
        with tempfile.TemporaryDirectory() as d:
            job = kvstore.FileStore(d, "job")
            os.mkdir(os.path.join(d, "job", "not-a-key"))  # a folder: the job's folder stays
            with self.assertRaises(kvstore.StoreError) as cm:
                job.clear()
            self.assertIn(f"cannot clear the rendezvous directory {d}/job", str(cm.exception))


TOKEN = "the-job-token"


class HostileClientTest(unittest.TestCase):
    """The launcher's tcp store against clients that misbehave, over real sockets: each is
    refused or dropped with its address logged, and the store goes on serving a real client.
    Raw clients speak Note [Store handshake] as written there, not through kvstore's client."""

    def setUp(self):
        self.logged = []
        self.server = kvstore.TcpStoreServer("127.0.0.1", 0, TOKEN, max_connections=8,
                                             handshake_timeout=0.5, log=self.logged.append)
        self.sockets = []

    def tearDown(self):
        for s in self.sockets:
            s.close()
        self.server.close()

    def raw(self):
        """A connected socket and the server's greeting."""
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=5)
        self.sockets.append(s)
        f = s.makefile("rb")
        greeting = json.loads(f.readline())
        self.assertEqual(greeting["server"], kvstore.SERVER_NAME)
        return s, f, greeting["nonce"]

    def authenticated(self):
        s, f, server_nonce = self.raw()
        nonce = secrets.token_hex(16)

        def mac(label, a, b):
            return hmac.new(TOKEN.encode(), label + b"\0" + bytes.fromhex(a) + bytes.fromhex(b),
                            hashlib.sha256).hexdigest()

        s.sendall(json.dumps({"op": "auth", "nonce": nonce,
                              "mac": mac(b"client", server_nonce, nonce)}).encode() + b"\n")
        reply = json.loads(f.readline())
        self.assertTrue(reply["ok"], reply)
        self.assertEqual(reply["mac"], mac(b"server", nonce, server_nonce))
        return s, f

    def peer(self, s):
        return "%s:%d" % s.getsockname()

    def assert_refused(self, s, f, needle, log_needle):
        """The server answered an error containing `needle`, closed, and logged the address."""
        reply = json.loads(f.readline())
        self.assertFalse(reply["ok"])
        self.assertIn(needle, reply["error"])
        self.assertEqual(f.readline(), b"")  # closed
        self.assert_logged(f"refused {self.peer(s)}: ", log_needle)

    def assert_logged(self, *needles):
        """Some line of the server's log holds every needle."""
        deadline = time.monotonic() + 5
        while not any(all(n in line for n in needles) for line in self.logged):
            self.assertLess(time.monotonic(), deadline, f"{needles!r} not in {self.logged}")
            time.sleep(0.01)

    def assert_serves(self):
        store = kvstore.TcpStore("127.0.0.1", self.server.port, 5, TOKEN)
        store.set("k", "v")
        self.assertEqual(store.get("k"), "v")
        self.assertEqual(store.add("n", 2) + 1, store.add("n", 1))
        store.close()

    def test_overlong_line(self):
        s, f, _ = self.raw()
        try:
            s.sendall(b"x" * (kvstore.MAX_LINE_BYTES + 10))
        except OSError:
            pass  # the server may stop reading first; the reply still comes
        self.assert_refused(s, f, "longer than 1048576 bytes", "sent a line longer than")
        # Authenticated clients get the same limit.
        s, f = self.authenticated()
        s.sendall(json.dumps({"op": "set", "key": "k", "value": "x" * kvstore.MAX_LINE_BYTES})
                  .encode() + b"\n")
        self.assert_refused(s, f, "longer than 1048576 bytes", "sent a line longer than")
        self.assert_serves()

    def test_malformed_requests(self):
        for junk in [b"{not json", b"\xff\xfe", b"[" * 100000, b"[1, 2]", b'{"op": 5}']:
            s, f, _ = self.raw()
            s.sendall(junk + b"\n")
            self.assert_refused(s, f, "bad request", "instead of the handshake")
        # Once authenticated, a bad request gets an error and the connection stays usable.
        s, f = self.authenticated()
        for junk in [b"{not json", b"\xff", b"[" * 100000, b"null", b'{"op": "set", "key": 1}',
                     b'{"op": "set", "key": "k", "value": 3}', b'{"op": "add", "key": "n"}',
                     b'{"op": "add", "key": "n", "delta": "1"}',
                     b'{"op": "add", "key": "n", "delta": true}',
                     b'{"op": "add", "key": "n", "delta": 1e400}',
                     b'{"op": "add", "key": "n", "delta": 99999999999999999999}',
                     b'{"op": "get"}', b'{"op": "nope", "key": "k"}']:
            s.sendall(junk + b"\n")
            reply = json.loads(f.readline())
            self.assertFalse(reply["ok"], junk[:40])
        s.sendall(b'{"op": "set", "key": "s", "value": "text"}\n'
                  b'{"op": "add", "key": "s", "delta": 1}\n{"op": "get", "key": "s"}\n')
        self.assertTrue(json.loads(f.readline())["ok"])
        self.assertIn("not an integer", json.loads(f.readline())["error"])
        self.assertEqual(json.loads(f.readline())["value"], "text")
        self.assert_serves()

    def test_wrong_or_no_token(self):
        s, f, server_nonce = self.raw()
        s.sendall(json.dumps({"op": "auth", "nonce": secrets.token_hex(16),
                              "mac": "00" * 32}).encode() + b"\n")
        self.assert_refused(s, f, "wrong job token", "wrong job token")
        s, f, _ = self.raw()
        s.sendall(json.dumps({"op": "auth", "nonce": secrets.token_hex(16), "mac": None})
                  .encode() + b"\n")
        self.assert_refused(s, f, "requires the job token", "no job token")
        s, f, _ = self.raw()
        s.sendall(b'{"op": "get", "key": "k"}\n')  # straight to business
        self.assert_refused(s, f, "handshake first", "'get' instead of the handshake")
        s, f, _ = self.raw()
        s.sendall(json.dumps({"op": "auth", "nonce": "zz", "mac": "\u00e9" * 64}).encode() +
                  b"\n")
        self.assert_refused(s, f, "handshake first", "'auth' instead of the handshake")
        # kvstore's own client: the error names the store and says to check the token.
        for token in ("wrong", None):
            with self.assertRaises(kvstore.StoreError) as cm:
                kvstore.TcpStore("127.0.0.1", self.server.port, 5, token)
            self.assertRegex(str(cm.exception),
                             rf"the rendezvous store at 127\.0\.0\.1:{self.server.port} "
                             r"refused this launcher: .*check that every launcher of the job "
                             r"has the same token \(PADDLE_STORE_TOKEN or --token-file\)")
        self.assert_serves()

    def test_silent_connection_times_out(self):
        s, f, _ = self.raw()
        start = time.monotonic()
        self.assert_refused(s, f, "no handshake", "did not authenticate within 0.5 s")
        self.assertLess(time.monotonic() - start, 3)
        # Half a line is no better than silence.
        s, f, _ = self.raw()
        s.sendall(b'{"op": "auth"')
        self.assert_refused(s, f, "no handshake", "did not authenticate within 0.5 s")
        self.assert_serves()

    def test_connections_over_the_cap(self):
        # Far more silent connections than the cap: each newcomer replaces the oldest
        # unauthenticated one, so a real client still gets in at once.
        silent = [self.raw() for _ in range(40)]
        self.assert_logged("to make room for")
        self.assert_serves()
        closed = sum(1 for s, f, _ in silent if f.readline() and f.readline() == b"")
        self.assertGreaterEqual(closed, 40 - 8)
        # Eight authenticated clients fill it: a ninth is told so, and gets in once one leaves.
        clients = [kvstore.TcpStore("127.0.0.1", self.server.port, 5, TOKEN) for _ in range(8)]
        with self.assertRaises(kvstore.StoreError) as cm:
            kvstore.TcpStore("127.0.0.1", self.server.port, 1, TOKEN)
        self.assertIn("the store is full (8 connections)", str(cm.exception))
        clients.pop().close()
        time.sleep(0.1)
        self.assert_serves()
        for c in clients:
            self.assertIsNone(c.get("nothing"))
            c.close()

    def test_client_refuses_a_server_without_the_token(self):
        plain = kvstore.TcpStoreServer("127.0.0.1", 0)
        try:
            with self.assertRaises(kvstore.StoreError) as cm:
                kvstore.TcpStore("127.0.0.1", plain.port, 5, TOKEN)
            self.assertIn(f"the rendezvous store at 127.0.0.1:{plain.port} did not prove that it "
                          "knows the job token (it has none)", str(cm.exception))
            kvstore.TcpStore("127.0.0.1", plain.port, 5).close()  # no token on either side
        finally:
            plain.close()
        # A fake server that answers ok with a made-up proof: refused too.
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()

            def fake():
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(json.dumps({"server": kvstore.SERVER_NAME,
                                             "nonce": "ab" * 16}).encode() + b"\n")
                    conn.makefile("rb").readline()
                    conn.sendall(b'{"ok": true, "mac": "' + b"0" * 64 + b'"}\n')
                    time.sleep(0.5)

            t = threading.Thread(target=fake)
            t.start()
            with self.assertRaises(kvstore.StoreError) as cm:
                kvstore.TcpStore("127.0.0.1", listener.getsockname()[1], 5, TOKEN)
            t.join()
            self.assertIn("did not prove that it knows the job token (a wrong proof)",
                          str(cm.exception))


class StoreServerTest(unittest.TestCase):
    """tools/paddle_store_server: tied to its launcher's stdin, or (--until-signal, a store on a
    machine of its own: tools/k8s_manifest) serving until SIGTERM whatever its stdin does."""

    BINARY = os.path.join(os.environ.get("TEST_SRCDIR", ""), "paddle", "tools",
                          "paddle_store_server")

    def start(self, *flags):
        p = subprocess.Popen([self.BINARY, "--host=127.0.0.1", "--port=0", *flags],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (p.poll() is None and p.kill(), p.wait()))
        line = p.stdout.readline().split()
        self.assertEqual(line[0], "port")
        return p, int(line[1])

    def test_until_signal_ignores_a_closed_stdin(self):
        p, port = self.start("--until-signal")
        time.sleep(0.6)  # three of its 200 ms ticks: a watched stdin at EOF would have ended it
        self.assertIsNone(p.poll())
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=10), 0)

    def test_a_closed_stdin_ends_it_by_default(self):
        p, _ = self.start()
        self.assertEqual(p.wait(timeout=10), 0)


class LauncherStoreTest(unittest.TestCase):
    """main.open_store: where the launcher's store listens, and that it requires the token."""

    def test_local_job_listens_on_loopback_with_its_token(self):
        opts = options.parse(["p"])
        store, server = main.open_store(opts, "tok", lambda m: None)
        try:
            self.assertEqual(server._listener.getsockname()[0], "127.0.0.1")
            with self.assertRaises(kvstore.StoreError):
                kvstore.TcpStore("127.0.0.1", server.port, 2)
        finally:
            store.close()
            server.close()

    def test_node_rank_0_listens_on_the_endpoint_address_only(self):
        port = options.free_port()
        opts = options.parse(["--nnodes=2", "--node-rank=0", f"--rdzv-endpoint=127.0.0.1:{port}",
                              "p"])
        store, server = main.open_store(opts, "tok", lambda m: None)
        try:
            self.assertEqual(server._listener.getsockname(), ("127.0.0.1", port))
        finally:
            store.close()
            server.close()
        opts = options.parse(["--nnodes=2", "--node-rank=0", "--rdzv-timeout=1",
                              "--rdzv-endpoint=192.0.2.1:29400", "p"])  # TEST-NET-1
        with self.assertRaises(kvstore.StoreError) as cm:
            main.open_store(opts, "tok", lambda m: None)
        self.assertIn("192.0.2.1 is not an address of this machine", str(cm.exception))


class DefaultJobTest(unittest.TestCase):
    def test_default_job_is_authenticated(self):
        """paddlerun --nproc=2 gives both workers the same fresh token, another job another."""
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.py")
            with open(script, "w") as f:
                f.write("import os\nprint('token', os.environ.get('PADDLE_STORE_TOKEN'))\n")
            env = {k: v for k, v in os.environ.items() if k != "PADDLE_STORE_TOKEN"}
            tokens = []
            for _ in range(2):
                p = subprocess.run(PADDLERUN + ["--nproc=2", script],
                                   env=env, capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                found = re.findall(r"^\[rank \d\] token (\S+)$", p.stdout, re.M)
                self.assertEqual(len(found), 2, p.stdout)
                self.assertEqual(found[0], found[1])
                self.assertRegex(found[0], r"^[0-9a-f]{32}$")
                tokens.append(found[0])
            self.assertNotEqual(tokens[0], tokens[1])

    def test_a_worker_whose_launcher_died_before_it_could_arm_the_death_signal_exits(self):
        """Found by tools/chaos: a launcher SIGKILLed while forking a worker left it running
        (PR_SET_PDEATHSIG only covers deaths after it is set). The child checks its parent."""
        from paddlerun import agent
        pid = os.fork()
        if pid == 0:
            agent._die_with_parent(launcher_pid=1)  # "the launcher" is not our parent: gone
            os._exit(0)  # not reached
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.WEXITSTATUS(status), 1)

    def test_a_worker_stuck_after_another_succeeded_fails_the_job_naming_it(self):
        """Found by tools/chaos: a worker SIGSTOPped at shutdown held the launcher forever while
        the others had exited 0. --exit-timeout bounds that wait and names the stuck rank."""
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.py")
            with open(script, "w") as f:
                f.write("import os, signal\n"
                        "if os.environ['RANK'] == '1':\n"
                        "    os.kill(os.getpid(), signal.SIGSTOP)\n")
            start = time.monotonic()
            p = subprocess.run(PADDLERUN + ["--nproc=2", "--exit-timeout=1", "--grace-s=1", script],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertLess(time.monotonic() - start, 30)
            self.assertRegex(p.stdout + p.stderr,
                             r"rank 1 \(pid \d+\) is stopped \(SIGSTOP\?\) 1 s after another "
                             r"worker of node 0 exited successfully")

    def test_a_failure_while_a_peer_is_stopped_blames_the_stopped_peer(self):
        """Found by tools/chaos: when rank 1 is SIGSTOPped, rank 0 times out and exits first, and
        the verdict used to blame rank 0. The stopped peer is the cause; the verdict names it."""
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.py")
            with open(script, "w") as f:
                f.write("import os, signal, sys, time\n"
                        "if os.environ['RANK'] == '1':\n"
                        "    os.kill(os.getpid(), signal.SIGSTOP)\n"
                        "time.sleep(0.5)\n"
                        "sys.exit('rank 0: timed out waiting for rank 1')\n")
            p = subprocess.run(PADDLERUN + ["--nproc=2", "--grace-s=1", script],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertRegex(p.stdout + p.stderr,
                             r"job failed: rank 1 \(pid \d+\) is stopped \(SIGSTOP\?\) and rank 0 "
                             r"\(local rank 0 on node 0, pid \d+\) exited with status 1")

    def test_every_stopped_worker_log_names_the_failed_rank(self):
        """Found by tools/chaos: the survivors of a dead rank were stopped by the launcher before
        they noticed, so their logs ended without a word of why. Each now ends with the
        launcher's line naming the culprit and its cause."""
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.py")
            with open(script, "w") as f:
                # Rank 1 fails once the others are up (their first line written), not before.
                f.write("import os, sys, time\n"
                        "print('rank', os.environ['RANK'], 'up', flush=True)\n"
                        f"open(os.path.join({d!r}, 'up' + os.environ['RANK']), 'w').close()\n"
                        "if os.environ['RANK'] == '1':\n"
                        f"    while not all(os.path.exists(os.path.join({d!r}, f'up{{r}}'))\n"
                        "                  for r in (0, 2)):\n"
                        "        time.sleep(0.01)\n"
                        "    sys.exit(3)\n"
                        "time.sleep(60)\n")
            logs_dir = os.path.join(d, "logs")
            p = subprocess.run(PADDLERUN + ["--nproc=3", "--grace-s=5", f"--log-dir={logs_dir}",
                                            "--tee", script],
                               capture_output=True, text=True, timeout=60)
            out = p.stdout + p.stderr
            self.assertEqual(p.returncode, 3, out)
            for r in (0, 2):
                with open(os.path.join(logs_dir, "attempt_0", f"rank_{r}.log")) as f:
                    lines = f.read().splitlines()
                self.assertEqual(lines[0], f"rank {r} up")
                self.assertRegex(lines[-1], r"^paddlerun: stopped this worker \(SIGTERM\): rank 1 "
                                            r"\(local rank 1 on node 0, pid \d+\) exited with "
                                            r"status 3$")
                self.assertIn(f"[rank {r}] {lines[-1]}", out)
            with open(os.path.join(logs_dir, "attempt_0", "rank_1.log")) as f:
                self.assertNotIn("paddlerun:", f.read())  # the culprit is not "stopped"

    def test_the_verdict_names_the_earliest_error_file_not_the_first_exit(self):
        """Found by tools/chaos (DISKFULL): rank 0 failed a checkpoint save and aborted the
        group; a peer exited before rank 0 did, and the verdict blamed the peer. A worker's
        PADDLE_ERROR_FILE, written before it aborts, makes the launcher name the cause."""
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.py")
            with open(script, "w") as f:
                f.write("import os, sys, time\n"
                        "r = os.environ['RANK']\n"
                        "if r == '0':\n"
                        "    with open(os.environ['PADDLE_ERROR_FILE'], 'w') as e:\n"
                        "        e.write(f'{time.time_ns()} 0\\nRESOURCE_EXHAUSTED: disk full\\n')\n"
                        "    time.sleep(3)\n"
                        "    sys.exit(1)\n"
                        "if r == '2':\n"
                        "    time.sleep(0.5)\n"
                        "    sys.exit('rank 2: rank 0 failed and left the group')\n"
                        "time.sleep(60)\n")
            logs_dir = os.path.join(d, "logs")
            p = subprocess.run(PADDLERUN + ["--nproc=3", "--grace-s=5", f"--log-dir={logs_dir}",
                                            script],
                               capture_output=True, text=True, timeout=60)
            out = p.stdout + p.stderr
            self.assertNotEqual(p.returncode, 0, out)
            self.assertRegex(out, r"job failed: rank 0 \(local rank 0 on node 0, pid \d+\) failed: "
                                  r"RESOURCE_EXHAUSTED: disk full")
            with open(os.path.join(logs_dir, "attempt_0", "rank_1.log")) as f:
                self.assertRegex(f.read().splitlines()[-1],
                                 r"^paddlerun: stopped this worker \(SIGTERM\): rank 0 .* failed: "
                                 r"RESOURCE_EXHAUSTED: disk full$")
            with open(os.path.join(logs_dir, "attempt_0", "rank_0.log")) as f:
                self.assertNotIn("paddlerun:", f.read())  # the culprit gets no "stopped" line

    def test_a_killed_worker_is_the_culprit_over_the_error_files_its_death_caused(self):
        """A worker killed by a signal writes no error file; the peers that fail because of it
        do, and exit too. Seen together (a slow monitor), the killed one is named."""
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.py")
            with open(script, "w") as f:
                f.write("import os, signal, sys, time\n"
                        "r = os.environ['RANK']\n"
                        "if r == '2':\n"
                        "    os.kill(os.getpid(), signal.SIGKILL)\n"
                        "time.sleep(0.3)\n"
                        "if r == '0':\n"
                        "    with open(os.environ['PADDLE_ERROR_FILE'], 'w') as e:\n"
                        "        e.write(f'{time.time_ns()} 0\\nUNAVAILABLE: peer 2 died\\n')\n"
                        "    sys.exit(1)\n"
                        "time.sleep(60)\n")
            p = subprocess.run(PADDLERUN + ["--nproc=3", "--grace-s=5", "--monitor-interval=2",
                                            script],
                               capture_output=True, text=True, timeout=60)
            out = p.stdout + p.stderr
            self.assertNotEqual(p.returncode, 0, out)
            self.assertRegex(out, r"job failed: rank 2 \(local rank 2 on node 0, pid \d+\) "
                                  r"killed by signal 9 \(SIGKILL\)")

    def test_an_elastic_worker_stopped_past_the_exit_timeout_is_killed_and_restarted(self):
        """An elastic job drops a stopped worker and goes on; the launcher must not wait for it
        forever: after --exit-timeout it is killed and, a restart left, started again."""
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.py")
            with open(script, "w") as f:
                f.write("import os, signal\n"
                        "if os.environ['RANK'] == '1' and "
                        "os.environ['PADDLE_RESTART_COUNT'] == '0':\n"
                        "    os.kill(os.getpid(), signal.SIGSTOP)\n")
            start = time.monotonic()
            p = subprocess.run(PADDLERUN + ["--nproc=2", "--min-nproc=1", "--max-restarts=1",
                                            "--exit-timeout=1", "--grace-s=1", script],
                               capture_output=True, text=True, timeout=60)
            out = p.stdout + p.stderr
            self.assertEqual(p.returncode, 0, out)
            self.assertLess(time.monotonic() - start, 30)
            self.assertRegex(out, r"worker 1 \(pid \d+\) has been stopped \(SIGSTOP\?\) for "
                                  r"\d+ s \(--exit-timeout=1\); killing it")
            self.assertIn("starting it again (restart 1 of --max-restarts=1)", out)


    def test_an_elastic_job_fails_at_once_when_its_store_dies(self):
        """Found by a chaos script that signalled the launcher's first child: with the store it
        hosts gone, the workers only fail after their timeouts and every restart waits for a
        store that is gone, so the launcher must end the job itself, naming the store."""
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.py")
            with open(script, "w") as f:
                f.write("import os, signal, time\n"
                        "if os.environ['RANK'] == '0':\n"
                        "    parent = os.getppid()\n"
                        "    for pid in open(f'/proc/{parent}/task/{parent}/children').read()"
                        ".split():\n"
                        "        if b'paddle_store_server' in open(f'/proc/{pid}/cmdline', 'rb')"
                        ".read():\n"
                        "            os.kill(int(pid), signal.SIGKILL)\n"
                        "time.sleep(60)\n")
            start = time.monotonic()
            p = subprocess.run(PADDLERUN + ["--nproc=2", "--min-nproc=1", "--max-restarts=3",
                                            "--grace-s=1", script],
                               capture_output=True, text=True, timeout=60)
            out = p.stdout + p.stderr
            self.assertEqual(p.returncode, 3, out)
            self.assertLess(time.monotonic() - start, 30, out)
            self.assertRegex(out, r"job failed: the workers' store \(paddle_store_server, pid "
                                  r"\d+\) killed by signal 9 \(SIGKILL\)")
            self.assertNotIn("starting it again", out)


class RendezvousTest(unittest.TestCase):
    def setUp(self):
        self.server = kvstore.TcpStoreServer("127.0.0.1", 0)

    def tearDown(self):
        self.server.close()

    def node(self, nnodes="2", node_rank=-1, nproc=2, timeout=10, addr="127.0.0.1"):
        lo, hi = options.parse_nnodes(nnodes)
        store = kvstore.TcpStore("127.0.0.1", self.server.port, 5)
        return rendezvous.NodeRendezvous(store, min_nodes=lo, max_nodes=hi, nnodes=nnodes,
                                         node_rank=node_rank, nproc=nproc, local_addr=addr,
                                         timeout=timeout, last_call=0.5)

    def join_all(self, nodes, r=0):
        results = [None] * len(nodes)

        def run(i):
            try:
                results[i] = nodes[i].join(r)
            except Exception as e:  # noqa: BLE001 - reported by the test
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(nodes))]
        for t in threads:
            t.start()
            time.sleep(0.05)
        [t.join() for t in threads]
        return results

    def test_static_ranks_follow_node_rank(self):
        nodes = [self.node(node_rank=1, nproc=3, addr="10.0.0.2"),
                 self.node(node_rank=0, nproc=2, addr="10.0.0.1")]
        a, b = self.join_all(nodes)
        self.assertEqual((a.group_rank, a.rank_offset, a.world_size), (1, 2, 5))
        self.assertEqual((b.group_rank, b.rank_offset, b.world_size), (0, 0, 5))
        self.assertEqual((a.master_addr, a.master_port), (b.master_addr, b.master_port))
        self.assertEqual(a.master_addr, "10.0.0.1")
        # The next round gets a fresh master port.
        c, d = self.join_all(nodes, r=1)
        self.assertEqual(c.round, 1)
        self.assertEqual(c.master_port, d.master_port)

    def test_elastic_closes_with_min_after_last_call(self):
        nodes = [self.node(nnodes="2:3"), self.node(nnodes="2:3")]
        start = time.monotonic()
        a, b = self.join_all(nodes)
        self.assertGreaterEqual(time.monotonic() - start, 0.5)
        self.assertEqual((a.group_world_size, sorted([a.group_rank, b.group_rank])), (2, [0, 1]))
        late = self.node(nnodes="2:3")
        with self.assertRaises(rendezvous.Late):
            late.join(0)

    def test_disagreeing_nnodes(self):
        a, b = self.join_all([self.node(nnodes="2"), self.node(nnodes="3")])
        for result in (a, b):
            self.assertIsInstance(result, rendezvous.RendezvousError)
            self.assertIn("launchers disagree on --nnodes", str(result))

    def test_duplicate_node_rank(self):
        a, b = self.join_all([self.node(node_rank=1), self.node(node_rank=1)])
        self.assertIsInstance(a, rendezvous.RendezvousError)
        self.assertIn("two launchers were started with --node-rank=1", str(a))

    def test_too_few_nodes_time_out(self):
        start = time.monotonic()
        with self.assertRaises(rendezvous.RendezvousError) as cm:
            self.node(nnodes="3", timeout=1).join(0)
        self.assertLess(time.monotonic() - start, 4)
        self.assertIn("only 1 of 3 nodes joined", str(cm.exception))


class LogMuxTest(unittest.TestCase):
    def test_prefix_files_filter_and_tail(self):
        import io
        import subprocess
        with tempfile.TemporaryDirectory() as d:
            out = io.StringIO()
            mux = logs.LogMux(d, 0, tee=True, ranks_filter={1}, out=out)
            procs = []
            for local in range(2):
                p = subprocess.Popen(["/bin/sh", "-c", f"echo a{local}; printf b{local}"],
                                     stdout=subprocess.PIPE)
                mux.add(10 + local, local, p.stdout)
                procs.append(p)
            [p.wait() for p in procs]
            mux.drain(5)
            self.assertEqual(out.getvalue(), "[rank 11] a1\n[rank 11] b1\n")
            with open(os.path.join(d, "attempt_0", "rank_10.log")) as f:
                self.assertEqual(f.read(), "a0\nb0\n")
            self.assertEqual(mux.tail(10), ["a0", "b0"])
            # After its pipe closed, the launcher's own line still ends the worker's output.
            mux.note(11, "stopped this worker: rank 10 exited with status 1")
            mux.note(10, "stopped this worker: rank 11 exited with status 1")
            self.assertTrue(out.getvalue().endswith(
                "[rank 11] paddlerun: stopped this worker: rank 10 exited with status 1\n"))
            with open(os.path.join(d, "attempt_0", "rank_10.log")) as f:
                self.assertEqual(
                    f.read(), "a0\nb0\npaddlerun: stopped this worker: rank 11 exited with status 1\n")
            self.assertEqual(mux.tail(10)[-1],
                             "paddlerun: stopped this worker: rank 11 exited with status 1")


class K8sTest(unittest.TestCase):
    def check_consistent(self, objs, nnodes, elastic):
        by_kind = {}
        for o in objs:
            by_kind.setdefault(o["kind"], []).append(o)
        job = by_kind["Job"][0]
        spec = job["spec"]
        self.assertEqual(spec["completionMode"], "Indexed")
        self.assertEqual(spec["completions"], nnodes)
        self.assertEqual(spec["parallelism"], nnodes)
        pod = spec["template"]
        headless = [s for s in by_kind["Service"] if s["spec"].get("clusterIP") == "None"][0]
        # The headless Service selects the job's pods, and the pods use it as their subdomain.
        for k, v in headless["spec"]["selector"].items():
            self.assertEqual(pod["metadata"]["labels"][k], v)
        self.assertEqual(pod["spec"]["subdomain"], headless["metadata"]["name"])
        container = pod["spec"]["containers"][0]
        command = container["command"]
        self.assertEqual(command[0], "paddlerun")
        env_names = {e["name"] for e in container["env"]}
        # Every pod gets the job's token from the job's Secret (Note [Job token]).
        token_ref = [e for e in container["env"] if e["name"] == "PADDLE_STORE_TOKEN"][0]
        ref = token_ref["valueFrom"]["secretKeyRef"]
        secret = [o for o in by_kind["Secret"] if o["metadata"]["name"] == ref["name"]][0]
        self.assertRegex(secret["stringData"][ref["key"]], r"^[0-9a-f]{32}$")
        self.assertIn("POD_IP", env_names)
        ports = {p["containerPort"] for p in container["ports"]}
        self.assertIn(headless["spec"]["ports"][0]["targetPort"], ports)
        if elastic:
            etcd = by_kind["Deployment"][0]
            etcd_svc = [s for s in by_kind["Service"] if s is not headless][0]
            self.assertEqual(etcd_svc["spec"]["selector"], etcd["spec"]["selector"]["matchLabels"])
            for k, v in etcd_svc["spec"]["selector"].items():
                self.assertEqual(etcd["spec"]["template"]["metadata"]["labels"][k], v)
            port = etcd_svc["spec"]["ports"][0]["targetPort"]
            self.assertEqual(etcd["spec"]["template"]["spec"]["containers"][0]["ports"][0]
                             ["containerPort"], port)
            self.assertIn("--rdzv-backend=etcd", command)
            self.assertIn(f"--rdzv-endpoint={etcd_svc['metadata']['name']}:{port}", command)
            self.assertNotIn("JOB_COMPLETION_INDEX", " ".join(command))
        else:
            self.assertNotIn("Deployment", by_kind)
            name = job["metadata"]["name"]
            self.assertIn(f"--rdzv-endpoint={name}-0.{headless['metadata']['name']}:"
                          f"{headless['spec']['ports'][0]['port']}", command)
            self.assertIn("--node-rank=$(JOB_COMPLETION_INDEX)", command)
            self.assertIn("JOB_COMPLETION_INDEX", env_names)
        # The launcher's own options parse; the program and its arguments come last.
        argv = [a.replace("$(JOB_COMPLETION_INDEX)", "0").replace("$(POD_IP)", "10.0.0.1")
                for a in command[1:]]
        opts = options.parse(argv)
        self.assertTrue(options.job_token(opts, {"PADDLE_STORE_TOKEN": "from-the-secret"}))
        self.assertEqual(opts.program, "//examples:fashion_mnist")
        self.assertEqual(opts.args, ["--model=cnn"])
        self.assertEqual(opts.max_nodes, nnodes)

    def test_static(self):
        objs = k8s.manifests("fm", "img:1", "3", 4, "//examples:fashion_mnist", ["--model=cnn"])
        self.check_consistent(objs, 3, elastic=False)
        self.assertIn('"kind": "Job"', k8s.to_yaml(objs))

    def test_elastic(self):
        objs = k8s.manifests("fm", "img:1", "2:4", 1, "//examples:fashion_mnist", ["--model=cnn"])
        self.check_consistent(objs, 4, elastic=True)

    def test_elastic_jobs_survive_a_lost_pod(self):
        # Note [Pods that go away]: replacements allowed, disruptions not counted; static jobs
        # end at the first lost pod.
        static = [o for o in k8s.manifests("fm", "img:1", "3", 4, "p") if o["kind"] == "Job"][0]
        self.assertEqual(static["spec"]["backoffLimit"], 0)
        self.assertNotIn("podFailurePolicy", static["spec"])
        for objs in (k8s.manifests("fm", "img:1", "2:4", 1, "p", max_restarts=3),
                     k8s.manifests("fm", "img:1", "2:4", 2, "p", max_restarts=3, min_nproc=1)):
            job = [o for o in objs if o["kind"] == "Job"][0]
            self.assertEqual(job["spec"]["backoffLimit"], 12)  # 3 replacements x 4 pods
            self.assertEqual(job["spec"]["template"]["spec"]["restartPolicy"], "Never")
            rule = job["spec"]["podFailurePolicy"]["rules"][0]
            self.assertEqual(rule["action"], "Ignore")
            self.assertEqual(rule["onPodConditions"], [{"type": "DisruptionTarget"}])

    def test_elastic_in_process_runs_the_store_on_its_own(self):
        objs = k8s.manifests("fm", "img:1", "2:4", 2, "//examples:fashion_mnist",
                             ["--elastic"], min_nproc=1)
        by_kind = {}
        for o in objs:
            by_kind.setdefault(o["kind"], []).append(o)
        store = by_kind["Deployment"][0]
        store_svc = [s for s in by_kind["Service"] if s["metadata"]["name"] == "fm-store"][0]
        self.assertEqual(store_svc["spec"]["selector"], store["spec"]["selector"]["matchLabels"])
        container = store["spec"]["template"]["spec"]["containers"][0]
        port = store_svc["spec"]["ports"][0]["targetPort"]
        self.assertEqual(container["ports"][0]["containerPort"], port)
        self.assertEqual(container["command"][0], "paddle_store_server")
        self.assertIn(f"--port={port}", container["command"])
        self.assertIn("--until-signal", container["command"])  # no launcher, no stdin
        self.assertEqual([e["name"] for e in container["env"]], ["PADDLE_STORE_TOKEN"])
        job = by_kind["Job"][0]
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        self.assertIn("--min-nproc=1", command)
        self.assertIn(f"--rdzv-endpoint=fm-store:{port}", command)
        self.assertNotIn("--rdzv-backend=etcd", command)
        argv = [a.replace("$(POD_IP)", "10.0.0.1") for a in command[1:]]
        opts = options.parse(argv)
        self.assertEqual((opts.min_nproc, opts.max_nodes, opts.nproc), (1, 4, 2))
        self.assertEqual(opts.args, ["--elastic"])

    def test_bad_nnodes(self):
        with self.assertRaises(ValueError):
            k8s.manifests("fm", "img", "3:2", 1, "p")
        with self.assertRaises(ValueError):
            k8s.manifests("fm", "img", "2", 0, "p")
        with self.assertRaisesRegex(ValueError, "min_nproc is 3"):
            k8s.manifests("fm", "img", "2", 2, "p", min_nproc=3)


if __name__ == "__main__":
    unittest.main()
