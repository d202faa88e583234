"""Safe file handling for every command: inputs must be regular files (a FIFO or device would
block or mislead), and outputs never replace an input or a non-regular file and appear only
when complete (written to a temporary file in the target folder, renamed on success)."""
from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
import urllib.parse

from .errors import ClefError, shown


def readonly_uri(path) -> str:
    """An SQLite URI that opens `path` read-only and immutable: no journal, WAL index or lock file
    is ever made beside it (an export in WAL mode would otherwise get -wal and -shm files); the
    path is percent-quoted, since '?', '#' and '%' in a folder name would otherwise end it."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


def check_regular(path, what: str = "input") -> None:
    """Refuse a path that is missing, a folder, or not a regular file, without opening it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ClefError(f"{shown(path)}: no such file") from None
    except OSError as exc:
        raise ClefError(f"{shown(path)}: cannot read the {what} ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ClefError(f"{shown(path)}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ClefError(f"{shown(path)}: not a regular file (a FIFO, socket or device); give the {what} as a file")


def check_output(path, inputs=()) -> None:
    """Refuse an output path that is an input (through any link or path spelling), an existing
    non-regular file (a device, a FIFO, a folder), or in a folder that does not exist."""
    path = os.fspath(path)
    real = os.path.realpath(path)
    for src in inputs:
        src = os.fspath(src)
        same = os.path.realpath(src) == real
        if not same and os.path.exists(path) and os.path.exists(src):
            with contextlib.suppress(OSError):
                same = os.path.samefile(src, path)
        if same:
            raise ClefError(f"{shown(path)}: is an input of this command ({shown(src)}); refusing to write over it")
    if os.path.lexists(path):
        try:
            st = os.stat(path)
        except OSError:
            raise ClefError(f"{shown(path)}: a dangling link; refusing to write through it") from None
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise ClefError(f"{shown(path)}: {kind}; refusing to write over it")
    folder = os.path.dirname(real) or "."
    if not os.path.isdir(folder):
        raise ClefError(f"{shown(path)}: the folder {shown(os.path.dirname(path) or '.')} does not exist")


@contextlib.contextmanager
def _term_as_interrupt():
    """While writing, SIGTERM raises KeyboardInterrupt, so the temporary file is removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def atomic_output(path, inputs=()):
    """Yield a temporary path in the output's folder; on success it is renamed to `path`, on any
    failure or interruption (Ctrl-C, SIGTERM) it is removed and nothing appears at `path`."""
    path = os.fspath(path)
    check_output(path, inputs)
    real = os.path.realpath(path)
    with _term_as_interrupt():
        tmp = None
        try:
            # the name is chosen, and held in `tmp`, before the file exists: Ctrl-C or SIGTERM
            # right after its creation still finds it to remove (a signal mask would not do: it
            # holds signals back in this thread only, and another one takes them)
            for _ in range(100):
                tmp = os.path.join(os.path.dirname(real) or ".",
                                   f".{os.path.basename(real)}.{os.urandom(4).hex()}.tmp")
                try:
                    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                    break
                except FileExistsError:     # another's (a name of 32 random bits): never removed here
                    tmp = None
                    continue
                except OSError as exc:
                    tmp = None
                    raise ClefError(f"{shown(path)}: cannot write ({exc.strerror or exc})") from None
            else:
                tmp = None
                raise ClefError(f"{shown(path)}: cannot write (no free temporary name beside it)")
            yield tmp
            os.chmod(tmp, 0o644)
            os.replace(tmp, real)
        except BaseException:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
            raise


def write_text(path, text: str, inputs=()) -> None:
    """Write `text` to `path` through atomic_output."""
    with atomic_output(path, inputs) as tmp:
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise ClefError(f"{shown(path)}: cannot write ({exc.strerror or exc})") from None
