"""Loads the clef_prof package from a given directory, ahead of any other clef_prof on sys.path:
the start-up hook (`sitecustomize.py`, from $CLEF_PROF_PKG) and the `inject --check` child (from
the directory of the copy that runs the check) both load the copy that launched them this way.

Standalone on purpose: both import it before clef_prof, from its own directory (put first on
sys.path for that import only); its name cannot clash with a module of the profiled program's.
"""
import sys


def load(pkg: str) -> None:
    """Import the package in directory `pkg` as `clef_prof`, unless a clef_prof is imported
    already or `pkg` holds none (then a plain `import clef_prof` finds one on sys.path)."""
    if "clef_prof" in sys.modules:
        return
    import importlib.util
    import os
    init = os.path.join(pkg, "__init__.py")
    if not os.path.isfile(init):
        return
    spec = importlib.util.spec_from_file_location("clef_prof", init, submodule_search_locations=[pkg])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["clef_prof"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules["clef_prof"]
        raise
