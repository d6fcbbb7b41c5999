"""Bytecode for a venv's modules: written by the runs that import them, shared by content.

Harness processes run with PYTHONDONTWRITEBYTECODE, so a module without a current .pyc would be
compiled in memory at every import. uv's `--compile-bytecode` compiled every module of every
venv at build (a torch CPU venv's 5,436 modules: 14 s wall, 24 s of CPU on 2 cores) although a
training imports a fraction of them (`import torch`: about 800), and again for each mix of a
bisection and each lock a test suite pins beside torch, although uv links a wheel's files from
its cache. Here:

- a venv's runs write the bytecode of the venv's modules they are first to import, into its
  site-packages and nowhere else (harness/_lockguard_harness/bytecode.py), and list them: a
  venv's first run pays what its imports compile (a torch.mlp run: 6.1 s against 1.7 s), the
  next ones nothing;
- lockguard takes each listed module's sha256 as a hint (`wanted/` in the store; a list a
  training wrote is only ever a hint, checked to name files of that venv, never bytecode
  taken from it);
- a build links every module's .pyc that the store (bytecode/<cache tag>/) holds, keyed by the
  sha256 of the module's bytes and the mtime and size the .pyc names, and compiles into the
  store the wanted modules it lacks: the second venv of a torch starts as warm as the first.

Sharing is sound: a .pyc from the store was compiled by lockguard from the same bytes (an inode
number or a timestamp is no name for content: a restored cache reuses both), its header names
the module's mtime and size (what the interpreter checks), and it is relocatable, since the
import system gives a code object the file name of the source it was loaded for. A .pyc a run
wrote stays in its own venv, and what a run lists costs lockguard a bounded read and hash.
That is sharing among well-behaved runs, not a wall: a venv's trainings run as the user who
runs lockguard, unsandboxed, so one that sets out to can rewrite a stored .pyc through its own
venv's link (or any file of the cache), as it always could; the docker backend's containers are
the hermetic runs (docs/environments.md).

The compiling runs the venv's interpreter isolated and without site (-I -S), so no .pth file
of the lock's runs at build time, as it did under uv's compile; a worker that dies fails the
build instead of leaving it waiting. A module that does not compile (a template with a .py
name) is left without bytecode, as uv leaves it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import struct
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path

from lockguard.cache import file_lock
from lockguard.envs.base import EnvError
from lockguard.envs.installed import site_packages
from lockguard.errors import LockguardError, one_line
from lockguard.files import ReadError, clean_stale_temps, link_file, read_bytes, write_text
from lockguard.installers import run_logged
from lockguard.probes import CACHE_TAG, COMPILE_BYTECODE
from lockguard.progress import StepHandle

STORE = "bytecode"  # in lockguard's cache: <cache tag>/<sha256>-<mtime>-<size>.pyc and WANTED
WANTED = "wanted"  # in the store: an empty file per sha256 of a module some run imported
RUN_LIST = "bytecode-written.txt"  # a run's list of the modules it wrote bytecode for
RUN_LIST_MAX = 16 << 20  # bytes of a run's list read (a torch.compile run's: about 300 KB)
MODULE_MAX = 64 << 20  # a listed module larger than this is no hint (torch's largest: 1.4 MB)
# What one run's list may cost lockguard, whatever it names: a torch.compile run lists about
# 2,500 modules, 40 MB together.
RUN_LIST_MODULES = 50_000
RUN_LIST_HASHED = 1 << 30
# In the venv while lockguard/probes/compile_bytecode.py compiles: [[module, its .pyc], ...].
LIST_FILE = "lockguard-compile.json"
LOG_FILE = "compile.log"


def link_or_compile(venv: Path, python: str, store_root: Path, step) -> tuple[int, int]:
    """Give the modules in the venv's site-packages a current .pyc: linked from the store where
    a venv compiled the same bytes before, else, for a module some run imported (WANTED),
    compiled with the venv's interpreter (the venv of `python`) and kept in the store; the rest
    are left to the runs that import them. Returns (linked, compiled)."""
    tag = _cache_tag(venv, python, step)
    store = store_root / tag
    store.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(store)  # what a killed build left half-kept
    try:
        wanted = set(os.listdir(store_root / WANTED))
    except OSError:
        wanted = set()
    missing: list[tuple[str, str, Path]] = []  # (module, its .pyc, its place in the store)
    linked = 0
    site = site_packages(venv)
    if site is not None:
        for directory, subdirectories, files in os.walk(site):
            subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
            for name in files:
                if not name.endswith(".py"):
                    continue
                module = os.path.join(directory, name)
                pyc = os.path.join(directory, "__pycache__", f"{name[:-3]}.{tag}.pyc")
                try:
                    st = os.stat(module)
                    if not stat.S_ISREG(st.st_mode):
                        continue  # not a module's file: nothing to compile
                    with open(module, "rb") as f:
                        digest = hashlib.sha256(f.read()).hexdigest()
                except OSError:
                    continue  # a dangling link: nothing to compile
                mtime = int(st.st_mtime) & 0xFFFFFFFF  # as a .pyc header names it
                header = _header(pyc)  # one open says whether a .pyc is there and whose it is
                if tag == sys.implementation.cache_tag and header == _current(mtime, st.st_size):
                    continue  # the wheel shipped it, current: uv's compile would keep it too
                kept = store / f"{digest}-{mtime}-{st.st_size}.pyc"
                if digest not in wanted and header is None and not os.path.exists(kept):
                    continue  # no run imported it yet: the first that does writes its .pyc
                # (A stale .pyc the wheel shipped is replaced now: a run's would change the size
                # of a file its RECORD lists, and the venv would fail its verification.)
                os.makedirs(os.path.dirname(pyc), exist_ok=True)
                if link_file(kept, Path(pyc)):
                    linked += 1
                else:
                    missing.append((module, pyc, kept))
    _compile_and_keep(venv, missing, step)
    _prune(store)
    return linked, len(missing)


def _compile_and_keep(venv: Path, missing: list[tuple[str, str, Path]], step) -> None:
    """Compile each (module, its .pyc, its place in the store) of `missing` and keep the .pyc
    in the store."""
    if missing:
        _compile(venv, [(module, pyc) for module, pyc, _ in missing], step)
        for _, pyc, kept in missing:
            if os.path.exists(pyc):
                link_file(Path(pyc), kept)  # not kept (no link here): compiled again next time


def remember_imported(venv: Path, listed: Path, store_root: Path,
                      compile_with: Path | None = None, lock: Path | None = None) -> int:
    """Mark as wanted the modules of the venv that a run listed in `listed` (it wrote their
    bytecode: harness/_lockguard_harness/bytecode.py), so that the next build installing the
    same files compiles them into the store. The list comes from a training, so it is a hint
    and no more: only a regular .py file inside the venv's site-packages counts (anything else
    is passed over), and what is marked is the sha256 of the file's bytes as lockguard reads
    them. The list is removed. Returns how many were marked; never fails a run (a full disk
    marks fewer).

    `compile_with` (the venv's interpreter): the run was sandboxed and could not write the
    bytecode it listed, so lockguard gives those modules theirs now, linked from the store or
    compiled there, holding the venv's build lock `lock` while it writes into the venv."""
    try:
        # Bounded, and never waiting on a FIFO the run may have left in the list's place.
        text = read_bytes(listed, "bytecode list", RUN_LIST_MAX)
    except ReadError:
        return 0  # the run wrote no bytecode (or no list it could): nothing to remember
    finally:
        with contextlib.suppress(OSError):
            listed.unlink()
    site = site_packages(venv)
    if site is None:
        return 0
    inside = os.path.join(os.path.realpath(site), "")
    wanted = store_root / WANTED
    try:
        wanted.mkdir(parents=True, exist_ok=True)
    except OSError:
        return 0
    seen: set[str] = set()
    marked = hashed = 0
    lacking: list[tuple[str, str]] = []  # (module, sha256) of the marked
    for line in text.decode("utf-8", "surrogateescape").splitlines():
        if (len(seen) >= RUN_LIST_MODULES or hashed >= RUN_LIST_HASHED
                or not line.endswith(".py") or not os.path.isabs(line) or "\0" in line):
            continue
        real = os.path.realpath(line)
        if real in seen or not real.startswith(inside):
            continue
        seen.add(real)
        try:
            data = read_bytes(Path(real), "module", MODULE_MAX)
            hashed += len(data)
            digest = hashlib.sha256(data).hexdigest()
            (wanted / digest).touch()
            marked += 1
            lacking.append((real, digest))
        except (ReadError, OSError, ValueError):
            continue
    if compile_with is not None and lacking:
        with contextlib.suppress(OSError, LockguardError), \
                file_lock(lock) if lock is not None else contextlib.nullcontext():
            _give_bytecode(venv, compile_with, store_root, lacking)
    return marked


def _give_bytecode(venv: Path, python: Path, store_root: Path,
                   modules: list[tuple[str, str]]) -> None:
    """A current .pyc for each of `modules` (path, sha256) that has none: linked from the store
    where it holds one, else compiled (-I -S: no code of the lock's runs) and kept there."""
    silent = StepHandle()  # bytecode given after a run is no step of its own: nothing shown
    tag = _cache_tag(venv, str(python), silent)
    store = store_root / tag
    store.mkdir(parents=True, exist_ok=True)
    missing: list[tuple[str, str, Path]] = []
    for module, digest in modules:
        st = os.stat(module)
        mtime = int(st.st_mtime) & 0xFFFFFFFF
        directory, name = os.path.split(module)
        pyc = os.path.join(directory, "__pycache__", f"{name[:-3]}.{tag}.pyc")
        if tag == sys.implementation.cache_tag and _header(pyc) == _current(mtime, st.st_size):
            continue  # another run's compile, or the build's link, came first
        kept = store / f"{digest}-{mtime}-{st.st_size}.pyc"
        os.makedirs(os.path.dirname(pyc), exist_ok=True)
        if not link_file(kept, Path(pyc)):
            missing.append((module, pyc, kept))
    _compile_and_keep(venv, missing, silent)


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
