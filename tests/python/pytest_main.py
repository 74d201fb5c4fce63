"""Runs the pytest files named on the command line, writing JUnit XML where Bazel asks for it."""
import os
import sys

import pytest

if __name__ == "__main__":
    args = sys.argv[1:] + ["-q", "-p", "no:cacheprovider"]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append("--junitxml=" + xml)
    sys.exit(pytest.main(args))
