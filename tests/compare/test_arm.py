"""Which captures make up each arm (compare.arm): `--arm NAME=PATHS` with globs, `ab` folders, the
baseline's choice, and copies of one run counted once. Exports here are plain files: arms only
name them (analyze checks them, tests/compare/test_compare.py runs the whole comparison)."""
import json
import os
import re

import pytest

from clef_prof.compare.arm import CompareError, collect, parse_arm, read_ab_folder


def _export(path, content=b"x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(content)
    return str(path)


def _capture_folder(folder, arm, content=None, export="cap.sqlite"):
    """One capture folder as `clef-prof ab` writes it: manifest.json naming its arm and export."""
    _export(os.path.join(folder, export), content if content is not None else os.fsencode(str(folder)))
    with open(os.path.join(folder, "manifest.json"), "w") as fh:
        json.dump({"arm": arm, "export": export}, fh)
    return os.path.join(folder, "manifest.json")


def test_arm_spec_names_exports_and_globs(tmp_path):
    a, b, c = (_export(tmp_path / f"runs/main-{i}.sqlite", bytes([i])) for i in range(3))
    name, refs = parse_arm(f" main = {a},{b}")
    assert name == "main" and [r.export for r in refs] == [a, b] and [r.source for r in refs] == [a, b]
    name, refs = parse_arm(f"main={tmp_path}/runs/main-*.sqlite")
    assert [r.export for r in refs] == [a, b, c]                    # sorted
    name, refs = parse_arm(f"main={c},, {a} ,")
    assert [r.export for r in refs] == [c, a]                       # empty items skipped, blanks trimmed
    # a path without glob characters is taken as named, even when missing (analyze then says so)
    name, refs = parse_arm(f"main={tmp_path}/later.sqlite")
    assert [r.export for r in refs] == [f"{tmp_path}/later.sqlite"]


@pytest.mark.parametrize("spec", ["main", "=a.sqlite", " =a.sqlite", "main=", "main=  "])
def test_arm_spec_syntax_errors(spec):
    with pytest.raises(CompareError, match=r"^--arm .*: expected NAME=CAPTURE\[,CAPTURE...\]"):
        parse_arm(spec)


def test_arm_spec_that_names_nothing(tmp_path):
    with pytest.raises(CompareError, match=r"names no capture$"):
        parse_arm("main=, ,")
    with pytest.raises(CompareError, match="^" + re.escape(f"{tmp_path}/none-*.sqlite: no file matches") + "$"):
        parse_arm(f"main={tmp_path}/none-*.sqlite")
    with pytest.raises(CompareError, match=r"no file matches"):
        parse_arm(f"main={tmp_path}/x[ab].sqlite")


def test_ab_folder_in_sorted_order_with_its_own_capture_first(tmp_path):
    ab = tmp_path / "ab"
    _capture_folder(ab / "r2-main", "main")
    _capture_folder(ab / "r1-pr", "pr")
    _capture_folder(ab / "r1-main", "main")
    (ab / "notes").mkdir()                                          # a subfolder without a manifest: not a capture
    got = read_ab_folder(str(ab))
    assert [(arm, os.path.basename(os.path.dirname(r.export))) for arm, r in got] == [
        ("main", "r1-main"), ("pr", "r1-pr"), ("main", "r2-main")]
    _capture_folder(ab, "pr")                                       # the folder is a capture folder too
    assert [arm for arm, _ in read_ab_folder(str(ab))] == ["pr", "main", "pr", "main"]
    with open(ab / "manifest.json", "w") as fh:                     # a record manifest without an arm: not one
        json.dump({"export": "cap.sqlite"}, fh)
    assert [arm for arm, _ in read_ab_folder(str(ab))] == ["main", "pr", "main"]


def test_one_manifest_is_an_ab_folder_of_one(tmp_path):
    m = _capture_folder(tmp_path / "one", "pr")
    (arm, r), = read_ab_folder(m)
    assert arm == "pr" and r.export == str(tmp_path / "one" / "cap.sqlite") and r.source == m


@pytest.mark.parametrize("arm", [None, "", 3, ["main"]])
def test_a_manifest_without_an_arm_name(tmp_path, arm):
    _export(tmp_path / "ab" / "a" / "cap.sqlite")
    with open(tmp_path / "ab" / "a" / "manifest.json", "w") as fh:
        json.dump({"export": "cap.sqlite"} | ({} if arm is None else {"arm": arm}), fh)
    with pytest.raises(CompareError, match=r'manifest.json: the manifest has no "arm" key naming its arm$'):
        read_ab_folder(str(tmp_path / "ab"))


def test_what_is_not_an_ab_folder(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CompareError, match=r"no capture folder with a manifest.json inside"):
        read_ab_folder(str(empty))
    for bad in (tmp_path / "missing", tmp_path / "missing.json", _export(tmp_path / "x.sqlite")):
        with pytest.raises(CompareError, match=r"not a folder written by `clef-prof ab`"):
            read_ab_folder(str(bad))


@pytest.mark.parametrize("base", ["main", "baseline", "base", "control", "master"])   # as docs/compare.md names them
def test_an_ab_folder_baseline_is_the_arm_named_like_one(tmp_path, base):
    _capture_folder(tmp_path / "ab" / "a", "zz-pr")
    _capture_folder(tmp_path / "ab" / "b", base)
    _capture_folder(tmp_path / "ab" / "c", "aa-other")
    arms = collect([str(tmp_path / "ab")], [])
    assert arms.names == [base, "zz-pr", "aa-other"] and arms.baseline == base


def test_baseline_choice(tmp_path):
    _capture_folder(tmp_path / "ab" / "a", "pr")
    _capture_folder(tmp_path / "ab" / "b", "exp")
    ab = str(tmp_path / "ab")
    assert collect([ab], []).names == ["pr", "exp"]                 # no usual name: the first folder's arm
    assert collect([ab], [], baseline="exp").names == ["exp", "pr"]
    x = _export(tmp_path / "x.sqlite", b"other")
    assert collect([ab], [f"flag={x}"]).names == ["flag", "pr", "exp"]  # the first --arm
    assert collect([ab], [f"flag={x}"], baseline="pr").names == ["pr", "flag", "exp"]
    with pytest.raises(CompareError, match=r"^--baseline 'main': no such arm \(arms: flag, pr, exp\)$"):
        collect([ab], [f"flag={x}"], baseline="main")


def test_two_arms_needed(tmp_path):
    x = _export(tmp_path / "x.sqlite")
    with pytest.raises(CompareError, match=r"^compare needs two arms, only arm 'main' given"):
        collect([], [f"main={x}"])
    with pytest.raises(CompareError, match=r"^compare needs two arms, no arm given"):
        collect([], [])
    with pytest.raises(CompareError, match=r"^--baseline 'main': no such arm \(arms: none\)$"):
        collect([], [], baseline="main")


def test_one_export_named_twice_counts_once(tmp_path):
    a = _export(tmp_path / "a.sqlite", b"aaaa")
    link = tmp_path / "link.sqlite"
    link.symlink_to(a)
    b = _export(tmp_path / "b.sqlite", b"bbbb")
    arms = collect([], [f"main={a},{link},{a}", f"pr={b},{a}"])
    assert [r.export for r in arms.captures["main"]] == [a]
    assert [r.export for r in arms.captures["pr"]] == [b, a]        # one export in two arms: each has it
    assert arms.notes == [f"arm main: {link} names the same export twice; counted once",
                          f"arm main: {a} names the same export twice; counted once"]


def test_byte_identical_copies_are_one_run_and_equal_manifests_are_not(tmp_path):
    a = _export(tmp_path / "a.sqlite", b"same run")
    copy = _export(tmp_path / "copy.sqlite", b"same run")
    other = _export(tmp_path / "other.sqlite", b"diff run")       # same size, other bytes
    arms = collect([], [f"main={a},{copy},{other}", f"pr={other}"])
    assert [r.export for r in arms.captures["main"]] == [a, other]
    assert arms.notes == [f"arm main: {copy} is a byte-identical copy of {a} (the same run, not another): counted once"]
    # two ab capture folders whose manifests are byte for byte the same name different exports
    m1 = _capture_folder(tmp_path / "ab" / "1", "main", b"run one")
    m2 = _capture_folder(tmp_path / "ab" / "2", "main", b"run two")
    _capture_folder(tmp_path / "ab" / "3", "pr", b"run 3")
    assert open(m1).read() == open(m2).read()
    arms = collect([str(tmp_path / "ab")], [])
    assert len(arms.captures["main"]) == 2 and not arms.notes


def test_missing_exports_and_folders_are_named_not_hashed(tmp_path):
    """collect only names captures: one that is missing (analyze says so later) or named by its
    folder is neither sized nor hashed here."""
    arms = collect([], [f"main={tmp_path}/gone-1.sqlite,{tmp_path}/gone-2.sqlite", f"pr={tmp_path}/gone-3.sqlite"])
    assert [r.export for r in arms.captures["main"]] == [f"{tmp_path}/gone-1.sqlite", f"{tmp_path}/gone-2.sqlite"]
    a = _capture_folder(tmp_path / "a", "x", b"run a")
    b = _capture_folder(tmp_path / "b", "y", b"run b")
    arms = collect([], [f"main={tmp_path / 'a'},{tmp_path / 'b'}", f"pr={b}"])
    assert len(arms.captures["main"]) == 2 and not arms.notes and a != b


def test_a_copied_report_and_its_copied_export_are_one_run_said_once(tmp_path, monkeypatch):
    """An arm naming two reports that are byte-identical copies, each with its export beside it
    (identical too): one run, and one note, though both its files match."""
    from clef_prof.analyze.read import inputs
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    reports = []
    for d in ("r1", "r2"):
        rep = tmp_path / d / "cap.nsys-rep"
        _export(rep, b"the same report")
        inputs._stamp(str(rep.with_suffix(".sqlite")), inputs.report_identity(str(rep)))
        reports.append(str(rep))
    other = _export(tmp_path / "other.sqlite", b"another run")
    arms = collect([], [f"main={reports[0]},{reports[1]}", f"pr={other}"])
    assert [r.source for r in arms.captures["main"]] == [reports[0]]
    assert arms.notes == [f"arm main: {reports[1]} is a byte-identical copy of {reports[0]} (the same run, not "
                          "another): counted once"]
