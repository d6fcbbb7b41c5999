"""Bytecode for a new venv's modules, shared with the venvs that installed the same files.

uv installs a wheel's files as hard links to one copy in its cache (UV_LINK_MODE=hardlink,
lockguard/installers.py), so the torch that ten venvs pin is one set of inodes; yet
`--compile-bytecode` compiled it again into every venv (a torch CPU venv's 5,436 modules: 14 s
wall, 24 s of CPU on 2 cores): each mix of a bisection, each lock a test suite pins beside torch.
Here a module's .pyc is kept once per source inode in lockguard's cache (bytecode/<cache tag>/),
hard-linked into every venv whose module is that inode, and only what no venv compiled before is
compiled, by the venv's interpreter.

Sharing is sound: a .pyc names its source by the source's mtime and size (the timestamp mode,
which uv writes too), which one inode has once; and it is relocatable, since the import system
gives a code object the file name of the source it was loaded for. A module that is not a hard
link (the venv's own copy) is compiled into its venv alone. A module that does not compile (a
template with a .py name) is left without bytecode, as uv leaves it.
"""

from __future__ import annotations

import os
from pathlib import Path

from lockguard.envs.base import EnvError
from lockguard.errors import one_line
from lockguard.files import link_file, write_text
from lockguard.installers import run_logged

LIST_FILE = "lockguard-compile.txt"  # in the venv while it compiles: module <tab> its .pyc
LOG_FILE = "compile.log"
# Run by the venv's interpreter, isolated and without site (so no .pth file of the lock's runs):
# compiles the listed modules on every core, each to the .pyc named beside it (not where a
# PYTHONPYCACHEPREFIX would put it), in uv's timestamp mode.
# compileall compiles listed files one at a time, and over a directory spends 6 s of a torch
# venv's 19 on passing by the modules whose .pyc was linked.
COMPILE = """
import multiprocessing, py_compile, sys

def compile_one(line):
    module, pyc = line.split("\\t")
    try:
        py_compile.compile(module, cfile=pyc, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    except Exception as exc:  # a module that does not compile is left without bytecode
        return f"{module}: {type(exc).__name__}"

if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        pool = multiprocessing.get_context("fork").Pool()
    except (OSError, ImportError):  # no semaphores here (a container without /dev/shm)
        problems = map(compile_one, lines)
    else:
        problems = pool.imap_unordered(compile_one, lines, chunksize=64)
    for problem in problems:
        if problem:
            print(problem)
"""


def link_or_compile(venv: Path, cache_tag: str, store_root: Path, step) -> tuple[int, int]:
    """Give every module in the venv's site-packages its .pyc (`cache_tag`, e.g. cpython-311):
    linked from the store where a venv compiled the same inode before, else compiled with the
    venv's interpreter and, for a hard-linked module, kept in the store. Returns (linked,
    compiled)."""
    store = store_root / cache_tag
    store.mkdir(parents=True, exist_ok=True)
    missing: list[tuple[str, str, Path | None]] = []  # (module, its .pyc, its place in the store)
    linked = 0
    for site in sorted(venv.glob("lib/python*/site-packages")):
        for directory, subdirectories, files in os.walk(site):
            subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
            for name in files:
                if not name.endswith(".py"):
                    continue
                module = os.path.join(directory, name)
                pyc = os.path.join(directory, "__pycache__", f"{name[:-3]}.{cache_tag}.pyc")
                try:
                    st = os.stat(module)
                except OSError:
                    continue  # a dangling link: nothing to compile
                # Only a hard link's inode outlives this venv as the same file elsewhere.
                kept = store / f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}.pyc" \
                    if st.st_nlink > 1 else None
                if kept is not None and _link(kept, pyc):
                    linked += 1
                else:
                    missing.append((module, pyc, kept))
    if missing:
        listed = venv / LIST_FILE
        write_text(listed, "".join(f"{module}\t{pyc}\n" for module, pyc, _ in missing))
        code, tail = run_logged([str(venv / "bin" / "python"), "-I", "-S", "-c", COMPILE,
                                 str(listed)], venv / LOG_FILE, step)
        if code != 0:
            raise EnvError(one_line(f"{venv}: could not compile its modules' bytecode: "
                                    f"{tail[-1] if tail else f'exit code {code}'}"))
        listed.unlink()
        for _, pyc, kept in missing:
            if kept is not None and os.path.exists(pyc):
                # Atomically: two builds may keep one at once. Not kept: compiled again next time.
                link_file(Path(pyc), kept)
    return linked, len(missing)


def _link(kept: Path, pyc: str) -> bool:
    """Hard-link the stored .pyc as the module's; False if the store has none (or no link can
    be made here: another file system)."""
    try:
        os.makedirs(os.path.dirname(pyc), exist_ok=True)
        os.link(kept, pyc)
        return True
    except FileExistsError:
        return True  # the wheel shipped its own .pyc: the installer's to keep
    except OSError:
        return False
