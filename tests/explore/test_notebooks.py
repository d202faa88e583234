"""The notebooks in notebooks/ run headless (nbclient, python3 kernel) from their own folder, and
are committed without outputs."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["explore.ipynb", "compare.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name):
    raw = json.loads((NOTEBOOKS / name).read_text())
    nbformat.validate(nbformat.reads(json.dumps(raw), as_version=4))
    for i, cell in enumerate(raw["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [], f"{name} cell {i} has outputs: strip them before committing"
        assert cell.get("execution_count") is None, f"{name} cell {i} has an execution count"
    assert "widgets" not in raw.get("metadata", {})


@pytest.mark.jupyter
@pytest.mark.parametrize("name", NAMES)
def test_executes_headless(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(nb, timeout=120, startup_timeout=60, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()                                   # raises CellExecutionError on any error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3, f"{name}: expected the plots inline"
