"""clef_prof.base.cupti: the CUPTI each nsys release ships against the driver's CUDA version (an nsys older
than the driver loses records), read from real exports, and nsys's lines about lost records."""
from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from clef_prof.base import cupti
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.judge.manifest import check_manifest
from clicheck import run_main

TRACES = Path(__file__).resolve().parents[1] / "traces"


def env_value(path, name):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [v for (v,) in con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = ?", (name,))]
    finally:
        con.close()


def test_version_table():
    assert cupti.cupti_major("2022.4.2.1")[:2] == (11, 11)
    assert cupti.cupti_major("2023.4.4.54")[:2] == (12, 12)
    assert cupti.cupti_major("2025.3.2.0")[:2] == (13, 13)
    assert cupti.cupti_major("2024.6.1")[:2] == (12, 13)        # unlisted: between its neighbours
    assert cupti.cupti_major(None)[:2] == (None, None)
    assert cupti.check("2025.3.2.0", 13000) == [] and cupti.check("2023.4.4.54", 12080) == []
    (w,) = cupti.check("2024.6.1", 13000)
    assert w.startswith("cannot tell whether nsys 2024.6.1")
    assert cupti.check("2026.1.0", 13000) == []                  # newer than 2025.3, whose CUPTI is 13
    assert cupti.check("2023.4.4.54", None) == []                # no driver version: nothing to say


@pytest.mark.parametrize("name, nsys", [("gpu-main-slice", "2023.4.4.54"), ("gpu25-pr-slice", "2025.3.2.0")])
def test_real_captures_hold_the_driver_version(name, nsys):
    path = TRACES / f"{name}.sqlite"
    assert env_value(path, "CudaDriverVersion") == ["13000"]
    r = analyze(str(path)).result
    assert (r.capture.cuda_driver_version, r.capture.nsys_version) == (13000, nsys)
    old = [w for w in r.warnings if "older than the driver's CUDA 13.0" in w]
    assert len(old) == (1 if nsys.startswith("2023") else 0)
    if old:
        assert "ships CUPTI 12.4" in old[0] and "CudaDriverVersion 13000" in old[0]


def test_newer_driver_warns_and_strict_exits_2(tmp_path):
    """nsys 2025.3 (CUPTI 13) against a driver that says CUDA 14.0 (the env row edited in a copy)."""
    cap = tmp_path / "cap.sqlite"
    shutil.copy(TRACES / "gpu25-pr-slice.sqlite", cap)
    con = sqlite3.connect(cap)
    con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '14000' WHERE name = 'CudaDriverVersion'")
    con.commit()
    con.close()
    p = run_main("analyze", cap, "-f", "json", "--strict")
    assert p.returncode == 2
    (w,) = json.loads(p.stdout)["warnings"]
    assert "ships CUPTI 13.0, older than the driver's CUDA 14.0" in w
    # a scrubbed export without the row: nothing to check, nothing said
    con = sqlite3.connect(cap)
    con.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'")
    con.commit()
    con.close()
    assert run_main("analyze", cap, "-f", "json", "--strict").returncode == 0


def test_nsys_messages_from_the_manifest_warn(slice_result):
    lines = cupti.problem_lines("Generating report\nUnknown runtime API function index: 468\n"
                                "Unknown runtime API function index: 468\n"
                                "Importer error status: Importation succeeded with non-fatal errors.\nok\n")
    assert lines == ["Unknown runtime API function index: 468 (x2)",
                     "Importer error status: Importation succeeded with non-fatal errors."]
    (w,) = check_manifest(replace(slice_result, requests=None), {"status": "ok", "nsys": {"messages": lines}})
    assert "Unknown runtime API function index: 468 (x2)" in w and "records may be missing" in w
