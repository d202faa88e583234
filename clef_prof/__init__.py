"""clef-prof: per-request host-path profiling of GPU model servers from Nsight Systems captures."""

__version__ = "0.1.0"
