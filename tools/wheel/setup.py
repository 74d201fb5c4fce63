"""Marks the distribution as binary: its packages carry extensions built by Bazel (not by
setuptools), so the wheel gets the interpreter's platform tag (cp311-cp311-linux_x86_64) and
installs into platlib instead of being a py3-none-any wheel that claims to run anywhere. The
metadata is in pyproject.toml."""
from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=BinaryDistribution)
