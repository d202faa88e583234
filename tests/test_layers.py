"""The import-linter contracts in pyproject.toml hold: cli on top, arrows only point down.

import-linter runs through this interpreter (`importlinter.cli.lint_imports`), not the
`lint-imports` script, so that a venv's python run without activating the venv still checks the
layers: the test never skips (import-linter is in the test extra). A contract broken on purpose
shows that the check can fail.
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports({args}))"


def lint(args: str = "no_cache=True") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", LINT.format(args=args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_import_contracts_hold():
    p = lint()
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "Contracts: " in p.stdout and " broken" in p.stdout and "0 broken" in p.stdout, p.stdout[-2000:]


def test_a_broken_contract_is_noticed(tmp_path):
    cfg = tmp_path / "broken.ini"
    cfg.write_text("[importlinter]\nroot_package = clef_prof\ninclude_external_packages = True\n\n"
                   "[importlinter:contract:numpy]\nname = analyze imports no numpy (false on purpose)\n"
                   "type = forbidden\nsource_modules = clef_prof.analyze\nforbidden_modules = numpy\n")
    p = lint(f"config_filename={str(cfg)!r}, no_cache=True")
    assert p.returncode == 1 and "BROKEN" in p.stdout and "clef_prof.analyze" in p.stdout, p.stdout[-2000:] + p.stderr
