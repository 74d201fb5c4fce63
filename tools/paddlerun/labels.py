"""Bazel labels (//examples:fashion_mnist) as programs: which binary the launcher runs for one.

Note [Optimized labels]
A label runs its optimized build, whatever was built last. A plain `bazel build` or `bazel run`
(fastbuild) points bazel-bin at unoptimized binaries, several times slower; and `-c opt` alone and
`--config=opt` (-c opt plus -O3) overwrite each other in bazel-out/k8-opt. So where it can, the
launcher runs `bazel build -c opt --config=opt LABEL` itself in the workspace (quiet, a no-op when
up to date) and takes the binary from that configuration's bazel-bin (`bazel info`). The
workspace is the one `bazel run` was started in, else $PADDLE_WORKSPACE (the installed paddlerun),
else the one holding the launcher. `bazel run` releases the Bazel lock before it starts the
launcher, so the nested build does not wait for it.
It does not build with --no-build, without a workspace or a `bazel` on PATH (a cluster that only
has the built binaries), or inside a Bazel test: the `bazel test` running it holds the lock, and
a nested build would wait for it until the test times out. A label is then looked for in the
launcher's runfiles, then in a workspace's bazel-out/k8-opt/bin and bazel-bin. Either way the
launcher prints one line naming the binary and its configuration.
"""
import os
import shutil
import subprocess
import time

BAZEL_OPT = ("-c", "opt", "--config=opt")
SLOW_BUILD_S = 3.0  # a build that takes longer is announced, so a wait is not a silent hang


class LabelError(Exception):
    """A label that cannot be built or found; the message says what to do."""


def split(label):
    """'//pkg/sub:name' -> ('pkg/sub', 'name'); '//pkg/sub' names 'sub'."""
    package, _, name = label[2:].partition(":")
    return package, name or package.rsplit("/", 1)[-1]


def runfiles_dirs(script):
    """The runfiles folders a label may be found in, best first."""
    dirs = []
    if os.environ.get("RUNFILES_DIR"):
        dirs.append(os.environ["RUNFILES_DIR"])
    d = os.path.abspath(script)
    while d != "/":
        if d.endswith(".runfiles"):
            dirs.append(d)
            break
        d = os.path.dirname(d)
    dirs.append(os.path.abspath(script) + ".runfiles")
    return dirs


def build_workspace(script, environ):
    """The workspace a label is built in (see the note), or None."""
    here = os.path.dirname(os.path.realpath(script))
    while here != "/" and not os.path.exists(os.path.join(here, "WORKSPACE")):
        here = os.path.dirname(here)
    for d in (environ.get("BUILD_WORKSPACE_DIRECTORY"), environ.get("PADDLE_WORKSPACE"), here):
        if d and os.path.isfile(os.path.join(d, "WORKSPACE")):
            return d
    return None


def workspace_dirs(script, environ):
    """Workspaces whose outputs may hold a label's binary when nothing is built."""
    dirs = [environ.get("BUILD_WORKSPACE_DIRECTORY"), environ.get("PADDLE_WORKSPACE"),
            build_workspace(script, environ), os.getcwd()]
    return list(dict.fromkeys(d for d in dirs if d))


def configuration(path):
    """The Bazel configuration a binary was built in ("k8-opt"), from where its file lives."""
    parts = os.path.realpath(path).split(os.sep)
    if "bazel-out" in parts and parts.index("bazel-out") + 1 < len(parts):
        return parts[parts.index("bazel-out") + 1]
    return ""


class Resolver:
    """Label -> binary (Note [Optimized labels]), each label built and looked up once.

    build: whether the launcher may run bazel (not with --no-build); say: where the one line
    naming the binary goes (None: nowhere)."""

    def __init__(self, build=True, say=None, environ=None):
        self.build = build
        self.say = say
        self.environ = os.environ if environ is None else environ
        self.resolved = {}

    def resolve(self, label, script):
        """The binary's path; raises LabelError."""
        if label not in self.resolved:
            self.resolved[label] = self._resolve(label, script)
        return self.resolved[label]

    def _resolve(self, label, script):
        workspace = build_workspace(script, self.environ)
        bazel = shutil.which("bazel", path=self.environ.get("PATH"))
        why_not = ("--no-build" if not self.build else
                   "in a Bazel test" if "TEST_SRCDIR" in self.environ else
                   "no workspace" if workspace is None else
                   "no bazel on PATH" if bazel is None else "")
        if why_not:
            path = self._find(label, script)
            how = f"not built: {why_not}"
        else:
            start = time.monotonic()
            path = self._build(bazel, workspace, label)
            how = f"bazel build {' '.join(BAZEL_OPT)}, {time.monotonic() - start:.1f} s"
        config = configuration(path) or "prebuilt"
        if config.endswith(("-fastbuild", "-dbg")):
            config += ": not optimized"
        if self.say is not None:
            self.say(f"{label} runs {path} ({config}; {how})")
        return path

    def _build(self, bazel, workspace, label):
        def run(*args):
            p = subprocess.Popen([bazel, *args], cwd=workspace, env=dict(self.environ),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            try:
                try:
                    out, err = p.communicate(timeout=SLOW_BUILD_S)
                except subprocess.TimeoutExpired:
                    if self.say is not None:
                        self.say(f"`bazel {' '.join(args)}` is taking a while (compiling, or "
                                 "waiting for another bazel command in this workspace); "
                                 "--no-build runs what is built already")
                    out, err = p.communicate()
            finally:
                if p.poll() is None:  # interrupted (KeyboardInterrupt): no build left behind
                    p.kill()
                    p.wait()
            if p.returncode != 0:
                lines = (err + out).strip().splitlines()
                why = next((ln for ln in lines if ln.startswith("ERROR:")),
                           lines[-1] if lines else "no output")
                raise LabelError(f"`bazel {' '.join(args)}` in {workspace} failed (exit "
                                 f"{p.returncode}): {why.strip()}; fix it, or give --no-build to "
                                 "run what is built already")
            return out

        run("build", *BAZEL_OPT, label)
        bin_dir = run("info", *BAZEL_OPT, "bazel-bin").strip()
        path = os.path.join(bin_dir, *split(label))
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise LabelError(f"{label} built, but {path} is not an executable file: is it a "
                             "cc_binary, py_binary or sh_binary?")
        return path

    def _find(self, label, script):
        package, name = split(label)
        tried = [os.path.join(d, "paddle", package, name) for d in runfiles_dirs(script)]
        for d in workspace_dirs(script, self.environ):
            tried.append(os.path.join(d, "bazel-out", "k8-opt", "bin", package, name))
            tried.append(os.path.join(d, "bazel-bin", package, name))
        for path in tried:
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
        raise LabelError(f"{label} is not among the launcher's runfiles nor built in a "
                         f"workspace (looked at {', '.join(tried)}); add it to the data of "
                         f"//tools:launch, `bazel build {' '.join(BAZEL_OPT)} {label}`, or pass "
                         "the built binary's path")
