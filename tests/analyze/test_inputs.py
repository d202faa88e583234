"""What a user names, to the export analyze reads (analyze.read.inputs), without running nsys: a report's
identity against hashes computed here, exports reused by that identity, where a new export would
go (the command nsys-less machines are told to run names it), and how folders and manifests
resolve. The exports nsys makes are checked by the nsys-marked tests in tests/cli."""
import hashlib
import json
import os
import random
import shlex

import pytest

from clef_prof.analyze.read import inputs
from clef_prof.analyze.read.inputs import InputError, export_report, from_manifest, resolve
from clef_prof.analyze.read.identity import report_identity
from clef_prof.base.errors import shown

MIB = 1 << 20


def _identity_by_hand(data: bytes):
    """The size, and a SHA-256 of the first MiB and of the last MiB that does not overlap it."""
    h = hashlib.sha256(data[:MIB])
    if len(data) > MIB:
        h.update(data[max(MIB, len(data) - MIB):])
    return len(data), h.hexdigest()


@pytest.mark.parametrize("size", [0, 10, MIB - 1, MIB, MIB + 1, MIB + 4096, 2 * MIB, 2 * MIB + 1, 3 * MIB + 7])
def test_report_identity_hashes_the_first_and_last_mib(tmp_path, size):
    data = random.Random(size).randbytes(size)
    path = tmp_path / "r.nsys-rep"
    path.write_bytes(data)
    assert report_identity(str(path)) == _identity_by_hand(data)


def test_a_changed_middle_is_not_read_and_a_changed_end_is(tmp_path):
    data = bytearray(random.Random(1).randbytes(4 * MIB))
    path = tmp_path / "r.nsys-rep"
    path.write_bytes(bytes(data))
    first = report_identity(str(path))
    data[2 * MIB] ^= 0xFF                               # the middle: left unread, by design
    path.write_bytes(bytes(data))
    assert report_identity(str(path)) == first
    data[-1] ^= 0xFF                                    # the last byte: a new report
    path.write_bytes(bytes(data))
    assert report_identity(str(path)) != first


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert inputs.cache_dir() == str(tmp_path / "xdg" / "clef-prof")
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert inputs.cache_dir() == str(tmp_path / "home" / ".cache" / "clef-prof")


@pytest.fixture
def report(tmp_path, monkeypatch):
    """A report (any bytes: nothing here runs nsys), a cache under tmp_path, and no nsys to find."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CLEF_PROF_NSYS", str(tmp_path / "no-nsys-here"))
    (tmp_path / "runs").mkdir()
    path = tmp_path / "runs" / "cap.nsys-rep"
    path.write_bytes(random.Random(7).randbytes(MIB + 300))
    return str(path)


def _cached(report):
    key = hashlib.sha256(os.path.abspath(report).encode()).hexdigest()[:12]
    return os.path.join(inputs.cache_dir(), f"cap-{key}.sqlite")


def _would_write(report) -> str:
    """Where export_report would put a new export: the path in the command it tells a user to run."""
    with pytest.raises(InputError) as err:
        export_report(report)
    text = str(err.value)
    assert text.startswith(f"{shown(report)}: a report must be exported to SQLite first")
    command = shlex.split(text.split("`")[1])          # `nsys export --type sqlite -o OUT REPORT`
    assert command[:4] == ["nsys", "export", "--type", "sqlite"] and command[-1] == report
    return command[command.index("-o") + 1]


def test_an_export_beside_the_report_with_its_identity_is_reused(report):
    beside = report[: -len(".nsys-rep")] + ".sqlite"
    assert _would_write(report) == beside                # nothing there yet: beside the report
    inputs._stamp(beside, report_identity(report), report)
    assert export_report(report) == beside
    assert inputs._stamped(beside) == report_identity(report)
    # the report replaced by another with the same size: the export is not trusted any more
    with open(report, "r+b") as fh:
        fh.write(b"X")
    assert _would_write(report) == beside                # made again in the same place (clef-prof's own)


def test_something_not_made_by_clef_prof_beside_the_report_is_left_alone(report):
    beside = report[: -len(".nsys-rep")] + ".sqlite"
    with open(beside, "w") as fh:
        fh.write("a user's own file")
    assert inputs._stamped(beside) is None
    assert _would_write(report) == _cached(report)
    os.remove(beside)
    os.mkdir(beside)                                     # a folder of that name
    assert inputs._stamped(beside) is None
    assert _would_write(report) == _cached(report)
    os.makedirs(inputs.cache_dir())
    inputs._stamp(_cached(report), report_identity(report))
    assert export_report(report) == _cached(report)      # the cached export, with its identity, reused
    assert open(_cached(report), "rb").read(16) == b"SQLite format 3\x00"


def test_a_stamped_export_of_another_report_is_not_reused(report, tmp_path):
    beside = report[: -len(".nsys-rep")] + ".sqlite"
    other = tmp_path / "other.nsys-rep"
    other.write_bytes(b"another report")
    inputs._stamp(beside, report_identity(str(other)))
    assert inputs._stamped(beside) == report_identity(str(other))
    assert _would_write(report) == beside                # clef-prof's own export: replaced in place


def test_a_missing_report_is_one_line(report, tmp_path):
    with pytest.raises(InputError) as err:
        export_report(str(tmp_path / "gone.nsys-rep"))
    assert str(err.value) == f"{shown(tmp_path / 'gone.nsys-rep')}: no such file"


def _manifest(folder, data) -> str:
    path = os.path.join(folder, "manifest.json")
    with open(path, "w") as fh:
        json.dump(data, fh)
    return path


def test_manifest_names_its_export_relative_to_its_folder(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "cap.sqlite").write_bytes(b"")
    m = _manifest(tmp_path / "run", {"export": "cap.sqlite", "arm": "main"})
    assert from_manifest(m) == (str(tmp_path / "run" / "cap.sqlite"), {"export": "cap.sqlite", "arm": "main"})
    assert resolve(str(tmp_path / "run")) == from_manifest(m) == resolve(m)
    m = _manifest(tmp_path, {"export": str(tmp_path / "run" / "cap.sqlite")})    # absolute
    assert from_manifest(m)[0] == str(tmp_path / "run" / "cap.sqlite")


@pytest.mark.parametrize("data, message", [
    ({}, 'the manifest has no "export" key naming its SQLite export'),
    ({"export": ""}, 'the manifest has no "export" key'),
    ({"export": 3}, 'the manifest has no "export" key'),
    ({"export": None, "report": "cap.qdrep"}, 'the manifest has no "export" key'),
    ({"export": "gone.sqlite"}, "its export {export} does not exist"),
])
def test_manifest_errors_name_the_manifest(tmp_path, data, message):
    m = _manifest(tmp_path, data)
    with pytest.raises(InputError) as err:
        from_manifest(m)
    assert str(err.value).startswith(f"{shown(m)}: " + message.format(export=shown(tmp_path / "gone.sqlite")))


def test_a_manifest_recorded_without_export_goes_to_its_report(report, tmp_path):
    (tmp_path / "runs" / "m").mkdir()
    m = _manifest(tmp_path / "runs" / "m", {"report": "../cap.nsys-rep"})
    beside = report[: -len(".nsys-rep")] + ".sqlite"
    inputs._stamp(beside, report_identity(report))
    assert from_manifest(m) == (beside, {"report": "../cap.nsys-rep"})
    m = _manifest(tmp_path / "runs" / "m", {"report": "../gone.nsys-rep", "export": ""})
    with pytest.raises(InputError) as err:
        from_manifest(m)
    assert str(err.value) == f"{shown(tmp_path / 'runs' / 'gone.nsys-rep')}: no such file"   # the path normalised


def test_folders_resolve_to_their_only_capture(tmp_path, report):
    runs = os.path.dirname(report)
    beside = report[: -len(".nsys-rep")] + ".sqlite"
    inputs._stamp(beside, report_identity(report))
    # the report and its own export are one capture, reached through the report
    assert resolve(runs) == (beside, None)
    (tmp_path / "runs" / "b.sqlite").write_bytes(b"")
    with pytest.raises(InputError, match=r"a folder with 2 candidate captures \(b\.sqlite, cap\.nsys-rep\); name one"):
        resolve(runs)
    os.remove(report)
    os.remove(beside)
    assert resolve(runs) == (os.path.join(runs, "b.sqlite"), None)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="a folder with no manifest.json, .sqlite export, .nsys-rep report"):
        resolve(str(empty))


def test_other_paths_are_taken_as_exports(tmp_path):
    assert resolve(str(tmp_path / "x.sqlite")) == (str(tmp_path / "x.sqlite"), None)
    assert resolve(tmp_path / "y.db") == (str(tmp_path / "y.db"), None)


def test_a_manifest_with_an_export_uses_it_even_beside_a_report(report, tmp_path):
    runs = tmp_path / "runs"
    (runs / "cap2.sqlite").write_bytes(b"")
    beside = report[: -len(".nsys-rep")] + ".sqlite"
    inputs._stamp(beside, report_identity(report))
    m = _manifest(runs, {"export": "cap2.sqlite", "report": "cap.nsys-rep"})
    assert from_manifest(m)[0] == str(runs / "cap2.sqlite")
    # an export key that is no name at all: the report then
    m = _manifest(runs, {"export": 3, "report": "cap.nsys-rep"})
    assert from_manifest(m)[0] == beside


def _kineto_trace(path):
    import lzma
    from conftest import DATA
    path.write_bytes(lzma.decompress((DATA / "kineto-demo-main.pt.trace.json.xz").read_bytes()))
    return str(path)


def test_a_manifest_naming_a_torch_trace_and_folders_of_traces(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    run = tmp_path / "run"
    run.mkdir()
    trace = _kineto_trace(run / "worker.pt.trace.json")
    m = _manifest(run, {"export": "worker.pt.trace.json"})
    export, data = from_manifest(m)
    assert export.endswith(".sqlite") and export != trace and data == {"export": "worker.pt.trace.json"}
    # a trace kept under another name is not read as one: it is taken for an export, as named
    other = _kineto_trace(tmp_path / "worker.trace")
    assert resolve(other) == (other, None)
    # a folder of traces and two exports: the exports are the candidates, and they are two
    (run / "manifest.json").unlink()
    (run / "a.sqlite").write_bytes(b"")
    (run / "b.sqlite").write_bytes(b"")
    with pytest.raises(InputError, match="a folder with 2 candidate captures"):
        resolve(str(run))


def test_something_not_a_file_named_like_an_export_is_no_export(report, tmp_path):
    beside = report[: -len(".nsys-rep")] + ".sqlite"
    os.mkfifo(beside)                                    # opening it would block
    assert inputs._stamped(beside) is None
    assert _would_write(report) == _cached(report)


def test_a_link_named_like_the_export_is_not_written_through(report, tmp_path):
    """A stamped export reached through a link beside the report (of another report here) is
    clef-prof's own, but the link is not a file to replace: the new export goes to the cache."""
    other = tmp_path / "elsewhere.sqlite"
    inputs._stamp(str(other), (1, "0" * 64))
    beside = report[: -len(".nsys-rep")] + ".sqlite"
    os.symlink(other, beside)
    assert inputs._stamped(beside) == (1, "0" * 64)
    assert _would_write(report) == _cached(report)
