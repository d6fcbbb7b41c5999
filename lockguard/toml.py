"""TOML as every reader of it here parses it (the standard library's tomllib from Python 3.11,
its backport tomli, a dependency there, on 3.10), and as every writer writes it: tomli_w
(`dumps` for a document, `string` for one value where the writer lays the lines out itself)."""

import re
import sys

import tomli_w

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, loads
else:  # pragma: no cover - Python 3.10 (tests/test_python_versions.py)
    from tomli import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "comment", "dumps", "loads", "string"]


def dumps(document: dict) -> str:
    """`document` as TOML text (tomli_w: every string escaped as TOML requires)."""
    return tomli_w.dumps(document)


def string(text: str) -> str:
    """`text` as one TOML value (a basic string, non-ASCII kept, control characters and DEL
    escaped), for a writer that lays out its own lines: tomli_w's, as it writes a key's
    value."""
    return dumps({"v": text}).removeprefix("v = ").removesuffix("\n")


def comment(text: str) -> str:
    """`text` as TOML comment lines ("# ..." each, newline-ended): a comment may hold no
    control character but tab, so any other is written as its \\uXXXX escape."""
    def escape(match: re.Match[str]) -> str:
        return f"\\u{ord(match[0]):04x}"

    return "".join("# " + re.sub(r"[\x00-\x08\x0a-\x1f\x7f]", escape, line) + "\n"
                   for line in text.split("\n"))
