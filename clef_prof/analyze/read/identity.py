"""A report's identity: what tells two `.nsys-rep` reports (or traces) apart without reading a
multi-GB file, whatever their mtimes (inputs stamps it in an export, kineto in a converted trace)."""
from __future__ import annotations

import os

HASHED = 1 << 20            # bytes hashed at each end of a report


def report_identity(report: str) -> tuple[int, str]:
    """(size, SHA-256 of the first and last MiB) of a report: what tells two reports apart
    without reading a multi-GB file, whatever their mtimes."""
    import hashlib         # here: 5 ms of OpenSSL start-up that an export's analysis does without

    h = hashlib.sha256()
    with open(report, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        h.update(fh.read(HASHED))
        if size > HASHED:
            fh.seek(max(HASHED, size - HASHED))
            h.update(fh.read(HASHED))
    return size, h.hexdigest()
