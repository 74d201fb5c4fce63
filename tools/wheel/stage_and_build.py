#!/usr/bin/env python3
"""Stages Paddle Collective's wheel and builds it: one script for tools/build-wheel (with the
optimized binaries Bazel just built) and for tests/tools:wheel_test (with its runfiles).

usage: stage_and_build.py --c-ext=_C.so --torch-ext=_C.so --store-server=paddle_store_server
                          --out=DIR [--src=ROOT] [--stage=DIR] [--python=/usr/bin/python3]

The staging folder gets
  paddle/                  python/paddle/**/*.py, paddle/_C.so (--c-ext) and
                           paddle/torch/_C.so (--torch-ext)
  paddlerun/               tools/paddlerun/*.py, a __main__.py (`python -m paddlerun`) and
                           bin/paddle_store_server (--store-server), which elastic jobs start
                           (paddlerun/elastic.py looks there first)
  pyproject.toml, setup.py from tools/wheel/ (metadata; the `paddlerun` console script)
and `python -m build --wheel --no-isolation` (Debian's python3-build; `pip wheel
--no-build-isolation` where that is missing) turns it into one wheel in --out, offline. Older
paddle_collective wheels in --out are removed first, so `pip install DIR/*.whl` finds one. The
last line printed is the wheel's path.

ROOT (default: two folders above this script, without resolving links, so that in a Bazel
runfiles tree it is the runfiles' workspace folder) holds python/paddle/ and tools/paddlerun/.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DIST = "paddle_collective"

MAIN = '''"""`python -m paddlerun`: the launcher, as the wheel's `paddlerun` command runs it."""
import sys

from paddlerun import main

sys.exit(main.main(sys.argv[1:], sys.argv[0]))
'''


def copy_py_tree(src, dest):
    """Copies the .py files under src (following links, as runfiles are links) to dest."""
    if not os.path.isdir(src):
        raise SystemExit(f"stage_and_build: {src} is not a folder (--src?)")
    count = 0
    for root, dirs, files in os.walk(src, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, name), src)
                os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
                shutil.copyfile(os.path.join(root, name), os.path.join(dest, rel))
                count += 1
    if not count:
        raise SystemExit(f"stage_and_build: no .py files under {src}")
    return count


def copy_binary(src, dest):
    if not os.path.isfile(src):
        raise SystemExit(f"stage_and_build: {src} does not exist (build it first)")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copyfile(src, dest)  # a plain copy: Bazel's outputs are read-only
    os.chmod(dest, 0o755)


def stage(args, where):
    root = os.path.abspath(args.src)
    n = copy_py_tree(os.path.join(root, "python", "paddle"), os.path.join(where, "paddle"))
    copy_binary(args.c_ext, os.path.join(where, "paddle", "_C.so"))
    copy_binary(args.torch_ext, os.path.join(where, "paddle", "torch", "_C.so"))
    n += copy_py_tree(os.path.join(root, "tools", "paddlerun"), os.path.join(where, "paddlerun"))
    with open(os.path.join(where, "paddlerun", "__main__.py"), "w") as f:
        f.write(MAIN)
    copy_binary(args.store_server, os.path.join(where, "paddlerun", "bin", "paddle_store_server"))
    for name in ("pyproject.toml", "setup.py"):
        shutil.copyfile(os.path.join(HERE, name), os.path.join(where, name))
    if os.path.isfile(os.path.join(root, "LICENSE")):  # setuptools puts it in .dist-info
        shutil.copyfile(os.path.join(root, "LICENSE"), os.path.join(where, "LICENSE"))
    return n


def build(args, where, out):
    have_build = subprocess.run([args.python, "-c", "import build"],
                                stderr=subprocess.DEVNULL).returncode == 0
    if have_build:
        command = [args.python, "-m", "build", "--wheel", "--no-isolation", "--outdir", out,
                   where]
    else:
        command = [args.python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                   "--no-index", "--wheel-dir", out, where]
    env = dict(os.environ, PIP_NO_CACHE_DIR="1", PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run(command, cwd=where, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.stderr.write(p.stdout.decode(errors="replace"))
        raise SystemExit(f"stage_and_build: {' '.join(command)} failed "
                         f"(exit status {p.returncode})")
    wheels = glob.glob(os.path.join(out, f"{DIST}-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"stage_and_build: expected one wheel in {out}, found {wheels}")
    wheel = wheels[0]
    if wheel.endswith("-none-any.whl"):
        raise SystemExit(f"stage_and_build: {wheel} is tagged pure Python (setup.py not used?)")
    return wheel


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--c-ext", required=True, help="the built paddle/_C.so")
    parser.add_argument("--torch-ext", required=True, help="the built paddle/torch/_C.so")
    parser.add_argument("--store-server", required=True, help="the built paddle_store_server")
    parser.add_argument("--out", required=True, help="folder the wheel is written to")
    parser.add_argument("--src", default=os.path.dirname(os.path.dirname(HERE)),
                        help="the workspace (python/paddle, tools/paddlerun); default %(default)s")
    parser.add_argument("--stage", help="staging folder, emptied first and kept "
                        "(default: a temporary folder, removed)")
    parser.add_argument("--python", default="/usr/bin/python3",
                        help="interpreter that runs the build; its tag names the wheel, so it "
                        "must be the one the extensions were built for (default %(default)s)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, f"{DIST}-*.whl")):
        os.remove(old)
    where = os.path.abspath(args.stage) if args.stage else tempfile.mkdtemp(prefix="wheel-")
    try:
        if args.stage:
            shutil.rmtree(where, ignore_errors=True)
            os.makedirs(where)
        n = stage(args, where)
        wheel = build(args, where, out)
    finally:
        if not args.stage:
            shutil.rmtree(where, ignore_errors=True)
    size = os.stat(wheel).st_size
    print(f"stage_and_build: {n} .py files, 2 extensions and paddle_store_server -> "
          f"{os.path.basename(wheel)} ({size / 2**20:.1f} MiB) in {time.monotonic() - t0:.1f} s",
          file=sys.stderr)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
