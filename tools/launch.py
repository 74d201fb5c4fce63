#!/usr/bin/python3
"""The launcher's entry point for `bazel run //tools:launch -- [options] PROGRAM [args]` and for
the installed `paddlerun` command (tools/install-paddlerun). The logic lives in tools/paddlerun/;
`paddlerun --help` documents every option and the workers' environment."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from paddlerun import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main.main(sys.argv[1:], sys.argv[0]))
