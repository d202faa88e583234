"""Which captures make up each arm of a comparison: `--arm NAME=PATHS`, record manifests and
`clef-prof ab` folders. Standard library only (the CLI imports it to build its parser).

An arm item names captures as `inputs.resolve` takes them (an export, a record manifest, a
capture folder, an `.nsys-rep`), or a glob of any of these (`runs/main-*.sqlite`).

A positional folder is an `ab` folder: each subfolder holds a `manifest.json` naming its arm in
"arm" and its export in "export" (the folder itself may be one capture folder too).
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

from ..base.errors import ClefError
from ..analyze.read.inputs import MANIFEST, from_manifest, read_manifest, resolve

BASELINE_NAMES = ("main", "baseline", "base", "control", "master")
_GLOB_CHARS = set("*?[")


class CompareError(ClefError):
    """Inputs that cannot be compared: bad arm syntax, missing files, incomparable captures."""


@dataclass(frozen=True)
class CaptureRef:
    """One capture of an arm: the export to analyze and where it was named from."""

    export: str                    # path of the SQLite export
    source: str                    # what the user named: the export, its manifest or its folder
    manifest: dict | None = field(default=None, compare=False, hash=False)

    @property
    def label(self) -> str:
        return self.source


@dataclass
class Arms:
    """Arms in order, the baseline first."""

    names: list[str]
    captures: dict[str, list[CaptureRef]]
    notes: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> str:
        return self.names[0]


def ref(path: str, resolved: tuple[str, dict | None]) -> CaptureRef:
    """The reference of a capture the user named as `path`, resolved to (export, manifest)."""
    return CaptureRef(resolved[0], path, resolved[1])


def resolve_item(item: str) -> list[CaptureRef]:
    """One comma-separated item of --arm: a path or a glob, to capture references."""
    item = item.strip()
    if not item:
        return []
    if _GLOB_CHARS & set(item):
        paths = sorted(glob.glob(item))
        if not paths:
            raise CompareError(f"{item}: no file matches")
    else:
        paths = [item]
    # existence and format of an export are checked by analyze, with its own clear messages
    return [ref(p, resolve(p)) for p in paths]


def parse_arm(spec: str) -> tuple[str, list[CaptureRef]]:
    """`NAME=PATH[,PATH...]` (globs allowed)."""
    name, sep, rest = spec.partition("=")
    name = name.strip()
    if not sep or not name or not rest.strip():
        raise CompareError(f"--arm {spec!r}: expected NAME=CAPTURE[,CAPTURE...] (e.g. --arm main=a.sqlite,b.sqlite)")
    refs = [r for item in rest.split(",") for r in resolve_item(item)]
    if not refs:
        raise CompareError(f"--arm {spec!r}: names no capture")
    return name, refs


def read_ab_folder(folder: str) -> list[tuple[str, CaptureRef]]:
    """(arm, capture) for each capture folder of an `ab` folder, in sorted subfolder order."""
    if not os.path.isdir(folder):
        if folder.endswith(".json") and os.path.isfile(folder):
            return [_armed(folder)]
        raise CompareError(f"{folder}: not a folder written by `clef-prof ab`; name captures with --arm NAME=PATHS")
    found = []
    own = os.path.join(folder, MANIFEST)
    if os.path.isfile(own) and "arm" in read_manifest(own):
        found.append(_armed(own))
    for sub in sorted(os.listdir(folder)):
        m = os.path.join(folder, sub, MANIFEST)
        if os.path.isfile(m):
            found.append(_armed(m))
    if not found:
        raise CompareError(f"{folder}: no capture folder with a {MANIFEST} inside (the layout `clef-prof ab` writes: "
                           f"one subfolder per capture, each with {MANIFEST} naming its arm and export)")
    return found


def _armed(manifest: str) -> tuple[str, CaptureRef]:
    r = ref(manifest, from_manifest(manifest))
    arm = r.manifest.get("arm")
    if not isinstance(arm, str) or not arm:
        raise CompareError(f"{manifest}: the manifest has no \"arm\" key naming its arm")
    return arm, r


def collect(folders: list[str], arm_specs: list[str], baseline: str | None = None) -> Arms:
    """Arms from ab folders and --arm options, merged by name; the baseline first.

    The baseline is `baseline` if given, else the first --arm, else (ab folders only) an arm named
    main/baseline/base/control/master, else the arm of the first capture folder in sorted order.
    """
    order: list[str] = []
    caps: dict[str, list[CaptureRef]] = {}
    notes: list[str] = []

    def add(name: str, ref: CaptureRef) -> None:
        if name not in caps:
            order.append(name)
            caps[name] = []
        real = os.path.realpath(ref.export)
        if any(os.path.realpath(r.export) == real for r in caps[name]):
            notes.append(f"arm {name}: {ref.source} names the same export twice; counted once")
            return
        caps[name].append(ref)

    from_flags: list[str] = []
    for spec in arm_specs:
        name, refs = parse_arm(spec)
        from_flags.append(name)
        for r in refs:
            add(name, r)
    for folder in folders:
        for name, ref in read_ab_folder(folder):
            add(name, ref)

    if baseline is not None:
        if baseline not in caps:
            raise CompareError(f"--baseline {baseline!r}: no such arm (arms: {', '.join(order) or 'none'})")
        first = baseline
    elif from_flags:
        first = from_flags[0]
    else:
        first = next((n for n in BASELINE_NAMES if n in caps), order[0] if order else None)
    if len(order) < 2:
        have = f"only arm {order[0]!r}" if order else "no arm"
        raise CompareError(f"compare needs two arms, {have} given: --arm main=A.sqlite --arm pr=B.sqlite, "
                           "or a folder written by `clef-prof ab`")
    names = [first] + [n for n in order if n != first]
    for n in names:
        caps[n] = _distinct(n, caps[n], notes)
    return Arms(names, {n: caps[n] for n in names}, notes)


def _distinct(arm: str, refs: list[CaptureRef], notes: list[str]) -> list[CaptureRef]:
    """The captures of an arm less byte-identical copies (a copied export, report or Kineto trace is
    the same run, not another one: counted twice it would shrink the interval between runs). A
    Kineto capture is its trace files together (a folder of ranks is a copy only if every file is);
    only files of equal size are hashed."""
    from ..analyze.read import kineto

    def keys(r: CaptureRef) -> list[tuple[str, ...]]:
        traces = kineto.trace_files(r.source) if os.path.exists(r.source) else []
        if traces:
            return [tuple(traces)]
        return [(p,) for p in dict.fromkeys((r.export, r.source)) if os.path.isfile(p) and not p.endswith(".json")]

    by_size: dict[tuple, list[tuple[CaptureRef, tuple[str, ...]]]] = {}
    for r in refs:
        for k in keys(r):
            by_size.setdefault(tuple((os.path.splitext(p)[1], os.path.getsize(p)) for p in k), []).append((r, k))
    seen: dict[tuple, CaptureRef] = {}
    dropped: set[int] = set()
    for group in by_size.values():
        if len({id(r) for r, _ in group}) < 2:
            continue
        for r, k in group:
            digest = tuple(_sha256(p) for p in k)
            if None in digest or id(r) in dropped:
                continue
            first = seen.setdefault(digest, r)
            if first is not r:
                dropped.add(id(r))
                notes.append(f"arm {arm}: {r.source} is a byte-identical copy of {first.source} (the same run, not "
                             "another): counted once")
    return [r for r in refs if id(r) not in dropped]


def _sha256(path: str) -> str | None:
    import hashlib

    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()
