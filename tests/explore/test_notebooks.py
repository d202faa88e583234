"""The notebooks in notebooks/ run headless (nbclient, python3 kernel) from their own folder, are
committed with the outputs a fresh run prints, and say why they stop when copied out of a checkout."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["explore.ipynb", "compare.ipynb"]


def _texts(nb) -> list[list[str]]:
    """Per code cell, its text outputs (streams and text/plain; images left out: their bytes vary
    with the matplotlib build)."""
    out = []
    for c in nb.cells:
        if c.cell_type == "code":
            out.append([o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
                        for o in c.outputs])
    return out


@pytest.mark.parametrize("name", NAMES)
def test_committed_with_outputs(name):
    """Committed run (scripts/run-notebooks.py), so that GitHub shows the tables and plots; no
    error, no widget state, no path of the machine that ran them."""
    text = (NOTEBOOKS / name).read_text()
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), f"{name}: run it with scripts/run-notebooks.py before committing"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 3
    assert "widgets" not in nb.metadata
    assert str(NOTEBOOKS.parent) not in text and "/home/" not in text and "/root/" not in text


@pytest.mark.jupyter
@pytest.mark.parametrize("name", NAMES)
def test_executes_headless_and_prints_what_is_committed(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    committed = _texts(nb)
    client = NotebookClient(nb, timeout=120, startup_timeout=60, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()                                   # raises CellExecutionError on any error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3, f"{name}: expected the plots inline"
    assert _texts(nb) == committed, f"{name}: its committed outputs are stale: python3 scripts/run-notebooks.py"


@pytest.mark.jupyter
def test_a_notebook_copied_out_of_the_checkout_says_why_it_stops(tmp_path):
    from nbclient.exceptions import CellExecutionError

    copy = tmp_path / "explore.ipynb"
    copy.write_text((NOTEBOOKS / "explore.ipynb").read_text())
    nb = nbformat.read(copy, as_version=4)
    client = NotebookClient(nb, timeout=120, startup_timeout=60, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError) as err:
        client.execute()
    msg = str(err.value)
    assert "FileNotFoundError" in msg and "StopIteration" not in msg
    assert "reads the sample captures in traces/ of a clef-prof checkout" in msg and str(tmp_path) in msg
