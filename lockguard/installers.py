"""The packaging tools lockguard runs beside its own code: where uv is, what pip is configured
with (uv reads none of pip's configuration, so the venv builds pass it on), and running one of
them. Shared by the resolver (locks/resolve.py) and the environment builds (envs/venv.py), so
neither imports the other.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from lockguard.allowlist import UV_PASSED, install_env
from lockguard.errors import LockguardError
from lockguard.files import scratch_dir, write_text


class ToolError(LockguardError):
    """A packaging tool that could not be run, or did not finish in time."""


def find_uv() -> str | None:
    """The uv executable: on PATH, or installed beside this interpreter (a venv whose bin/ is
    not on PATH, as `.venv/bin/python -m lockguard` runs)."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


def pip_config_as_uv_args(*, constraints: bool = True, index_url: bool = True) -> list[str]:
    """pip's index options, as uv arguments (uv reads none of pip's configuration).

    The venv backend installs with uv from the same places pip would; it leaves out the
    constraint files (uv refuses an unpinned constraint under --require-hashes, and a lock's
    exact pins leave a constraint nothing to choose) and, when the lock names its own index,
    pip's index url (pip's requirements file wins over its configuration)."""
    values = pip_config()
    args: list[str] = []
    if values.get("no-index", "").lower() in {"1", "true", "yes", "on"}:
        args.append("--no-index")
    for url in _split(values.get("index-url", ""))[:1] if index_url else []:
        args += ["--index-url", url]
    for url in _split(values.get("extra-index-url", "")):
        args += ["--extra-index-url", url]
    for link in _split(values.get("find-links", "")):
        args += ["--find-links", link]
    for constraint in _split(values.get("constraint", "")) if constraints else []:
        args += ["--constraint", constraint]
    if args:
        # pip picks the best version across all indexes; uv's default stops at the first index
        # that has the package, which could hide a newer version elsewhere.
        args += ["--index-strategy", "unsafe-best-match"]
    return args


def _split(value: str) -> list[str]:
    return value.split()  # pip takes several values of one option whitespace-separated


@functools.cache
def pip_config() -> dict[str, str]:
    """pip's effective settings for `pip install`: env vars over [install] over [global].

    Asking pip costs a second (it imports itself twice over), which every environment build
    with uv would pay; so the answer is kept in lockguard's cache with what it was read from
    (every configuration file pip looked at, existing or not, with its size and mtime, the PIP_*
    variables and those that move the files, pip's version) and reused while all of that is
    unchanged."""
    import json

    from lockguard.cache import cache_root, ensure_dir

    memo = cache_root() / "tools" / "pip-config.json"
    try:
        kept = json.loads(memo.read_text(encoding="utf-8"))
        if kept["source"] == _pip_config_source(kept["files"]):
            return dict(kept["values"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:  # the two questions at once
        asked = pool.submit(run_tool, [sys.executable, "-m", "pip", "config", "debug"],
                            timeout=60, what="pip config debug")
        values = _ask_pip_config()
        debug = asked.result()
    if values is not None and debug.returncode == 0:
        files = re.findall(r"^\s+(/.*), exists: (?:True|False)$", debug.stdout, re.M)
        try:
            ensure_dir(memo.parent)
            write_text(memo, json.dumps({"source": _pip_config_source(files), "files": files,
                                         "values": values}, indent=1))
        except (OSError, LockguardError):
            pass  # asked again next time
    return values or {}


def _pip_config_source(files: list[str]) -> list:
    from importlib.metadata import PackageNotFoundError, version

    def stat(path: str) -> list[int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns]

    try:
        pip = version("pip")
    except PackageNotFoundError:
        pip = None
    moving = ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "VIRTUAL_ENV")
    env = sorted([k, v] for k, v in os.environ.items() if k.startswith("PIP_") or k in moving)
    return [sys.executable, pip, env, [[f, stat(f)] for f in files]]


def _ask_pip_config() -> dict[str, str] | None:
    import ast

    proc = run_tool([sys.executable, "-m", "pip", "config", "list"], timeout=60, what="pip config")
    if proc.returncode != 0:
        return None
    layers: dict[str, dict[str, str]] = {"global": {}, "install": {}, ":env:": {}}
    for line in proc.stdout.splitlines():
        key, sep, raw = line.partition("=")
        section, _, option = key.rpartition(".")
        if not sep or section not in layers:
            continue
        try:
            value = ast.literal_eval(raw)  # pip prints values with repr()
        except (ValueError, SyntaxError):
            value = raw
        layers[section][option] = str(value)
    merged: dict[str, str] = {}
    for section in ("global", "install", ":env:"):
        merged.update(layers[section])
    return merged


def drop_uv_settings(env: dict[str, str]) -> list[str]:
    """Remove from `env` the UV_* variables that could change what uv installs (all but
    allowlist.UV_PASSED); their names, sorted (for a line saying so)."""
    dropped = sorted(k for k in env if k.startswith("UV_") and k not in UV_PASSED)
    for name in dropped:
        del env[name]
    return dropped


def uv_settings_note(dropped: list[str]) -> str:
    return (f"not passed to uv: {', '.join(dropped)} (settings that would change what a lock "
            "installs; uv installs from pip's index settings)")


def run_tool(cmd: Sequence[str], *, timeout: float, what: str, cwd: Path | None = None,
             error: type[LockguardError] = ToolError,
             env_changes: Mapping[str, str | None] | None = None,
             ) -> subprocess.CompletedProcess[str]:
    """A packaging tool's command through the one process runner; stdout and stderr as text
    (each capped by the runner, which keeps the head and the end where errors are); its
    failure to run as `error`. `env_changes` are applied to the tool's environment last: a
    value sets the variable, None removes it."""
    from lockguard import process

    env = install_env()  # the allowlist: no CI secret reaches a resolver's build code
    drop_uv_settings(env)
    # Never wait on a credentials prompt or print upgrade nags into the captured output.
    env.setdefault("PIP_NO_INPUT", "1")
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    for name, value in (env_changes or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    with scratch_dir("cmd") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        try:
            done = process.run(list(cmd), log=out, stderr_log=err, timeout=timeout, env=env,
                               cwd=cwd)
        except process.ProcessError as exc:
            raise error(f"{what}: {exc}") from None
        if done.timed_out:
            raise error(f"{what} did not finish within {timeout:.0f} s")
        return subprocess.CompletedProcess(
            list(cmd), done.code if done.code is not None else 1,
            out.read_text(encoding="utf-8", errors="replace"),
            err.read_text(encoding="utf-8", errors="replace"))
