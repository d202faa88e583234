"""scripts/install-nsys.sh against a machine whose installed packages its own lists do not hold.

apt takes an installed version as the candidate when it is newer than what the lists offer; on a
maintained Debian 12 (libssh-4 0.10.6-0+deb12u3 from bookworm-security) `apt-get download libssh-4`
through the installer's private bookworm lists then finds no source for it and stops (issue 42).
The machine's state is made for the test, never changed: an apt configuration (APT_CONFIG) whose
package status says libssh-4 0.10.6-0+deb12u3 is installed. A control shows that this state makes
a plain `apt-get download` over the same lists fail; the installer, which consults an empty status
of its own, must fetch the versions its lists hold, with that state and without it.

Needs Debian's archive (deb.debian.org, or NSYS_APT_MIRROR): without it the tests skip, except
under CI=true, where they fail.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install-nsys.sh"
SECURITY_ONLY = "0.10.6-0+deb12u3"      # bookworm-security's libssh-4, which bookworm main does not hold
LIBS = ("libssh.so.4", "libpfm.so.4", "libgssapi_krb5.so.2", "libkrb5.so.3", "libk5crypto.so.3",
        "libkrb5support.so.0", "libkeyutils.so.1", "libcom_err.so.2", "libcrypto.so.3", "libelf.so.1")

pytestmark = pytest.mark.skipif(shutil.which("apt-get") is None or shutil.which("dpkg") is None,
                                reason="needs apt-get and dpkg (Debian or Ubuntu)")

STATUS_ENTRY = """Package: {name}
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 500
Maintainer: Debian
Architecture: amd64
Multi-Arch: same
Version: {version}
Description: an installed package, made for the test

"""


def machine_state(tmp: Path, installed: dict[str, str]) -> dict[str, str]:
    """The environment of a machine whose dpkg status lists `installed` (name -> version), made
    with an apt configuration of its own: nothing of the real machine's packages is changed."""
    status = tmp / "dpkg-status"
    status.write_text("".join(STATUS_ENTRY.format(name=n, version=v) for n, v in installed.items()))
    conf = tmp / "apt.conf"
    conf.write_text(f'Dir::State::status "{status}";\n')
    return dict(os.environ, APT_CONFIG=str(conf))


def digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def install_libs(env: dict[str, str], dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--libs-only"], env=dict(env, NSYS_DIR=str(dest)),
                          capture_output=True, text=True, timeout=600)


def unreachable(p: subprocess.CompletedProcess) -> bool:
    return "apt-get update for" in p.stderr and ("Could not resolve" in p.stderr or "Failed to fetch" in p.stderr
                                                 or "Temporary failure" in p.stderr)


@pytest.fixture(scope="module")
def lists(tmp_path_factory) -> Path:
    """An NSYS_DIR whose private bookworm lists are fetched once (the installer's own update)."""
    dest = tmp_path_factory.mktemp("nsys-libs")
    p = install_libs(dict(os.environ), dest)
    if p.returncode != 0 and unreachable(p):
        why = f"Debian's archive is not reachable: {p.stderr.strip().splitlines()[-1]}"
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(why)
        pytest.skip(why)
    assert p.returncode == 0, p.stderr
    return dest


def lists_opts(lists: Path, cache: Path) -> list[str]:
    """apt options that read the installer's private bookworm lists (and nothing else of its)."""
    d = lists / ".apt" / "bookworm"
    (cache / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    return [f"-oDir::Etc::SourceList={d}/sources.list", "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={d}/lists", f"-oDir::Cache={cache}", "-oAPT::Sandbox::User=root"]


def listed_version(lists: Path, cache: Path, package: str) -> str:
    """The version of `package` that the installer's lists hold (no installed package consulted)."""
    p = subprocess.run(["apt-cache", *lists_opts(lists, cache), "-oDir::State::status=/dev/null", "show",
                        "--no-all-versions", package], capture_output=True, text=True, timeout=60)
    return next(line.split(": ", 1)[1] for line in p.stdout.splitlines() if line.startswith("Version: "))


def test_the_state_made_for_the_test_breaks_a_plain_download(lists, tmp_path):
    """The control: with libssh-4 installed at a version the lists lack, apt's own download over the
    installer's lists fails as issue 42 saw it, so the next test tests that failure."""
    env = machine_state(tmp_path, {"libssh-4": SECURITY_ONLY})
    (tmp_path / "dl").mkdir()
    p = subprocess.run(["apt-get", "-q", *lists_opts(lists, tmp_path / "cache"), "download", "libssh-4"],
                       cwd=tmp_path / "dl", env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and f"version '{SECURITY_ONLY}'" in p.stderr, p.stderr


@pytest.mark.parametrize("installed", [{"libssh-4": SECURITY_ONLY, "libelf1": "0.188-2.1+deb12u9"}, {}],
                         ids=["installed-newer-than-the-lists", "not-installed"])
def test_the_bundled_libraries_come_from_the_installers_own_lists(lists, tmp_path, installed):
    shutil.rmtree(lists / ".deps", ignore_errors=True)
    before = digest("/var/lib/dpkg/status")
    p = install_libs(machine_state(tmp_path, installed), lists)
    assert p.returncode == 0, p.stderr
    lib = Path(p.stdout.strip().splitlines()[-1])
    assert lib == lists / ".deps" / "lib"
    assert sorted(f.name for f in lib.iterdir()) == sorted(LIBS)
    assert all((lib / so).read_bytes()[:4] == b"\x7fELF" for so in LIBS)
    # the version bundled is the one the lists hold, named in the package's changelog beside the libraries
    with gzip.open(lists / ".deps" / "doc" / "libssh-4" / "changelog.Debian.gz", "rt") as fh:
        bundled = fh.readline().split("(", 1)[1].split(")", 1)[0]
    assert bundled == listed_version(lists, tmp_path / "cache", "libssh-4") != SECURITY_ONLY
    assert digest("/var/lib/dpkg/status") == before, "the machine's own package status changed"
