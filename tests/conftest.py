"""Fixtures: the real captures in ../shared/traces, decompressed once per session."""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CLEF_SHARED", ROOT.parent / "shared")) / "traces"


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory) -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"the shared captures are missing: {SHARED} (set CLEF_SHARED)")
    return tmp_path_factory.mktemp("shared")


def _unpack(shared_dir: Path, name: str) -> Path:
    out = shared_dir / f"{name}.sqlite"
    if not out.exists():
        with lzma.open(SHARED / f"{name}.sqlite.xz") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out.chmod(0o444)
    return out


@pytest.fixture(scope="session")
def capture(shared_dir):
    """capture('gpu-q1c16-main') -> Path of the decompressed, read-only export."""
    return lambda name: _unpack(shared_dir, name)


@pytest.fixture(scope="session")
def truth():
    return lambda name: json.loads((SHARED / f"{name}.truth.json").read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
