"""The compile cache trusts only directories nobody else can write (issue 41, item 1).

Whoever can write a cache directory can plant a module under a predictable
key with matching metadata, and so run code as the cache's user.  These tests
plant one (a module whose ``add`` returns 666) the way another user could:
files owned by another uid, or modes that let others write, or a symbolic
link to such a directory.  The victim runs in a fresh process as this user
(root in CI: root must not trust another user's directory either), and must
warn, naming the directory, owner and mode, and compile its own module in a
private directory instead of loading the planted one.  The other tests check
the modes tenure creates: 0700 directories and 0600 files under ``umask 000``.
"""

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tenure.linkers.c import cache
from tests.linkers.c.test_cache import TAG, add_source, load_add_code, run_python

#: a uid that is not this process's: the other local user
ATTACKER_UID = 12345


def evil_source() -> str:
    return add_source(salt="evil").replace("return PyNumber_Add(a, b);",
                                           "return PyLong_FromLong(666);")


def plant(compiledir: Path, scratch: Path) -> Path:
    """A cache in ``compiledir`` whose entry for ``add_source()`` holds the
    evil binary with metadata that matches it: what another user who could
    write the directory would leave.  Returns its entries directory."""
    cache._forget_loaded()   # so that both are built in these directories
    cache.load_module("addmod", add_source(), compiledir=compiledir)
    cache.load_module("addmod", evil_source(), compiledir=scratch)
    entry = cache.entries_dir(compiledir) / cache.cache_key(add_source())
    evil_entry = cache.entries_dir(scratch) / cache.cache_key(evil_source())
    evil_meta = json.loads((evil_entry / "meta.json").read_text())
    meta = json.loads((entry / "meta.json").read_text())
    evil_binary = (evil_entry / evil_meta["module_file"]).read_bytes()
    # A new file, not the mapped one rewritten in place (this process loaded it).
    (entry / "evil.tmp").write_bytes(evil_binary)
    os.replace(entry / "evil.tmp", entry / meta["module_file"])
    meta.update(binary_size=evil_meta["binary_size"], binary_sha256=evil_meta["binary_sha256"])
    (entry / "meta.json").write_text(json.dumps(meta))
    return cache.entries_dir(compiledir)


def give_to(path: Path, uid: int, mode: int) -> None:
    """``path`` and all below it owned by ``uid``, directories ``mode``, files readable."""
    for root, dirs, files in os.walk(path):
        for name in files:
            os.chown(os.path.join(root, name), uid, -1)
            os.chmod(os.path.join(root, name), 0o644)
        for name in dirs:
            os.chown(os.path.join(root, name), uid, -1)
            os.chmod(os.path.join(root, name), mode)
    os.chown(path, uid, -1)
    os.chmod(path, mode)


def victim_loads(compiledir: Path) -> tuple[list[str], str]:
    proc = run_python(load_add_code(compiledir, add_source()))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split(), proc.stderr


@pytest.fixture
def as_root_or_skip():
    if os.geteuid() != 0:
        pytest.skip("giving files to another uid needs root (CI runs as root)")


def _owned_by_another_user(tmp_path):
    compiledir = tmp_path / "cache"
    plant(compiledir, tmp_path / "scratch")
    give_to(compiledir, ATTACKER_UID, 0o755)
    return compiledir, compiledir, f"uid {ATTACKER_UID}", "0o755"


def _writable_by_others(tmp_path):
    compiledir = tmp_path / "cache"
    entries = plant(compiledir, tmp_path / "scratch")
    give_to(entries, os.geteuid(), 0o777)
    return compiledir, entries, "uid 0", "0o777"


def _writable_by_the_group(tmp_path):
    compiledir = tmp_path / "cache"
    plant(compiledir, tmp_path / "scratch")
    give_to(compiledir, os.geteuid(), 0o770)
    return compiledir, compiledir, "uid 0", "0o770"


def _symlink_to_another_users_directory(tmp_path):
    # The victim's own compile directory is fine; the level below is a link
    # out of it, into a directory the attacker owns.
    elsewhere = tmp_path / "attacker"
    entries = plant(elsewhere, tmp_path / "scratch")
    give_to(elsewhere, ATTACKER_UID, 0o755)
    compiledir = tmp_path / "cache"
    compiledir.mkdir(mode=0o700)
    (compiledir / TAG).symlink_to(entries)
    return compiledir, compiledir / TAG, "symbolic link", ""


def _inside_another_users_directory(tmp_path):
    # The attacker owns the parent: they can rename the victim's directory
    # away and put theirs in its place.
    parent = tmp_path / "attacker"
    compiledir = parent / "cache"
    plant(compiledir, tmp_path / "scratch")
    give_to(compiledir, os.geteuid(), 0o700)
    os.chown(parent, ATTACKER_UID, -1)
    os.chmod(parent, 0o755)
    return compiledir, parent, f"uid {ATTACKER_UID}", "0o755"


@pytest.mark.parametrize("setup", [_owned_by_another_user, _writable_by_others,
                                   _writable_by_the_group, _symlink_to_another_users_directory,
                                   _inside_another_users_directory])
def test_a_planted_module_is_not_loaded_from_an_unsafe_cache(cc, tmp_path, as_root_or_skip,
                                                             setup):
    compiledir, culprit, owner, mode = setup(tmp_path)
    out, err = victim_loads(compiledir)
    assert out == ["COMPILED", "RESULT", "42"], err   # its own build, not the planted 666
    assert "CacheWarning" in err and str(culprit) in err
    assert owner in err and mode in err
    assert "private directory" in err


def test_the_warning_comes_once_per_process(cc, tmp_path, as_root_or_skip):
    compiledir, _, _, _ = _writable_by_others(tmp_path)
    proc = run_python(load_add_code(compiledir, add_source()) + textwrap_second_load())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["COMPILED", "RESULT", "42", "COMPILED", "AGAIN", "5"]
    assert proc.stderr.count("CacheWarning") == 1


def textwrap_second_load() -> str:
    return ("module = cache.load_module('addmod', SOURCE.replace('/*  */', '/* 2 */'), "
            "compiledir=COMPILEDIR)\nprint('AGAIN', module.add(2, 3), flush=True)\n")


def test_a_safe_cache_is_used_without_a_warning(cc, tmp_path):
    compiledir = tmp_path / "cache"
    cache._forget_loaded()
    cache.load_module("addmod", add_source(), compiledir=compiledir)
    out, err = victim_loads(compiledir)
    assert out == ["RESULT", "42"] and "Warning" not in err


def test_directories_are_0700_and_files_0600_under_umask_000(cc, tmp_path):
    # Missing parents too: tenure creates them.
    compiledir = tmp_path / "missing" / "parent" / "cache"
    code = f"""
        import os
        os.umask(0)
        from tenure.linkers.c import cache, kernels
        from tenure.linkers.c.compiler import CompileError, make_recipe
        cache.load_module("addmod", {add_source(salt="umask")!r}, compiledir={str(compiledir)!r})
        cache.load_files("pre", "text", make_recipe(()),
                         lambda d: (d / "pre.h").write_text("text"), compiledir={str(compiledir)!r})
        kernels._write_index("0" * 24, {{"name": "x", "entry": "y", "flags": []}},
                             {str(compiledir)!r})
        try:
            cache.load_module("broken", "PyInit_broken oops", compiledir={str(compiledir)!r})
        except CompileError:
            print("FAILED AS EXPECTED")
    """
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert "FAILED AS EXPECTED" in proc.stdout
    paths = [tmp_path / "missing", *sorted((tmp_path / "missing").rglob("*"))]
    kinds = {"index": False, "failed": False, "gch-or-header": False, "binary": False}
    for path in paths:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"
        kinds["index"] |= path.parent.name == "kernel-index"
        kinds["failed"] |= path.parent.name == "failed"
        kinds["gch-or-header"] |= path.name == "pre.h"
        kinds["binary"] |= path.suffix == ".so"
    assert all(kinds.values()), kinds


def test_a_symlinked_file_in_an_entry_is_not_followed(cc, tmp_path):
    # Only this user could put it there, but a link out of the cache must
    # not be read: the entry counts as corrupt and is rebuilt.
    compiledir = tmp_path / "cache"
    cache.load_module("addmod", add_source(salt="link"), compiledir=compiledir)
    entry = cache.entries_dir(compiledir) / cache.cache_key(add_source(salt="link"))
    outside = tmp_path / "outside.json"
    shutil.move(entry / "meta.json", outside)
    (entry / "meta.json").symlink_to(outside)
    proc = run_python(load_add_code(compiledir, add_source(salt="link")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["COMPILED", "RESULT", "42"]
    assert "rebuilt" in proc.stderr
