"""The test suite's own rules (tests/conftest.py): what keeps its timings honest on a shared
machine."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import TEST_LOCKS

TRY_EXCLUSIVE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("taken")
except BlockingIOError:
    print("held by another")
"""


def test_the_machine_lock_is_held_host_wide(tmp_path_factory):
    """Every test holds the machine lock shared while it runs (an `exclusive` one, alone): in
    a folder of the host's, not of this pytest session's, so that a process outside this
    session (another pytest run, a benchmark) cannot take it exclusively meanwhile."""
    path = TEST_LOCKS / "machine.lock"
    session = tmp_path_factory.getbasetemp().parent  # (all of this session's workers')
    assert path.is_file() and not path.resolve().is_relative_to(session.resolve())
    out = subprocess.run([sys.executable, "-c", TRY_EXCLUSIVE, str(path)], check=True,
                         capture_output=True, text=True).stdout
    assert out == "held by another\n"


@pytest.mark.exclusive
def test_an_exclusive_test_holds_it_alone():
    path = TEST_LOCKS / "machine.lock"
    out = subprocess.run([sys.executable, "-c", TRY_EXCLUSIVE.replace("LOCK_EX", "LOCK_SH"),
                          str(path)], check=True, capture_output=True, text=True).stdout
    assert out == "held by another\n"
