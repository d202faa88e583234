"""nsys' own Python samples (2023.4 `--python-sampling`, clef_prof.analyze.read.nsyspy) per stage, on
real recordings (scripts/make-nsys-python-captures.py): tests/programs/sampled_split.py (`head`
calls `three(3K)` then `one(K)`) and tests/programs/sampled_threads.py (`head` on the main thread,
`encode` on w-light; with --idle a third thread that waits). Oracles: the programs' own
perf_counter_ns split and thread ids, a decoding of the JSON payloads written here with
struct.unpack, SQL over the SQLite export (sample times joined to the ranges of the program's own
thread ids); hostile edits of a copy of the JSON."""
from __future__ import annotations

import base64
import json
import lzma
import os
import shutil
import struct
import sys
from pathlib import Path

import pytest

from clef_prof.analyze.read import nsyspy
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.samples import UNKNOWN_FRAME
import nsys_json_oracle
from conftest import sql

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TRUTH = json.loads((DATA / "cpu23-nsyspy.truth.json").read_text())


def _unpack(tag: str, tmp: Path, nsys: str = "cpu23") -> Path:
    """X.sqlite and X.json (nsys' JSON export, cut) of a shipped capture, side by side in tmp
    (`nsys`: cpu23, recorded with 2023.4; gpu25, with 2025.3)."""
    name = f"{nsys}-nsyspy-{tag}"
    for ext in ("sqlite", "json"):
        (tmp / f"{name}.{ext}").write_bytes(lzma.decompress((DATA / f"{name}.{ext}.xz").read_bytes()))
    return tmp / f"{name}.sqlite"


def _by_hand(json_path: Path) -> list[tuple[int, int, list[tuple[str, str, int]]]]:
    """(time, thread, [(function, file, line)] innermost first) of each sample, by hand
    (tests/nsys_json_oracle.py): the thread is the 2023.4 mark's Category ordinal, or 2025.3's OS
    thread id."""
    return [(t, abs(who), [fr[:3] for fr in frames]) for t, who, frames in nsys_json_oracle.decode(json_path)]


def _in_ranges(db: Path, tid: int, name: str, times: list[int]) -> int:
    """How many of `times` fall in an NVTX range called `name` (or a batch range when name is
    None) on OS thread `tid`: SQL over the export."""
    rows = sql(db, "SELECT e.start, e.\"end\" FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
               "WHERE e.eventType = 59 AND (e.globalTid & 16777215) = ? AND COALESCE(e.text, s.value) = ?",
               tid, name or "pooler n=1")
    return sum(any(a <= t <= b for a, b in rows) for t in times)


def test_frames_match_a_decoding_by_hand(tmp_path):
    db = _unpack("split", tmp_path)
    hand = _by_hand(db.with_suffix(".json"))
    d = nsyspy.read_json(str(db.with_suffix(".json")))
    assert len(hand) == len(d.t) > 200
    text = dict(zip(d.string_ids.tolist(), d.string_text))
    for i, (t, cat, frames) in enumerate(hand):
        assert int(d.t[i]) == t and int(d.category[i]) == cat and int(d.status[i]) == nsyspy.OK
        rows = d.frames[d.first[i]: d.first[i] + d.depth[i]].tolist()
        assert [(text[f], text[fl], ln) for f, fl, ln in rows] == frames


@pytest.mark.parametrize("nsys", ["cpu23", "gpu25"])
def test_three_to_one_split_within_its_interval(tmp_path, nsys):
    db = _unpack("split", tmp_path, nsys)
    facts = (TRUTH if nsys == "cpu23" else TRUTH25)[f"{nsys}-nsyspy-split"]
    an = analyze(str(db))
    s = an.result.samples
    assert s is not None and s.source == "nsys python sampling" and s.asked_hz == 200
    head = s.stages["head"]
    three = next(f for f in head.top_self if f.function == "three")
    one = next(f for f in head.top_self if f.function == "one")
    truth = facts["ns"]["three"] / facts["ns"]["head"]
    assert 0.70 < truth < 0.80                              # 3:1 by construction, measured by the program
    assert three.self_share_low <= truth <= three.self_share_high
    assert one.self_share_low <= 1 - truth <= one.self_share_high
    # the counts against the by-hand decoding placed by SQL in the head ranges of the main thread
    # (2023.4 names the program's one Python thread by an ordinal; 2025.3 by its OS id)
    hand = _by_hand(db.with_suffix(".json"))
    main_tid = int(an.stages.instances["gtid"][0]) & 0xFFFFFF
    mine = [(t, fr) for t, who, fr in hand if nsys == "cpu23" or who == main_tid]
    assert three.self_samples == _in_ranges(db, main_tid, "head", [t for t, fr in mine if fr and fr[0][0] == "three"])
    assert head.samples == _in_ranges(db, main_tid, "head", [t for t, _f in mine])
    assert sum(st.samples for st in s.stages.values()) == s.samples == len(hand)


def test_threads_tied_to_the_programs_own_thread_ids(tmp_path):
    db = _unpack("threads", tmp_path)
    facts = TRUTH["cpu23-nsyspy-threads"]["threads"]
    an = analyze(str(db))
    sc, s = an.sample_counts, an.result.samples
    hand = _by_hand(db.with_suffix(".json"))
    # which ordinal is which thread, from the program: heavy runs on the main thread only, light on w-light only
    cat_of = {fn: {c for _t, c, fr in hand if fr and fr[0][0] == fn} for fn in ("heavy", "light")}
    assert all(len(v) == 1 for v in cat_of.values())
    ties = {c: g & 0xFFFFFF for c, g in sc.thread_ties.items()}
    assert ties == {cat_of["heavy"].pop(): facts["MainThread"]["tid"], cat_of["light"].pop(): facts["w-light"]["tid"]}
    assert s.placed_by_time == 0 and s.unplaced == 0
    for stage, thread in (("head", "MainThread"), ("encode", "w-light")):
        cat = next(c for c, g in ties.items() if g == facts[thread]["tid"])
        times = [t for t, c, _f in hand if c == cat]
        assert s.stages[stage].samples == _in_ranges(db, facts[thread]["tid"], stage, times)
    assert not [w for w in an.result.warnings if "could not be tied" in w]


def test_untied_threads_are_placed_by_time_and_said(tmp_path):
    db = _unpack("idle", tmp_path)
    facts = TRUTH["cpu23-nsyspy-idle"]["threads"]
    an = analyze(str(db))
    s = an.result.samples
    hand = _by_hand(db.with_suffix(".json"))
    main_cat = {c for _t, c, fr in hand if fr and fr[0][0] == "heavy"}
    assert len(main_cat) == 1
    assert {c: g & 0xFFFFFF for c, g in an.sample_counts.thread_ties.items()} == {main_cat.pop(): facts["MainThread"]["tid"]}
    # w-light and w-idle are two ordinals for one ranged thread: placed by time, in w-light's ranges
    light = facts["w-light"]["tid"]
    others = [t for t, c, _f in hand if c not in an.sample_counts.thread_ties]
    assert s.placed_by_time == _in_ranges(db, light, None, others) > 0
    assert s.stages["encode"].samples == _in_ranges(db, light, "encode", others)
    said = [w for w in an.result.warnings if "could not be tied" in w]
    assert len(said) == 1 and f"{s.placed_by_time:,} were placed by time" in said[0]
    # the idle thread's wait is among them: what the warning says a placement by time can do
    idle = {fn for st in (s.stages["encode"],) for fn in (f.function for f in st.top_self)}
    assert "wait" in idle


def _edit(tmp_path: Path, edits) -> Path:
    """A copy of the split capture whose JSON payloads are rewritten: edits[i](raw) -> bytes for
    the i-th mark."""
    db = _unpack("split", tmp_path)
    js = db.with_suffix(".json")
    lines = js.read_text().splitlines(keepends=True)
    k = 0
    for i, line in enumerate(lines):
        if not line.startswith('{"Type":34,'):
            continue
        if k in edits:
            ev = json.loads(line)
            b = ev["NvtxEvent"]["Payload"]["BinaryData"][0]
            b["Data"] = base64.b64encode(edits[k](base64.b64decode(b["Data"]))).decode()
            lines[i] = json.dumps(ev, separators=(",", ":")) + "\n"
        k += 1
    js.write_text("".join(lines))
    return db


def test_hostile_payloads_are_counted_not_fatal(tmp_path):
    deep = lambda raw: struct.pack("<IIII", 1, 1, 130, 0) + raw[16:40] * 130     # 130 copies of the leaf frame
    edits = {0: lambda raw: raw[:10],                                            # shorter than the header
             1: lambda raw: raw[:8] + struct.pack("<I", 999) + raw[12:],         # count overruns the payload
             2: lambda raw: raw[:16] + struct.pack("<Q", 10 ** 9) + raw[24:],    # unknown function string id
             3: deep}
    db = _edit(tmp_path, edits)
    before = os.path.getsize(db.with_suffix(".json"))
    an = analyze(str(db))
    s = an.result.samples
    assert s.unreadable == 2 and s.cut_stacks == 1
    assert any(UNKNOWN_FRAME in sc for sc in an.sample_counts.func_name)
    w = " | ".join(an.result.warnings)
    assert "shorter than its header" in w and "overruns it" in w and "lacks" in w and "deeper than 128" in w
    assert os.path.getsize(db.with_suffix(".json")) == before            # the input is left as it is
    cut = [st for j, st in enumerate(an.sample_counts.stacks) if an.sample_counts.counts[:, j].sum() and len(st) == 128]
    assert len(cut) == 1


def test_garbled_or_foreign_json_is_one_warning(tmp_path):
    db = _unpack("split", tmp_path)
    js = db.with_suffix(".json")
    text = js.read_text().splitlines(keepends=True)
    i = next(i for i, ln in enumerate(text) if ln.startswith('{"Type":34,'))
    js.write_text("".join(text[:i] + ['{"Type":34,"NvtxEvent":{"Timestamp": oops\n'] + text[i + 1:]))
    an = analyze(str(db))
    assert an.result.samples is None
    said = [w for w in an.result.warnings if "nsys' Python sampler" in w]
    assert len(said) == 1 and "not an nsys JSON export that can be read" in said[0] and "\n" not in said[0]
    # a JSON export of another capture: its sample times are not this one's
    (tmp_path / "o").mkdir()
    other = _unpack("threads", tmp_path / "o")
    shutil.copy(other.with_suffix(".json"), js)
    an = analyze(str(db))
    assert an.result.samples is None
    assert any("not this capture's" in w for w in an.result.warnings)


def test_without_the_json_no_samples_and_a_warning_only_where_record_asked(tmp_path):
    """Most captures recorded with nsys' sampler on travel without their report (traces/, a
    scrubbed copy): no samples section and no warning of its own, which would differ between a
    capture and its scrubbed copy by path alone; a manifest that says record asked for them warns."""
    db = _unpack("split", tmp_path)
    db.with_suffix(".json").unlink()
    an = analyze(str(db))
    assert an.result.samples is None
    assert not [w for w in an.result.warnings if "Python sampl" in w]
    (tmp_path / "manifest.json").write_text(json.dumps({"trace": {"python_sampling_hz": 0, "nsys_python_sampling_hz": 200}}))
    said = [w for w in analyze(str(db)).result.warnings if "Python samples" in w]
    assert len(said) == 1 and "record asked nsys for Python samples at 200 Hz" in said[0], said


@pytest.mark.nsys("2023.4")
def test_report_is_exported_to_json_once_and_cached(tmp_path, monkeypatch, capfd):
    import subprocess

    from clef_prof.analyze.read.inputs import resolve
    from recording import nsys_path

    nsys = nsys_path("2023.4")
    monkeypatch.setenv("CLEF_PROF_NSYS", str(nsys))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_")}
    env.update(PYTHONPATH=str(ROOT), CLEF_PROF_PY_SAMPLING_HZ="0", TMPDIR=str(tmp_path))
    subprocess.run([nsys, "profile", "-t", "nvtx", "--sample=none", "--cpuctxsw=none", "--python-sampling=true",
                    "--python-sampling-frequency=200", "-o", tmp_path / "run", sys.executable,
                    ROOT / "tests" / "programs" / "sampled_split.py", "--seconds", "1", "--out", tmp_path / "f.json"],
                   check=True, env=env, capture_output=True, timeout=120)
    rep = tmp_path / "run.nsys-rep"
    db, _ = resolve(str(rep))
    a = analyze(db).result.samples
    assert "read nsys' Python samples from a JSON export" in capfd.readouterr().err
    cache = Path(db).with_suffix(".nsys-python.npz")
    assert a is not None and a.source == "nsys python sampling" and cache.exists()
    assert not list(tmp_path.glob("*.json")) or [p.name for p in tmp_path.glob("*.json")] == ["f.json"]
    subprocess.run([nsys, "export", "--type", "json", "-o", tmp_path / "mine.json", rep], check=True,
                   capture_output=True)
    hand = _by_hand(tmp_path / "mine.json")
    assert a.samples == len(hand) and a.stages["head"].samples > 0
    # the second time from the cache: no nsys needed, the same figures
    monkeypatch.setenv("CLEF_PROF_NSYS", str(tmp_path / "no-nsys"))
    b = analyze(db).result.samples
    assert "JSON export" not in capfd.readouterr().err
    assert b is not None and b.to_json() == a.to_json()


# ---------------------------------------------------------------- nsys 2025.3 (the GPU machine's)
# The same programs under nsys 2025.3 (`PREFIX=gpu25 NSYS=... scripts/make-nsys-python-captures.py`
# on the GPU machine): its marks lie in the domain "Python Periodic Sampling", each on the sampled OS
# thread itself, and the payload's frame count moved to header word 3.
TRUTH25 = json.loads((DATA / "gpu25-nsyspy.truth.json").read_text())


def test_2025_frames_match_a_decoding_by_hand(tmp_path):
    db = _unpack("split", tmp_path, "gpu25")
    hand = _by_hand(db.with_suffix(".json"))
    d = nsyspy.read_json(str(db.with_suffix(".json")))
    assert d.os_threads and len(hand) == len(d.t) > 200
    text = dict(zip(d.string_ids.tolist(), d.string_text))
    for i, (t, tid, frames) in enumerate(hand):
        assert int(d.t[i]) == t and int(d.category[i]) & 0xFFFFFF == tid and int(d.status[i]) == nsyspy.OK
        rows = d.frames[d.first[i]: d.first[i] + d.depth[i]].tolist()
        assert [(text[f], text[fl], ln) for f, fl, ln in rows] == frames
    # the marks the SQLite export holds are the JSON's, one for one (SQL, not nsyspy.marks)
    times = [r[0] for r in sql(db, "SELECT e.start FROM NVTX_EVENTS e WHERE e.eventType = 34 ORDER BY e.start")]
    assert times == sorted(t for t, _tid, _f in hand)


@pytest.mark.parametrize("tag", ["threads", "idle"])
def test_2025_samples_lie_on_their_own_threads(tmp_path, tag):
    """2025.3 names each sample's OS thread: no ties to guess, nothing placed by time, and an idle
    thread's waits stay out of the stage of the thread beside it (2023.4's ordinals could not)."""
    db = _unpack(tag, tmp_path, "gpu25")
    facts = TRUTH25[f"gpu25-nsyspy-{tag}"]["threads"]
    an = analyze(str(db))
    s = an.result.samples
    hand = _by_hand(db.with_suffix(".json"))
    assert s.placed_by_time == 0 and s.unplaced == 0 and an.sample_counts.thread_ties == {}
    assert not [w for w in an.result.warnings if "could not be tied" in w]
    for stage, thread in (("head", "MainThread"), ("encode", "w-light")):
        tid = facts[thread]["tid"]
        assert s.stages[stage].samples == _in_ranges(db, tid, stage, [t for t, x, _f in hand if x == tid]) > 20
    assert {t for t, x, fr in hand if x == facts["MainThread"]["tid"] and fr and fr[0][0] == "heavy"}
    top = {f.function for f in s.stages["encode"].top_self}
    assert "light" in top and "heavy" not in top and "wait" not in top
    if tag == "idle":
        waits = [t for t, x, _f in hand if x == facts["w-idle"]["tid"]]
        assert len(waits) > 20 and _in_ranges(db, facts["w-idle"]["tid"], "encode", waits) == 0
