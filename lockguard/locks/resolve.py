"""Resolving locks: pip-tools (default) or uv, and proposals of upgrades.

All resolver I/O lives here and runs as subprocesses (`run_tool`, which
lockguard.locks.outdated also uses to ask pip's index): pip-tools has no supported Python API,
and uv is a binary. Every public function raises `ResolveError`, whose `str()` is one line the CLI
prints before exiting with 2.

Which pip-tools, which pip
--------------------------
pip-compile's output depends on the pip it drives (the resolver, the hash and marker handling,
how the header is written), and pip-tools supports only a window of pip versions. A lock must not
change because the machine that made it had another pip installed. So lockguard runs one known
pair, `PIP_TOOLS_VERSION` with `PIP_VERSION` (and the rest of pip-tools' dependencies pinned,
`TOOL_REQUIREMENTS`), in a tool virtualenv of its own:

    ${LOCKGUARD_CACHE:-~/.cache/lockguard}/tools/pip-tools-<ver>-pip-<ver>-py<X.Y>-<interp>/

It is created once with the interpreter running lockguard (so markers such as python_version
evaluate as they do for the user), installed with the user's own pip configuration (indexes,
proxies, certificates), and then reused. A `.complete` marker is written last, so an interrupted
bootstrap is rebuilt rather than used; an flock serialises two lockguards bootstrapping at once.
The current interpreter is used instead when it already has exactly that pair, and
LOCKGUARD_PIP_TOOLS_PYTHON names an interpreter to use as is (pre-provisioned or offline images).

The lock format
---------------
Both resolvers write the same file: pip-compile's header (the `#    pip-compile ...` command line
that Renovate and Dependabot read and re-run, followed by a line naming the lockguard command
that wrote it), the index options from the pip configuration, then `name==version` pins with
`--hash` lines and `# via` annotations. The resolvers run with `--no-header` and lockguard writes
the header itself, so it names the real output path even though the resolver wrote a temp file.

pip's configuration (pip.conf, PIP_* variables) decides where packages come from, and
`pip install` applies its constraint files. pip-compile reads the indexes from it but ignores the
constraint files; uv reads none of it. With `use_pip_config` (the default) lockguard passes the
constraint files to pip-compile, and the index urls, find-links and constraint files to uv (with
pip's best-version-across-indexes strategy), so both resolvers see the same packages and the
lock installs with the same pip. (This machine's pip caps torch through a constraint file:
without this, pip-compile pins a torch that `pip install` here then refuses.)

Atomicity
---------
The resolver writes into a temporary directory, seeded with the existing lock (that is how
pip-compile keeps unrelated pins). Only a successful resolve is moved over the output, with
os.replace from the same directory: a failed or interrupted resolve leaves the old lock as it was,
byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from lockguard import installers
from lockguard.errors import LockguardError, printable
from lockguard.installers import ToolError, find_uv, pip_config_as_uv_args
from lockguard.files import scratch_dir, write_text
from lockguard.locks.parser import parse_lock

PIP_TOOLS_VERSION = "7.5.2"
PIP_VERSION = "25.2"
# The whole closure, so the tool env is the same everywhere (click releases have broken
# pip-tools before). Markers cover the Pythons lockguard supports (>=3.10).
TOOL_REQUIREMENTS: tuple[str, ...] = (
    f"pip=={PIP_VERSION}",
    f"pip-tools=={PIP_TOOLS_VERSION}",
    "click==8.1.8",
    "build==1.2.2.post1",
    "pyproject_hooks==1.2.0",
    "packaging==25.0",
    "wheel==0.45.1",
    "setuptools==80.9.0",
    'tomli==2.2.1; python_version < "3.11"',
)

Resolver = Literal["pip-tools", "uv"]
Progress = Callable[[str], None]

RESOLVE_TIMEOUT_S = 1800.0  # a torch+jax+tf resolve from a cold cache takes minutes, not hours
BOOTSTRAP_TIMEOUT_S = 600.0

_PYPI_SIMPLE = "https://pypi.org/simple"


class ResolveError(LockguardError):
    """A lock could not be resolved or written; `str()` is one line saying why."""


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def compile_lock(
    requirements_in: Path,
    output: Path,
    *,
    upgrade_packages: Sequence[str] = (),
    resolver: Resolver = "pip-tools",
    extra_args: Sequence[str] = (),
    progress: Progress | None = None,
    use_pip_config: bool = True,
    timeout: float = RESOLVE_TIMEOUT_S,
) -> Path:
    """Resolve `requirements_in` into a fully pinned, hashed lock at `output`; returns `output`.

    Pins already in `output` are kept unless named in `upgrade_packages` (`P` or `P==V`, any
    specifier), as pip-compile does. `extra_args` go to the resolver unchanged. On any failure
    `output` is left untouched and ResolveError says why.
    """
    output = Path(output)
    return _compile(
        Path(requirements_in),
        output,
        seed=output if output.is_file() else None,
        header_as=output,
        upgrade_packages=upgrade_packages,
        resolver=resolver,
        extra_args=extra_args,
        progress=progress,
        use_pip_config=use_pip_config,
        timeout=timeout,
        invocation=_lock_invocation(Path(requirements_in), output, resolver),
    )


def propose_lock(
    current_inputs: Path,
    current_lock: Path,
    upgrades: Sequence[str],
    cache_dir: Path,
    resolver: Resolver = "pip-tools",
    *,
    progress: Progress | None = None,
    use_pip_config: bool = True,
    timeout: float = RESOLVE_TIMEOUT_S,
    refresh: bool = False,
) -> Path:
    """Resolve a candidate lock: `current_inputs` with `upgrades` applied, other pins kept.

    The candidate is written under `cache_dir/proposals/<key>/<lock name>`, the key being a hash
    of everything that decides it (inputs, current lock, upgrades, resolver and its version, pip's
    index configuration), so asking twice costs nothing. The index is not part of the key: an
    open request such as `jax>=0.10` keeps its first answer until `refresh`. The user's inputs
    and lock are only read.
    """
    current_inputs, current_lock = Path(current_inputs), Path(current_lock)
    for path, what in ((current_inputs, "requirements input"), (current_lock, "lock")):
        if not path.is_file():
            raise ResolveError(f"{path}: the {what} does not exist")
    if not upgrades:
        raise ResolveError("nothing to propose: name at least one upgrade, e.g. torch==2.14.1")
    lock_text = current_lock.read_text(encoding="utf-8")
    pinned = parse_lock(current_lock).by_name
    names = []
    for spec in upgrades:
        name = _requirement_name(spec)
        if name not in pinned:
            raise ResolveError(
                f"{spec}: {name} is not pinned in {current_lock}; add it to {current_inputs} first"
            )
        names.append(name)
    if len(set(names)) != len(names):
        raise ResolveError(f"each package can be named once: {' '.join(upgrades)}")

    key = hashlib.sha256()
    for part in (
        current_inputs.read_bytes(),
        lock_text.encode(),
        "\n".join(sorted(upgrades)).encode(),
        resolver.encode(),
        _resolver_identity(resolver).encode(),
        repr(sorted(_pip_config().items()) if use_pip_config else None).encode(),
        f"{sys.version_info[:2]}".encode(),
    ):
        key.update(hashlib.sha256(part).digest())
    target_dir = Path(cache_dir) / "proposals" / key.hexdigest()[:24]
    target = target_dir / current_lock.name

    from lockguard.cache import file_lock  # cheap; deferred to keep `import resolve` minimal

    with file_lock(target_dir.parent / f"{target_dir.name}.lock"):
        if target.is_file() and not refresh:
            return target  # written atomically, so a file that exists is complete
        return _compile(
            current_inputs,
            target,
            seed=current_lock,
            header_as=current_lock,  # the header reads right if the user adopts the candidate
            upgrade_packages=upgrades,
            resolver=resolver,
            extra_args=(),
            progress=progress,
            use_pip_config=use_pip_config,
            timeout=timeout,
            invocation="lockguard propose " + " ".join(shlex.quote(u) for u in upgrades),
        )


# ---------------------------------------------------------------------------------------------
# Compiling
# ---------------------------------------------------------------------------------------------


def _compile(
    src: Path,
    output: Path,
    *,
    seed: Path | None,
    header_as: Path,
    upgrade_packages: Sequence[str],
    resolver: Resolver,
    extra_args: Sequence[str],
    progress: Progress | None,
    use_pip_config: bool,
    timeout: float,
    invocation: str,
) -> Path:
    say = progress or (lambda _msg: None)
    if not src.is_file():
        raise ResolveError(f"{src}: the requirements input does not exist")
    for spec in upgrade_packages:
        _requirement_name(spec)  # a bad spec fails here, not as a resolver traceback
    # The resolver runs where the lock will live, so `# via -r requirements.in` annotations and
    # the header's paths are relative to the lock, as they are when pip-compile runs beside it.
    workdir = header_as.resolve().parent
    src_arg = _relpath(src.resolve(), workdir)
    out_arg = _relpath(header_as.resolve(), workdir)

    if resolver == "pip-tools":
        python = _pip_tools_python(say)
        tool = f"pip-tools {PIP_TOOLS_VERSION}, pip {PIP_VERSION}"
    elif resolver == "uv":
        uv = _uv_binary()
        tool = _uv_version(uv)
    else:
        raise ResolveError(f"unknown resolver {resolver!r}: use pip-tools or uv")

    with scratch_dir("resolve") as tmp:
        scratch = Path(tmp) / output.name
        if seed is not None:
            shutil.copyfile(seed, scratch)  # existing pins are the resolver's preferences
        if resolver == "pip-tools":
            cmd = [python, "-m", "piptools", "compile", "--quiet", "--no-header",
                   "--generate-hashes", "--allow-unsafe", "--resolver=backtracking",
                   "--strip-extras", "--output-file", str(scratch)]
            if use_pip_config:
                # pip-compile reads pip's indexes from its configuration but not its constraint
                # files; `pip install` of the lock would apply them, so the resolve must too.
                for constraint in _pip_config().get("constraint", "").split():
                    cmd += ["--constraint", constraint]
            cmd += [f"--upgrade-package={p}" for p in upgrade_packages]
            cmd += [*extra_args, src_arg]
        else:
            cmd = [uv, "pip", "compile", "--quiet", "--no-header", "--generate-hashes",
                   "--emit-index-url", "--emit-find-links", "--python", sys.executable,
                   "--output-file", str(scratch)]
            if use_pip_config:
                cmd += pip_config_as_uv_args()
            cmd += [f"--upgrade-package={p}" for p in upgrade_packages]
            cmd += [*extra_args, src_arg]
        say(f"resolving {src_arg} with {tool}")
        proc = run_tool(cmd, cwd=workdir, timeout=timeout, what=resolver)
        if proc.returncode != 0:
            reason = trim_resolver_error(proc.stderr + "\n" + proc.stdout)
            # pip applies upgrade requests as hidden constraints and then reports only the
            # bare name ("Cannot install six"): say which request that was.
            involved = [p for p in upgrade_packages
                        if re.search(rf"(?<![\w.-]){re.escape(_requirement_name(p))}(?![\w.-])",
                                     reason.lower().replace("_", "-"))]
            if involved:
                reason += f" (requested upgrade: {', '.join(involved)})"
            raise ResolveError(f"{resolver} could not resolve {src}: {reason}")
        body = scratch.read_text(encoding="utf-8")
        if resolver == "uv":
            body = _normalise_uv_body(body)
        header = _header(out_arg, src_arg, extra_args, tool, invocation)
        write_text(output, header + body.lstrip("\n"))
    say(f"wrote {output}")
    return output


def _header(out_arg: str, src_arg: str, extra_args: Sequence[str], tool: str,
            invocation: str) -> str:
    # pip-compile's own header, word for word: Renovate takes the first "#    " line as the
    # command to re-run and Dependabot reads the options from it. pip-compile sorts its options
    # and leaves out one-off ones (--upgrade-package, --verbose...); so do we.
    args = ["--allow-unsafe", "--generate-hashes", f"--output-file={out_arg}", "--strip-extras"]
    args = sorted(args + _header_options(extra_args))
    command = " ".join(["pip-compile", *(shlex.quote(a) for a in args), shlex.quote(src_arg)])
    from lockguard import __version__

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (
        "#\n"
        f"# This file is autogenerated by pip-compile with Python {python}\n"
        "# by the following command:\n"
        "#\n"
        f"#    {command}\n"
        "#\n"
        f"# Written by lockguard {__version__} ({tool}) via:\n"
        f"#   {invocation}\n"
        "#\n"
    )


_ONE_OFF = {"-v", "--verbose", "-q", "--quiet", "-U", "--upgrade", "-P", "--upgrade-package",
            "--rebuild", "--dry-run", "--cache-dir", "-n", "--no-cache", "--refresh"}
_TAKES_VALUE = {"-P", "--upgrade-package", "--cache-dir", "-c", "--constraint", "-i",
                "--index-url", "--extra-index-url", "-f", "--find-links", "--extra", "--resolver",
                "--pip-args", "-o", "--output-file"}
_LONG = {"-c": "--constraint", "-i": "--index-url", "-f": "--find-links"}


def _header_options(extra_args: Sequence[str]) -> list[str]:
    """extra_args as pip-compile's header spells them: long names, `--opt=value`, no one-offs.

    Renovate refuses a header whose option values are not joined with `=`.
    """
    out: list[str] = []
    args = list(extra_args)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        i += 1
        if not eq and name in _TAKES_VALUE and i < len(args):
            value, eq = args[i], "="
            i += 1
        if name in _ONE_OFF or not name.startswith("-"):
            continue
        out.append(f"{_LONG.get(name, name)}{eq}{value}")
    return out


def _lock_invocation(src: Path, output: Path, resolver: Resolver) -> str:
    parts = ["lockguard", "lock", str(src), "-o", str(output)]
    if resolver != "pip-tools":
        parts += ["--resolver", resolver]
    return " ".join(shlex.quote(p) for p in parts)


def _normalise_uv_body(body: str) -> str:
    # uv always emits the default index; pip-compile emits only a non-default one. Dropping it
    # makes the two resolvers' locks carry the same options (and the same lock hash).
    lines = [ln for ln in body.splitlines(keepends=True) if ln.strip() != f"--index-url {_PYPI_SIMPLE}"]
    return "".join(lines)


def _relpath(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


# ---------------------------------------------------------------------------------------------
# The pinned pip-tools and uv
# ---------------------------------------------------------------------------------------------


def _pip_tools_python(say: Progress) -> str:
    """The interpreter that runs pip-compile: the pinned tool env, created on first use."""
    override = os.environ.get("LOCKGUARD_PIP_TOOLS_PYTHON")
    if override:
        return override
    if _has_pinned_pair():
        return sys.executable
    from lockguard.cache import cache_dir, file_lock

    interp = hashlib.sha256(f"{os.path.realpath(sys.executable)}|{sys.version}".encode()).hexdigest()
    name = (f"pip-tools-{PIP_TOOLS_VERSION}-pip-{PIP_VERSION}"
            f"-py{sys.version_info.major}.{sys.version_info.minor}-{interp[:8]}")
    venv = cache_dir() / "tools" / name
    python = venv / "bin" / "python"
    marker = venv / ".complete"
    if marker.is_file():
        return str(python)
    with file_lock(venv.parent / f"{venv.name}.lock"):
        if marker.is_file():  # another lockguard finished it while we waited
            return str(python)
        say(f"installing pip-tools {PIP_TOOLS_VERSION} with pip {PIP_VERSION} (once) in {venv}")
        shutil.rmtree(venv, ignore_errors=True)  # a half-built env from an interrupted run
        proc = run_tool([sys.executable, "-m", "venv", str(venv)], timeout=BOOTSTRAP_TIMEOUT_S,
                    what="python -m venv")
        if proc.returncode != 0:
            raise ResolveError(f"cannot create the pip-tools env {venv}: {_last_line(proc.stderr)}")
        proc = run_tool([str(python), "-m", "pip", "install", "--quiet", *TOOL_REQUIREMENTS],
                    timeout=BOOTSTRAP_TIMEOUT_S, what="pip install pip-tools")
        if proc.returncode != 0:
            reason = trim_resolver_error(proc.stderr + "\n" + proc.stdout)
            raise ResolveError(f"cannot install pip-tools {PIP_TOOLS_VERSION} into {venv}: {reason}")
        write_text(marker, " ".join(TOOL_REQUIREMENTS) + "\n")
    return str(python)


def _has_pinned_pair() -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pip") == PIP_VERSION and version("pip-tools") == PIP_TOOLS_VERSION
    except PackageNotFoundError:
        return False


def _uv_binary() -> str:
    uv = find_uv()
    if uv is None:
        raise ResolveError("--resolver uv needs the uv command (pip install uv)")
    return uv


def _uv_version(uv: str) -> str:
    proc = run_tool([uv, "--version"], timeout=60, what="uv --version")
    words = proc.stdout.split()  # "uv 0.13.9 (x86_64-unknown-linux-gnu)"
    return " ".join(words[:2]) if len(words) >= 2 else "uv"


def _resolver_identity(resolver: Resolver) -> str:
    if resolver == "uv":
        uv = find_uv()
        return _uv_version(uv) if uv else "uv (missing)"
    return f"pip-tools {PIP_TOOLS_VERSION} pip {PIP_VERSION}"


def _pip_config() -> dict[str, str]:
    """pip's configuration (installers.pip_config), its failures as ResolveError."""
    try:
        return installers.pip_config()
    except ToolError as exc:
        raise ResolveError(str(exc)) from None


def run_tool(cmd: Sequence[str], *, timeout: float, what: str,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A resolver command (installers.run_tool), its failures as ResolveError."""
    return installers.run_tool(cmd, timeout=timeout, what=what, cwd=cwd, error=ResolveError)


# ---------------------------------------------------------------------------------------------
# Resolver errors, trimmed to what matters
# ---------------------------------------------------------------------------------------------

_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_SPEC_REQ = re.compile(r"SpecifierRequirement\('((?:[^'\\]|\\.)*)'\), parent=(None|\w+\('([^']*)')")
_DIST_FILE = re.compile(r"/([A-Za-z0-9_.]+?)-(\d[A-Za-z0-9_.!+]*?)(?:-[^/#]*)?\.(?:whl|tar\.gz|zip)")


def trim_resolver_error(text: str) -> str:
    """The resolver's own reason in one line, without tracebacks, warnings or version walls."""
    text = printable(text)  # resolvers colour their errors; only the words are wanted
    lines = [ln.rstrip() for ln in text.splitlines()]

    # uv: "error: No solution found ..." then "  cause: Because ..." (older) or "  ╰─▶ Because".
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(("cause:", "╰─▶", "Caused by:")):
            cause = [stripped.split(":", 1)[1] if stripped.startswith(("cause:", "Caused by:"))
                     else stripped.removeprefix("╰─▶")]
            cause += [ln.strip() for ln in lines[i + 1:] if ln.startswith("  ") and ln.strip()]
            return _one_line(" ".join(c.strip() for c in cause))
    uv_errors = [ln.strip()[len("error:"):].strip() for ln in lines if ln.strip().startswith("error:")]

    # pip: "ERROR: ..." lines carry the reason; the traceback below them only repeats it.
    pip_errors = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("ERROR: "):
            pip_errors.append(_short_versions(stripped[len("ERROR: "):]))
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
        return _one_line(reason)
    if uv_errors:
        return _one_line("; ".join(uv_errors))
    for pattern in ("No matching distribution", "Could not find a version", "conflict",
                    "Error:", "error:"):
        for line in lines:
            if pattern in line:
                return _one_line(_short_versions(line.strip()))
    return _one_line(_last_line(text) or "the resolver failed without saying why")


def _short_versions(line: str) -> str:
    def shorten(match: re.Match[str]) -> str:
        versions = [v.strip() for v in match.group(1).split(",") if v.strip()]
        if len(versions) <= 5:
            return match.group(0)
        return f"(from {len(versions)} versions: {versions[0]} ... {', '.join(versions[-4:])})"

    if "(from versions: none)" in line:
        return line
    return _FROM_VERSIONS.sub(shorten, line)


def _one_line(text: str, limit: int = 600) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip() and not line.startswith(" "):
            return line.strip()
    return ""


# ---------------------------------------------------------------------------------------------
# Requirements
# ---------------------------------------------------------------------------------------------


def _requirement_name(spec: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        return canonicalize_name(Requirement(spec).name)
    except InvalidRequirement:
        raise ResolveError(f"{spec!r} is not a requirement (expected e.g. torch==2.14.1 or jax>=0.10)") from None


__all__ = [
    "BOOTSTRAP_TIMEOUT_S",
    "PIP_TOOLS_VERSION",
    "PIP_VERSION",
    "ResolveError",
    "Resolver",
    "TOOL_REQUIREMENTS",
    "compile_lock",
    "propose_lock",
]
