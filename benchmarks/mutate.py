"""Mutation pass over clef-prof's core: does the test suite notice small, plausible bugs?

Each mutant is one small edit of one module (a comparison swapped or relaxed, a constant moved by
one, `and`/`or` swapped, a condition dropped, two arguments swapped, one entry of a literal table
removed, h2d/d2h or start/end or pid/tid swapped, + for -); the tests that run the mutated line
are run with `-x`, and the mutant is *killed* (a test failed), *survived* (all passed), *timeout*,
or *uncovered* (no test of the selection runs the line: it survives without a run). Equivalent
mutants (no behaviour changes) are listed with the reason in a JSON file (--equivalent) and left
out of the kill rate.

Why a script of our own and not mutmut: mutmut 3 rewrites every function of the package into
trampolines inside a `mutants/` copy and needs its own runner configuration; here we want a fixed,
documented operator set (the classes the issue-21 audit found), per-module kill rates, and the
test selection of each mutant chosen from a traced baseline. The script never edits the user's
tree: it copies the tracked and untracked-not-ignored files into a temporary folder, mutates there,
and deletes the folder at the end, on Ctrl-C too.

Speed: a forked runner imports pytest, NumPy, pandas and pyarrow once; each mutant forks it and
runs, with -x and fastest first, the tests of its module (MODULE_TESTS) that ran the mutated line
in the baseline (traced with sys.settrace; a line run while a fixture is set up counts for the
whole test file, a line run only at import for the module's test files). --rerun skips what an
earlier result killed. A benchmark, not a test: run it by hand (docs/mutation.md).

    python3 benchmarks/mutate.py                       # the default modules, CPU-only selection
    python3 benchmarks/mutate.py clef_prof/analyze/figures/ranks.py --show-survivors
    python3 benchmarks/mutate.py clef_prof/analyze --rerun last.jsonl --json now.json
    python3 benchmarks/mutate.py --report last.jsonl now.jsonl      # the table, with the current equivalent list
"""
from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TARGETS = ("clef_prof/analyze", "clef_prof/capture", "clef_prof/explore/termtable.py", "clef_prof/explore/markup.py",
                   "clef_prof/compare", "clef_prof/bench/stats.py", "clef_prof/base/redact.py")
DEFAULT_MARK = "not nsys and not chromium and not jupyter and not vllm"
# the tests of each module (fnmatch patterns of modules -> test files or folders): a mutant runs
# those of them that ran its line in the traced baseline (all of them for a line run only at
# import); --tests and --wide override. The core figures' tests go with every analysis module.
_A = "tests/analyze/"
_CORE = (_A + "test_analyze_truth.py", _A + "test_gpu_captures.py", _A + "test_result_model.py")
_PIPELINE = (_A + "test_outside_batch.py", _A + "test_per_batch_stream.py", _A + "test_window.py",
             _A + "test_overlap.py", _A + "test_ranks_capture.py", _A + "test_hostile_numbers.py",
             _A + "test_validate.py", _A + "test_result_edges.py", "tests/journey/test_journey_engine_ids.py", *_CORE)
_INPUTS = (_A + "test_inputs.py", _A + "test_bad_input.py", _A + "test_streaming.py", "tests/cli",
           "tests/compare/test_compare.py", _A + "test_kineto.py", _A + "test_nsys_samples.py")
MODULE_TESTS = {
    "clef_prof/analyze/figures/arrays.py": (_A + "test_arrays.py", _A + "test_oracles.py", *_CORE),
    "clef_prof/analyze/figures/attribute.py": (_A + "test_attribute.py", _A + "test_oracles.py", _A + "test_metrics.py", *_CORE, _A + "test_window.py",
                                       _A + "test_outside_batch.py", _A + "test_stages_edges.py"),
    "clef_prof/analyze/read/columns.py": (_A + "test_columns_markup.py", _A + "test_metrics.py", _A + "test_arrays.py", *_CORE, "tests/explore",
                                     "tests/journey/test_journey_output.py"),
    "clef_prof/analyze/figures/cuda.py": (_A + "test_cuda.py", _A + "test_metrics.py", _A + "test_per_batch_stream.py",
                                  _A + "test_ranks_capture.py", *_CORE,
                                  _A + "test_kineto.py"),
    "clef_prof/analyze/read/export.py": (_A + "test_reader.py", _A + "test_reader_stops.py", _A + "test_bad_input.py",
                                    _A + "test_hostile_numbers.py", _A + "test_streaming.py", *_CORE,
                                    _A + "test_export_edges.py"),
    "clef_prof/analyze/read/filecache.py": (_A + "test_filecache.py", _A + "test_reader.py", _A + "test_streaming.py", "tests/compare/test_compare.py",
                                       "tests/explore", "tests/cli/test_report_identity.py"),
    "clef_prof/analyze/judge/findings.py": (_A + "test_findings.py", _A + "test_finding_boundaries.py",
                                      _A + "test_finding_evidence.py", _A + "test_kineto_python.py"),
    "clef_prof/analyze/read/inputs.py": _INPUTS,
    "clef_prof/analyze/read/identity.py": _INPUTS,
    "clef_prof/analyze/figures/intervals.py": (_A + "test_oracles.py", _A + "test_overlap.py", *_CORE,
                                       _A + "test_intervals_edges.py"),
    "clef_prof/analyze/figures/journey.py": ("tests/journey",),
    "clef_prof/analyze/*/manifest.py": (   _A + "test_manifest_checks.py", _A + "test_manifest.py", _A + "test_validate.py", _A + "test_validate_edges.py",
                                      _A + "test_gpu_captures.py", "tests/record", "tests/explore/test_html.py",
                                      "tests/compare/test_compare.py"),
    "clef_prof/explore/markup.py": (_A + "test_columns_markup.py", _A + "test_findings.py",),
    "clef_prof/analyze/figures/metrics.py": (_A + "test_metrics.py", _A + "test_per_batch_stream.py", *_CORE),
    "clef_prof/analyze/model.py": (_A + "test_model_figures.py", "tests/journey/test_journey_output.py", "tests/journey/test_journey_gpu.py", _A + "test_samples.py", _A + "test_kineto_python.py", _A + "test_result_model.py", _A + "test_findings.py", *_CORE, "tests/explore",
                                   "tests/compare/test_interval_coverage.py", _A + "test_streaming.py"),
    "clef_prof/analyze/read/nsyspy.py": (_A + "test_nsyspy_decode.py", _A + "test_nsys_samples.py", _A + "test_samples_oracle.py"),
    "clef_prof/analyze/read/nvtx.py": (_A + "test_nvtx_ids.py", _A + "test_kineto.py", _A + "test_ranks_capture.py", _A + "test_nvtx_reading.py", _A + "test_validate.py",
                                  _A + "test_validate_edges.py", _A + "test_reader.py", *_CORE,
                                  _A + "test_validate_damaged.py", _A + "test_nested_batches.py",
                                  _A + "test_concurrent_batches.py", "tests/cli/test_doctor.py", "tests/journey",
                                  _A + "test_fork_orphans.py"),
    "clef_prof/analyze/figures/overlap.py": (_A + "test_overlap.py", _A + "test_per_batch_stream.py", *_CORE,
                                     _A + "test_overlap_edges.py"),
    "clef_prof/analyze/parallel.py": (_A + "test_parallel.py", _A + "test_streaming.py", "tests/compare/test_compare.py", "tests/cli"),
    "clef_prof/analyze/figures/ranks.py": (_A + "test_ranks_capture.py", _A + "test_nvtx_reading.py"),
    "clef_prof/analyze/pipeline.py": _PIPELINE,
    "clef_prof/analyze/assemble.py": _PIPELINE,
    "clef_prof/analyze/figures/samples.py": (_A + "test_samples.py", _A + "test_samples_oracle.py", _A + "test_nsys_samples.py",
                                     _A + "test_kineto_python.py",
                                     _A + "test_profiler_pair.py", _A + "test_profiler_pair_bert.py",
                                     _A + "test_finding_evidence.py", "tests/compare/test_function_changes.py",
                                     "tests/explore/test_flame.py"),
    "clef_prof/analyze/read/kineto.py": (_A + "test_kineto.py", _A + "test_kineto_oracle.py", _A + "test_kineto_python.py",
                                    _A + "test_profiler_pair.py", _A + "test_profiler_pair_bert.py", "tests/journey/test_journey_kineto.py",
                                    "tests/journey/test_request_torch_bookkeeping.py"),
    "clef_prof/capture/scrub.py": (_A + "test_scrub.py", _A + "test_scrub_edges.py", _A + "test_slicing_oracle.py"),
    "clef_prof/capture/slicing.py": (_A + "test_slicing_oracle.py", _A + "test_overlap.py", _A + "test_window.py", _A + "test_scrub.py",
                                     _A + "test_hostile_numbers.py", "tests/cli/test_hostile_files.py"),
    "clef_prof/analyze/figures/stages.py": (_A + "test_outside_batch.py", _A + "test_hostile_numbers.py",
                                    _A + "test_ranks_capture.py", _A + "test_validate.py", *_CORE,
                                    _A + "test_capture_edges.py", _A + "test_nested_batches.py",
                                    _A + "test_concurrent_batches.py", _A + "test_validate_edges.py",
                                    _A + "test_stages_edges.py"),
    "clef_prof/analyze/judge/validate.py": (_A + "test_validate.py", _A + "test_validate_edges.py", _A + "test_ranks_capture.py",
                                      _A + "test_nvtx_reading.py", *_CORE,
                                      _A + "test_capture_edges.py", _A + "test_validate_damaged.py",
                                      _A + "test_stages_edges.py", _A + "test_fork_orphans.py"),
    "clef_prof/analyze/figures/window.py": (_A + "test_model_figures.py", _A + "test_window.py", *_CORE, _A + "test_outside_batch.py", "tests/explore"),
    "clef_prof/explore/termtable.py": (_A + "test_termtable.py", "tests/explore", "tests/cli/test_demo.py", _A + "test_hostile_numbers.py",
                                       "tests/journey/test_journey_output.py", "tests/compare/test_gates.py",
                                       _A + "test_findings.py", "tests/cli/test_glyphs.py"),
    "clef_prof/base/glyphs.py": ("tests/cli/test_glyphs.py", _A + "test_termtable.py"),
    "clef_prof/analyze/*": (_A,),
    "clef_prof/compare/welch.py": ("tests/compare", "tests/bench/test_bench_calibration.py"),
    "clef_prof/compare/resample.py": ("tests/compare/test_resample_chunks.py", "tests/compare"),
    "clef_prof/compare/functions.py": ("tests/compare/test_function_changes.py", _A + "test_kineto_python.py",
                                       "tests/compare"),
    "clef_prof/compare/arm.py": ("tests/compare/test_arm.py", "tests/compare", "tests/cli/test_cli_inputs.py", "tests/cli/test_hostile_files.py",
                                 "tests/record/test_ab.py"),
    "clef_prof/compare/*": ("tests/compare", "tests/cli/test_cli_inputs.py", "tests/cli/test_hostile_files.py"),
    "clef_prof/bench/*": ("tests/bench",),
    "clef_prof/base/redact.py": ("tests/test_redact.py", _A + "test_scrub.py"),
}
EQUIVALENT = ROOT / "benchmarks" / "mutation_equivalent.json"

# comparison operator -> what it becomes (relaxed/strict, negated)
_CMP = {ast.Lt: [ast.LtE], ast.LtE: [ast.Lt], ast.Gt: [ast.GtE], ast.GtE: [ast.Gt], ast.Eq: [ast.NotEq],
        ast.NotEq: [ast.Eq], ast.In: [ast.NotIn], ast.NotIn: [ast.In], ast.Is: [ast.IsNot], ast.IsNot: [ast.Is]}
_CMP_TOKEN = {ast.Lt: r"<(?![<=])", ast.LtE: r"<=", ast.Gt: r"(?<!-)>(?![>=])", ast.GtE: r">=", ast.Eq: r"==",
              ast.NotEq: r"!=", ast.In: r"(?<!not )\bin\b", ast.NotIn: r"\bnot\s+in\b", ast.Is: r"\bis\b(?!\s+not)",
              ast.IsNot: r"\bis\s+not\b"}
_CMP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
             ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_BIN = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.Div: ("/", "*"),
        ast.FloorDiv: ("//", "/"), ast.BitAnd: ("&", "|"), ast.BitOr: ("|", "&")}
# arguments worth swapping (two variables), and calls where the order does not matter
_VARIABLE = (ast.Name, ast.Attribute, ast.Subscript)
_SYMMETRIC = {"max", "min", "maximum", "minimum", "add", "union1d", "intersect1d", "logical_and", "logical_or",
              "array_equal", "isclose", "allclose", "zip", "hypot"}
# names that mean one of a pair: the bug of reading the other one
_SWAPS = (("h2d", "d2h"), ("start", "end"), ("pid", "tid"), ("min", "max"), ("first", "last"), ("src", "dst"),
          ("pinned", "pageable"), ("HTOD", "DTOH"), ("minimum", "maximum"))


@dataclass
class Mutant:
    path: str               # relative to the tree
    line: int
    kind: str
    before: str             # the original line(s)
    after: str              # the mutated line(s)
    source: str = field(repr=False, default="")
    status: str = ""
    seconds: float = 0.0
    tests: list = field(default_factory=list)
    why: str = ""

    def record(self) -> dict:
        return {k: getattr(self, k) for k in ("path", "line", "kind", "before", "after", "status", "seconds", "tests",
                                              "why")}

    @property
    def key(self) -> tuple[str, str, str]:
        return self.path, self.before.strip(), self.after.strip()

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.before.splitlines(True), self.after.splitlines(True),
                                            f"a/{self.path}", f"b/{self.path}", n=0, lineterm="\n")
                       ).replace("@@ -1 +1 @@", f"@@ line {self.line} @@")


# -------------------------------------------------------------------------------------------------
# mutants: text edits located by the AST, so that the diff is the edit and nothing else


class _Edits(ast.NodeVisitor):
    """Collects (start offset, end offset, replacement, kind) edits of one module."""

    def __init__(self, src: str):
        self.src = src
        self.offsets = [0]
        for ln in src.splitlines(True):
            self.offsets.append(self.offsets[-1] + len(ln))
        self.edits: list[tuple[int, int, str, str]] = []
        self.skip: set[int] = set()         # ids of nodes inside docstrings / f-strings
        self.depth = 0                      # function nesting (0: module or class level)
        self.idents = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", src))

    def pos(self, node, end=False) -> int:
        if end:
            return self.offsets[node.end_lineno - 1] + len(self.src_line_bytes(node.end_lineno)[:node.end_col_offset]
                                                           .decode("utf-8"))
        return self.offsets[node.lineno - 1] + len(self.src_line_bytes(node.lineno)[:node.col_offset].decode("utf-8"))

    def src_line_bytes(self, lineno: int) -> bytes:
        return self.src[self.offsets[lineno - 1]:self.offsets[lineno]].encode("utf-8")

    def seg(self, node) -> str:
        return self.src[self.pos(node):self.pos(node, True)]

    def add(self, a: int, b: int, text: str, kind: str):
        self.edits.append((a, b, text, kind))

    # --- structure -------------------------------------------------------------------------------
    def generic_visit(self, node):
        if isinstance(node, ast.JoinedStr):
            return                                          # f-strings: messages, and no usable positions
        super().generic_visit(node)

    def _body(self, body):
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]                                 # docstring
        for stmt in body:
            self.visit(stmt)

    def visit_Module(self, node):
        self._body(node.body)

    def visit_ClassDef(self, node):
        for d in node.decorator_list:
            self.visit(d)
        self._body(node.body)

    def visit_FunctionDef(self, node):
        for d in node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(d)
        self.depth += 1
        self._body(node.body)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant):
            return
        self.generic_visit(node)

    def visit_Assign(self, node):
        if self.depth == 0 and isinstance(node.value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            self._drop_entries(node.value)                  # a table: drop one entry at a time
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        if self.depth == 0 and isinstance(node.value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            self._drop_entries(node.value)
        if node.value is not None:
            self.visit(node.value)

    def visit_Call(self, node):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name in ("compile", "search", "match", "sub", "fullmatch", "findall") and self._is_re(f):
            # a regular expression: its text is a pattern table of its own, left alone here
            for a in node.args[1:]:
                self.visit(a)
            for k in node.keywords:
                self.visit(k.value)
            return
        args = node.args
        if len(args) >= 2 and name not in _SYMMETRIC and all(isinstance(x, _VARIABLE) for x in args[:2]):
            a, b = args[0], args[1]
            pa, pb, ea, eb = self.pos(a), self.pos(b), self.pos(a, True), self.pos(b, True)
            self.add(pa, eb, self.src[pb:eb] + self.src[ea:pb] + self.src[pa:ea], "swap arguments")
        self.generic_visit(node)

    @staticmethod
    def _is_re(f) -> bool:
        return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("re", "_re")

    # --- operators -------------------------------------------------------------------------------
    def _drop_entries(self, node):
        elts = list(node.keys) if isinstance(node, ast.Dict) else list(node.elts)
        if len(elts) < 2 or any(e is None for e in elts):
            return
        ends = [self.pos(node.values[i] if isinstance(node, ast.Dict) else e, True) for i, e in enumerate(elts)]
        for i, e in enumerate(elts):
            start = self.pos(e)
            if i + 1 < len(elts):
                self.add(start, self.pos(elts[i + 1]), "", "drop table entry")
            else:
                self.add(ends[i - 1], ends[i], "", "drop table entry")

    def visit_Compare(self, node):
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            a, b = self.pos(left, True), self.pos(right)
            between = self.src[a:b]
            m = re.search(_CMP_TOKEN[type(op)], between)
            if m:
                for new in _CMP[type(op)]:
                    self.add(a + m.start(), a + m.end(), _CMP_TEXT[new], "comparison")
            left = right
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        word, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        vals = node.values
        for x, y in zip(vals, vals[1:]):
            a, b = self.pos(x, True), self.pos(y)
            m = re.search(rf"\b{word}\b", self.src[a:b])
            if m:
                self.add(a + m.start(), a + m.end(), other, "and/or")
        for i, v in enumerate(vals):                        # drop one condition
            if i == 0:
                self.add(self.pos(v), self.pos(vals[1]), "", "drop condition")
            else:
                self.add(self.pos(vals[i - 1], True), self.pos(v, True), "", "drop condition")
        self.generic_visit(node)

    def visit_BinOp(self, node):
        ops = _BIN.get(type(node.op))
        strs = any(isinstance(x, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(x, "value", 0), str)
                   or isinstance(x, ast.JoinedStr) for x in (node.left, node.right))
        if ops and not strs:
            a, b = self.pos(node.left, True), self.pos(node.right)
            between = self.src[a:b]
            i = between.find(ops[0])
            if i >= 0:
                self.add(a + i, a + i + len(ops[0]), ops[1], "arithmetic" if ops[0] not in "&|" else "mask &/|")
            if isinstance(node.op, (ast.BitAnd, ast.BitOr)):    # a NumPy mask: drop one side
                self.add(self.pos(node), self.pos(node.right), "", "drop condition")
                self.add(self.pos(node.left, True), self.pos(node, True), "", "drop condition")
        self.generic_visit(node)

    def visit_If(self, node):
        # a guard (its body leaves: return, raise, continue, break) dropped
        if not node.orelse and isinstance(node.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
            self.add(self.pos(node.test), self.pos(node.test, True), "False", "drop guard")
        self.generic_visit(node)

    def visit_comprehension(self, node):
        for cond in node.ifs:
            self.add(self.pos(cond), self.pos(cond, True), "True", "drop condition")
        self.generic_visit(node)

    def visit_Raise(self, node):
        return                                              # the error's text; its guard is mutated

    def visit_Subscript(self, node):
        self.visit(node.value)
        if not isinstance(node.slice, (ast.Constant, ast.Slice, ast.UnaryOp)):
            self.visit(node.slice)                          # constant indices and slices left alone

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return
        if self.depth and not (isinstance(v, int) and -2 <= v <= 2):
            return          # in code: off-by-one of small integers; thresholds and tables live at module level
        if isinstance(v, int):
            news = [repr(v + 1)] + ([repr(v - 1)] if v else [])
        else:
            news = [repr(round(v * 1.25, 12)) if v else "1e-09", repr(round(v * 0.8, 12)) if v else "-1e-09"]
        for new in news:
            self.add(self.pos(node), self.pos(node, True), new if not new.startswith("-") else f"({new})", "constant")

    def _swap_name(self, node, text: str):
        for a, b in _SWAPS:
            for x, y in ((a, b), (b, a)):
                if re.search(rf"(?:^|_){x}(?:_|$)", text) or text == x:
                    new = re.sub(rf"(?:(?<=_)|^){x}(?=_|$)", y, text)
                    if new != text and new in self.idents:
                        seg = self.seg(node)
                        i = seg.rfind(text)
                        p = self.pos(node) + i
                        self.add(p, p + len(text), new, "swap name")

    def visit_Attribute(self, node):
        self._swap_name(node, node.attr)
        self.generic_visit(node)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self._swap_name(node, node.id)


def mutants_of(path: Path, rel: str) -> list[Mutant]:
    src = path.read_text()
    v = _Edits(src)
    v.visit(ast.parse(src))
    out, seen = [], set()
    for a, b, text, kind in v.edits:
        new = src[:a] + text + src[b:]
        if new == src or new in seen:
            continue
        try:
            compile(new, rel, "exec")
        except SyntaxError:
            continue
        seen.add(new)
        first = src.count("\n", 0, a)
        last_old = src.count("\n", 0, b)
        last_new = first + (last_old - first) + text.count("\n") - src[a:b].count("\n")
        old_lines, new_lines = src.splitlines(True), new.splitlines(True)
        out.append(Mutant(rel, first + 1, kind, "".join(old_lines[first:last_old + 1]),
                          "".join(new_lines[first:last_new + 1]), new))
    return out


# -------------------------------------------------------------------------------------------------
# the tree copy and the forked runner


def copy_tree(dest: Path) -> Path:
    """The tracked and untracked-not-ignored files of the checkout and the extension modules built
    in it (the C reader: ignored by git, but what the tests run), copied; .nsys linked."""
    try:
        names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):    # a copy without .git (a lent machine): every file
        skip = {".git", ".nsys", ".cache", ".device", ".venv", ".whl", ".pytest_cache", "__pycache__", "build"}
        names = [str(f.relative_to(ROOT)) for f in ROOT.rglob("*") if f.is_file()
                 and not skip & set(f.relative_to(ROOT).parts[:-1])]
    names += [str(f.relative_to(ROOT)) for f in (ROOT / "clef_prof").rglob("*.so")]
    for n in filter(None, names):
        s = ROOT / n
        if s.is_file() and not s.is_symlink():
            (dest / n).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, dest / n)
    for link in (".nsys", ".cache"):
        if (ROOT / link).exists():
            os.symlink((ROOT / link).resolve(), dest / link)
    return dest


class Tracer:
    """A pytest plugin: which lines of the target files each test runs (in this process). Lines run
    while a fixture is set up or torn down count for the test's whole file (a module fixture's result
    is read by every test of the file); lines run before the first test, for "<import>"."""

    def __init__(self, files: set[str]):
        self.files = files
        self.current = "<import>"
        self.lines: dict[tuple[str, int], set[str]] = defaultdict(set)
        self.seconds: dict[str, float] = defaultdict(float)

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines[(frame.f_code.co_filename, frame.f_lineno)].add(self.current)
        return self._local

    def _global(self, frame, event, arg):
        if frame.f_code.co_filename in self.files:
            self.lines[(frame.f_code.co_filename, frame.f_code.co_firstlineno)].add(self.current)
            return self._local
        return None

    def start(self):
        import threading
        sys.settrace(self._global)
        threading.settrace(self._global)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        t = time.monotonic()
        yield
        self.seconds[item.nodeid] += time.monotonic() - t

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        self.current = item.nodeid.split("::")[0]
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        self.current = item.nodeid
        yield
        self.current = item.nodeid.split("::")[0]


def _preload():
    """The heavy imports every test run shares, done once before forking (no clef_prof module)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pytest  # noqa: F401
    try:
        import adbc_driver_sqlite.dbapi  # noqa: F401
    except ImportError:
        pass


def run_pytest(tree: Path, args: list[str], timeout: float, log: Path, plugin=None) -> tuple[str, float]:
    """Run pytest in a forked child in `tree`: 'passed', 'failed' or 'timeout', and the seconds."""
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:                                       # the child
        code = 3
        try:
            os.setpgid(0, 0)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(tree)
            sys.path.insert(0, str(tree))
            if plugin is not None:
                plugin.start()
            code = int(pytest.main(args, plugins=[plugin] if plugin else []))
            if plugin is not None:
                sys.settrace(None)
                with open(log.with_suffix(".json"), "w") as f:
                    json.dump({"lines": [[k[0], k[1], sorted(v)] for k, v in plugin.lines.items()],
                               "seconds": plugin.seconds}, f)
        except BaseException:                          # noqa: BLE001 - anything: report it, never return
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = t0 + timeout
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                # pytest: 0 passed, 1 failed, 2 interrupted (a collection error); < 0 a crash (a signal)
                out = "passed" if code == 0 else "failed" if code in (1, 2) or code < 0 else "error"
                return out, time.monotonic() - t0
            if time.monotonic() > deadline:
                _kill_group(pid)
                return "timeout", time.monotonic() - t0
            time.sleep(0.05)
    except BaseException:                              # Ctrl-C: the child's group goes too
        _kill_group(pid)
        raise


def _kill_group(pid: int):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        time.sleep(0.2)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# -------------------------------------------------------------------------------------------------
# the pass


def module_tests(rel: str) -> list[str]:
    """The test paths of a module: its MODULE_TESTS entry (the first pattern that matches)."""
    import fnmatch

    return next((list(ts) for pat, ts in MODULE_TESTS.items() if fnmatch.fnmatch(rel, pat)), [])


def target_files(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        full = ROOT / p
        if full.is_dir():
            out += sorted(str(f.relative_to(ROOT)) for f in full.rglob("*.py") if f.name != "__init__.py")
        elif full.is_file():
            out.append(str(full.relative_to(ROOT)))
        else:
            sys.exit(f"mutate: no such module or folder: {p}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", default=list(DEFAULT_TARGETS), help="modules or folders to mutate")
    ap.add_argument("--tests", nargs="+", help="the test paths every mutant may run (default: each module's own, "
                    "MODULE_TESTS)")
    ap.add_argument("--wide", action="store_true", help="every test under tests/ that ran the line (slow)")
    ap.add_argument("-m", "--mark", default=DEFAULT_MARK, help="pytest -m expression of the selection")
    ap.add_argument("--timeout", type=float, default=3.0,
                    help="a mutant times out after this many times its tests' baseline seconds (+60 s: on a busy machine a slow run is not a hang)")
    ap.add_argument("--slow", type=float, default=30.0,
                    help="tests slower than this (s, baseline) are left out of the mutant runs")
    ap.add_argument("--kinds", help="only these mutation kinds (comma-separated)")
    ap.add_argument("--sample", type=float, help="run this share (0-1] of each module's mutants, a seeded random "
                    "subset: an estimate of the kill rate in less time")
    ap.add_argument("--seed", type=int, default=21, help="the seed of --sample")
    ap.add_argument("--rerun", nargs="+", help="skip the mutants an earlier --json result (FILE or FILEl) killed or timed out "
                    "(tests are only added, so they stay killed): run the survivors and the mutants it lacks")
    ap.add_argument("--shard", help="K/N: only every N-th mutant from the K-th (0-based), so that N passes on "
                    "N cores split one module; their --json results combine with --report")
    ap.add_argument("--drop-failing", action="store_true", help="leave out, and name, the tests that fail "
                    "without any mutation (another machine's packages), instead of stopping")
    ap.add_argument("--save-baseline", metavar="FILE", help="write the traced baseline (which tests ran each "
                    "line of the targets, and each test's seconds) here")
    ap.add_argument("--baseline-only", action="store_true", help="stop after the baseline (with --save-baseline: "
                    "trace the suite in parts on several cores, one --tests part a pass)")
    ap.add_argument("--load-baseline", nargs="+", metavar="FILE", help="use these saved baselines, merged, "
                    "instead of tracing one (they must have traced these targets in this tree)")
    ap.add_argument("--line", type=int, help="only mutants on this line (with one target file)")
    ap.add_argument("--equivalent", default=str(EQUIVALENT), help="JSON list of known-equivalent mutants")
    ap.add_argument("--json", help="write every mutant and its outcome here (and to JSON+'l' a line each as it goes)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--show-survivors", action="store_true", help="print the diff of each survivor")
    ap.add_argument("--markdown", action="store_true", help="with --report: each module's equivalent and "
                    "surviving mutants as docs/mutation.md lists them")
    ap.add_argument("--report", nargs="+", metavar="JSON",
                    help="print the report of earlier --json results (JSON or JSONL; a later file's outcome of a "
                         "mutant replaces an earlier one's) with the current equivalent list, running nothing")
    a = ap.parse_args(argv)
    if a.report:
        return report_from(a.report, a.equivalent, a.show_survivors, a.markdown, a.json)

    files = target_files(a.targets)
    muts: list[Mutant] = []
    for rel in files:
        muts += mutants_of(ROOT / rel, rel)
    if a.kinds:
        muts = [m for m in muts if m.kind in set(a.kinds.split(","))]
    if a.line:
        muts = [m for m in muts if m.line == a.line]
    # the sample first, then --rerun's filter: a rerun of a sampled pass runs that sample's survivors
    if a.sample:
        import random
        rng = random.Random(a.seed)
        muts = [m for rel in files for m in (lambda ms: sorted(rng.sample(ms, max(1, round(a.sample * len(ms)))),
                                                                key=ms.index) if ms else [])(
            [m for m in muts if m.path == rel])]
    if a.rerun:
        done = {(e["path"], e["before"].strip(), e["after"].strip()) for e in _entries(a.rerun)
                if e["status"] in ("killed", "timeout")}
        muts = [m for m in muts if m.key not in done]
    if a.shard:
        k, _, n = a.shard.partition("/")
        if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
            sys.exit(f"mutate: --shard {a.shard!r}: give K/N with 0 <= K < N")
        muts = muts[int(k)::int(n)]
    if a.list:
        for m in muts:
            print(f"{m.path}:{m.line} [{m.kind}] {m.before.strip()}  ->  {m.after.strip()}")
        print(f"{len(muts)} mutants")
        return 0
    focus = {rel: [t for t in module_tests(rel) if (ROOT / t).exists()] for rel in files}
    if a.tests or a.wide:
        focus = {rel: list(a.tests or ["tests"]) for rel in files}
    if not all(focus.values()):
        sys.exit(f"mutate: no tests for {', '.join(r for r, t in focus.items() if not t)}; name them with --tests")
    a.tests = list(dict.fromkeys(t for ts in focus.values() for t in ts))
    equivalent = load_equivalent(a.equivalent)

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # once: a second one must not cut the clean-up
        raise KeyboardInterrupt         # SIGTERM as Ctrl-C: the child's group ended, the copy removed

    signal.signal(signal.SIGTERM, on_term)
    tmp = Path(tempfile.mkdtemp(prefix="clef-mutate-"))
    # one pytest temp folder for every run, which pytest empties at each start: left to itself,
    # each forked run made a new /tmp/pytest-of-USER/pytest-N with its copies of captures, and a
    # pass of a few hundred mutants filled the disk (71 GB here)
    base_args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", a.mark, "-W", "ignore",
                 f"--basetemp={tmp / 'pytest'}"]
    tree = copy_tree(tmp / "tree")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    os.environ["CLEF_TEST_CAPTURES"] = str(tmp / "captures")     # decompressed once, by the baseline
    (tmp / "captures").mkdir()
    sys.dont_write_bytecode = True
    started = time.monotonic()
    try:
        _preload()
        if not a.load_baseline:
            print(f"mutate: {len(muts)} mutants in {len(files)} files; baseline run of {' '.join(a.tests)} "
                  f"(-m {a.mark!r}), traced ...", flush=True)
        full = {str(tree / f) for f in files}
        tracer = Tracer(full)
        log = tmp / "baseline.log"
        if a.load_baseline:
            traced, secs = _merged_baselines(a.load_baseline), 0.0
            stale = [f for f in files if traced["sources"].get(f) != _digest(tree / f)]
            if stale:
                print(f"mutate: the saved baseline did not trace these sources as they are now: {', '.join(stale)}; "
                      "trace it again", file=sys.stderr)
                return 2
            base_args += [x for t in traced["failing"] for x in ("--deselect", t)]
        else:
            status, secs = run_pytest(tree, base_args + a.tests, 3600, log, tracer)
            # pytest's summary: "FAILED nodeid - message" (a parametrized id may hold spaces)
            failing = sorted(set(re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", log.read_text(), re.M)))
            if status != "passed" and a.drop_failing and failing:
                print(f"mutate: left out, failing without any mutation: {', '.join(failing)}", flush=True)
                base_args += [x for t in failing for x in ("--deselect", t)]
                tracer = Tracer(full)
                status, secs = run_pytest(tree, base_args + a.tests, 3600, log, tracer)
            else:
                failing = []
            if status != "passed":
                print(log.read_text()[-3000:])
                print("mutate: the selection fails without any mutation; fix that first", file=sys.stderr)
                return 2
            traced = json.loads(log.with_suffix(".json").read_text())
            traced["lines"] = [[str(Path(f).relative_to(tree)), ln, t] for f, ln, t in traced["lines"]]
            traced["failing"] = failing
            traced["sources"] = {f: _digest(tree / f) for f in files}
        if a.save_baseline:             # a traced part, or the merge of --load-baseline's parts
            Path(a.save_baseline).write_text(json.dumps(traced))
        if a.baseline_only:
            return 0
        tsecs: dict[str, float] = traced["seconds"]
        slow = sorted(t for t, x in tsecs.items() if x > a.slow)
        fsecs: dict[str, float] = defaultdict(float)
        for t, x in tsecs.items():
            if t not in slow:
                fsecs[t.split("::")[0]] += x
        cover: dict[tuple[str, int], set[str]] = {}
        by_file: dict[str, set[str]] = defaultdict(set)
        for rel, ln, tests in traced["lines"]:
            t = set(tests) - {"<import>"} - set(slow)
            cover[(rel, ln)] = t | ({"<import>"} & set(tests))
            by_file[rel] |= {x.split("::")[0] for x in t}
        print(f"mutate: baseline passed in {secs:.0f} s; left out of mutant runs (slower than {a.slow:g} s): "
              f"{', '.join(slow) or 'none'}", flush=True)
        deselect = [x for t in slow for x in ("--deselect", t)]

        for i, m in enumerate(muts, 1):
            if m.key in equivalent:
                m.status, m.why = "equivalent", equivalent[m.key]
                continue
            span = range(m.line, m.line + max(1, m.before.count("\n")))
            mine = tuple(focus[m.path])
            hit = {t for ln in span for t in cover.get((m.path, ln), ()) if t.startswith(mine)}
            # a line run only at import, or only in a subprocess: the module's test files that run it
            hit = hit or {t for t in by_file[m.path] if t.startswith(mine)}
            if not hit:
                m.status = "uncovered"
                continue
            files_hit = {t for t in hit if "::" not in t}
            tests = sorted((t for t in hit if t.split("::")[0] not in files_hit or t in files_hit),
                           key=lambda t: fsecs.get(t, tsecs.get(t, 1.0)))      # fastest first: -x stops sooner
            m.tests = tests
            budget = 60 + a.timeout * sum(fsecs.get(t, tsecs.get(t, 1.0)) for t in tests)
            dest = tree / m.path
            original = dest.read_text()
            dest.write_text(m.source)
            try:
                st, m.seconds = run_pytest(tree, base_args + ["-x"] + deselect + tests, budget, tmp / "mutant.log")
            finally:
                dest.write_text(original)
            m.status = {"failed": "killed", "passed": "survived"}.get(st, st)
            if a.json:                  # one line a mutant, as it goes: a long pass can be read while it runs
                with open(a.json + "l", "a") as fh:
                    fh.write(json.dumps(m.record()) + "\n")
            if m.status == "error":
                m.why = (tmp / "mutant.log").read_text()[-500:]
            mark = {"killed": ".", "survived": "S", "timeout": "T", "error": "E"}[m.status]
            print(mark, end="" if i % 80 else f" {i}/{len(muts)}\n", flush=True)
    except KeyboardInterrupt:
        print("\nmutate: interrupted; partial results below", file=sys.stderr)
    finally:
        if a.json and not a.baseline_only:  # first: a pass stopped at a deadline may not get to the end
            Path(a.json).write_text(json.dumps([m.record() for m in muts], indent=1))
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    report(muts, a.show_survivors, time.monotonic() - started)
    return 0


def _entries(files: list[str]) -> list[dict]:
    """The mutants of earlier --json results: FILE (a JSON list) or FILEl (a line each; a cut last line left out)."""
    entries = []
    for f in files:
        try:
            text = Path(f).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"mutate: {f}: cannot read it ({exc.strerror if isinstance(exc, OSError) else exc})")
        if text.lstrip().startswith("["):
            entries += json.loads(text)
            continue
        lines = [x for x in text.splitlines() if x]
        for i, x in enumerate(lines):
            try:
                entries.append(json.loads(x))
            except ValueError:
                if i < len(lines) - 1:
                    raise SystemExit(f"mutate: {f}: line {i + 1} is not JSON")
                print(f"mutate: {f}: its last line is cut (the pass stopped while writing it); left out",
                      file=sys.stderr)
    return entries


def _merged_baselines(files: list[str]) -> dict:
    """Saved baselines of parts of the suite as one: each line's tests joined, each test's seconds kept."""
    lines: dict[tuple[str, int], set[str]] = defaultdict(set)
    seconds: dict[str, float] = {}
    failing: set[str] = set()
    sources: dict[str, str | None] = {}
    for f in files:
        part = json.loads(Path(f).read_text())
        for rel, ln, tests in part["lines"]:
            lines[(rel, ln)].update(tests)
        seconds.update(part["seconds"])
        failing.update(part.get("failing", ()))
        for rel, digest in part.get("sources", {}).items():     # parts of other sources: none of them counts
            sources[rel] = digest if sources.get(rel, digest) == digest else None
    return {"lines": [[rel, ln, sorted(t)] for (rel, ln), t in lines.items()], "seconds": seconds,
            "failing": sorted(failing), "sources": sources}


def _digest(path: Path) -> str:
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_equivalent(path: str | None) -> dict:
    if not path or not Path(path).exists():
        return {}
    return {(e["file"], e["before"].strip(), e["after"].strip()): e["why"] for e in json.loads(Path(path).read_text())}


def report_from(files: list[str], equivalent: str | None, show: bool, markdown: bool = False,
                merged: str | None = None) -> int:
    eq = load_equivalent(equivalent)
    by_key: dict = {}
    for f in files:
        # a mutant is its text edit, not its line (lines move as the module is edited between passes);
        # the same edit on several lines of one module is told apart by its order in the module
        seen: dict = defaultdict(int)
        for e in sorted(_entries([f]), key=lambda e: (e["path"], e["line"])):
            m = Mutant(e["path"], e["line"], e["kind"], e["before"], e["after"], status=e["status"],
                       seconds=e.get("seconds", 0.0), tests=e.get("tests", []), why=e.get("why", ""))
            nth = seen[(m.key, m.kind)]
            seen[(m.key, m.kind)] += 1
            if not m.status:            # not run (a pass stopped first): no outcome to replace another's
                continue
            if m.key in eq:
                m.status, m.why = "equivalent", eq[m.key]
            by_key[(m.key, m.kind, nth)] = m
    # only the mutants the modules still have: an edit of a line changed or removed since is stale
    current = set()
    for path in {k[0][0] for k in by_key}:
        seen = defaultdict(int)
        for m in mutants_of(ROOT / path, path) if (ROOT / path).exists() else []:
            current.add((m.key, m.kind, seen[(m.key, m.kind)]))
            seen[(m.key, m.kind)] += 1
    stale = [k for k in by_key if k not in current]
    for k in stale:
        del by_key[k]
    if stale:
        print(f"mutate: {len(stale)} results left out: their edits are no longer in the modules", file=sys.stderr)
    muts = list(by_key.values())
    if merged:                          # the combined outcomes as one result file
        Path(merged).write_text(json.dumps([m.record() for m in sorted(muts, key=lambda m: (m.path, m.line))],
                                           indent=1))
    if markdown:
        return survivors_markdown(muts)
    report(muts, show, sum(m.seconds for m in muts))
    return 0


def survivors_markdown(muts: list[Mutant]) -> int:
    """Per module, its equivalent mutants (with why) and its survivors, as docs/mutation.md lists them."""
    def one(m: Mutant) -> str:
        cut = lambda t: t.strip().replace("`", "'")[:90] + ("…" if len(t.strip()) > 90 else "")
        return f"{m.line} `{cut(m.before)}` → `{cut(m.after)}`"

    for path in sorted({m.path for m in muts}):
        mine = sorted((m for m in muts if m.path == path), key=lambda m: (m.line, m.after))
        eq = [m for m in mine if m.status == "equivalent"]
        left = [m for m in mine if m.status in ("survived", "uncovered")]
        print(f"### `{path}`\n")
        if eq:
            print("Equivalent (left out of the rate):\n")
            print("\n".join(f"- {one(m)}: {m.why}" for m in eq) + "\n")
        if left:
            print("Surviving (not equivalent; no test yet):\n")
            print("\n".join(f"- {one(m)}{' (no test runs it)' if m.status == 'uncovered' else ''}" for m in left) + "\n")
        if not eq and not left:
            print("Every mutant killed.\n")
    return 0


def report(muts: list[Mutant], show: bool, seconds: float):
    """The table per module (killed, survived, timeout, uncovered, equivalent, kill rate) and the survivors."""
    cols = ("killed", "survived", "timeout", "uncovered", "equivalent", "error")
    rows = defaultdict(lambda: dict.fromkeys(cols, 0))
    for m in muts:
        if m.status in cols:
            rows[m.path][m.status] += 1
    tot = dict.fromkeys(cols, 0)
    print("| module | mutants | killed | survived | timeout | uncovered | equivalent | error | kill rate |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def line(name, r):
        n = sum(r.values())
        judged = n - r["equivalent"] - r["error"]
        rate = f"{100 * (r['killed'] + r['timeout']) / judged:.0f}%" if judged else "—"
        print(f"| {name} | {n} | " + " | ".join(str(r[c]) for c in cols) + f" | {rate} |")

    for path in sorted(rows):
        line(f"`{path}`", rows[path])
        for c in cols:
            tot[c] += rows[path][c]
    line("**all**", tot)
    print(f"\n(kill rate: killed + timeout over the mutants not known to be equivalent, errors left out; {seconds / 60:.1f} min)")
    left = [m for m in muts if m.status in ("survived", "uncovered")]
    if left:
        print(f"\n{len(left)} surviving mutants:")
        for m in left:
            print(f"  {m.path}:{m.line} [{m.kind}]{' (no test runs it)' if m.status == 'uncovered' else ''}: "
                  f"{m.before.strip()[:100]}  ->  {m.after.strip()[:100]}")
            if show:
                print("    " + m.diff().replace("\n", "\n    "))


if __name__ == "__main__":
    sys.exit(main())
