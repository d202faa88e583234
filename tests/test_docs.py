"""The documentation: the MkDocs site builds with --strict (every nav entry, link and anchor
resolves), README.md stays a front door, and its example output is the command's real output."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from clef_prof.base.glyphs import ascii_text

from conftest import ROOT


def test_site_builds_strict(tmp_path):
    pytest.importorskip("material", reason="mkdocs-material is not installed (run: python3 -m pip install -e '.[docs]')")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    # the home page is the README with its links made relative to docs/
    assert 'href="getting-started/"' in home and "docs/getting-started" not in home
    for page in ("getting-started", "profile-your-own-server", "analyze", "compare", "json", "layout"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    # every page of the site is one click from the README
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", text))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages <= linked, pages - linked


def test_ci_runs_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    cmd = "bash scripts/install-test-tools.sh && python3 -m pip install -e '.[test]' && python3 -m pytest -q"
    assert f"```bash\n{cmd}\n```" in readme
    assert cmd in ci


def test_readme_example_is_the_real_output():
    """The README's first command, at 80 columns on a UTF-8 terminal (glyphs drawn, as
    CLEF_PROF_ASCII=0 asks), prints exactly the block under it; piped, the same words with the
    glyphs' ASCII stand-ins, within 80 columns, as the README says."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"clef-prof analyze (traces/\S+\.sqlite)\n```\n.*?```text\n(.*?)```", readme, re.S)
    assert m, "the README's first command and its output block"
    env = {k: v for k, v in os.environ.items() if k != "CLEF_PROF_ASCII"}
    runs = [subprocess.run([sys.executable, "-m", "clef_prof", "analyze", m.group(1)], cwd=ROOT, capture_output=True,
                           env={**env, "COLUMNS": "80", "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8", **more})
            for more in ({"CLEF_PROF_ASCII": "0"}, {})]
    assert all(r.returncode == 0 and r.stderr == b"" for r in runs), runs
    assert runs[0].stdout.decode() == m.group(2), "stale: python3 scripts/readme-example.py"
    piped = runs[1].stdout.decode()        # laid out in the stand-ins: → is two columns, lines break elsewhere
    assert piped.isascii() and max(map(len, piped.splitlines())) <= 80
    assert piped.split() == ascii_text(m.group(2)).split() and "-> fix:" in piped
    assert "piped or written to a file (`-o`) the glyphs are ASCII" in " ".join(readme.split())


def test_paths_the_docs_name_exist():
    """Every repository path the README and the docs name in code spans (`tests/...`,
    `benchmarks/...`, `scripts/...`, ...) is there: a file, a folder, or the stem of files
    (`tests/data/cpu23-nsyspy-split` for its .sqlite.xz and .json.xz). Globs and placeholders are
    left alone."""
    pat = re.compile(r"`((?:tests|bench|scripts|clef_prof|annotations|notebooks|traces|docs)/"
                     r"[A-Za-z0-9_./-]+?)(?:::[^`]*)?`")
    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in pat.finditer(page.read_text()):
            rel = m.group(1).rstrip("/.")
            p = ROOT / rel
            if not (p.exists() or any(p.parent.glob(p.name + ".*"))):
                missing.append(f"{page.relative_to(ROOT)}: {rel}")
    assert missing == []


def test_layout_table_is_the_tree():
    """docs/layout.md's table names every folder of clef_prof/ (a private one, `_startup/`, in its
    parent's row) and, outside its parentheses, exactly the modules in it (the package's __init__
    only for clef_prof/ itself)."""
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w/]+)` \| [^|]+ \| (.+) \|$", text, re.M)
    pkg = ROOT / "clef_prof"
    folders = {d for d in pkg.rglob("*") if d.is_dir() and (d / "__init__.py").is_file() and d.name[0] != "_"}
    named = {pkg if f == "clef_prof/" else pkg / f.rstrip("/") for f, _ in rows}
    assert named == folders | {pkg}, sorted(str(p.relative_to(ROOT)) for p in named ^ (folders | {pkg}))
    for folder, modules in rows:
        where = pkg if folder == "clef_prof/" else pkg / folder.rstrip("/")
        listed = set(re.findall(r"`([\w/]+)`", re.sub(r"\([^()]*\)", "", modules)))
        present = {f.stem for f in where.glob("*.py")} | {f"{d.name}/" for d in where.iterdir()
                                                          if d.is_dir() and d not in folders and d.name != "__pycache__"}
        if where != pkg:
            present.discard("__init__")
        assert listed == present, (folder, sorted(listed ^ present))
