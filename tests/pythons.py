"""The CPython versions lockguard promises beyond the one it is tested on, and where to find
them: the floor (pyproject's requires-python) and the newest the frameworks publish wheels for.

An interpreter is `python3.X` on PATH (actions/setup-python puts each version it installs
there; `uv python install` does with its bin folder on PATH) or pyenv's, and counts only once it
answers with its version (pyenv's shim of a version that is not selected does not). .ci/run asks
this module which are missing before it installs them (`python3 tests/pythons.py`): one finder,
for the script and the tests. Stdlib only: .ci/run calls it before lockguard is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

FLOOR = "3.10"
NEWEST = "3.13"
VERSIONS = (FLOOR, NEWEST)


def find(version: str) -> str | None:
    """A CPython `version` (X.Y) interpreter that runs: python3.X on PATH, else pyenv's."""
    candidates = [shutil.which(f"python{version}")]
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found = Path(root).glob(f"versions/{version}.*/bin/python{version}")
    candidates += sorted(str(p) for p in found)
    for exe in filter(None, candidates):
        done = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode == 0 and done.stdout.strip() == version:
            return exe
    return None


if __name__ == "__main__":
    # The versions of VERSIONS (or of the arguments) that no interpreter here answers for.
    print(" ".join(v for v in (sys.argv[1:] or VERSIONS) if find(v) is None))
