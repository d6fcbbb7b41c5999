"""Resolving locks: one face (`compile`, `propose`) over one module per resolver (piptools.py,
uv.py) and what they share (common.py: the error, running a resolver, the indexes; relaxed.py:
the lines of requirements.in that rule an upgrade out, and the relaxed copies; header.py: the
header in the resolver's words).

All resolver I/O runs as subprocesses (common.run_tool, which lockguard.locks.outdated also uses
to ask pip's index): pip-tools has no supported Python API, and uv is a binary. Every public
function raises `ResolveError`, whose `str()` is one line the CLI prints before exiting with 2.

Which resolver
--------------
The one asked for (`--resolver`); otherwise the tool that wrote the lock being re-resolved, as
its header says (`default_resolver`: pip-compile's header → pip-tools, uv's → uv), so a team's
lock keeps its tool and its header; uv when there is no lock yet or its header names neither
(uv resolves an ML stack in seconds where pip-compile takes minutes). A resolver is a module
with `identity`, `tool`, `command`, `head`, `CLOSING` and `normalise` (`_MODULES`).

Atomicity
---------
The resolver writes into a temporary directory, seeded with the existing lock (that is how
pip-compile keeps unrelated pins). Only a successful resolve is moved over the output, with
os.replace from the same directory: a failed or interrupted resolve leaves the old lock as it was,
byte for byte. A proposal is a cache entry (cache.entry): resolved in a stage, published whole.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from lockguard.cache import entry
from lockguard.files import scratch_dir, write_text
from lockguard.installers import tool_reason
from lockguard.locks.formats import format_by_name
from lockguard.locks.model import LockOptions
from lockguard.locks.parser import (
    RequirementsInput, lock_writer, parse_lock, read_requirements_input,
)
from lockguard.locks.resolvers import header, piptools, uv
from lockguard.locks.resolvers.common import (
    BOOTSTRAP_TIMEOUT_S, PROPOSED, RESOLVE_TIMEOUT_S, RESOLVERS, SILENT, Progress, Proposal,
    ResolveError, Resolver, index_args, relpath, requirement_name, resolver_reads, run_tool,
)
from lockguard.locks.resolvers.relaxed import (
    Block, blocking_lines, explain_failure, named_back, once, relaxed_copy,
)

if TYPE_CHECKING:
    from lockguard.sandbox import Sandbox

_MODULES: dict[str, ModuleType] = {"pip-tools": piptools, "uv": uv}
# What decides a proposal's key, beside its inputs: bump it when that changes.
_PROPOSAL_FORMAT = "2"
# The tool that writes each lock format that is not requirements text: `lockguard lock` writes
# requirements text only, and never over another format's file.
_FORMAT_TOOLS = {"uv.lock": "`uv lock`", "pylock.toml": "`uv pip compile -o pylock.toml`",
                 "poetry.lock": "`poetry lock`"}


def default_resolver(lock: Path | None) -> Resolver:
    """The resolver to re-resolve `lock` with when none is asked for: the tool that wrote it,
    as its header says; uv when there is no lock or its header names neither."""
    if lock is not None:
        try:
            head = Path(lock).read_text(encoding="utf-8-sig", errors="replace")[:8192]
        except OSError:
            head = ""
        writer = lock_writer(head)
        if writer in RESOLVERS:
            return writer  # type: ignore[return-value]
    return "uv"


def resolver_identity(resolver: Resolver) -> str:
    """The resolver's name and version, as they decide its answers (a proposal's key)."""
    return _MODULES[resolver].identity()


def compile(  # noqa: A001 - the one way to resolve a lock, as the issue names it
    inputs: Path,
    out: Path,
    upgrades: Sequence[str] = (),
    *,
    resolver: Resolver | None = None,
    like: Path | None = None,
    relax: bool = False,
    extra_args: Sequence[str] = (),
    progress: Progress | None = None,
    timeout: float = RESOLVE_TIMEOUT_S,
    sandbox: Sandbox | None = None,
    invocation: str | None = None,
    read: RequirementsInput | None = None,
) -> Path:
    """Resolve `inputs` (a requirements.in) into a fully pinned, hashed lock at `out`; returns
    `out`. The resolver runs in `sandbox` (it may build an sdist for its metadata: run_tool).

    Pins and index options of `like` (default: `out`, where it exists) are kept unless named
    in `upgrades` (`P` or `P==V`, any specifier), as pip-compile does, and the header names
    paths as seen from `like`'s folder. `resolver` None: the tool that wrote `like`
    (default_resolver). `extra_args` go to the resolver unchanged. An upgrade that the inputs
    rule out is refused before resolving, or with `relax` resolved from a copy of the inputs
    that asks for it there (a proposal; `read`: the inputs already read). `invocation` is the
    lockguard command the header names (default: `lockguard lock` with these arguments). On any
    failure `out` is left untouched and ResolveError (or a LockError for an unreadable `like`)
    says why.
    """
    inputs, out = Path(inputs), Path(out)
    _refuse_other_format(out)
    seed = Path(like) if like is not None else (out if out.is_file() else None)
    header_as = seed if like is not None else out
    chosen = resolver or default_resolver(seed)
    if invocation is None:
        invocation = _lock_invocation(inputs, out, upgrades, chosen)
    say = progress or (lambda _msg: None)
    _check_request(inputs, upgrades, chosen)
    read = read or read_requirements_input(inputs)
    blocks = blocking_lines(read, upgrades)
    if blocks and not relax:
        more = f" (and {len(blocks) - 1} more line(s))" if len(blocks) > 1 else ""
        raise ResolveError(blocks[0].refusal() + more)
    # The lock's own index options, where requirements.in does not say them already.
    kept = parse_lock(seed).options if seed is not None else LockOptions()
    return _resolve(_Request(inputs, out, seed, header_as, tuple(upgrades), chosen, read,
                             tuple(blocks), index_args(kept, read), tuple(extra_args), timeout,
                             sandbox, invocation), say)


@dataclass(frozen=True)
class _Request:
    """One resolve, as compile settled it."""

    src: Path
    output: Path
    seed: Path | None  # the lock whose pins are the resolver's preferences
    header_as: Path  # the lock whose folder the header's paths are seen from
    upgrades: tuple[str, ...]
    resolver: Resolver
    inputs: RequirementsInput
    blocks: tuple[Block, ...]
    indexes: list[str]  # the lock's index options the inputs do not state (pip-tools adds)
    extra_args: tuple[str, ...]
    timeout: float
    sandbox: Sandbox | None
    invocation: str


def propose(
    inputs: Path,
    lock: Path,
    upgrades: Sequence[str],
    cache_dir: Path,
    resolver: Resolver | None = None,
    *,
    progress: Progress | None = None,
    timeout: float = RESOLVE_TIMEOUT_S,
    refresh: bool = False,
    sandbox: Sandbox | None = None,
) -> Proposal:
    """Resolve a candidate lock: `inputs` with `upgrades` applied, the other pins of `lock`
    kept (`compile` with `like=lock` and `relax`).

    The candidate is a cache entry, `cache_dir/proposals/<key>/<lock name>`, the key being a
    hash of everything that decides it (the inputs and the files they include, the current
    lock, the upgrades, the resolver and its version), so asking twice costs nothing. The index
    is not part of the key: an open request such as `jax>=0.10` keeps its first answer until
    `refresh`. A line of the inputs that rules an upgrade out is read as asking for the upgrade
    instead (Proposal.relaxed says which). The user's inputs and lock are only read.
    """
    inputs, lock = Path(inputs), Path(lock)
    for path, what in ((inputs, "requirements input"), (lock, "lock")):
        if not path.is_file():
            raise ResolveError(f"{path}: the {what} does not exist")
    if not upgrades:
        raise ResolveError("nothing to propose: name at least one upgrade, e.g. torch==2.14.1")
    lock_text = lock.read_text(encoding="utf-8")
    pinned = parse_lock(lock).by_name
    names = []
    for spec in upgrades:
        name = requirement_name(spec)
        if name not in pinned:
            raise ResolveError(f"{spec}: {name} is not pinned in {lock}; add it to {inputs} "
                               "first")
        names.append(name)
    if len(set(names)) != len(names):
        raise ResolveError(f"each package can be named once: {' '.join(upgrades)}")
    chosen = resolver or default_resolver(lock)
    read = read_requirements_input(inputs)
    relaxed = tuple(block.relaxed_note() for block in blocking_lines(read, upgrades))
    where = Path(cache_dir) / "proposals" / _proposal_key(lock_text, upgrades, chosen, read)
    invocation = " ".join(shlex.quote(p) for p in
                          ["lockguard", "propose", *upgrades, "--resolver", chosen])

    def build(stage: Path) -> str:
        # The header as the user's lock reads it, should they adopt the candidate.
        compile(inputs, stage / lock.name, upgrades, resolver=chosen, like=lock, relax=True,
                progress=progress, timeout=timeout, sandbox=sandbox, invocation=invocation,
                read=read)
        return ""

    with entry(where, build, marker=PROPOSED, what=f"the proposal for {lock.name}",
               ready=lambda path: not refresh and (path / PROPOSED).is_file()):
        pass
    return Proposal(where / lock.name, chosen, relaxed)


def _proposal_key(lock_text: str, upgrades: Sequence[str], resolver: Resolver,
                  inputs: RequirementsInput) -> str:
    """24 hex of what decides a proposal but the index: the format, the lock, the upgrades,
    the resolver and its version, the Python, and the inputs with the files they include."""
    key = hashlib.sha256()
    parts = [_PROPOSAL_FORMAT.encode(), lock_text.encode(), "\n".join(sorted(upgrades)).encode(),
             resolver.encode(), resolver_identity(resolver).encode(),
             f"{sys.version_info[:2]}".encode()]
    for file in inputs.files:
        try:
            parts.append(file.read_bytes())
        except OSError:
            parts.append(b"")  # missing: the resolver will say so
    for part in parts:
        key.update(hashlib.sha256(part).digest())
    return key.hexdigest()[:24]


def _lock_invocation(inputs: Path, out: Path, upgrades: Sequence[str], resolver: str) -> str:
    """The `lockguard lock` command that writes `out` from `inputs`, as the header names it:
    paths as seen from the lock's folder, credentials redacted."""
    workdir = out.resolve().parent
    src_arg = relpath(inputs.resolve(), workdir)
    out_arg = relpath(out.resolve(), workdir)
    parts = ["lockguard", "lock", src_arg]
    if Path(src_arg).with_suffix(".txt").as_posix() != out_arg:
        parts += ["-o", out_arg]
    for spec in upgrades:
        parts += ["-P", spec]
    parts += ["--resolver", resolver]
    return " ".join(shlex.quote(header.redact(p)) for p in parts)


def _refuse_other_format(output: Path) -> None:
    kind = format_by_name(output.name)
    if kind in _FORMAT_TOOLS:
        raise ResolveError(f"{output}: a {kind} is written by {_FORMAT_TOOLS[kind]}; lockguard "
                           "lock writes requirements text (name the output *.txt)")


def _resolve(r: _Request, say: Progress) -> Path:
    """Run the resolver over the inputs (or their relaxed copy) in a scratch folder, then write
    the header and its output to the request's output (compile's second half)."""
    module = _MODULES[r.resolver]
    # The resolver runs where the lock will live, so `# via -r requirements.in` annotations and
    # the header's paths are relative to the lock, as they are when pip-compile runs beside it.
    workdir = r.header_as.resolve().parent
    src_arg = relpath(r.src.resolve(), workdir)
    out_arg = relpath(r.header_as.resolve(), workdir)
    indexes = list(r.indexes)
    program, tool, env = module.tool(r.inputs, indexes, workdir, say)
    find_links = any(a.startswith("--find-links=") for a in indexes) or any(
        ln.option == "find-links" for ln in r.inputs.options())
    header_args = header.options([*indexes, *r.extra_args])
    with scratch_dir("resolve") as tmp:
        scratch = Path(tmp) / r.output.name
        if r.seed is not None:
            # Existing pins are the resolver's preferences. Only the pins: its options are
            # passed above, and a relative --find-links would not name the same folder here.
            write_text(scratch, "".join(
                ln for ln in r.seed.read_text(encoding="utf-8-sig").splitlines(keepends=True)
                if not ln.startswith("-")))
        names: dict[str, str] = {}
        resolve_src = src_arg
        if r.blocks:
            copy, names = relaxed_copy(r.inputs, r.blocks, Path(tmp) / "inputs", workdir)
            resolve_src = str(copy)
        cmd = [*module.command(program, scratch, find_links),
               *(f"--upgrade-package={p}" for p in r.upgrades),
               *indexes, *r.extra_args, resolve_src]
        say(f"resolving {src_arg} with {tool}")
        proc = run_tool(cmd, cwd=workdir, timeout=r.timeout, what=r.resolver, env=env,
                        sandbox=r.sandbox, reads=resolver_reads(workdir, indexes),
                        writes=(str(tmp),))
        if proc.returncode != 0:
            reason = named_back(tool_reason(proc.stderr + "\n" + proc.stdout, SILENT), names)
            raise ResolveError(f"{r.resolver} could not resolve {r.src}: "
                               + explain_failure(reason, r.upgrades, r.inputs, r.blocks))
        body = module.normalise(once(named_back(scratch.read_text(encoding="utf-8"), names)))
        notes = [block.relaxed_note(
            f"{relpath(block.line.path.resolve(), workdir)}:{block.line.first}")
            for block in r.blocks]
        head = _header(r.resolver, out_arg, src_arg, header_args, tool, r.invocation, notes,
                       find_links)
        write_text(r.output, head + body.lstrip("\n"))
    say(f"wrote {r.output}")
    return r.output


def _header(resolver: Resolver, out_arg: str, src_arg: str, options: Sequence[str], tool: str,
            invocation: str, notes: Sequence[str], find_links: bool) -> str:
    """The lock's header: the resolver's own (`head`: Renovate re-runs its command line,
    Dependabot reads its options), lockguard's block, the resolver's closing line."""
    module = _MODULES[resolver]
    return (module.head(out_arg, src_arg, options, find_links)
            + header.lockguard_block(tool, invocation, notes) + module.CLOSING)


def _check_request(src: Path, upgrade_packages: Sequence[str], resolver: str) -> None:
    """What `lock` was asked, refused before anything runs: no input, a bad -P spec (here,
    not as a resolver traceback), an unknown resolver."""
    if not src.is_file():
        raise ResolveError(f"{src}: the requirements input does not exist")
    for spec in upgrade_packages:
        requirement_name(spec)
    if resolver not in RESOLVERS:
        raise ResolveError(f"unknown resolver {resolver!r}: use pip-tools or uv")


__all__ = [
    "BOOTSTRAP_TIMEOUT_S",
    "Block",
    "PROPOSED",
    "Proposal",
    "RESOLVE_TIMEOUT_S",
    "ResolveError",
    "Resolver",
    "SILENT",
    "blocking_lines",
    "compile",
    "default_resolver",
    "propose",
    "resolver_identity",
    "resolver_reads",
    "run_tool",
]
