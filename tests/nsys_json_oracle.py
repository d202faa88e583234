"""nsys' Python samples read by hand from a JSON export (`nsys export --type json`), sharing no
code with clef_prof.analyze.read.nsyspy: the tests' oracle for the two layouts nsys writes."""
from __future__ import annotations

import base64
import html
import json
import struct
from pathlib import Path


def decode(json_path: Path) -> list[tuple[int, int, list[tuple[str, str, int, int, int]]]]:
    """(time, thread, frames) of each Python sample mark, by struct.unpack of its payload in the
    layout of the nsys that wrote it. 2023.4: header uint32 flags, uint32 1, uint32 count,
    padding, and the thread is minus the mark's Category (a Python-thread ordinal); 2025.3: uint32
    flags, uint32 0, uint32 kind, uint32 count, and the thread is the OS thread id in the mark's
    GlobalTid. Each frame: (function, file, line, function string id, file string id), innermost
    first, the texts unescaped as nsys escapes them (`&lt;module&gt;`)."""
    with open(json_path) as fh:
        table = json.loads(fh.readline())["data"]
        out = []
        for line in fh:
            ev = json.loads(line)
            e = ev.get("NvtxEvent") or {}
            if ev.get("Type") != 34 or "BinaryData" not in (e.get("Payload") or {}):
                continue
            raw = base64.b64decode(e["Payload"]["BinaryData"][0]["Data"])
            _flags, word1, w2, w3 = struct.unpack_from("<IIII", raw, 0)
            n = w2 if word1 == 1 else w3
            assert word1 in (0, 1) and len(raw) == 16 + 24 * n and ("Category" in e) == (word1 == 1)
            frames = [struct.unpack_from("<QQQ", raw, 16 + 24 * i) for i in range(n)]
            who = -int(e["Category"]) if word1 == 1 else int(e["GlobalTid"]) & 0xFFFFFF
            out.append((int(e["Timestamp"]), who,
                        [(html.unescape(table[f]), html.unescape(table[fl]), ln, f, fl) for f, fl, ln in frames]))
    return out
