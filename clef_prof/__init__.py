"""clef-prof: per-request host-path profiling of GPU model servers from Nsight Systems captures.

The annotation API, `clef_prof.stage`, `clef_prof.batch`, `clef_prof.request` and
`clef_prof.enqueued` (see clef_prof.annotate.api), is
imported on first use, so that `import clef_prof` stays light for a server.
"""
from .base.defaults import VERSION as __version__


def open(path, **kw):  # noqa: A001 - clef_prof.open(path) reads like the builtin, on purpose
    """Analyze an nsys SQLite export once and return a `clef_prof.explore.frames.Capture` (DataFrames)."""
    from .explore.frames import open as _open
    return _open(path, **kw)


def history_frame(path, **kw):
    """A history store (clef-prof history) as a pandas DataFrame: one row per result and metric, with
    its change points (`clef_prof.history.frame.history_frame`)."""
    from .history.frame import history_frame as _frame
    return _frame(path, **kw)


_ANNOTATIONS = ("stage", "batch", "request", "enqueued")


def __getattr__(name):
    if name in _ANNOTATIONS:
        from .annotate import api as annotate
        return getattr(annotate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
