"""The per-file result cache (compare's captures, explore's frames): what makes two reads of a path
the same file, and which results it keeps."""
import os

import pytest

from clef_prof.analyze.read.filecache import FileCache

MIB = 1 << 20


def _file(path, size, fill=b"a"):
    path.write_bytes(fill * size)
    return str(path)


def _rewrite_at(path, offset, byte):
    """Change one byte in place and put size and mtime back, as `cp -p` of an edited copy would."""
    st = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(byte)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns


def test_no_key_for_what_cannot_be_read_as_a_file(tmp_path):
    assert FileCache.key(str(tmp_path / "missing.sqlite")) is None
    assert FileCache.key(str(tmp_path)) is None                      # a folder
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    assert FileCache.key(str(fifo)) is None                          # never opened: the read would block
    dangling = tmp_path / "dangling.sqlite"
    dangling.symlink_to(tmp_path / "gone.sqlite")                   # a link to nothing: no key
    assert FileCache.key(str(dangling)) is None



def test_a_change_in_the_first_mib_is_a_new_file_even_with_size_and_mtime_kept(tmp_path):
    path = _file(tmp_path / "a.sqlite", 3 * MIB)
    before = FileCache.key(path)
    for offset in (0, MIB // 2 + 17, MIB - 1):
        _rewrite_at(path, offset, b"b")
        after = FileCache.key(path)
        assert after != before and after[1:3] == before[1:3]
        before = after


def test_only_the_first_mib_is_read(tmp_path):
    """The key's cost is bounded: a byte past the first MiB, with size and mtime kept, is not seen."""
    path = _file(tmp_path / "a.sqlite", 3 * MIB)
    before = FileCache.key(path)
    for offset in (MIB, MIB + MIB // 2, 2 * MIB + 5):
        _rewrite_at(path, offset, b"b")
        assert FileCache.key(path) == before


def test_a_link_and_its_file_are_one_file_and_extras_tell_results_apart(tmp_path):
    path = _file(tmp_path / "a.sqlite", 100)
    link = tmp_path / "link.sqlite"
    link.symlink_to(path)
    assert FileCache.key(str(link)) == FileCache.key(path)
    assert FileCache.key(path)[0] == os.path.realpath(path)
    assert FileCache.key(path, "stages.json", 2) == (*FileCache.key(path), "stages.json", 2)
    assert FileCache.key(path, "a") != FileCache.key(path, "b")
    old = FileCache.key(path)
    _file(tmp_path / "a.sqlite", 101)                                # another size
    assert FileCache.key(path)[1] == 101 and FileCache.key(path) != old


@pytest.mark.parametrize("size", [2, 3, 4])
def test_least_recently_used_goes_first_and_size_results_are_kept(size):
    cache = FileCache(size)
    keys = [("k", i) for i in range(size + 1)]
    for k in keys[:size]:
        cache.put(k, f"v{k[1]}")
    assert all(cache.get(k) == f"v{k[1]}" for k in keys[:size])      # all kept at exactly `size`
    cache.get(keys[0])                                               # the oldest, used again
    cache.put(keys[size], "new")
    assert cache.get(keys[size]) == "new" and cache.get(keys[0]) == "v0"
    dropped = [k for k in keys if cache.get(k) is None]
    assert dropped == [keys[1]]
    assert len([k for k in keys if cache.get(k) is not None]) == size


def test_a_put_of_a_known_key_refreshes_it_and_none_keys_are_never_kept():
    cache = FileCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 3)                                                # "a" now the newest
    cache.put("c", 4)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (3, None, 4)
    cache.put(None, "unreadable")
    assert cache.get(None) is None
    assert (cache.get("a"), cache.get("c")) == (3, 4)
    one = FileCache(1)
    one.put("a", 1)
    one.put("b", 2)
    assert (one.get("a"), one.get("b")) == (None, 2)
    cache.clear()
    assert cache.get("a") is None and cache.get("c") is None
