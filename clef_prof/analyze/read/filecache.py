"""Results kept per input file, keyed on the file's real path, size, mtime and a hash of its
first MiB (so an edited or replaced export is read anew, also one replaced by a copy that keeps
an older mtime: `cp -p`, `rsync -a`, `tar`) plus what else shaped the result; least recently
used dropped."""
from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections import OrderedDict


HEAD = 1 << 20       # bytes hashed from the start of a file (an SQLite header's change counter is in it)


class FileCache:
    """An LRU of up to `size` results; thread-safe. `key(path, *extra)` is None for a path that
    cannot be read or is not a regular file, and such results are not kept."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(path: str, *extra) -> tuple | None:
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):     # a FIFO would block the read
                return None
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                head = hashlib.sha256(fh.read(HEAD)).hexdigest()
        except OSError:
            return None
        return (os.path.realpath(path), st.st_size, st.st_mtime_ns, head, *extra)

    def get(self, key):
        if key is None:
            return None
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key, value) -> None:
        if key is None:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
