"""The optional C reader, clef_prof/analyze/_scan.c (everything else is in pyproject.toml).

Built where a C compiler and Python's headers are (`optional`: a failed build is a warning and
clef-prof reads the same values through ADBC or sqlite3, slower). SQLite's development files are
not needed: without sqlite3.h the reader declares the calls it makes itself, and without the
libsqlite3.so link it links the runtime library, libsqlite3.so.0, the one Python's sqlite3 uses.
"""
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """Link -lsqlite3 (the development link), else the runtime library by its file name."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception:  # noqa: BLE001 - CompileError or LinkError: retried once, then optional
            if "sqlite3" not in ext.libraries:
                raise
            ext.libraries = [lib for lib in ext.libraries if lib != "sqlite3"]
            ext.extra_link_args = [*ext.extra_link_args, "-l:libsqlite3.so.0"]
            super().build_extension(ext)


setup(ext_modules=[Extension("clef_prof.analyze._scan", ["clef_prof/analyze/_scan.c"],
                             libraries=["sqlite3"], optional=True)],
      cmdclass={"build_ext": BuildExt})
