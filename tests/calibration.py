"""The verdict calibration harness (benchmarks/verdict_calibration.py, also run as a script for the
table in docs/statistics.md) for the tests in tests/bench and tests/compare, and a compare
capture built from per-batch arrays, so that a simulated study can go through `compare` itself."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from clef_prof.analyze.model import (BatchFigures, CaptureFacts, CudaCounts, CudaPerRequest, Excluded, OutsideStages,
                                     Overlap, PerRequest, Result, StageFigures)
from clef_prof.compare.engine import CaptureData
from clef_prof.base.config import StageConfig

ROOT = Path(__file__).resolve().parents[1]


def harness():
    spec = importlib.util.spec_from_file_location("verdict_calibration", ROOT / "benchmarks" / "verdict_calibration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def capture_data(name: str, size: np.ndarray, ns: np.ndarray) -> CaptureData:
    """A capture of one stage ("head", the whole batch) with these batch sizes and host ns."""
    size = np.asarray(size).astype(np.int64)
    ns = np.asarray(ns).round().astype(np.int64)
    n, req, total = len(size), int(size.sum()), int(ns.sum())
    fig = dict(instances=n, host_ns_total=total, host_ms_total=total / 1e6, host_ms_per_request=total / 1e6 / req,
               host_ms_mean=float(ns.mean() / 1e6), host_ms_p50=float(np.percentile(ns, 50) / 1e6),
               host_ms_p99=float(np.percentile(ns, 99) / 1e6), cuda=CudaCounts(), cuda_per_request=CudaPerRequest())
    result = Result(path=name, requests=req, requests_source="message n=K", batches=n,
                    config=StageConfig(stages=("head",)),
                    capture=CaptureFacts(nsys_version="sim", cuda_driver_version=None, schema_version=None,
                                         duration_s=None, stage_window_s=None, cuda_traced=False,
                                         graph_trace_mode=None, threads=[]),
                    stages={"head": StageFigures(**fig)}, pooler=BatchFigures(**fig, name="pooler"),
                    outside_stages=OutsideStages(CudaCounts(), CudaCounts()), totals=CudaCounts(),
                    per_request=PerRequest(pooler_host_ms=total / 1e6 / req), overlap=Overlap(),
                    excluded=Excluded(cut_at_edges={}, outside_batch_instances=0), ranks=[], warnings=[],
                    slots=["head", "pooler (no stage)", "outside"])
    return CaptureData(name, result, {"size": size, "host_ns": ns, "stage:head:ns": ns})
