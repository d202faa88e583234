"""clef-prof's start-up hook: `clef-prof inject` puts this directory first on PYTHONPATH, so
every Python process started with that environment imports this file at start-up.

1. It runs the `sitecustomize` it shadows (the next one on sys.path), if there is one.
2. With $CLEF_PROF_SPEC set, it loads clef_prof (from $CLEF_PROF_PKG, the copy that printed
   the environment, when given: `_clef_prof_boot.load`, beside this file) and calls
   `clef_prof.annotate.startup.install_from_env()`, which installs the spec's wrappers lazily,
   through an import hook.

It never raises: a failure prints one line on stderr (and, for an unusable spec without
$CLEF_PROF_LENIENT=1, ends the process with exit code 1).
"""


def _clef_prof_chain():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.realpath(__file__))
    rest = []
    for p in sys.path:
        try:
            if os.path.realpath(p or os.getcwd()) == here:
                continue
        except (OSError, ValueError):
            pass
        rest.append(p)
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    if spec.origin and os.path.realpath(spec.origin) == os.path.realpath(__file__):
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_clef_prof_chained_sitecustomize"] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:  # what site.py does for a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize ({spec.origin}, chained by clef-prof): "
                         f"{type(exc).__name__}: {exc}\n")


def _clef_prof_install():
    import os
    import sys

    if not os.environ.get("CLEF_PROF_SPEC"):
        return
    pkg = os.environ.get("CLEF_PROF_PKG")
    if pkg:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        try:
            import _clef_prof_boot
        finally:
            del sys.path[0]
            sys.modules.pop("_clef_prof_boot", None)     # nothing left behind in the program
        _clef_prof_boot.load(pkg)
    from clef_prof.annotate import startup
    startup.install_from_env()


def _clef_prof_main():
    import sys
    try:
        _clef_prof_chain()
    except Exception as exc:
        sys.stderr.write(f"clef-prof inject: warning: could not chain the existing sitecustomize: "
                         f"{type(exc).__name__}: {exc}\n")
    try:
        _clef_prof_install()
    except Exception as exc:
        import os
        lenient = os.environ.get("CLEF_PROF_LENIENT", "").strip().lower() in ("1", "true", "yes", "on")
        sys.stderr.write(f"clef-prof inject: {'warning' if lenient else 'error'}: cannot install "
                         f"{os.environ.get('CLEF_PROF_SPEC')}: {type(exc).__name__}: {exc}\n")
        if not lenient:
            sys.stderr.flush()
            os._exit(1)


_clef_prof_main()
