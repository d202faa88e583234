"""The import-linter contracts in pyproject.toml hold: cli on top, arrows only point down.

import-linter runs through this interpreter (`importlinter.cli.lint_imports`), not the
`lint-imports` script, so that a venv's python run without activating the venv still checks the
layers: the test never skips (import-linter is in the test extra). A contract broken on purpose
shows that the check can fail. No import circle anywhere: grimp (import-linter's graph) finds none
between any two modules of clef_prof or benchmarks/, function-level imports included.
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ("import sys, json, grimp; g = grimp.build_graph(sys.argv[1]); "
         "print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}))")
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


def circles(imports: dict[str, list[str]]) -> list[str]:
    """The import circles of a graph (module -> the modules it imports): its strongly connected
    components of two modules or more (Tarjan), each as "a <-> b <-> c"."""
    index, low, stack, out = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in imports.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(" <-> ".join(sorted(comp)))

    for m in sorted(imports):
        if m not in index:
            visit(m)
    return sorted(out)


def package_imports(package: str, path: str = str(ROOT)) -> dict[str, list[str]]:
    """grimp's graph of a package (function-level imports included)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([path, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", GRAPH, package], cwd=path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def script_imports(folder: Path) -> dict[str, list[str]]:
    """Which scripts of a folder (not a package: they import each other by name) import which."""
    names = {f.stem for f in folder.glob("*.py")}
    out = {}
    for f in folder.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
        out[f.stem] = sorted(found & names)
    return out


def test_no_import_circle():
    assert circles(package_imports("clef_prof")) == []
    assert circles(script_imports(ROOT / "benchmarks")) == []


def test_an_import_circle_is_noticed(tmp_path):
    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert circles(package_imports("circ", path=str(tmp_path))) == ["circ.a <-> circ.b"]
    (tmp_path / "x.py").write_text("import y\n")
    (tmp_path / "y.py").write_text("def f():\n    from x import f\n")
    assert circles(script_imports(tmp_path)) == ["x <-> y"]
