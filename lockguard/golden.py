"""The golden store: golden/<device-class>/<scenario>.json, with provenance, written atomically.

A golden file holds one reference RunResult and where it came from:

    {"schema_version": 1,
     "provenance": {"lock_hash", "inputs_digest", "framework_version", "lockguard_version",
                    "git_commit", "recorded_at", "fingerprint"},
     "result": {... RunResult ...}}

Writes go to a temporary file in the same directory and are renamed over the old file, so a crash
or Ctrl-C during `record` leaves every previous golden intact.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockguard import __version__
from lockguard.errors import LockguardError
from lockguard.results import SCHEMA_VERSION, ResultError, RunResult, parse_result


class GoldenError(LockguardError):
    """A golden file that exists but cannot be used; one line naming the file."""


@dataclass(frozen=True)
class Golden:
    path: Path
    provenance: dict[str, Any]
    result: RunResult


def golden_path(golden_dir: Path, device_class: str, scenario_id: str) -> Path:
    return golden_dir / device_class / f"{scenario_id}.json"


def read_raw(path: Path) -> dict[str, Any] | None:
    """The decoded file, checked for shape only (cheap: no pydantic) — None when absent."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GoldenError(f"{path}:{exc.lineno}: corrupt golden file: {exc.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("result"), dict) \
            or not isinstance(data.get("provenance"), dict):
        raise GoldenError(f"{path}: corrupt golden file: expected 'provenance' and 'result'")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise GoldenError(f"{path}: golden schema_version {data.get('schema_version')!r} is not "
                          f"supported (expected {SCHEMA_VERSION}); re-record it")
    return data


def load(path: Path) -> Golden | None:
    data = read_raw(path)
    return None if data is None else from_raw(path, data)


def from_raw(path: Path, data: dict[str, Any]) -> Golden:
    """A Golden from what read_raw returned: the result validated against RunResult."""
    try:
        result = parse_result(data["result"], f"{path} (result)")
    except ResultError as exc:
        raise GoldenError(f"corrupt golden file: {exc}") from None
    return Golden(path=path, provenance=data["provenance"], result=result)


def write(path: Path, result: RunResult, provenance: dict[str, Any]) -> None:
    """Replace `path` atomically with a golden for `result`."""
    document = {"schema_version": SCHEMA_VERSION,
                "provenance": {**provenance, "lockguard_version": __version__,
                               "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                "result": result.model_dump(mode="json")}
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def git_commit(root: Path) -> str | None:
    """The commit the project is at, for provenance; None outside a git work tree."""
    try:
        import git  # lazy: gitpython costs import time the fast paths do not pay

        return git.Repo(root, search_parent_directories=True).head.commit.hexsha
    except Exception:
        return None
