"""Bytecode of the venv's modules, written by the first run that imports them (stdlib only).

Harness processes run with PYTHONDONTWRITEBYTECODE: a module without a current .pyc is compiled
in memory at every import. A venv is built without compiling what no run may ever import (a
torch venv's 5,400 modules cost 7 s of a 12 s build; `import torch` needs 800 of them), so the
venv backend asks its runs (run.py --bytecode-list) to write the bytecode of what they import,
in the venv's site-packages and nowhere else (not the interpreter's own library, not a user's
script, not a compiler's generated code), and to list the modules they wrote it for. Each is
written as the interpreter always writes it (to a temporary file, then renamed), so runs of
one venv side by side never read half a file. lockguard reads the list after the run
(envs/bytecode.py), as a hint of what later venvs of the same files should compile at build.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from importlib.machinery import SourceFileLoader


def write_in_site_packages() -> list[str]:
    """From now on, write the bytecode of modules imported from the venv's site-packages; the
    list returned fills with their source paths as they are compiled (written or not)."""
    roots = set()
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        roots.update({os.path.join(path, ""), os.path.join(os.path.realpath(path), "")})
    roots = tuple(roots)
    written: list[str] = []
    cache_bytecode = SourceFileLoader._cache_bytecode

    def in_site_packages_only(loader, source_path, bytecode_path, data):
        if not source_path.startswith(roots):
            return None  # not the venv's to keep: compiled in memory, as before
        # Listed whether or not the write succeeded (the interpreter ignores a failed one): in
        # a sandbox the venv is read-only, and lockguard compiles what the list names.
        written.append(source_path)
        return cache_bytecode(loader, source_path, bytecode_path, data)

    SourceFileLoader._cache_bytecode = in_site_packages_only
    sys.dont_write_bytecode = False
    return written


def list_written(path: str, written: list[str]) -> None:
    """Write the source paths of `written` to `path`, one a line (nothing when there are none)."""
    if written:
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("".join(f"{p}\n" for p in written))
