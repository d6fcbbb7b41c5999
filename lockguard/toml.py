"""TOML as every reader of it here parses it (the standard library's tomllib from Python 3.11,
its backport tomli, a dependency there, on 3.10), and the one quoter of a TOML string the
writers use."""

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, loads
else:  # pragma: no cover - Python 3.10 (tests/test_python_versions.py)
    from tomli import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "loads", "string"]


def string(text: str) -> str:
    """`text` as a TOML basic string: JSON's escapes, which TOML shares, non-ASCII kept as it
    is, and DEL escaped too (JSON writes it raw; TOML forbids it)."""
    import json

    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")
