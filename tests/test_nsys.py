"""clef_prof.base.nsys: where nsys is found (the forms --nsys and $CLEF_PROF_NSYS take), the switches of
the installed releases, and the importer's command and environment."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from clef_prof.base import nsys as nsys_mod
from clef_prof.base.nsys import import_command

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.nsys("2023.4")
def test_locate_nsys_forms(monkeypatch):
    inst = ROOT / ".nsys" / "2023.4"
    for form in (inst, inst / "nsys", inst / "target-linux-x64", inst / "target-linux-x64" / "nsys"):
        assert os.path.basename(nsys_mod.locate(str(form))) == "nsys"
    monkeypatch.setenv(nsys_mod.ENV_NSYS, str(inst))
    assert nsys_mod.locate() == str(inst / "nsys")
    monkeypatch.setenv(nsys_mod.ENV_NSYS, "/nonexistent/nsys")
    with pytest.raises(nsys_mod.NsysMissing, match="CLEF_PROF_NSYS"):
        nsys_mod.locate()


@pytest.mark.nsys("2022.4")
def test_nsys_2022_has_no_python_sampling():
    n22 = ROOT / ".nsys" / "2022.4" / "nsys"
    n = nsys_mod.Nsys.find(str(n22))
    notes = []
    cmd = nsys_mod.profile_command(n, nsys_mod.TraceOptions(python_sampling_hz=100), "/tmp/x", ["srv"], session="s",
                                   notes=notes)
    assert not any("python-sampling" in c for c in cmd) and "--capture-range=cudaProfilerApi" in cmd
    assert notes and "python-sampling" in notes[0]


def test_importer_gets_the_libraries_alone(tmp_path):
    argv, env = import_command("/opt/x/host-linux-x64/QdstrmImporter", str(tmp_path / "c.qdstrm"), str(tmp_path),
                               env={"LD_LIBRARY_PATH": "/usr/lib/a", "PATH": "/bin"})
    assert argv == ["/opt/x/host-linux-x64/QdstrmImporter", "-i", str(tmp_path / "c.qdstrm")]
    assert env["LD_LIBRARY_PATH"] == f"{tmp_path}:/usr/lib/a" and env["PATH"] == "/bin"
    assert import_command("imp", "c.qdstrm", None, env={})[1] == {}


def test_the_newest_nsys_that_fits_the_driver_is_chosen():
    """cupti.py's table: 2022.4 ships CUPTI 11.8, 2023.4 12.4, 2025.3 13.0. On a CUDA 13.0 driver
    (13000) only 2025.3 fits, wherever it was found; on 12.2 (12020) the newest of CUDA 12 (an
    unlisted 2024.6 lies between 2023.4 and 2025.3: CUDA 12 at least); with no driver, the first."""
    d22, d23 = "/r/.nsys/2022.4/nsys", "/r/.nsys/2023.4/nsys"
    ncu = "/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys"
    found = [(d23, "2023.4"), (d22, "2022.4"), (ncu, "2025.3.1")]
    assert nsys_mod.choose(found, 13000) == ncu
    assert nsys_mod.choose(found, 12020) == d23
    assert nsys_mod.choose(found, 11080) == d22
    assert nsys_mod.choose(found, None) == d23
    on_path = ("/usr/bin/nsys", "NVIDIA Nsight Systems version 2024.6.1.90-246160830v0")
    assert nsys_mod.choose([(d23, "2023.4"), on_path], 12020) == "/usr/bin/nsys"
    # nothing fits a CUDA 14 driver: the first found (and analyze warns about its CUPTI)
    assert nsys_mod.choose(found, 14000) == d23
    # 2025.3's CUPTI 13 is newer than a CUDA 12 driver: only when no CUDA 12 nsys is there
    assert nsys_mod.choose([(ncu, "2025.3.1"), (d22, "2022.4")], 12020) == ncu
