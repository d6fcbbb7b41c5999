"""Bytecode for a venv's modules: every one compiled at build, shared by content where asked.

Harness processes run with PYTHONDONTWRITEBYTECODE, so a module without a current .pyc would be
compiled in memory at every import. A build gives every module of the venv's site-packages its
.pyc, compiled by lockguard with the venv's interpreter isolated and without site (-I -S: no
.pth file of the lock's runs); the venv's manifest (envs/venv.py) lists each .pyc with the
sha256 of its bytes, so a .pyc changed, replaced or removed after the build is damage found at
the venv's next use, as any file of the venv is. No run writes bytecode.

One switch, `share_bytecode` (the config's key, backend_for's argument), says where a .pyc
comes from:

- off: each venv compiles its own modules into its own site-packages (uv's
  `--compile-bytecode`, done by lockguard), nothing shared;
- on (the default, held by tests/test_differential.py): the store (bytecode/<cache tag>/ in
  lockguard's cache) keeps each .pyc lockguard compiled, named
  `<sha256 of the module>-<mtime>-<size>-<sha256 of the .pyc>.pyc`; a build links the stored
  .pyc of each module whose bytes, mtime and size it holds (the mtime and size its header
  names, which uv's links from its cache keep alike) once the .pyc's bytes are those its name
  hashes (one changed through another venv's link is dropped and compiled again), and compiles
  the rest into the venv and keeps them: the second venv of a torch links its 5,400 .pyc.

Sharing is sound: a stored .pyc was compiled by lockguard from the same bytes (an inode number
or a timestamp is no name for content: a restored cache reuses both), by an interpreter of the
same cache tag, its header names the module's mtime and size (what the interpreter checks), and
it is relocatable, since the import system gives a code object the file name of the source it
was loaded for.

What a run can touch of it: a sandboxed run (lockguard/sandbox.py, docs/environments.md) reads
its venv and writes neither the venv nor the store (of lockguard's cache it writes only its
environment's compile cache), so no run changes a venv's .pyc or a stored one. With
`sandbox = "off"`, a run writes what the user running lockguard can: a stored .pyc through its
venv's link, as it can uv's cache, whose files every venv links too; a .pyc so changed fails
the manifest check of each venv that links it (its inode's change time passes the seal) and
the store's own check at the next build. A writer who forges a .pyc and names it by its forged
bytes' hash is not told from lockguard's compile: that writer could rewrite a venv's manifest
as well. (The venv's manifest check runs once per check, beside its first training: a run
without the sandbox that damages a shared .pyc while another venv's trainings of the same
check go on is found by the next check, as a venv file it rewrote would be.)

A module that does not compile (a template with a .py name) is left without bytecode, as uv
leaves it.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import sys
from collections.abc import Iterator
from importlib.util import MAGIC_NUMBER
from pathlib import Path

from lockguard.envs.base import EnvError
from lockguard.envs.installed import site_packages
from lockguard.errors import one_line
from lockguard.files import clean_stale_temps, link_file, sha256_file, write_text
from lockguard.installers import run_logged
from lockguard.probes import CACHE_TAG, COMPILE_BYTECODE

# In lockguard's cache: <cache tag>/<module's sha256>-<mtime>-<size>-<the .pyc's sha256>.pyc
STORE = "bytecode"
# In the venv while lockguard/probes/compile_bytecode.py compiles: [[module, its .pyc], ...].
LIST_FILE = "lockguard-compile.json"
LOG_FILE = "compile.log"


def compile_all(venv: Path, python: str, store_root: Path | None, step) -> tuple[int, int]:
    """Give every module of the venv's site-packages a current .pyc: linked from the store at
    `store_root` where it keeps a sound one of the same bytes, else compiled with the venv's
    interpreter (the venv of `python`) into the venv, and kept in the store. `store_root`
    None (share_bytecode off): every module compiled into the venv, nothing shared. Returns
    (linked, compiled)."""
    tag = _cache_tag(venv, python, step)
    store = None if store_root is None else store_root / tag
    stored: dict[str, str] = {}  # <module sha256>-<mtime>-<size> -> the stored .pyc's name
    if store is not None:
        store.mkdir(parents=True, exist_ok=True)
        clean_stale_temps(store)  # what a killed build left half-kept
        stored = _stored(store)
    missing: list[tuple[str, str, str]] = []  # (module, its .pyc, its key in the store)
    linked = 0
    for module, pyc, st in _modules(venv, tag):
        mtime = int(st.st_mtime) & 0xFFFFFFFF  # as a .pyc header names it
        if tag == sys.implementation.cache_tag and _header(pyc) == _current(mtime, st.st_size):
            continue  # the wheel shipped it, current: its RECORD lists it, the manifest checks it
        key = ""
        if store is not None:
            try:
                key = f"{sha256_file(module)}-{mtime}-{st.st_size}"
            except OSError:
                continue  # gone since the walk: nothing to compile
            if key in stored and _link_sound(store / stored[key], pyc):
                linked += 1
                continue
        missing.append((module, pyc, key))
    if missing:
        _compile(venv, [(module, pyc) for module, pyc, _ in missing], step)
    if store is not None:
        for _, pyc, key in missing:
            if os.path.exists(pyc):  # not kept (no link here): compiled again next time
                link_file(Path(pyc), store / f"{key}-{sha256_file(pyc)}.pyc")
        _prune(store)
    return linked, len(missing)


def _modules(venv: Path, tag: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(module, its .pyc, its stat) of every regular .py file in the venv's site-packages."""
    site = site_packages(venv)
    if site is None:
        return
    for directory, subdirectories, files in os.walk(site):
        subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
        for name in files:
            if not name.endswith(".py"):
                continue
            module = os.path.join(directory, name)
            try:
                st = os.stat(module)
            except OSError:
                continue  # a dangling link: nothing to compile
            if stat.S_ISREG(st.st_mode):  # else not a module's file: nothing to compile
                pyc = os.path.join(directory, "__pycache__", f"{name[:-3]}.{tag}.pyc")
                yield module, pyc, st


def _stored(store: Path) -> dict[str, str]:
    """{<module sha256>-<mtime>-<size>: the file's name} of the .pyc files the store keeps."""
    try:
        names = os.listdir(store)
    except OSError:
        return {}
    return {name[:-4].rpartition("-")[0]: name for name in names if name.endswith(".pyc")}


def _link_sound(kept: Path, pyc: str) -> bool:
    """Link the stored `kept` at `pyc` if its bytes are those its name hashes; a stored .pyc
    changed since it was kept (written through a venv's link) is removed. Whether it was
    linked."""
    try:
        sound = sha256_file(str(kept)) == kept.name[:-4].rpartition("-")[2]
        if not sound:
            os.unlink(kept)
    except OSError:
        return False
    if not sound:
        return False
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    return link_file(kept, Path(pyc))


def _cache_tag(venv: Path, python: str, step) -> str:
    """The interpreter's cache tag (cpython-311), asked of the venv's own unless it is ours."""
    if python == sys.executable:
        return sys.implementation.cache_tag
    code, tail = run_logged(CACHE_TAG.argv(str(venv / "bin" / "python")), venv / LOG_FILE, step)
    if code != 0 or not tail or not tail[-1].strip():
        raise EnvError(one_line(f"{python}: cannot tell its bytecode's cache tag: "
                                f"{tail[-1] if tail else f'exit code {code}'}"))
    return tail[-1].strip()


def _header(pyc: str) -> bytes | None:
    """The first 16 bytes of `pyc`; None when there is no such file (b"" when it is there but
    cannot be read: a directory, no permission)."""
    try:
        with open(pyc, "rb") as f:
            return f.read(16)
    except FileNotFoundError:
        return None
    except OSError:
        return b""


def _current(mtime: int, size: int) -> bytes:
    """The header this interpreter writes for a module of that mtime and size (its magic
    number, the timestamp mode): a .pyc that starts so is current."""
    return MAGIC_NUMBER + struct.pack("<III", 0, mtime, size & 0xFFFFFFFF)


def _compile(venv: Path, pairs: list[tuple[str, str]], step) -> None:
    """Compile each (module, its .pyc) of `pairs` with the venv's interpreter (-I -S)."""
    listed = venv / LIST_FILE
    write_text(listed, json.dumps(pairs))
    code, tail = run_logged(COMPILE_BYTECODE.argv(str(venv / "bin" / "python"), str(listed)),
                            venv / LOG_FILE, step)
    if code != 0:
        raise EnvError(one_line(f"{venv}: could not compile its modules' bytecode: "
                                f"{tail[-1] if tail else f'exit code {code}'}"))
    listed.unlink()


def _prune(store: Path) -> None:
    """Drop the stored .pyc files that no venv links any more (a venv removed, rebuilt)."""
    try:
        entries = list(os.scandir(store))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.name.endswith(".pyc") and entry.stat().st_nlink == 1:
                os.unlink(entry.path)
        except OSError:
            continue
