"""Refresh the README's example output: run its first command (`clef-prof analyze traces/...`) at
80 columns on a UTF-8 terminal (the glyphs drawn: CLEF_PROF_ASCII=0) and put what it prints in the
```text block under it. tests/test_docs.py checks they
agree; run this after a change to analyze's terminal output:
    python3 scripts/readme-example.py"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    m = re.search(r"clef-prof analyze (traces/\S+\.sqlite)\n```\n.*?```text\n(.*?)```", text, re.S)
    if m is None:
        sys.exit("README.md: no `clef-prof analyze traces/...` command followed by a ```text block")
    out = subprocess.run([sys.executable, "-m", "clef_prof", "analyze", m.group(1)], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT), "CLEF_PROF_ASCII": "0",
                              "PYTHONIOENCODING": "utf-8"}, check=True).stdout
    readme.write_text(text[:m.start(2)] + out + text[m.end(2):], encoding="utf-8")
    print(f"README.md: the example output of {m.group(1)} refreshed ({len(out.splitlines())} lines)")
