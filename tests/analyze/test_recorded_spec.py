"""#35 B2: a capture recorded with `record --spec` is analyzed with the stages its manifest records
(the "stage_config" snapshot, or in older manifests the spec file it names), said on stderr; a
manifest whose spec is gone, or captures recorded with different specs, are refused in one line.

On the real gpu25-bertsrv capture (recorded with --spec tests/programs/bertsrv.toml: stages parse,
transfer, head, encode), the instances of each stage equal a count by SQL of its ranges."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clicheck import assert_one_line, run_main
from conftest import ROOT, sql

SPEC = ROOT / "tests" / "programs" / "bertsrv.toml"
RANGES = """SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId
            WHERE e.eventType = 59 AND s.value = ?"""


def _folder(tmp_path: Path, capture, name: str, **manifest) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    shutil.copyfile(capture("gpu25-bertsrv"), folder / "capture.sqlite")
    (folder / "manifest.json").write_text(json.dumps({"export": "capture.sqlite", "status": "ok", **manifest}))
    return folder


def _analyze(*args):
    p = run_main("analyze", *args, "-f", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def test_old_manifest_names_the_spec_file(tmp_path, capture):
    folder = _folder(tmp_path, capture, "old", spec=str(SPEC))
    doc, err = _analyze(folder)
    assert doc["config"]["stages"] == ["parse", "transfer", "head", "encode"]
    assert str(SPEC) in doc["config"]["source"] and "manifest.json" in doc["config"]["source"]
    assert "note: stages parse,transfer,head,encode" in err
    db = folder / "capture.sqlite"
    for name in ("parse", "transfer", "head", "encode"):
        (n,), = sql(db, RANGES, name)
        assert doc["stages"][name]["instances"] == n, name
    assert (doc["stages"]["encode"]["instances"], doc["stages"]["parse"]["instances"]) == (1254, 149)
    # the export named alone has its manifest beside it: the same stages
    assert _analyze(db)[0]["config"]["stages"] == doc["config"]["stages"]
    # with no manifest: the default stages
    bare, err = _analyze(capture("gpu25-bertsrv"))
    assert bare["config"]["stages"] == ["parse", "index", "transfer", "head", "encode"]
    assert bare["config"]["source"] is None and "note:" not in err


def test_snapshot_wins_over_a_missing_spec_file(tmp_path, capture):
    snap = {"domain": "clef", "batch": "pooler", "stages": ["head", "encode"], "findings": {},
            "engine_id_pattern": None}
    folder = _folder(tmp_path, capture, "snap", spec=str(tmp_path / "gone.toml"), stage_config=snap)
    doc, err = _analyze(folder / "manifest.json")
    assert doc["config"]["stages"] == ["head", "encode"]
    assert set(doc["stages"]) == {"head", "encode"}
    (n,), = sql(folder / "capture.sqlite", RANGES, "head")
    assert doc["stages"]["head"]["instances"] == n == 149
    # flags win over what was recorded, and nothing is said
    doc, err = _analyze(folder, "--stages", "parse")
    assert doc["config"]["stages"] == ["parse"] and "note:" not in err


def test_refusals(tmp_path, capture):
    gone = _folder(tmp_path, capture, "gone", spec=str(tmp_path / "gone.toml"))
    p = run_main("analyze", gone)
    assert p.returncode != 0
    assert_one_line(p, p.returncode, "gone.toml", "no longer exists", "--spec")
    bad = _folder(tmp_path, capture, "bad", stage_config={"domain": "clef", "stages": "parse"})
    p = run_main("analyze", bad)
    assert p.returncode != 0
    assert_one_line(p, p.returncode, "stage_config", "damaged manifest")
    # two captures recorded with different specs, or one with a spec and one without
    old = _folder(tmp_path, capture, "old", spec=str(SPEC))
    snap = _folder(tmp_path, capture, "snap", stage_config={"domain": "clef", "batch": "pooler",
                                                           "stages": ["head"], "findings": {}})
    plain = _folder(tmp_path, capture, "plain")
    for pair in ((old, snap), (old, plain)):
        p = run_main("analyze", *pair)
        assert p.returncode != 0
        assert_one_line(p, p.returncode, "different stage specs", "--spec")
    doc = json.loads(run_main("analyze", old, old / "manifest.json", "-f", "json").stdout)
    assert [d["config"]["stages"] for d in doc] == [["parse", "transfer", "head", "encode"]] * 2
    # the same with --spec given: read alike, no refusal
    assert run_main("analyze", old, plain, "--spec", SPEC, "-f", "json").returncode == 0


def test_record_writes_the_snapshot_analyze_reads():
    from clef_prof.annotate.spec import load
    from clef_prof.base.config import StageConfig
    from clef_prof.record.session import recorded_stage_config

    snap = recorded_stage_config(str(SPEC))
    assert json.loads(json.dumps(snap)) == snap
    assert snap["stages"] == ["parse", "transfer", "head", "encode"] and snap["batch"] == "pooler"
    back = StageConfig.from_dict(snap, "m.json", source="recorded in m.json")
    assert back == load(str(SPEC)).config and back.source == "recorded in m.json"
    assert recorded_stage_config(None) is None


@pytest.mark.parametrize("damage", [{"stages": []}, {"stages": [1]}, {"batch": ""}, {"findings": {"x": "1"}},
                                    {"findings": {"x": float("nan")}}, {"engine_id_pattern": 3}])
def test_damaged_snapshot_is_one_error(damage):
    from clef_prof.base.config import StageConfig
    from clef_prof.base.errors import ClefError

    snap = {"domain": "clef", "batch": "pooler", "stages": ["head"], "findings": {}, **damage}
    with pytest.raises(ClefError, match="damaged manifest"):
        StageConfig.from_dict(snap, "m.json")
