"""The packaging tools lockguard runs beside its own code: where uv is (or why it is needed),
what pip is configured with (uv reads none of pip's configuration, so the venv builds pass it
on), running one of them, and what one said when it failed, in one line. Shared by the
resolver (locks/resolvers/) and the environment backends (envs/venv.py, envs/docker/), so none
of them imports another.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from lockguard import process
from lockguard.allowlist import HARNESS_SETTINGS, UV_PASSED, install_env
from lockguard.cache import cache_root, ensure_dir, cache_dir
from lockguard.errors import LockguardError, last_line, one_line, printable
from lockguard.files import scratch_dir, write_text
from lockguard.progress import show_command
from lockguard.sandbox import Policy, interpreter_prefix

if TYPE_CHECKING:
    from lockguard.sandbox import Sandbox

# One installer run (an environment build, a wheelhouse download): a hung download must not
# hold CI forever.
BUILD_TIMEOUT_S = 3600


class ToolError(LockguardError):
    """A packaging tool that could not be run, or did not finish in time."""


def find_uv() -> str | None:
    """The uv executable: on PATH, or installed beside this interpreter (a venv whose bin/ is
    not on PATH, as `.venv/bin/python -m lockguard` runs)."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


def require_uv(asked: str, error: type[LockguardError] = ToolError, fix: str = "") -> str:
    """The uv executable (find_uv), or `error` saying that `asked` needs it, where it was
    looked for, and the user's ways out (reinstalling lockguard, or `fix`)."""
    uv = find_uv()
    if uv is None:
        raise error(f"{asked} needs the uv command, which is neither beside {sys.executable} "
                    "nor on PATH (it is a dependency of lockguard: reinstall lockguard"
                    + (f", or {fix})" if fix else ")"))
    return uv


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


# The installer options that name where files come from.
SOURCE_OPTIONS = ("--find-links", "-f", "--index-url", "-i", "--extra-index-url")


def local_sources(args: Sequence[str], urls: Sequence[str] = ()) -> list[str]:
    """The folders and files on this machine an installer or resolver given `args` (`--option
    value` or `--option=value`) takes files from: its --find-links and file:// indexes, and
    of `urls` (a pylock.toml's) the file:// ones; absolute, existing, each once. What a
    sandboxed install or resolve is given to read."""
    values = [v for option, v in zip(args, args[1:]) if option in SOURCE_OPTIONS]
    values += [a.split("=", 1)[1] for a in args if a.split("=", 1)[0] in SOURCE_OPTIONS
               and "=" in a]
    found = []
    for value in [*values, *urls]:
        path = unquote(urlsplit(value).path) if value.startswith("file:") else value
        if "://" not in path and os.path.exists(path):
            found.append(os.path.abspath(path))
    return list(dict.fromkeys(found))


def _split(value: str) -> list[str]:
    return value.split()  # pip takes several values of one option whitespace-separated


def pip_config() -> dict[str, str]:
    """pip's effective settings for `pip install`: env vars over [install] over [global]."""
    return dict(_pip_config()[0])


def pip_config_files() -> list[str]:
    """The configuration files pip reads here that exist: what an installer in a sandbox
    (an allowed sdist's build) is given to read of the real HOME."""
    return [f for f in _pip_config()[1] if os.path.isfile(f)]


@functools.cache
def _pip_config() -> tuple[dict[str, str], tuple[str, ...]]:
    """(pip's effective settings, every configuration file pip looks at).

    Asking pip costs a second (it imports itself twice over), which every environment build
    with uv would pay; so the answer is kept in lockguard's cache with what it was read from
    (every configuration file pip looked at, existing or not, with its size and mtime, the PIP_*
    variables and those that move the files, pip's version) and reused while all of that is
    unchanged."""
    memo = cache_root() / "tools" / "pip-config.json"
    try:
        kept = json.loads(memo.read_text(encoding="utf-8"))
        if kept["source"] == _pip_config_source(kept["files"]):
            return dict(kept["values"]), tuple(kept["files"])
    except (OSError, ValueError, KeyError, TypeError):
        pass

    with ThreadPoolExecutor(max_workers=1) as pool:  # the two questions at once
        asked = pool.submit(run_tool, [sys.executable, "-m", "pip", "config", "debug"],
                            timeout=60, what="pip config debug")
        values = _ask_pip_config()
        debug = asked.result()
    files: list[str] = []
    if values is not None and debug.returncode == 0:
        files = re.findall(r"^\s+(/.*), exists: (?:True|False)$", debug.stdout, re.M)
        try:
            ensure_dir(memo.parent)
            write_text(memo, json.dumps({"source": _pip_config_source(files), "files": files,
                                         "values": values}, indent=1))
        except (OSError, LockguardError):
            pass  # asked again next time
    return values or {}, tuple(files)


def _pip_config_source(files: list[str]) -> list:
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
    """The note saying which UV_* variables (drop_uv_settings' list) were withheld from uv and
    why, for the progress line and for an install failure's reason."""
    return (f"not passed to uv: {', '.join(dropped)} (settings that would change what a lock "
            "installs; uv installs from pip's index settings)")


def run_tool(cmd: Sequence[str], *, timeout: float, what: str, cwd: Path | None = None,
             error: type[LockguardError] = ToolError,
             env_changes: Mapping[str, str | None] | None = None,
             sandbox: Sandbox | None = None, reads: Sequence[str] = (),
             writes: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """A packaging tool's command through the one process runner; stdout and stderr as text
    (each capped by the runner, which keeps the head and the end where errors are); its
    failure to run as `error`. `env_changes` are applied to the tool's environment last: a
    value sets the variable, None removes it. Under an active `sandbox` (a resolver, which may
    build an sdist for its metadata: the lock's code) it reads the system, the tool's and
    lockguard's installations and `reads`, writes `writes` and a scratch HOME, and keeps the
    network."""
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
        spec = None
        if sandbox is not None and sandbox.active:
            tool = os.path.abspath(shutil.which(cmd[0]) or cmd[0])
            # The tool's installation (a venv's own folder, and the interpreter its python
            # links to) and lockguard's, whose uv and interpreter a resolver is handed.
            read = (str(Path(tool).parent.parent), interpreter_prefix(tool), sys.prefix,
                    interpreter_prefix(sys.executable), *reads)
            env, spec = sandbox.confine(Path(tmp) / "sandbox", env,
                                        Policy(read=read, write=tuple(writes), network=True))
        try:
            done = process.run(list(cmd), log=out, stderr_log=err, timeout=timeout, env=env,
                               cwd=cwd, sandbox=spec)
        except process.ProcessError as exc:
            raise error(f"{what}: {exc}") from None
        if done.timed_out:
            raise error(f"{what} did not finish within {timeout:.0f} s")
        return subprocess.CompletedProcess(
            list(cmd), done.code if done.code is not None else 1,
            out.read_text(encoding="utf-8", errors="replace"),
            err.read_text(encoding="utf-8", errors="replace"))


def installer_env() -> dict[str, str]:
    """The installers' process environment: the install allowlist (lockguard/allowlist.py:
    what a training sees, and the proxies, certificates, pip and uv settings and credential
    stores an install needs; no CI secret), and one wheel cache per installer under lockguard's
    cache, shared by every env, so a wheel two locks pin is downloaded once (and the CI cache
    of lockguard's folder keeps it). A cache the user chose for the installer is kept."""
    wheels = cache_dir() / "wheels"
    env = install_env()
    env.update(HARNESS_SETTINGS)  # an installer's Python as isolated as the harness's
    drop_uv_settings(env)
    env.setdefault("UV_CACHE_DIR", str(wheels / "uv"))
    env.setdefault("PIP_CACHE_DIR", str(wheels / "pip"))
    # uv hardlinks from its cache when the venvs share its filesystem (they lie beside it) and
    # copies otherwise; copying always would add a torch-sized copy to every build. The
    # manifest check catches an env file changed in place, which a hardlink shares with the
    # cache, and rebuilds that env.
    env.setdefault("UV_LINK_MODE", "hardlink")
    return env


def run_logged(cmd: list[str], log: Path, step, *, env: dict[str, str] | None = None,
               sandbox: dict | None = None) -> tuple[int, list[str]]:
    """Run an installer, its output going to a log file and its latest line to the spinner;
    in `env` (default: installer_env()) and `sandbox` (process.run's: an allowed sdist's
    build). Returns the exit code (non-zero when it could not start or ran past
    BUILD_TIMEOUT_S) and the log's last lines."""
    show_command(cmd)
    try:
        done = process.run(cmd, log=log, timeout=BUILD_TIMEOUT_S,
                           env=installer_env() if env is None else env,
                           header=" ".join(cmd), on_line=step.update, sandbox=sandbox)
    except process.ProcessError as exc:
        return 127, [str(exc)]
    lines = done.output.splitlines()[-40:]
    if done.timed_out:
        return 124, [*lines, f"{cmd[0]}: {done.describe()}"]
    return done.code if done.code is not None else 1, lines


# ---------------------------------------------------------------------------------------------
# What a packaging tool said when it failed, in one line
# ---------------------------------------------------------------------------------------------

_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_SPEC_REQ = re.compile(r"SpecifierRequirement\('((?:[^'\\]|\\.)*)'\), parent=(None|\w+\('([^']*)')")
_DIST_FILE = re.compile(r"/([A-Za-z0-9_.]+?)-(\d[A-Za-z0-9_.!+]*?)(?:-[^/#]*)?\.(?:whl|tar\.gz|zip)")
# pip's noise before the reason: the versions it skipped for another Python.
_PIP_NOISE = "Ignored the following versions"


def tool_reason(output: str, silent: str = "") -> str:
    """An installer's or resolver's own reason (pip, pip-tools, uv) in one line, without
    tracebacks, warnings or version walls: the one trimming of a packaging tool's failure, for
    the resolver and every environment backend; `silent` when the output says nothing."""
    text = printable(output)  # the tools colour their errors; only the words are wanted
    lines = [ln.rstrip() for ln in text.splitlines()]

    # uv: "error: No solution found ..." then "  cause: Because ..." or "  ╰─▶ Because ...".
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(("cause:", "╰─▶", "Caused by:")):
            cause = [stripped.split(":", 1)[1] if stripped.startswith(("cause:", "Caused by:"))
                     else stripped.removeprefix("╰─▶")]
            cause += [ln.strip() for ln in lines[i + 1:] if ln.startswith("  ") and ln.strip()]
            return one_line(" ".join(c.strip() for c in cause), 600)
    # uv without a cause: "error: ..." (or, drawn for a terminal, "× ...").
    uv_errors = [re.sub(r"^(error:|×)\s*", "", ln.strip()) for ln in lines
                 if ln.strip().startswith(("error:", "×"))]

    # pip: "ERROR: ..." lines carry the reason; the traceback below them only repeats it.
    pip_errors = []
    for line in lines:
        stripped = line.strip()
        said = stripped[len("ERROR: "):]
        if stripped.startswith("ERROR: ") and not said.startswith(_PIP_NOISE):
            pip_errors.append(_short_versions(said))
    causes = []
    for line in lines:  # pip-tools swallows pip's "The conflict is caused by:" block; rebuild it
        if "ResolutionImpossible: [" in line:
            for req, parent, parent_text in _SPEC_REQ.findall(line):
                if parent == "None":
                    causes.append(f"you asked for {req}")
                else:
                    dist = _DIST_FILE.search(parent_text or "")
                    who = f"{dist.group(1)} {dist.group(2)}" if dist else "a dependency"
                    causes.append(f"{who} requires {req}")
            break
    if pip_errors:
        reason = "; ".join(dict.fromkeys(pip_errors))
        if causes:
            reason = reason.rstrip(".") + ": " + "; ".join(dict.fromkeys(causes))
        return one_line(reason, 600)
    if uv_errors:
        return one_line("; ".join(uv_errors), 600)
    for pattern in ("No matching distribution", "Could not find a version", "conflict",
                    "Error:", "error:"):
        for line in lines:
            if pattern in line:
                return one_line(_short_versions(line.strip()), 600)
    return one_line(last_line(text, unindented=True) or silent, 600)


def _short_versions(line: str) -> str:
    def shorten(match: re.Match[str]) -> str:
        versions = [v.strip() for v in match.group(1).split(",") if v.strip()]
        if len(versions) <= 5:
            return match.group(0)
        return f"(from {len(versions)} versions: {versions[0]} ... {', '.join(versions[-4:])})"

    if "(from versions: none)" in line:
        return line
    return _FROM_VERSIONS.sub(shorten, line)
