"""The default backend: one cached virtualenv per lock, installed from wheels only.

Cache layout: $LOCKGUARD_CACHE/venvs/<key>/ where key hashes the lock's canonical hash, the
interpreter, the installer and the build policy (wheels only, or sdists allowed), so a second
record/check on the same lock reinstalls nothing, and an env built under a looser policy is never
found under a stricter one. A build happens under a file lock and is only marked ready
(`lockguard-ready.json`) once the installer succeeded: a killed build is detected and redone by
the next run, and two concurrent checks never install into one venv.

No code from a lock runs on this machine: building an sdist runs its setup.py (or build
backend), so the installer gets `--only-binary :all:` unless the project sets
`allow_sdist = true`. An sdist-only pin fails the build naming its lock line, and a lock's own
`--no-binary` is refused before anything is built. An install that may build sdists runs in the
sandbox (_build_sandbox); a wheels-only install runs no package code and runs bare.

The installer reads the lock as lockguard.locks.writer writes it from the parsed Lock (never
the user's file): with uv, a pylock.toml or uv.lock as a pylock.toml (uv installs the very files
it names), anything else as requirements text.

A cached env is verified at every use, not trusted: beside the marker lies a manifest of
every file each installed distribution's RECORD lists and of every .pyc the build compiled or
linked (envs/bytecode.py), with its size and the sha256 of its bytes at build; `prepare`
checks the marker, `bin/python` and every file's existence, size and change time (one stat per file; benchmarks/bench_venv.py measures it for the torch env) and
rebuilds a damaged env, saying why. A file whose inode changed after the env was sealed (its
ctime, which no process can set back, is past the seal's) is read and hashed: other bytes
than the build's are damage, even of the same size; the same bytes (a cache restored from an
archive, another venv linking the same inode) move the seal forward, so they are read once. The
backend's prepare leaves the stats to the env's first training, which makes them while its
interpreter starts; a damaged env's trainings are killed, the env rebuilt and the trainings
run again, so no result comes from an env that did not pass (bisect, which reads an env's
metadata without a training, checks it first: VenvEnv.checked).

The marker also names the files the lock's distributions installed that run at every start of
the env's interpreter, before any training (.pth files, sitecustomize: `startup_files`), so
that a check can say which changed pin brought one.

Installers run with the install allowlist of lockguard's environment, trainings with the
training allowlist (lockguard/allowlist.py): no CI secret reaches a lock's code.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
import venv as stdlib_venv  # the standard library's, not lockguard.envs.venv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from lockguard.allowlist import training_env
from lockguard.cache import cache_dir, entry
from lockguard.cache_entries import hold, record_use
from lockguard.envs.base import (
    Backend, EnvError, READY, RunRequest, compile_cache_env, compile_cache_for, confined,
    harness_env, interpreter_tag, own_temp_dir, require_writable_cache, run_with,
    variables_identity,
)
from lockguard.envs.bytecode import LOG_FILE as BYTECODE_LOG
from lockguard.envs.bytecode import STORE as BYTECODE_STORE
from lockguard.envs.bytecode import compile_all
from lockguard.envs.compile_cache import compile_cache_dir
from lockguard.envs.installed import site_packages as installed_site_packages
from lockguard.errors import LockguardError, one_line
from lockguard.files import sha256_file, write_bytes, write_text
from lockguard.installers import (
    drop_uv_settings, installer_env, local_sources, pip_config_as_uv_args, pip_config_files,
    require_uv, run_logged, tool_reason, uv_settings_note,
)
from lockguard.locks.installable import require_wheels
from lockguard.locks.model import Lock, Pin
from lockguard.locks.target import target_for
from lockguard.locks.trust import require_trusted
from lockguard.locks.writer import install_form, option_args, pylock_text, requirements_text
from lockguard.progress import QUIET, Progress
from lockguard.results import RunResult

if TYPE_CHECKING:
    from lockguard.sandbox import Sandbox

LOCK_FILE = "lockguard-lock.txt"  # in the env: the lock the installer read, from the parsed Lock
PYLOCK_FILE = "pylock.lockguard.toml"  # the same, when uv installs it as a pylock.toml
MANIFEST = "lockguard-manifest.json"
# 2: each file's sha256 beside its size, and the seal (SEAL) that says when they were checked;
# 3: every .pyc of site-packages listed too, the build's bytecode (envs/bytecode.py)
MANIFEST_FORMAT = 3
BYTECODE_OWNER = "the venv's bytecode"  # the manifest's owner of the .pyc no RECORD lists
SEAL = "lockguard-seal.json"  # {"ctime_ns": N}: every listed file's content checked as of N
PIP_DEBUG_LOG = "pip-debug.log"
ALLOW_HINT = "set allow_sdist = true in [tool.lockguard] to allow it"


def build_policy(allow_sdist: bool) -> str:
    """The build policy's name, in a venv's key and marker."""
    return "sdist-allowed" if allow_sdist else "wheels-only"


# How venvs are built, in their key: 2 since uv gets no UV_* setting that changes what it
# installs (under 1, a UV_CONFIG_FILE could have built a lock's sdist into a "wheels-only" venv);
# 3 since a venv's bytecode is lockguard's (compiled at build, or linked from its store), not
# uv's.
RECIPE = 3


def venv_key(lock: Lock, python: str, installer: str, allow_sdist: bool = False, *,
             tag: str | None = None) -> str:
    """The cache key of `lock`'s venv: the lock's hash, interpreter (`tag`, if asked already),
    installer and policy."""
    tag = tag or interpreter_tag(python)
    recipe = f"{RECIPE}\0{lock.lock_hash}\0{tag}\0{installer}\0{build_policy(allow_sdist)}"
    return hashlib.sha256(recipe.encode()).hexdigest()[:20]


class VenvEnv:
    """A lock's cached venv at `path`, its trainings run with its interpreter."""

    def __init__(self, path: Path, lock_hash: str, compile_cache: Path,
                 startup: dict[str, tuple[tuple[str, bool], ...]] | None = None, *,
                 shared_cache: bool = False,
                 files: _FileCheck | None = None,
                 rebuilt: Callable[[], VenvEnv] | None = None,
                 sandbox: Sandbox | None = None) -> None:
        self.path = path
        self.lock_hash = lock_hash
        self.python = path / "bin" / "python"
        self.label = f"venv {path.name}"
        self.compile_cache = compile_cache
        self.shared_cache = shared_cache  # with venvs whose compilers are pinned alike
        # distribution -> ((file, runs code), ...): see startup_files
        self.startup_files = startup or {}
        self._files = files  # not yet checked against the manifest: checked beside a run
        self._rebuilt = rebuilt  # prepare again: the env rebuilt after the check found damage
        self.sandbox = sandbox  # what its trainings are confined to (None: nothing)
        self.held = None  # the shared lock on it a check holds (cache_entries.hold)
        self._replaced = threading.Lock()
        self._replacement: VenvEnv | BaseException | None = None  # what _rebuilt gave

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        """The harness with the venv's interpreter, its compilers' caches beside the venv (shared
        with the venvs whose compilers are pinned alike: envs/compile_cache.py). It writes no
        bytecode: the build compiled every module's (envs/bytecode.py). Its temporary files go
        with it (base.own_temp_dir)."""
        if self._replacement is not None:  # found damaged by an earlier training
            return self._rebuild().run(request, out_dir)
        compile_cache = str(compile_cache_for(self.compile_cache, request))
        env = own_temp_dir(out_dir, harness_env(compile_cache_env(compile_cache,
                                                                 self.shared_cache)))
        files = self._files
        try:
            return run_with(str(self.python), request, out_dir, env,
                            alongside=None if files is None else lambda: _intact(files),
                            sandbox=self.sandbox, writes=(compile_cache,))
        except _Damaged:
            return self._rebuild().run(request, out_dir)

    def site_packages(self) -> Path | None:
        """Its site-packages, its files checked now (the env rebuilt when one changed): for a
        reader of its metadata that runs no training (bisection)."""
        env = self
        if self._files is not None:
            try:
                _intact(self._files)
            except _Damaged:
                env = self._rebuild()
        return installed_site_packages(env.path)

    def _rebuild(self) -> VenvEnv:
        """The env rebuilt after its file check failed (prepare says why), once for all the
        trainings that found it so: those after the first take its env, or its error."""
        with self._replaced:
            if self._replacement is None:
                assert self._rebuilt is not None
                try:
                    self._replacement = self._rebuilt()
                except BaseException as exc:
                    self._replacement = exc
                    raise
            if isinstance(self._replacement, BaseException):
                raise self._replacement
            return self._replacement


def _intact(files: _FileCheck) -> None:
    problem = files.problem()
    if problem is not None:
        raise _Damaged(problem)


class VenvBackend(Backend):
    """The venv backend: a cached virtualenv per lock (module docstring), built with `python`
    (None: the interpreter running lockguard) and `installer` (uv or pip). A lock is admitted
    only with hashes and an https index unless `allow_unhashed` / `allow_insecure_index` opt
    in (locks/trust.py), and only when each pin has a wheel for that interpreter, or an sdist
    under `allow_sdist` (locks/installable.py). The shortcuts between venvs, each one switch
    (backend_for says who sets them): `share_bytecode`, the .pyc store (envs/bytecode.py);
    `share_compile_caches`, the compilers' caches (envs/compile_cache.py)."""

    def __init__(self, python: str | None = None, installer: str = "uv", *,
                 allow_sdist: bool = False, allow_unhashed: bool = False,
                 allow_insecure_index: bool = False, sandbox: Sandbox | None = None,
                 share_compile_caches: bool = False, share_bytecode: bool = True,
                 project: Path | None = None) -> None:
        self.python = python
        self.project = project  # the folder of the project the checks are of (cache listing)
        self.share_compile_caches = share_compile_caches  # backend_for's
        self.share_bytecode = share_bytecode  # backend_for's
        self.sandbox = sandbox
        self.installer = installer
        self.allow_sdist = allow_sdist
        self.allow_unhashed = allow_unhashed
        self.allow_insecure_index = allow_insecure_index
        self._identity: str | None = None

    def identity(self) -> str:
        """"venv", the interpreter's tag (asked once: another interpreter is a process) and
        the variables its runs see (base.variables_identity)."""
        if self._identity is None:
            self._identity = f"venv {interpreter_tag(self.python or sys.executable)}"
        return f"{self._identity} vars {variables_identity(training_env())}"

    def admit(self, locks: Sequence[Lock]) -> None:
        """A writable cache, then each lock trusted and installable here, in order."""
        require_writable_cache()
        for lock in locks:
            self._admit(lock)

    def _admit(self, lock: Lock) -> None:
        require_trusted(lock, allow_unhashed=self.allow_unhashed,
                        allow_insecure_index=self.allow_insecure_index)
        require_wheels(lock, target_for(self.python), allow_sdist=self.allow_sdist)

    def scope(self, framework: str, device: str) -> str:
        """One venv per lock serves every framework and device in it."""
        return ""

    def prepare(self, lock: Lock | None, framework: str, device: str,
                progress: Progress) -> VenvEnv:
        """The lock's venv (`_prepare`), the lock admitted again first: a backend a flow wraps
        (bisect's) is prepared lock by lock."""
        assert lock is not None, "the venv backend builds a lock's environment"
        self._admit(lock)
        env = _prepare(lock, python=self.python, installer=self.installer,
                      allow_sdist=self.allow_sdist, progress=progress,
                      check_files_beside_first_run=True, sandbox=self.sandbox,
                      share_compile_cache=self.share_compile_caches,
                      share_bytecode=self.share_bytecode)
        # Listed as used by this project now, and held while this process lives: `lockguard
        # cache prune` leaves it alone meanwhile (cache_entries.py).
        record_use(env.path, self.project)
        env.held = hold(env.path)
        return env


def _prepare(lock: Lock, *, python: str | None = None, installer: str = "uv",
            allow_sdist: bool = False, progress: Progress = QUIET,
            check_files_beside_first_run: bool = False,
            sandbox: Sandbox | None = None, share_compile_cache: bool = False,
            share_bytecode: bool = True) -> VenvEnv:
    """Return the env for `lock`, building it first if the cache has no sound one (its .pyc
    linked from the bytecode store where `share_bytecode`, else compiled in it).

    With `check_files_beside_first_run`, a cached env's files are checked while its first
    training starts rather than before (verify's stats in parallel with the interpreter's
    start); a damaged env's trainings are then killed, the env rebuilt once (saying why, as
    here) and the trainings run again in it. A reader of the env's files that starts no
    training asks VenvEnv.site_packages(), which checks them first."""
    python = python or sys.executable
    if installer == "uv":
        _uv()  # a missing uv is known before the lock is waited for
    if not allow_sdist:
        refuse_source_options(lock)
    tag = interpreter_tag(python)
    key = venv_key(lock, python, installer, allow_sdist, tag=tag)
    root = cache_dir() / "venvs"
    path = root / key
    files, problem = None, None

    def ready(at: Path) -> bool:
        nonlocal files, problem
        problem, manifest = _marked_ready(at, lock, allow_sdist)
        if problem is None and check_files_beside_first_run:
            files = _FileCheck(str(at), manifest)
        elif problem is None:
            problem = _manifest_problem(str(at), manifest)
        return problem is None

    def build(at: Path) -> str:
        if at.exists():
            progress.info(one_line(f"Rebuilding the venv of {Path(lock.source).name} "
                                   f"({at}): {problem}"))
        return _build(at, lock, python, installer, allow_sdist, progress, sandbox,
                      share_bytecode)

    # In place: a venv's scripts and pyvenv.cfg name the folder it was made in.
    with entry(path, build, ready=ready, marker=READY, in_place=True,
               what=f"the venv of {Path(lock.source).name} ({path})", tell=progress.info):
        startup = recorded_startup_files(path)
        compile_cache, shared = compile_cache_dir(root, path, key, lock, tag,
                                                  share=share_compile_cache)

    def rebuilt() -> VenvEnv:
        return _prepare(lock, python=python, installer=installer, allow_sdist=allow_sdist,
                        progress=progress, sandbox=sandbox,
                        share_compile_cache=share_compile_cache, share_bytecode=share_bytecode)

    return VenvEnv(path, lock.lock_hash, compile_cache, startup, shared_cache=shared,
                   files=files, rebuilt=rebuilt if files is not None else None,
                   sandbox=sandbox)


def refuse_source_options(lock: Lock) -> None:
    """A lock's own `--no-binary` (or `--only-binary :none:`) would override `--only-binary
    :all:` in pip (options in a requirements file are applied after the command line's), and
    build from source."""
    for kind, option, line in lock.options.lines:
        if kind != "other":
            continue
        name, _, value = option.partition("=")
        # `--only-binary :none:` clears the command line's `:all:` just as `--no-binary` does.
        if (name == "--no-binary" and value != ":none:") or (
                name == "--only-binary" and ":none:" in value.split(",")):
            raise EnvError(one_line(
                f"{lock.source}:{line}: {name} {value} asks for builds from source, which "
                f"would run code from the lock on this machine ({ALLOW_HINT})"))


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------


def _build(path: Path, lock: Lock, python: str, installer: str, allow_sdist: bool,
           progress: Progress, sandbox: Sandbox | None = None,
           share_bytecode: bool = True) -> str:
    """Build the env at `path`; its ready marker's text (cache.entry writes it last, and
    removes the env on any failure, once the failed build's log is kept beside it)."""
    try:
        if path.exists():
            shutil.rmtree(path)  # an earlier build was interrupted, or the env is damaged
        return _install(path, lock, python, installer, allow_sdist, progress, sandbox,
                        share_bytecode=share_bytecode)
    except BaseException as exc:
        log = _keep_failed_log(path)
        if isinstance(exc, OSError):
            raise EnvError(one_line(f"{path}: cannot build the venv of {lock.source}: "
                                    f"{exc.strerror or exc}")) from None
        if isinstance(exc, EnvError) and log is not None:
            raise EnvError(one_line(f"{exc} (log: {log})")) from None
        raise


def _keep_failed_log(path: Path) -> Path | None:
    """The log of a failed build, moved out of the env about to be removed and kept beside it
    (where the venv/uv creation logs are), so that the error can name it; None if none. The
    bytecode's log, where there is one: it comes after a successful install."""
    log = path / BYTECODE_LOG if (path / BYTECODE_LOG).is_file() else path / "install.log"
    kept = path.parent / f"{path.name}.{log.name}"
    try:
        write_bytes(kept, log.read_bytes())  # capped by the process runner: small
        return kept
    except (OSError, LockguardError):
        pass
    return next((p for p in (path.parent / f"{path.name}.uv.log",
                             path.parent / f"{path.name}.venv.log") if p.is_file()), None)


def _install(path: Path, lock: Lock, python: str, installer: str, allow_sdist: bool,
             progress: Progress, sandbox: Sandbox | None, healed: bool = False,
             share_bytecode: bool = True) -> str:
    started = time.perf_counter()
    # Said with -v, and in the error of a failed build (where a dropped index would matter).
    dropped = drop_uv_settings(dict(os.environ)) if installer == "uv" else []
    if dropped:
        progress.detail(uv_settings_note(dropped))
    with progress.step(f"Building venv for {Path(lock.source).name} ({len(lock.pins)} pins, "
                       f"{installer}, {build_policy(allow_sdist)})") as step:
        code, tail = _install_with(installer, path, lock, python, allow_sdist, step, sandbox)
        used = installer
        if (code != 0 and installer == "uv" and any("Hash mismatch" in ln for ln in tail)
                and install_form(lock) == "requirements.txt" and file_sources(lock) > 1):
            # With several indexes, uv takes a release's files from the first index that has
            # the version, even under unsafe-best-match (astral-sh/uv#14000), so a lock
            # hashing another index's wheel of it fails where pip, which chooses among every
            # index's files those the lock hashes, installs. Same pins and hashes either way.
            # From one place (or a pylock.toml's own URL), a mismatch is the lock's own: said
            # at once, no pip rebuild.
            progress.info("  uv took a file the lock does not hash; installing with pip")
            shutil.rmtree(path)
            path.mkdir()
            used = "pip"
            code, tail = _install_with("pip", path, lock, python, allow_sdist, step, sandbox)
        if code != 0:
            sdist = None if allow_sdist else sdist_only_message(lock, used, tail, path)
            if sdist is not None:
                raise EnvError(one_line(sdist))
            reason = tool_reason("\n".join(tail), f"exit code {code}")
            if dropped and used == "uv":
                reason += f" ({uv_settings_note(dropped)})"
            raise EnvError(one_line(f"{lock.source}: {used} could not install the lock: "
                                    f"{reason}"))
        (path / PIP_DEBUG_LOG).unlink(missing_ok=True)
        if used == "uv":  # pip compiled every module as it installed them
            step.update("bytecode (linked where another venv compiled it)" if share_bytecode
                        else "bytecode")
            compile_all(path, python, cache_dir() / BYTECODE_STORE if share_bytecode else None,
                        step)
    try:
        return ready_record(path, lock, python=python, installer=used,
                            allow_sdist=allow_sdist, built_s=time.perf_counter() - started,
                            verify=not healed)
    except DamagedInstall as damage:
        if used != "uv":
            raise
        # uv links installed files from its cache, so one unsandboxed run that rewrote a venv's
        # file in place rewrote the cache's copy, and every venv built from it since. The
        # cache's entries of those distributions go; their archives are fetched again. Should
        # the files still differ then, the wheel's own RECORD is wrong: built as it is.
        progress.info(one_line(f"  {damage}; cleaning uv's cache of them and installing again"))
        with progress.step(f"Cleaning uv's cache of {', '.join(damage.distributions)}") as step:
            code, tail = run_logged([_uv(), "cache", "clean", "--no-config",
                                     *damage.distributions],
                                    path.parent / f"{path.name}.uv-clean.log", step)
        if code != 0:
            raise EnvError(one_line(f"{damage}, and uv could not clean it: "
                                    f"{tool_reason(chr(10).join(tail), f'exit code {code}')}"))
        shutil.rmtree(path)
        return _install(path, lock, python, installer, allow_sdist, progress, sandbox,
                        healed=True, share_bytecode=share_bytecode)


def file_sources(lock: Lock) -> int:
    """How many places the installer may take a release's files from: the index (the lock's,
    else pip's, else PyPI; none under --no-index), extra indexes and find-links, the lock's
    and pip's configuration's."""
    args = option_args(lock) + pip_config_as_uv_args(
        constraints=False, index_url=not lock.options.index_url)
    extra = sum(a in ("--extra-index-url", "--find-links") for a in args)
    return extra + (0 if "--no-index" in args else 1)


def _install_with(installer: str, path: Path, lock: Lock, python: str, allow_sdist: bool,
                  step, sandbox: Sandbox | None) -> tuple[int, list[str]]:
    """Create the venv at `path` and install the lock into it with `installer`: (exit code,
    the output's last lines).

    The lock as its own installer takes it (locks.writer.install_form): with uv, a pylock.toml
    or a uv.lock as a pylock.toml, which uv installs from the very files it names, without an
    index; requirements text and a poetry.lock as requirements. pip reads no pylock.toml."""
    pylock = installer == "uv" and install_form(lock) == "pylock.toml"
    if installer == "uv":
        uv = _uv()
        if python == sys.executable:
            # The host interpreter's venv, made in-process as `python -m venv` makes it
            # (the pip builds' layout): a millisecond, where `uv venv` is a supervised
            # process start on every build.
            stdlib_venv.EnvBuilder(symlinks=os.name != "nt").create(path)
        else:
            code, tail = run_logged([uv, "venv", "--no-config", "--no-python-downloads",
                                     "--python", python, str(path)],
                                    path.parent / f"{path.name}.uv.log", step)
            if code != 0:
                raise EnvError(one_line(f"uv could not create a venv with {python}: "
                                        f"{tail[-1] if tail else f'exit code {code}'}"))
        # --no-config: a project's [tool.uv] or a user's uv.toml (no-binary = [...], another
        # index) must not change what a lock installs, nor let an sdist build run.
        # No --compile-bytecode: the venv's bytecode comes after the install, linked from the
        # venvs that installed the same files (envs/bytecode.py). pip compiles at install time.
        cmd = [uv, "pip", "install", "--no-config", "--python", str(path / "bin" / "python")]
        if not allow_sdist:
            cmd += ["--only-binary", ":all:"]
        if not pylock:  # a pylock.toml names its files' URLs: no index is asked
            # From where pip would install: uv reads none of pip's configuration.
            cmd += pip_config_as_uv_args(constraints=not lock.has_hashes,
                                         index_url=not lock.options.index_url)
    else:
        code, tail = run_logged([python, "-m", "venv", "--clear", str(path)],
                                path.parent / f"{path.name}.venv.log", step)
        if code != 0:
            raise EnvError(f"{python} could not create a venv: "
                           f"{tail[-1] if tail else f'exit code {code}'}")
        cmd = [str(path / "bin" / "python"), "-m", "pip", "install", "--no-input",
               "--disable-pip-version-check", "--progress-bar", "off"]
        if not allow_sdist:
            # The debug log is where pip says which links it skipped as sources: how an
            # sdist-only pin is told apart from one that does not exist.
            cmd += ["--only-binary=:all:", "--log", str(path / PIP_DEBUG_LOG)]
    if lock.has_hashes:
        cmd.append("--require-hashes")
    if pylock:
        lock_file, text = path / PYLOCK_FILE, pylock_text(lock)
    else:
        lock_file, text = path / LOCK_FILE, requirements_text(lock)
    write_text(lock_file, text)
    cmd += ["-r", str(lock_file)]
    if allow_sdist and sandbox is not None and sandbox.active:
        with _build_sandbox(sandbox, path, lock, cmd, installer) as (env, spec):
            return run_logged(cmd, path / "install.log", step, env=env, sandbox=spec)
    return run_logged(cmd, path / "install.log", step)


@contextlib.contextmanager
def _build_sandbox(sandbox: Sandbox, path: Path, lock: Lock, cmd: list[str], installer: str):
    """(environment, sandbox spec) of an install that may build sdists, whose build code is the
    lock's: it writes the venv being built and a scratch folder beside it (removed after:
    HOME, TMPDIR and the installer's caches, private so that no build can plant a file in the
    wheel cache other venvs link from), reads what a training reads plus the installer, the
    lock's local sources and pip's configuration files, and reaches the network, which the
    installer needs (docs/environments.md)."""
    scratch = path.parent / f"{path.name}.build"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        env = installer_env()
        env.update(UV_CACHE_DIR=str(scratch / "uv-cache"),
                   PIP_CACHE_DIR=str(scratch / "pip-cache"))
        env.pop("TMPDIR", None)  # the sandbox gives the build one of its scratch
        # The lock's local sources: the command's, the lock's options', a pylock's file URLs.
        reads = [os.path.dirname(os.path.realpath(cmd[0])),
                 *local_sources([*cmd, *option_args(lock)],
                                [f.url for pin in lock.pins for f in pin.files if f.url])]
        if installer == "pip":
            # pip finds its user configuration below the real HOME, which the sandbox replaces.
            home = os.path.expanduser("~")
            env.setdefault("XDG_CONFIG_HOME", os.path.join(home, ".config"))
            legacy = os.path.join(home, ".pip", "pip.conf")
            if os.path.isfile(legacy):
                env.setdefault("PIP_CONFIG_FILE", legacy)
            reads += pip_config_files()
        env, spec = confined(sandbox, scratch, env, str(path / "bin" / "python"),
                             writes=(str(path),), reads=reads, network=True)
        yield env, spec
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def ready_record(path: Path, lock: Lock, *, python: str, installer: str, allow_sdist: bool,
                 built_s: float, verify: bool = True) -> str:
    """Write the manifest of what is installed and its seal, and return the ready marker's
    text that binds them (cache.entry writes it last: an env without a marker is an unfinished
    build); DamagedInstall first, with `verify`, when a file does not hold what its RECORD
    names."""
    files = build_manifest(path, verify=verify)
    manifest = json.dumps(files, separators=(",", ":"))
    write_text(path / MANIFEST, manifest)
    ready = {"lock_hash": lock.lock_hash, "lock": lock.source, "python": python,
             "installer": installer, "policy": build_policy(allow_sdist),
             "manifest_sha256": hashlib.sha256(manifest.encode()).hexdigest(),
             "startup_files": startup_files(path, files),
             "built_s": round(built_s, 1),
             "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _seal(path, files)
    return json.dumps(ready, indent=1)


def _seal(path: Path, manifest: dict) -> None:
    """Record that every file the manifest lists holds its listed bytes as of now: the
    latest change time among them (a file changed later is hashed again at use)."""
    latest = 0
    for _, directory, names, _ in manifest["files"]:
        for name in names:
            with contextlib.suppress(OSError):
                latest = max(latest, os.stat(os.path.join(path, directory, name)).st_ctime_ns)
    write_text(path / SEAL, json.dumps({"ctime_ns": latest}))


# What a distribution can install that runs at every start of the env's interpreter (site.py,
# before any user code): a .pth file at the top of site-packages (its `import` lines are
# executed, its other lines added to sys.path) and the sitecustomize/usercustomize modules.
# Only files a distribution's RECORD lists count: a venv tool's own (uv's _virtualenv.pth,
# virtualenv's) are not the lock's, and the stdlib venv writes none.
STARTUP_MODULES = ("sitecustomize.py", "usercustomize.py")


def startup_files(path: Path, manifest: dict) -> dict[str, list[list]]:
    """{distribution (canonical name): [[file, runs code], ...]} of the startup files the
    manifest lists; a .pth without an `import` line only adds to sys.path."""
    found: dict[str, list[list]] = {}
    for owner, directory, names, _ in manifest["files"]:
        if owner == "the venv" or not re.fullmatch(r"lib/python[^/]*/site-packages", directory):
            continue
        for name in names:
            if name.endswith(".pth"):
                runs = _pth_runs_code(path / directory / name)
            elif name in STARTUP_MODULES:
                runs = True
            else:
                continue
            distribution = canonicalize_name(owner.rpartition("-")[0] or owner)
            found.setdefault(distribution, []).append([name, runs])
    return {name: sorted(files) for name, files in sorted(found.items())}


def _pth_runs_code(pth: Path) -> bool:
    """Whether site.py executes a line of `pth` (one starting with `import`, as site.py tests)."""
    try:
        lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return True  # unreadable now: assume the worst
    return any(line.startswith(("import ", "import\t")) for line in lines)


def recorded_startup_files(path: Path) -> dict[str, tuple[tuple[str, bool], ...]]:
    """The startup files of a ready env, from its marker (an env built before the marker held
    them: from its manifest)."""
    try:
        ready = json.loads((path / READY).read_text(encoding="utf-8"))
        found = ready.get("startup_files")
        if found is None:
            found = startup_files(path, json.loads((path / MANIFEST).read_bytes()))
        return {str(name): tuple((str(f), bool(runs)) for f, runs in files)
                for name, files in found.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}  # verified a moment ago; a marker changed since is the next check's to find


# What pip and uv say when the only distribution of a pin is an sdist and builds are off.
_PIP_NOT_FOUND = re.compile(r"No matching distribution found for (\S+)")
_PIP_SKIPPED_SOURCE = re.compile(r"Skipping link: No sources permitted for [^:]*: (\S+)")
_UV_NEEDS_BUILD = re.compile(r"Wheels are required for `([^`]+)` because building from source "
                             r"is disabled")


def sdist_only_message(lock: Lock, installer: str, tail: list[str], path: Path) -> str | None:
    """The one-line error for a pin whose only distribution is an sdist, naming its lock line;
    None when the installer failed for another reason."""
    text = "\n".join(tail)
    if installer == "uv":
        names = [canonicalize_name(m) for m in _UV_NEEDS_BUILD.findall(text)]
        candidates = [(name, None) for name in names]
    else:
        sources = _skipped_sources(path / PIP_DEBUG_LOG)
        candidates = []
        for requirement in _PIP_NOT_FOUND.findall(text):
            try:
                name = canonicalize_name(Requirement(requirement).name)
            except InvalidRequirement:
                continue
            candidates += [(name, v) for n, v in sources if n == name]
    for name, version in candidates:
        pins = lock.by_name.get(name, ())
        pin = next((p for p in pins if version is None or p.parsed_version == version), None)
        if pin is not None:
            return _sdist_error(lock, pin)
        if not pins:  # a dependency the lock does not pin (a lock without hashes)
            shown = f"{name}=={version}" if version is not None else name
            return (f"{lock.source}: {shown}, a dependency the lock does not pin, is only "
                    f"available as a source distribution; building it would run its setup.py "
                    f"on this machine ({ALLOW_HINT})")
    return None


def _sdist_error(lock: Lock, pin: Pin) -> str:
    return (f"{lock.source}:{pin.line}: {pin.requirement} is only available as a source "
            f"distribution; building it would run its setup.py on this machine ({ALLOW_HINT})")


def _skipped_sources(debug_log: Path) -> list[tuple[str, Version]]:
    """(name, version) of every sdist pip skipped because sources were not permitted. The
    name comes from the file name: pip checks the format before the project name, so a
    find-links directory's other sdists are listed under the requested project too."""
    try:
        text = debug_log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for url in _PIP_SKIPPED_SOURCE.findall(text):
        filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        try:
            name, version = parse_sdist_filename(filename)
        except (InvalidSdistFilename, InvalidVersion):
            continue
        found.append((str(name), version))
    return found


# ---------------------------------------------------------------------------------------------
# Verifying: the manifest of installed files
# ---------------------------------------------------------------------------------------------


class DamagedInstall(EnvError):
    """Files an install wrote do not hold the bytes their distribution's RECORD names: the
    installer took them from a damaged cache (a hardlinked file a run rewrote, say)."""

    def __init__(self, path: Path, damaged: list[tuple[str, str]]) -> None:
        self.distributions = sorted({owner for owner, _ in damaged})
        first = damaged[0][1]
        more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
        super().__init__(f"{path}: {first}{more} does not hold the bytes its RECORD names "
                         f"({', '.join(self.distributions)}): the installer's cache is damaged")


def build_manifest(path: Path, *, verify: bool = True) -> dict:
    """Every file the RECORDs of the env's distributions list, and every .pyc of its
    site-packages none lists (the build's bytecode, owned by BYTECODE_OWNER), with its size on
    disk now and the sha256 of its bytes (`digests`, a list per group beside `files`). A file
    whose bytes
    are not those its RECORD row hashes is DamagedInstall: the installer linked or copied it
    from a cache something changed, and sealing it would make the damage the reference.

    Grouped by owner and directory, names and sizes in parallel lists: json parses that four
    times faster than one [path, size] pair per file, and verifying is one stat per file.
    Building it is on every env build's path (16,000 files for torch), so the common RECORD row
    (a plain relative path, no quoting) is taken apart with string operations; any other row
    goes through csv and normpath.
    """
    root = str(path)
    groups: list[list] = []
    digests: list[list[str]] = []
    damaged: list[tuple[str, str]] = []
    listed: set[str] = set()  # the relative paths the RECORDs list
    stat = os.stat

    def add(owner: str, files: dict[str, tuple[list[str], list[int]]],
            recorded: dict[str, str] | None = None) -> None:
        for directory, (names, sizes) in sorted(files.items()):
            groups.append([owner, directory, names, sizes])
            prefix = os.path.join(root, directory)
            found = [sha256_file(os.path.join(prefix, name)) for name in names]
            digests.append(found)
            for name, digest in zip(names, found):
                want = (recorded or {}).get(f"{directory}/{name}")
                if want is not None and want != _record_hash(digest):
                    damaged.append((canonicalize_name(owner.rpartition("-")[0] or owner),
                                    f"{directory}/{name}"))

    add("the venv", {".": (["pyvenv.cfg"], [stat(path / "pyvenv.cfg").st_size])})
    for record in sorted(path.glob("lib/python*/site-packages/*.dist-info/RECORD")):
        site = str(record.parent.parent)
        site_rel = os.path.relpath(site, root)
        files: dict[str, tuple[list[str], list[int]]] = {}
        recorded: dict[str, str] = {}  # relative path -> RECORD's sha256 (urlsafe base64)
        with open(record, newline="", encoding="utf-8", errors="replace") as f:
            text = f.read()
        for line in text.split("\n"):  # csv's line ends: "\n", "\r\n"
            if '"' in line:
                row = next(csv.reader([line]), None)
                entry, hashed = (row[0], row[1] if len(row) > 1 else "") if row else ("", "")
            else:
                entry, _, rest = line.removesuffix("\r").partition(",")
                hashed = rest.partition(",")[0]
            if not entry:
                continue
            if (entry[0] in "/." or entry[-1] == "/" or "/." in entry or "//" in entry
                    or "\r" in entry):
                # Absolute, dotted, doubled or odd: normalised the slow way; may leave the env.
                full = os.path.normpath(os.path.join(site, entry))
                relative = os.path.relpath(full, root)
                if relative.startswith(".."):
                    continue  # installed outside the env: not the env's to check
            else:
                relative = f"{site_rel}/{entry}"
                full = f"{root}/{relative}"
            try:
                size = stat(full).st_size
            except OSError:
                continue  # listed but never written (an installer's optional .pyc)
            directory, _, name = relative.rpartition("/")
            listed.add(relative)
            names, sizes = files.setdefault(directory or ".", ([], []))
            names.append(name)
            sizes.append(size)
            # A wheel's own bytecode is replaced by the build's (envs/bytecode.py), checked by
            # the manifest from then on.
            if hashed.startswith("sha256=") and not name.endswith(".pyc"):
                recorded[f"{directory or '.'}/{name}"] = hashed[len("sha256="):]
        add(record.parent.name.removesuffix(".dist-info"), files, recorded)
    add(BYTECODE_OWNER, _bytecode(path, listed))
    if damaged and verify:
        raise DamagedInstall(path, damaged)
    return {"format": MANIFEST_FORMAT, "files": groups, "digests": digests}


def _bytecode(path: Path, listed: set[str]) -> dict[str, tuple[list[str], list[int]]]:
    """{directory: (names, sizes)} of the .pyc files in the site-packages' __pycache__ folders
    of the env at `path` that no RECORD lists (`listed`, paths relative to the env)."""
    found: dict[str, tuple[list[str], list[int]]] = {}
    for site in sorted(path.glob("lib/python*/site-packages")):
        for directory, subdirectories, names in os.walk(site):
            subdirectories.sort()
            if os.path.basename(directory) != "__pycache__":
                continue
            relative = os.path.relpath(directory, path)
            for name in sorted(names):
                if name.endswith(".pyc") and f"{relative}/{name}" not in listed:
                    with contextlib.suppress(OSError):
                        size = os.stat(os.path.join(directory, name)).st_size
                        kept = found.setdefault(relative, ([], []))
                        kept[0].append(name)
                        kept[1].append(size)
    return found


def _record_hash(hexdigest: str) -> str:
    """A sha256 as a RECORD row spells it: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(bytes.fromhex(hexdigest)).rstrip(b"=").decode()


def verify(path: Path, lock: Lock, allow_sdist: bool) -> str | None:
    """None if the env at `path` is complete and intact, else why it must be (re)built."""
    problem, manifest = _marked_ready(path, lock, allow_sdist)
    return problem if problem is not None else _manifest_problem(str(path), manifest)


def _marked_ready(path: Path, lock: Lock, allow_sdist: bool) -> tuple[str | None, dict]:
    """verify's first part, without a stat of every file: (why the env must be (re)built, or
    None and its manifest for _manifest_problem)."""
    if not path.exists():
        return "it does not exist", {}
    try:
        ready = json.loads((path / READY).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "an earlier build did not finish", {}
    except (OSError, ValueError):
        return f"its ready marker {READY} is unreadable", {}
    if not isinstance(ready, dict) or ready.get("lock_hash") != lock.lock_hash:
        return f"its ready marker {READY} is not this lock's", {}
    python = path / "bin" / "python"
    if not (python.is_file() and os.access(python, os.X_OK)):
        return "bin/python is missing or not executable", {}
    digest = ready.get("manifest_sha256")
    if digest is None:
        return f"it has no manifest {MANIFEST} (built by an older lockguard)", {}
    if ready.get("policy") != build_policy(allow_sdist):
        return f"its ready marker {READY} names another build policy", {}
    try:
        data = (path / MANIFEST).read_bytes()
    except OSError:
        return f"its manifest {MANIFEST} is missing", {}
    if hashlib.sha256(data).hexdigest() != digest:
        return f"its manifest {MANIFEST} does not match its ready marker", {}
    try:
        manifest = json.loads(data)
    except ValueError:
        return f"its manifest {MANIFEST} is unreadable", {}
    if not isinstance(manifest, dict):
        return f"its manifest {MANIFEST} is unreadable", {}
    try:
        seal = json.loads((path / SEAL).read_text(encoding="utf-8"))["ctime_ns"]
    except (OSError, ValueError, TypeError, KeyError):
        seal = 0  # no seal: every file is hashed, and the env sealed again
    manifest["seal_ns"] = seal if isinstance(seal, int) else 0
    return None, manifest


def _manifest_problem(root: str, manifest: dict) -> str | None:
    """Why the env at `root` differs from its manifest (a file missing, of another size, or
    changed since its seal to other bytes than the build's), or None: verify's second part,
    one stat per file and a hash of each file changed since the seal."""
    try:
        return _changed_file(root, manifest)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):  # tampered
        return f"its manifest {MANIFEST} is unreadable"


class _FileCheck:
    """`_manifest_problem` of one env, asked once and answered to every training that asks,
    while it starts (VenvEnv.run): a torch env's 17,000 stats took 40 ms in front of every
    check, and the run they guard starts just as well beside them."""

    def __init__(self, root: str, manifest: dict) -> None:
        self._root = root
        self._manifest: dict | None = manifest
        self._lock = threading.Lock()
        self._problem: str | None = None

    def problem(self) -> str | None:
        with self._lock:
            if self._manifest is not None:
                self._problem = _manifest_problem(self._root, self._manifest)
                self._manifest = None
            return self._problem


class _Damaged(Exception):
    """Raised beside a training (process.run's `alongside`) whose env a file check found
    damaged: the training is killed, the env rebuilt (prepare says why) and run again."""


def _changed_file(root: str, manifest: dict) -> str | None:
    if manifest.get("format") != MANIFEST_FORMAT:
        return f"its manifest {MANIFEST} has another format"
    stat = os.stat
    seal = manifest.get("seal_ns", 0)
    touched: list[tuple[str, str, str]] = []  # (path, sha256, what) changed since the seal
    latest = seal
    for (owner, directory, names, sizes), digests in zip(manifest["files"], manifest["digests"],
                                                         strict=True):
        prefix = f"{root}/{directory}/"
        for name, size, digest in zip(names, sizes, digests, strict=True):
            what = f"{os.path.join(directory, name)} (of {owner})"
            try:
                st = stat(prefix + name)
            except FileNotFoundError:
                return f"{what} is missing"
            except OSError as exc:
                return f"{what} cannot be read: {exc.strerror or exc}"
            if st.st_size != size:
                return f"{what} has changed size"
            # >=: a change in the seal's own clock tick (coarse change times) is read again
            if st.st_ctime_ns >= seal:
                touched.append((prefix + name, digest, what))
                latest = max(latest, st.st_ctime_ns)
    for path, digest, what in touched:
        try:
            if sha256_file(path) != digest:
                return f"{what} has changed: its bytes are not the build's"
        except OSError as exc:
            return f"{what} cannot be read: {exc.strerror or exc}"
    if latest > seal:  # the same bytes as built: sealed as of now, not read again
        with contextlib.suppress(OSError, LockguardError):
            write_text(Path(root) / SEAL, json.dumps({"ctime_ns": latest}))
    return None


def _uv() -> str:
    return require_uv('installer = "uv"', EnvError, 'set installer = "pip" in [tool.lockguard]')
