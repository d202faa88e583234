"""analyze.pipeline at its edges, on a real GPU capture (gpu25-q1c16-pr, nsys 2025.3) and copies of it
edited with SQL: each figure against SQL over the export. The cases the mutation pass of result.py
found untested (docs/mutation.md)."""
from __future__ import annotations

import pytest

from clef_prof.analyze.pipeline import analyze
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
    from clef_prof.base.errors import CaptureError
    path, _ = base
    cut = edited_copy(path, tmp_path / "cut.sqlite", "DROP TABLE NVTX_EVENTS", *(f"DROP TABLE {t}" for t in drop))
    with pytest.raises(CaptureError) as exc:
        analyze(str(cut))
    assert "not an Nsight Systems export" not in str(exc.value) and "NVTX" in str(exc.value)
    foreign = edited_copy(path, tmp_path / "foreign.sqlite", *(
        f"DROP TABLE {t}" for (t,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'TARGET_INFO_GPU'")))
    with pytest.raises(CaptureError, match="not an Nsight Systems export"):
        analyze(str(foreign))


BATCH_OF = """SELECT count(*) FROM NVTX_EVENTS b LEFT JOIN StringIds bn ON bn.id = b.textId
              WHERE b.eventType = 59 AND coalesce(b.text, bn.value) LIKE 'pooler %'
                AND b.globalTid = e.globalTid AND b.start <= e.start AND e."end" <= b."end\""""


def test_batch_and_outside_batch_figures_on_third_party_code(capture):
    """bertsrv (gpu25-bert-pair): parse, transfer and head run inside its batches, encode on the
    event-loop thread outside every batch. Each stage's host ms outside batches, the batch's host
    ms per request and its CUDA launches (stages and the batch's own, no stage) by SQL."""
    from clef_prof.analyze.figures.stages import StageConfig
    path = capture("gpu25-bert-pair")
    r = analyze(str(path), StageConfig(stages=("parse", "transfer", "head", "encode"))).result
    for name in ("parse", "transfer", "head", "encode"):
        loose = sql(path, f"""SELECT coalesce(sum(e."end" - e.start), 0) FROM NVTX_EVENTS e LEFT JOIN StringIds s
                              ON s.id = e.textId WHERE e.eventType = 59 AND coalesce(e.text, s.value) = ?
                              AND ({BATCH_OF}) = 0""", name)[0][0]
        assert r.stages[name].outside_batch_host_ms_per_request == pytest.approx(loose / 1e6 / r.requests, rel=1e-12), name
    assert r.stages["encode"].outside_batch_host_ms_per_request > 0 == r.stages["head"].outside_batch_host_ms_per_request
    batch_ns = sql(path, """SELECT sum(e."end" - e.start) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                            WHERE e.eventType = 59 AND coalesce(e.text, s.value) LIKE 'pooler %'""")[0][0]
    assert r.pooler.host_ms_per_request == pytest.approx(batch_ns / 1e6 / r.requests, rel=1e-12)
    assert r.pooler.host_ms_total == pytest.approx(batch_ns / 1e6, rel=1e-12)
    launches = sql(path, f"""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME e
                             ON e.correlationId = k.correlationId WHERE ({BATCH_OF}) > 0""")[0][0]
    assert r.pooler.cuda.kernel_launches == launches == r.totals.kernel_launches > 0


def test_the_batch_counts_only_cuda_work_launched_inside_it(capture, tmp_path):
    """One kernel launch moved before every batch (an edited copy): the capture's totals keep it,
    the batch's own CUDA counts do not."""
    path = capture("gpu25-bert-pair")
    cid = sql(path, "SELECT r.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                    "ON k.correlationId = r.correlationId ORDER BY r.start LIMIT 1")[0][0]
    moved = edited_copy(path, tmp_path / "moved.sqlite",
                        ('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 1, "end" = 2 WHERE rowid = ?', (cid,)))
    r = analyze(str(moved)).result
    inside = sql(moved, f"""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME e
                            ON e.correlationId = k.correlationId WHERE ({BATCH_OF}) > 0""")[0][0]
    assert r.pooler.cuda.kernel_launches == inside == r.totals.kernel_launches - 1


@pytest.mark.parametrize("value,refused", [(0, False), (1 << 40, False), ((1 << 40) + 1, True), (-1, True)])
def test_copy_sizes_up_to_one_tib_are_read_beyond_it_refused(base, tmp_path, value, refused):
    """One memcpy record of up to 1 TiB is a copy (its bytes counted); beyond it, or negative, the
    export is damaged: one line."""
    from clef_prof.base.errors import CaptureError
    path, r = base
    row = sql(path, "SELECT rowid, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 ORDER BY rowid LIMIT 1")[0]
    big = edited_copy(path, tmp_path / "big.sqlite", ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = ? WHERE rowid = ?",
                                                     (value, row[0])))
    if refused:
        with pytest.raises(CaptureError, match=r"bytes outside 0\.\.1099511627776"):
            analyze(str(big))
    else:
        assert analyze(str(big)).result.totals.h2d_bytes == r.totals.h2d_bytes - row[1] + value
