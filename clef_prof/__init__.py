"""clef-prof: per-request host-path profiling of GPU model servers from Nsight Systems captures.

The annotation API, `clef_prof.stage` and `clef_prof.batch` (see clef_prof.annotate), is
imported on first use, so that `import clef_prof` stays light for a server.
"""
import sys as _sys
import types as _types

__version__ = "0.1.0"


def open(path, **kw):  # noqa: A001 - clef_prof.open(path) reads like the builtin, on purpose
    """Analyze an nsys SQLite export once and return a `clef_prof.model.Capture` (DataFrames)."""
    from .model import open as _open
    return _open(path, **kw)


_ANNOTATIONS = ("stage", "batch")


def __getattr__(name):
    if name in _ANNOTATIONS:
        from . import annotate
        return getattr(annotate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _StageModule(_types.ModuleType):
    """The analysis submodule clef_prof/stage.py, made callable as clef_prof.stage(name, ...)."""

    def __call__(self, name, domain="clef"):
        from .annotate import stage
        return stage(name, domain)


class _Package(_types.ModuleType):
    """`clef_prof.stage` is both the annotation function and the name of the analysis
    submodule clef_prof/stage.py. Importing that submodule binds it here, over the function;
    this keeps the binding (so `import clef_prof.stage` and patching still see the module)
    but makes that module callable, so `clef_prof.stage("index")` works before and after."""

    def __setattr__(self, name, value):
        if name == "stage" and type(value) is _types.ModuleType:
            value.__class__ = _StageModule
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
