"""TOML as every reader of it here parses it: the standard library's tomllib from Python 3.11,
its backport tomli (a dependency there) on 3.10."""

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, loads
else:  # pragma: no cover - Python 3.10 (tests/test_python310.py)
    from tomli import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "loads"]
