"""The optional C reader, clef_prof/analyze/read/_scan.c (everything else is in pyproject.toml).

Built where a C compiler and Python's headers are (`optional`: a failed build is a warning and
clef-prof reads the same values through ADBC or sqlite3, slower). SQLite's development files are
not needed: without sqlite3.h the reader declares the calls it makes itself, and without the
libsqlite3.so link (Linux) it links the runtime library, libsqlite3.so.0 (usually the one
Python's sqlite3 uses; a Python that bundles its own SQLite reads the same values through the
system's). pip says nothing of a failed build unless run with -v: `clef-prof doctor` tells.
"""
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import LinkError


class BuildExt(build_ext):
    """Link -lsqlite3 (the development link), else the runtime library by its file name (GNU ld)."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except LinkError:
            if "sqlite3" not in ext.libraries or not sys.platform.startswith("linux"):
                raise
            ext.libraries = [lib for lib in ext.libraries if lib != "sqlite3"]
            ext.extra_link_args = [*ext.extra_link_args, "-l:libsqlite3.so.0"]
            super().build_extension(ext)


setup(ext_modules=[Extension("clef_prof.analyze.read._scan", ["clef_prof/analyze/read/_scan.c"],
                             libraries=["sqlite3"], optional=True)],
      cmdclass={"build_ext": BuildExt})
