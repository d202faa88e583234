"""What compare refuses or leaves out, on copies of the real GPU slices (traces/) changed by SQL the
way other servers' captures differ: batch ranges without sizes, a stage recorded once, a stage no
capture has, a record manifest that marks its capture failed."""
from __future__ import annotations

import json
import shutil

import pytest

from clicheck import run_main
from conftest import ROOT, edited_copy, sql

MAIN = ROOT / "traces" / "gpu-main-slice.sqlite"
PR = ROOT / "traces" / "gpu-pr-slice.sqlite"
BATCH_NAME = "COALESCE(text, (SELECT value FROM StringIds s WHERE s.id = textId))"


def _compare(*argv):
    p = run_main("compare", *argv, "--format", "json")
    return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else None), p.stderr


def _renamed(tmp_path, name, where, new_name):
    """A copy of the main slice whose batch ranges matching `where` are renamed `new_name`."""
    return edited_copy(MAIN, tmp_path / name,
                       f"UPDATE NVTX_EVENTS SET text = '{new_name}', textId = NULL WHERE eventType = 59 "
                       f"AND {BATCH_NAME} LIKE 'pooler n=%' AND ({where})")


@pytest.mark.parametrize("where", ["1", "rowid % 2 = 0", "rowid = (SELECT max(rowid) FROM NVTX_EVENTS WHERE "
                                                     "eventType = 59 AND " + BATCH_NAME + " LIKE 'pooler n=%')"])
def test_batches_without_a_size_are_refused(tmp_path, where):
    """Every batch, half of them, or only the last without its n=K: per-request figures need them all."""
    sizeless = _renamed(tmp_path, "sizeless.sqlite", where, "pooler")
    rc, _, err = _compare("--arm", f"a={sizeless}", "--arm", f"b={PR}")
    assert rc == 1 and "has no 'pooler' batch ranges with a size (n=K)" in err and "sizeless.sqlite" in err


def test_a_stage_recorded_once_is_still_a_stage(tmp_path):
    once = edited_copy(MAIN, tmp_path / "once.sqlite",
                       f"DELETE FROM NVTX_EVENTS WHERE eventType = 59 AND {BATCH_NAME} = 'index' AND rowid > "
                       f"(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59 AND {BATCH_NAME} = 'index')")
    rc, comp, err = _compare("--arm", f"a={once}", "--arm", f"b={PR}")
    assert rc == 0, err
    assert any(m["metric"] == "stages.index.host_ms_per_request" for m in comp["metrics"])


def test_a_stage_no_capture_holds_has_no_metrics(tmp_path):
    rc, comp, err = _compare("--arm", f"a={MAIN}", "--arm", f"b={PR}", "--stages", "parse,index,transfer,head,encode,extra")
    assert rc == 0, err
    names = [m["metric"] for m in comp["metrics"]]
    assert not [n for n in names if n.startswith("stages.extra.")]
    assert "stages.head.kernel_launches_per_request" in names and "per_request.h2d_copies" in names


def test_a_failed_capture_is_said_once(tmp_path):
    for arm, src in (("a", MAIN), ("b", PR)):
        d = tmp_path / arm
        d.mkdir()
        shutil.copy(src, d / "capture.sqlite")
        (d / "manifest.json").write_text(json.dumps({"export": "capture.sqlite", "status": "failed",
                                                     "status_detail": "the server died"}))
    rc, comp, err = _compare("--arm", f"a={tmp_path / 'a'}", "--arm", f"b={tmp_path / 'b'}")
    assert rc == 0
    marked = [w for w in comp["warnings"] if "marks this capture 'failed'" in w]
    assert len(marked) == 2 and len(set(marked)) == 2
    assert len(comp["warnings"]) == len(set(comp["warnings"]))


def test_the_stage_no_capture_holds_is_named_and_versions_told_apart(tmp_path, capture):
    rc, comp, err = _compare("--arm", f"a={MAIN}", "--arm", f"b={PR}", "--stages", "parse,index,transfer,head,encode,extra")
    assert [n for n in comp["notes"] if n.startswith("no range in any capture")] == [
        "no range in any capture for stage(s) extra: not compared"]
    # captures of nsys 2023.4 and 2025.3 in one comparison: said, since profiler overhead differs
    rc, comp, err = _compare("--arm", f"a={capture('gpu-q1c16-main')}", "--arm", f"b={capture('gpu25-q1c16-pr')}")
    versions = sorted({v for a in comp["arms"].values() for v in a["nsys_versions"]})
    assert len(versions) == 2 and any(n.startswith(f"captures from different nsys versions ({', '.join(versions)})")
                                      for n in comp["notes"])


def test_torch_traces_have_no_nsys_version(tmp_path):
    import lzma
    from conftest import DATA
    paths = []
    for name in ("kineto-demo-main", "kineto-demo-pr"):
        p = tmp_path / f"{name}.pt.trace.json"
        p.write_bytes(lzma.decompress((DATA / f"{name}.pt.trace.json.xz").read_bytes()))
        paths.append(p)
    rc, comp, err = _compare("--arm", f"a={paths[0]}", "--arm", f"b={paths[1]}")
    assert rc == 0, err
    assert comp["arms"]["a"]["nsys_versions"] == comp["arms"]["b"]["nsys_versions"] == ["?"]
    assert not [n for n in comp["notes"] if n.startswith("captures from different nsys versions")]


def test_byte_identical_torch_traces_count_once(tmp_path):
    """Copies of one Kineto trace in an arm are one capture with a note, as nsys copies are (#35 B8):
    counted twice they gave every stage 'beyond noise (detects +-0.0%)'. A folder of traces is a copy
    only when every file is: one differing rank keeps it."""
    import lzma
    from conftest import DATA
    from clef_prof.compare.arm import collect
    raw = {n: lzma.decompress((DATA / f"kineto-{n}.pt.trace.json.xz").read_bytes())
           for n in ("demo-main", "demo-pr", "journey-pr")}
    copies = [tmp_path / f"main-{i}.pt.trace.json" for i in (1, 2, 3)]
    for p in copies:
        p.write_bytes(raw["demo-main"])
    pr = tmp_path / "pr.pt.trace.json"
    pr.write_bytes(raw["demo-pr"])
    rc, comp, err = _compare("--arm", "a=" + ",".join(map(str, copies)), "--arm", f"b={pr}")
    assert rc == 0, err
    assert comp["arms"]["a"]["captures"] == 1 and comp["arms"]["b"]["captures"] == 1
    assert [n for n in comp["notes"] if "byte-identical" in n] == [
        f"arm a: {c} is a byte-identical copy of {copies[0]} (the same run, not another): counted once"
        for c in copies[1:]]
    # folders of two traces of one run: a full copy is dropped; one whose second file differs (by its
    # last byte, a space for a newline: the same size, so it is hashed) is another capture
    folders = {}
    for name, tails in (("r1", (b"\n", b"\n")), ("r2", (b"\n", b"\n")), ("r3", (b"\n", b" "))):
        d = tmp_path / name
        d.mkdir()
        for i, tail in enumerate(tails):
            (d / f"rank{i}.pt.trace.json").write_bytes(raw["demo-main"] + tail)
        folders[name] = d
    arms = collect([], [f"a={folders['r1']},{folders['r2']},{folders['r3']}", f"b={pr}"])
    assert [r.source for r in arms.captures["a"]] == [str(folders["r1"]), str(folders["r3"])]
    assert arms.notes == [f"arm a: {folders['r2']} is a byte-identical copy of {folders['r1']} (the same run, not "
                          "another): counted once"]


def test_a_capture_without_cuda_is_named_with_the_reason(capture):
    """The traced capture first in the arms, the untraced one second: the message names the one
    without CUDA records and analyze's own reason for it."""
    rc, _, err = _compare("--arm", f"a={MAIN}", "--arm", f"b={capture('cpu23-inline')}")
    assert rc == 1
    assert f"a ({MAIN}) has CUDA records, b (" in err and "cpu23-inline.sqlite) none (CUDA was not traced" in err


def test_one_batch_and_an_empty_batch_are_compared(tmp_path):
    """A capture of a single batch is a capture; a batch of n=0 (a server's empty flush) is a batch
    with no request."""
    from clef_prof.capture.slicing import slice_capture
    (start, end), = sql(MAIN, f"SELECT start, \"end\" FROM NVTX_EVENTS WHERE eventType = 59 AND {BATCH_NAME} "
                              "LIKE 'pooler n=%' ORDER BY start LIMIT 1")
    one = tmp_path / "one.sqlite"
    slice_capture(str(MAIN), str(one), start - 1000, end + 1000)
    rc, comp, err = _compare("--arm", f"a={one}", "--arm", f"b={PR}")
    assert rc == 0, err
    assert comp["arms"]["a"]["batches"] == 1
    zero = _renamed(tmp_path, "zero.sqlite", "rowid = (SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59 AND "
                    + BATCH_NAME + " LIKE 'pooler n=%')", "pooler n=0")
    rc, comp, err = _compare("--arm", f"a={zero}", "--arm", f"b={PR}")
    assert rc == 0, err
