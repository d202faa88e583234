"""Run the notebooks in notebooks/ headless (nbclient, python3 kernel) and write them back with
their outputs, so that GitHub shows their tables and plots. Run from anywhere:
    python3 scripts/run-notebooks.py
tests/explore/test_notebooks.py checks that the committed outputs are what a fresh run prints."""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, startup_timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nb.metadata.pop("widgets", None)
    return nb


if __name__ == "__main__":
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nbformat.write(run(path), path)
        print(f"wrote {path.name} with its outputs")
