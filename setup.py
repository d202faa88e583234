"""The optional C reader, clef_prof/analyze/_scan.c (everything else is in pyproject.toml).

Built when a C compiler, Python's headers and sqlite3.h are there (`optional`: a failed build
is a warning); without it clef-prof reads the same values through ADBC or sqlite3, slower.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("clef_prof.analyze._scan", ["clef_prof/analyze/_scan.c"],
                             libraries=["sqlite3"], optional=True)])
