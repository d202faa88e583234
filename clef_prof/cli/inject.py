"""`clef-prof inject`: the environment that injects a stage spec, and its checks
(clef_prof.annotate: envform, check, nsys_json)."""
from __future__ import annotations

import os
import sys

from ..annotate.check import CheckResult, check_targets, command_main, command_python
from ..annotate.envform import environment, format_env
from ..annotate.mainhook import matches_main
from ..annotate.nsys_json import nsys_analyze_hint, nsys_annotations
from ..annotate.registry import ENV_LENIENT, ENV_VERBOSE
from ..annotate.wrap import say
from ..base.errors import ClefError, SpecError
from .options import HelpFormatter


def add_parser(subparsers) -> None:
    import argparse
    p = subparsers.add_parser(
        "inject", help="run a command with a stage spec's NVTX wrappers in every Python process",
        description="Wrap the functions a stage spec names in NVTX ranges, in every Python process of a "
                    "command (the process itself, multiprocessing spawn/forkserver workers, Python "
                    "subprocesses), without touching their source. Or print the environment that does "
                    "it (for nsys profile ... env ... server), or write the spec as nsys's own JSON.",
        epilog="examples:\n"
               "  clef-prof inject --spec annotations/clef-vllm.toml -- vllm serve MODEL\n"
               "  clef-prof inject --spec annotations/clef-vllm.toml --print-env\n"
               "  clef-prof inject --spec annotations/clef-vllm.toml --emit-nsys-json clef.json",
        formatter_class=HelpFormatter)
    p.add_argument("--spec", required=True, help="stage spec TOML (annotations/*.toml)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--print-env", action="store_true",
                      help="print the environment to export instead of running a command")
    mode.add_argument("--emit-nsys-json", metavar="OUT.json",
                      help="write the spec as nsys Python-annotation JSON (--python-nvtx-annotations in "
                           "nsys 2023.4, --python-functions-trace later) and exit; the targets are imported "
                           "first (--python, or this interpreter, from the current directory) and the "
                           "classmethods, staticmethods and coroutines that nsys's wrapper mishandles are "
                           "left out, with a warning")
    mode.add_argument("--check", action="store_true",
                      help="only import and check every target, then exit; with -- COMMAND, as that command "
                           "will run them (its interpreter, its main module or script)")
    p.add_argument("--format", choices=["sh", "env", "json"], default="sh",
                   help="--print-env output: shell exports (default), NAME=value lines, or JSON")
    p.add_argument("--lenient", action="store_true",
                   help=f"warn about and skip unresolvable targets instead of exiting ({ENV_LENIENT}=1)")
    p.add_argument("--verbose", action="store_true", help=f"print each installed wrapper ({ENV_VERBOSE}=1)")
    p.add_argument("--no-check", action="store_true", help="launch without importing the targets first")
    p.add_argument("--python", help="interpreter to check the targets with (default: the command's own, "
                                    "when it is a Python command; else this one)")
    p.add_argument("--check-timeout", type=float, default=120, metavar="S",
                   help="seconds allowed for importing the targets (default 120)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    p.set_defaults(func=cmd_inject)


def _print_warnings(warnings) -> None:
    for w in warnings:
        say(f"clef-prof: warning: {w}")


def _check_or_raise(spec, python, path0, timeout, strict_top_level, lenient, main=None, off="") -> CheckResult:
    res = check_targets(spec, python, path0, timeout, strict_top_level, main)
    if off:
        res.errors.insert(0, SpecError(f"spec {spec.path}: the command runs Python with -{off}, which keeps "
                                       f"{'site (and so the injection hook) out' if 'S' in off else 'PYTHONPATH (and so the injection hook) out'}: "
                                       f"no target would be wrapped"))
    _print_warnings(res.warnings)
    if res.errors and lenient:
        _print_warnings(f"{e}; skipped (--lenient)" for e in res.errors)
    elif len(res.errors) == 1:
        raise res.errors[0]
    elif res.errors:
        for e in res.errors:          # one line per target, then the count
            say(f"clef-prof: error: {e}")
        raise SpecError(f"spec {spec.path}: {len(res.errors)} of {len(spec.bindings())} targets cannot be "
                        f"wrapped (one line each above)")
    return res


def _refuse_input(out: str, spec) -> None:
    """--emit-nsys-json onto one of its inputs (the spec, a script a target names) is refused."""
    if not os.path.exists(out):
        return
    inputs = [spec.path, *(b.target.path for b in spec.bindings() if b.target.path)]
    for path in inputs:
        try:
            same = os.path.samefile(out, path)
        except OSError:
            same = False
        if same:
            raise ClefError(f"--emit-nsys-json {out!r} is {'the spec' if path == spec.path else 'a target script'} "
                            f"it reads: refused (write the JSON elsewhere)")


def cmd_inject(args) -> int:
    from ..annotate.spec import load
    spec = load(args.spec)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.emit_nsys_json or args.print_env:
        if command:
            raise ClefError(f"a command ({command[0]}) makes no sense with "
                            f"{'--emit-nsys-json' if args.emit_nsys_json else '--print-env'}")
    if args.emit_nsys_json:
        import json
        if args.emit_nsys_json != "-":
            _refuse_input(args.emit_nsys_json, spec)
        kinds = None
        if not args.no_check:
            res = _check_or_raise(spec, args.python or sys.executable, os.getcwd(), args.check_timeout,
                                  bool(args.python), args.lenient)
            kinds = res.kinds
        blocks, left_out = nsys_annotations(spec, kinds)
        _print_warnings(left_out)
        text = json.dumps(blocks, indent=2) + "\n"
        if args.emit_nsys_json == "-":
            sys.stdout.write(text)
        else:
            try:
                with open(args.emit_nsys_json, "w") as fh:
                    fh.write(text)
            except OSError as exc:
                raise ClefError(f"{args.emit_nsys_json}: cannot write: {exc.strerror}") from None
            say(f"clef-prof: wrote {args.emit_nsys_json}; nsys names its ranges module.qualname and "
                 f"carries no batch size: {nsys_analyze_hint(spec, blocks)}")
        return 0
    if args.print_env:
        sys.stdout.write(format_env(environment(spec.path, args.lenient, verbose=args.verbose), args.format))
        return 0
    if not command and not args.check:
        raise ClefError("inject needs a command after --, or --print-env, --emit-nsys-json or --check")
    if args.check or not args.no_check:
        python, path0 = command_python(command)
        main, off = command_main(command)
        strict = True
        if args.python:
            python = args.python
        elif python is None:
            python, path0, strict = sys.executable, os.getcwd(), not command
        if not command:
            path0 = os.getcwd()
        res = _check_or_raise(spec, python, path0, args.check_timeout, strict, args.lenient, main, off)
    if args.check:
        n_main = sum(matches_main(b.target, *((main[1], None) if main[0] == "module" else (None, main[1])))
                     for b in spec.bindings()) if main else 0
        in_main = f" ({n_main} in the main module {main[1]}, wrapped as their definitions run)" if n_main else ""
        never: list[str] = []
        if res.runner is not None:
            from ..annotate import vllm_runner
            notes, warns, never = vllm_runner.lines(
                res.runner, [(b.where, str(b.target), b.runner) for b in spec.bindings() if b.role == "batch"])
            for n in notes:
                say(f"clef-prof: {n}")
            _print_warnings(warns)
        called = [w for w in res.kinds if w not in never]
        say(f"clef-prof: {spec.path}: {len(res.kinds)} of {len(spec.bindings())} targets import and wrap "
             f"in {python}{in_main}" + (f"; {len(called)} of them will be called" if never else ""))
        batches = [b.where for b in spec.bindings() if b.role == "batch"]
        if batches and all(w in never for w in batches):
            return 1
        return 0 if len(res.kinds) == len(spec.bindings()) or args.lenient else 1
    env = dict(os.environ)
    env.update(environment(spec.path, args.lenient, verbose=args.verbose))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        raise ClefError(f"{command[0]}: command not found") from None
    except PermissionError:
        raise ClefError(f"{command[0]}: permission denied") from None
    except OSError as exc:
        raise ClefError(f"{command[0]}: cannot run: {exc.strerror}") from None
    return 0  # not reached
