"""CLI: `bazel run //tools:k8s -- ...` or python3 -m k8s_manifest (PYTHONPATH=tools); writes the
manifests of tools/k8s_manifest/__init__.py to stdout. (The package is not named k8s: Bazel would
make the py_binary //tools:k8s and a folder tools/k8s/ the same runfiles path.)"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

import k8s_manifest  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(prog="k8s", description=k8s_manifest.__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="job name (DNS label)")
    ap.add_argument("--image", required=True, help="container image with paddlerun installed")
    ap.add_argument("--nnodes", default="1", help="pods: N, or MIN:MAX (adds etcd)")
    ap.add_argument("--nproc", type=int, default=1, help="workers per pod")
    ap.add_argument("--min-nproc", type=int, default=0,
                    help="elastic in process: the fewest workers per pod the job keeps going "
                         "with (paddlerun --min-nproc); adds the workers' store as a Deployment")
    ap.add_argument("--max-restarts", type=int, default=3,
                    help="restarts per worker; for elastic jobs also the replacements per pod")
    ap.add_argument("--cpu", default="2")
    ap.add_argument("--memory", default="4Gi")
    ap.add_argument("program")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    o = ap.parse_args(argv)
    try:
        objs = k8s_manifest.manifests(o.name, o.image, o.nnodes, o.nproc, o.program, o.args,
                             o.max_restarts, o.cpu, o.memory, o.min_nproc)
    except ValueError as e:
        ap.error(str(e))
    sys.stdout.write(k8s_manifest.to_yaml(objs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
