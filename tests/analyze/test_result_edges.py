"""analyze.result at its edges, on a real GPU capture (gpu25-q1c16-pr, nsys 2025.3) and copies of it
edited with SQL: each figure against SQL over the export. The cases the mutation pass of result.py
found untested (docs/mutation.md)."""
from __future__ import annotations

import pytest

from clef_prof.analyze.result import analyze
from conftest import edited_copy, sql

CAP = "gpu25-q1c16-pr"
STAGE_NS = """SELECT sum(e."end" - e.start) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
              WHERE e.eventType = 59 AND coalesce(e.text, s.value) = ?"""


@pytest.fixture(scope="module")
def base(capture):
    return capture(CAP), analyze(str(capture(CAP))).result


def test_stage_host_totals_in_ms_are_the_ranges_sum(base):
    path, r = base
    for name, st in r.stages.items():
        ns = sql(path, STAGE_NS, name)[0][0] or 0
        assert st.host_ns_total == ns and st.host_ms_total == pytest.approx(ns / 1e6, rel=1e-12), name


def test_without_export_metadata_an_export_is_still_read(base, tmp_path):
    """nsys exports with no META_DATA_EXPORT (older ones, or a copy stripped of it) are exports
    while they hold StringIds: the same figures."""
    path, r = base
    bare = edited_copy(path, tmp_path / "bare.sqlite", "DROP TABLE META_DATA_EXPORT")
    b = analyze(str(bare)).result
    assert (b.requests, b.batches, b.totals.h2d_copies, b.totals.kernel_launches) == (
        r.requests, r.batches, r.totals.h2d_copies, r.totals.kernel_launches)


def test_zero_length_rows_are_not_reversed(base, tmp_path):
    """A CUDA call or GPU row that ends where it starts (a 0 ns kernel, a call timed at one clock
    tick) is a row like any other, not a reversed one: no warning, every count unchanged."""
    path, r = base
    kid = sql(path, "SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    cid = sql(path, "SELECT r.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                    "ON k.correlationId = r.correlationId WHERE k.rowid = ?", kid)[0][0]      # the kernel's launch
    flat = edited_copy(path, tmp_path / "flat.sqlite",
                       ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start WHERE rowid = ?', (kid,)),
                       ('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = start WHERE rowid = ?', (cid,)))
    f = analyze(str(flat)).result
    assert not [w for w in f.warnings if "end before they start" in w]
    assert (f.requests, f.batches, f.totals.h2d_copies, f.totals.kernel_launches, f.totals.d2h_copies) == (
        r.requests, r.batches, r.totals.h2d_copies, r.totals.kernel_launches, r.totals.d2h_copies)
    # and rows that really end before they start are said, each kind on its own
    back = edited_copy(path, tmp_path / "back.sqlite",
                       ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 1 WHERE rowid = ?', (kid,)),
                       ('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = start - 1 WHERE rowid = ?', (cid,)))
    said = [w for w in analyze(str(back)).result.warnings if "end before they start" in w]
    assert [w.split()[0:3] for w in said] == [["1", "CUDA", "API"], ["1", "GPU", "activity"]]


@pytest.mark.parametrize("drop", [(), ("META_DATA_EXPORT",), ("StringIds",)])
def test_an_export_without_nvtx_is_told_from_a_foreign_file(base, tmp_path, drop):
    """An nsys export with no NVTX_EVENTS (recorded without -t nvtx) says so, whether it still
    holds its export metadata, its StringIds or both; a SQLite file with neither is no export."""
    from clef_prof.errors import CaptureError
    path, _ = base
    cut = edited_copy(path, tmp_path / "cut.sqlite", "DROP TABLE NVTX_EVENTS", *(f"DROP TABLE {t}" for t in drop))
    with pytest.raises(CaptureError) as exc:
        analyze(str(cut))
    assert "not an Nsight Systems export" not in str(exc.value) and "NVTX" in str(exc.value)
    foreign = edited_copy(path, tmp_path / "foreign.sqlite", *(
        f"DROP TABLE {t}" for (t,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'TARGET_INFO_GPU'")))
    with pytest.raises(CaptureError, match="not an Nsight Systems export"):
        analyze(str(foreign))
