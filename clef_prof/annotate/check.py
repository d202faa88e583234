"""Checking a stage spec up front, out of the profiled process (`clef-prof inject --check`, and
before every launch): `check_targets` imports every target in a fresh interpreter (the
command's own, as the command will run them) and tries to wrap it; `command_python` and
`command_main` read what a command line will run."""
from __future__ import annotations

import importlib.util
import os
import re
import sys

from ..base.errors import SpecError
from .envform import PKG_DIR, STARTUP_DIR
from .registry import ENV_LENIENT
from .mainhook import ENV_MAIN, guard_definitions, matches_main, python_launch
from .startup import ENV_SPEC
from .wrap import TargetError, prepare

# argv: the start-up directory, the clef_prof package directory (the copy that runs the check,
# loaded by _startup/_clef_prof_boot.py ahead of any other clef_prof), then _check_child's
_CHECK_SNIPPET = (
    "import sys\n"
    "sys.path.insert(0,sys.argv[1])\n"
    "import _clef_prof_boot\n"
    "del sys.path[0]\n"
    "_clef_prof_boot.load(sys.argv[2])\n"
    "from clef_prof.annotate.check import _check_child\n"
    "_check_child(sys.argv[3:])\n")


def _check_child(argv: list[str]) -> None:
    """In a fresh interpreter: import each target of the spec (the command's main script by
    its path), wrap it, and write what fails (and each target's kind) as JSON. sys.path[0] is
    what the command's gets (a script's own folder while a script loads), so a script that
    cannot import its own package fails here as it would there. A target the main code defines
    inside `if __name__ == "__main__":` is checked by running that definition beside the
    module's top level. The module being imported is written to OUT.progress first, so that a
    hang or a hard exit is named."""
    import json
    spec_path, out_path, path0, main_kind, main_value = argv
    main = (main_kind, main_value) if main_kind else None
    sys.path[0] = path0 or os.getcwd()       # `python -c` put the current folder there
    from .spec import load
    errors, warnings, kinds = [], [], {}
    try:
        spec = load(spec_path)
    except SpecError as exc:
        errors.append(str(exc))
        spec = None
    modules = {}

    def run_script(script):
        saved = sys.path[0]
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        try:
            s = importlib.util.spec_from_file_location("__clef_prof_main__", script)
            mod = importlib.util.module_from_spec(s)
            sys.modules[s.name] = mod
            s.loader.exec_module(mod)
            return mod
        finally:
            sys.path[0] = saved

    def load_module(b):
        t = b.target
        script = None
        if t.path is not None:
            if main is not None and main[0] == "module":
                return ("error", f"the command runs -m {main[1]}, not this file: a file target is wrapped "
                                 f"only in the script run by path (and its workers)")
            if main is not None and not matches_main(t, None, main[1]):
                return "error", f"the command runs {main[1]}, not this file"
            script = t.path
        elif main is not None and main[0] == "script" and matches_main(t, None, main[1]):
            script = main[1]
        key = script or t.module
        if key in modules:
            return modules[key]
        with open(out_path + ".progress", "w") as fh:
            fh.write(f"{b.where}: {t}: importing {key}")
        try:
            if script is not None:
                if not os.path.isfile(script):
                    raise ModuleNotFoundError(f"no such file {script}", name=None)
                modules[key] = ("ok", run_script(script))
            else:
                modules[key] = ("ok", importlib.import_module(t.module))
        except ModuleNotFoundError as exc:
            if script is None and exc.name and (t.module == exc.name or t.module.startswith(exc.name + ".")):
                modules[key] = ("missing", exc.name)
            else:
                modules[key] = ("soft", f"importing {key} failed: ModuleNotFoundError: {exc}")
        except SystemExit as exc:
            modules[key] = ("soft", f"importing {key} exited (SystemExit: {exc.code})")
        except BaseException as exc:  # noqa: BLE001 - the target's own import trouble
            modules[key] = ("soft", f"importing {key} raised {type(exc).__name__}: {exc}")
        return modules[key]

    def in_guard(b, mod) -> str | None:
        """Run the main guard's definition of `b`'s first name in `mod` (the command's main code)
        when the top level leaves the target unresolved: None when there is none (or no need),
        "" when it ran, else why it could not run out of the program."""
        first, *rest = b.target.qualname.split(".")
        obj = vars(mod).get(first)
        for name in rest[:-1]:
            obj = getattr(obj, name, None)
        if first in vars(mod) and (not rest or hasattr(obj, rest[-1])):
            return None
        is_main = (b.target.path is not None or main is not None and
                   matches_main(b.target, main[1] if main[0] == "module" else None,
                                main[1] if main[0] == "script" else None))
        filename = getattr(mod, "__file__", None)
        if not is_main or not filename:
            return None
        try:
            with open(filename, "rb") as fh:
                code = guard_definitions(fh.read(), filename, {first})
        except OSError:
            return None
        if code is None:
            return None
        try:
            exec(code, vars(mod))
        except Exception as exc:  # noqa: BLE001 - the definition needs what the guard sets first
            return f"{type(exc).__name__}: {exc}"
        return ""

    for b in (spec.bindings() if spec is not None else ()):
        state, val = load_module(b)
        problem = None
        if state == "missing":
            problem, soft = f"no module named {val!r}", "." not in val
        elif state in ("soft", "error"):
            problem, soft = val, state == "soft"
        else:
            guard = in_guard(b, val)
            if guard:
                warnings.append(f"spec {spec.path} {b.where}: {b.target}: defined inside the main guard from "
                                f"what the guard sets first ({guard}): wrapped when it runs, not checked here")
                kinds[b.where] = "main guard, unchecked"
                continue
            try:
                p = prepare(b, spec, val)
                if p is not None:
                    p.apply()
                kinds[b.where] = ("wrapped" if p is None else
                                  f"async {p.kind}" if p.flavour == "async" else p.kind)
            except TargetError as exc:
                problem, soft = exc.problem, False
            except (AttributeError, TypeError) as exc:
                problem, soft = f"cannot be replaced: {exc}", False
        if problem is not None:
            errors.append({"where": b.where, "target": str(b.target), "problem": problem, "soft": soft})
    runner = None
    if spec is not None and any(b.runner for b in spec.bindings()):
        from . import vllm_runner
        runner = vllm_runner.report([b.runner for b in spec.bindings() if b.runner])
    with open(out_path, "w") as fh:
        json.dump({"errors": errors, "warnings": warnings, "kinds": kinds, "python": sys.executable,
                   "runner": runner}, fh)


def command_python(command: list[str], cwd: str | None = None) -> tuple[str | None, str | None]:
    """(interpreter, sys.path[0]) the command will run with, when it is a Python command:
    `python[3.X] [opts] script.py|-m mod|-c code`, or a script whose shebang names Python."""
    import shutil
    if not command:
        return None, None
    cwd = cwd or os.getcwd()
    exe = shutil.which(command[0]) or command[0]
    if re.fullmatch(r"python[\d.]*", os.path.basename(command[0])):
        main, _ = python_launch(command[1:], cwd)
        return exe, (os.path.dirname(os.path.realpath(main[1])) if main and main[0] == "script" else cwd)
    try:
        with open(exe, "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None, None
    if first.startswith("#!") and "python" in first:
        words = first[2:].split()
        here = os.path.dirname(os.path.realpath(exe))      # a script's sys.path[0]
        if words and os.path.basename(words[0]) == "env":
            words = [w for w in words[1:] if not w.startswith("-")]
            if not words:
                return None, None
            return shutil.which(words[0]), here
        if words and "python" in os.path.basename(words[0]):
            return words[0], here
    return None, None


def command_main(command: list[str], cwd: str | None = None) -> tuple[tuple[str, str] | None, str]:
    """The command's main code (`python_launch`), and the options that keep the hook out;
    a Python script run directly (shebang) is its own main script."""
    import shutil
    if not command:
        return None, ""
    if re.fullmatch(r"python[\d.]*", os.path.basename(command[0])):
        return python_launch(command[1:], cwd)
    exe = shutil.which(command[0]) or os.path.join(cwd or os.getcwd(), command[0])
    return ("script", os.path.abspath(exe)), ""


class CheckResult:
    """What importing a spec's targets in a fresh interpreter found: one line per problem."""

    def __init__(self, errors=(), warnings=(), kinds=None, python=None, runner=None):
        self.errors = list(errors)          # SpecError / TargetError
        self.warnings = list(warnings)      # str
        self.kinds = dict(kinds or {})      # binding.where -> function|method|staticmethod|classmethod|...
        self.python = python
        self.runner = runner                # vllm_runner.report() when batch targets name a runner

    def __iter__(self):  # errors, warnings = check_targets(...)
        return iter((self.errors, self.warnings))


def check_targets(spec, python: str | None = None, path0: str | None = None, timeout: float = 120,
                  strict_top_level: bool = True, main: tuple[str, str] | None = None) -> CheckResult:
    """Import every target of `spec` in a fresh `python` (sys.path[0] = path0; `main`, the
    command's main code, loaded as the command will run it) and try to wrap it. A top-level
    package missing, or a module that raises or exits on import, counts as an error only with
    strict_top_level (when `python` is the command's own interpreter); else as a warning. A
    module that hangs (`timeout`) or ends the interpreter is an error."""
    import json
    import subprocess
    import tempfile
    python = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="clef-prof-check-") as tmp:
        out = os.path.join(tmp, "result.json")
        argv = [python, "-c", _CHECK_SNIPPET, STARTUP_DIR, PKG_DIR, os.path.abspath(spec.path), out,
                path0 or "", *(main or ("", ""))]
        env = {k: v for k, v in os.environ.items() if k not in (ENV_SPEC, ENV_LENIENT, ENV_MAIN)}

        def progress() -> str:
            try:
                with open(out + ".progress") as fh:
                    return fh.read()
            except OSError:
                return "importing the targets"

        try:
            p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            return CheckResult([SpecError(f"spec {spec.path} {progress()}: did not finish within "
                                          f"{timeout:g} s (--check-timeout)")], python=python)
        except OSError as exc:
            return CheckResult(warnings=[f"cannot run {python} to check the targets: {exc}; not checked"],
                               python=python)
        if not os.path.exists(out):
            tail = (p.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            why = tail[-1] if tail else f"exit code {p.returncode}"
            return CheckResult([SpecError(f"spec {spec.path} {progress()}: ended the checking "
                                          f"interpreter {python} ({why})")], python=python)
        with open(out) as fh:
            res = json.load(fh)
    errors, warnings = [], list(res["warnings"])
    for e in res["errors"]:
        if isinstance(e, str):
            errors.append(SpecError(e))
        elif e["soft"] and not strict_top_level:
            warnings.append(f"spec {spec.path} {e['where']}: {e['target']}: not checked: {e['problem']} "
                            f"in {python}")
        else:
            errors.append(TargetError(spec.path, e["where"], e["target"], e["problem"]))
    return CheckResult(errors, warnings, res.get("kinds"), python, res.get("runner"))
