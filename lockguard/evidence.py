"""The evidence store, beside the golden store (golden.py): what a check keeps of its runs,
its JSON report and both sides' RunResults, one directory a run:

    <dir>/report.json                 the Report (--format json), `lockguard report` re-renders it
    <dir>/baseline/<scenario>.json    the baseline's RunResult (a golden's, or the old lock's run)
    <dir>/candidate/<scenario>.json   the candidate's RunResult

`--artifacts DIR` chooses the directory; by default it is <cache>/artifacts/<project>/<report id>,
where <project> is a hash of the project's root, and the newest KEEP of a project are kept. Each
project's `last-check` file names the directory of its latest `check`: what `lockguard accept`
adopts goldens from. A directory is written whole or not at all: it is assembled beside its
place and renamed into it, so a reader never finds a report without its results.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lockguard.cache import cache_root
from lockguard.errors import LockguardError
from lockguard.files import (WriteError, publish_dir, recover_dir, staging_dir, write_text,
                             writable_dir)

if TYPE_CHECKING:
    from lockguard.report import Report

KEEP = 20  # artefact directories kept per project in the cache
# What each check's JSON report hashed to, kept apart from the artefacts (in the project's
# cache folder, never in the artefact directory a user may edit or download): `accept` adopts
# a report only as what a run produced when its bytes hash to what the check recorded.
LEDGER = "ledger"
_STALE_S = 30 * 24 * 3600  # another project's artefacts untouched this long are removed
_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")
LAST_CHECK = "last-check"


class ArtifactError(LockguardError):
    """No artefacts where they were looked for."""


def new_id() -> str:
    """A report id: its UTC time (so ids sort by age) and 6 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def project_dir(root: Path) -> Path:
    """Where the cache keeps the artefacts of the project at `root`."""
    key = hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:16]
    return cache_root() / "artifacts" / key


@dataclass(frozen=True)
class Target:
    """Where one run's artefacts go, decided by `prepare` before anything runs: the report id,
    its directory, the project's cache folder, and whether `save` prunes old directories there."""

    report_id: str
    directory: Path
    project: Path  # the project's folder in the cache: its last-check pointer
    pruned: bool  # whether `directory` is one of the cache's, pruned to the newest KEEP


def prepare(option: Path | None, root: Path, *, check: bool = False) -> Target:
    """Where this run's artefacts go, checked writable now, before anything runs. A `check`
    takes the project's last-check pointer away as it starts: one that does not finish
    (Ctrl-C, exit 2 or 3) leaves `accept` nothing to adopt, never an older check's runs."""
    report_id = new_id()
    project = project_dir(root)
    directory = option if option is not None else project / report_id
    # A run killed while it published here left its copies beside the directory: the last
    # artefacts are put back where a reader (accept) looks for them.
    recover_dir(directory)
    try:
        if directory.exists() and not directory.is_dir():
            raise WriteError(f"--artifacts {directory}: is not a directory")
        # The run's artefacts replace the directory whole: only an empty one, or the artefacts
        # of an earlier run, may be replaced, never files of the user's.
        if directory.is_dir() and not _replaceable(directory):
            raise WriteError(f"--artifacts {directory}: holds files that are not lockguard "
                             "artefacts; give a new or empty directory")
    except OSError as exc:
        raise WriteError(f"--artifacts {directory}: {exc.strerror or exc}") from None
    # The directory is assembled beside its place and renamed into it.
    writable_dir(directory.parent, "the artefact directory")
    writable_dir(project, "the artefact cache")
    target = Target(report_id, directory, project, pruned=option is None)
    if check:
        forget_last_check(target)
    return target


ARTEFACT_NAMES = frozenset({"report.json", "baseline", "candidate"})


def _replaceable(directory: Path) -> bool:
    """Empty, or what `save` writes (report.json, baseline/, candidate/) and nothing else."""
    names = {entry.name for entry in os.scandir(directory)}
    return not names or ("report.json" in names and names <= ARTEFACT_NAMES)


def save(target: Target, report: Report, report_json: str) -> Path:
    """Write the report (`report_json`: its JSON, as `--format json` renders it) and both
    sides' results of every scenario; returns the directory."""
    staging = staging_dir(target.directory)
    try:
        shutil.rmtree(staging, ignore_errors=True)
        for ev in report.evidence:
            for side in (ev.baseline, ev.candidate):
                if side is None:
                    continue
                if "/" in ev.scenario or ev.scenario.startswith("."):
                    raise WriteError(f"{ev.scenario!r} cannot be an artefact file's name")
                write_text(staging / side.role / f"{ev.scenario}.json",
                           side.result.model_dump_json(indent=1) + "\n")
        text = report_json
        write_text(staging / "report.json", text)
        if report.id is not None:
            write_text(target.project / LEDGER / report.id, digest(text.encode("utf-8")) + "\n")
        publish_dir(staging, target.directory)
    except OSError as exc:
        raise WriteError(f"{target.directory}: cannot write the artefacts: "
                         f"{exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if report.command == "check":
        write_text(target.project / LAST_CHECK, str(target.directory.resolve()) + "\n")
    if target.pruned:
        prune(target.project)
    return target.directory


def digest(data: bytes) -> str:
    """The sha256 of `data` as "sha256:<hex>": what the ledger records of a report's JSON bytes
    and `vouched` compares them with."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def vouched(root: Path, report_id: str | None, data: bytes) -> bool | None:
    """Whether a JSON report's bytes are what a check of the project at `root` wrote on this
    machine (its report id's ledger entry): True, False (edited since), or None when this
    machine recorded no such check (artefacts downloaded from elsewhere)."""
    if not report_id or not _ID.match(report_id):
        return None
    try:
        recorded = (project_dir(root) / LEDGER / report_id).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return recorded == digest(data)


def forget_last_check(target: Target) -> None:
    """No pointer to an earlier check's artefacts (a check is starting)."""
    try:
        (target.project / LAST_CHECK).unlink(missing_ok=True)
    except OSError as exc:
        raise WriteError(f"{target.project / LAST_CHECK}: cannot remove: "
                         f"{exc.strerror or exc}") from None


def prune(project: Path, keep: int = KEEP) -> None:
    """Keep a project's newest `keep` artefact directories; remove leftovers of killed writers
    and the artefacts of projects not checked for a month."""
    try:
        entries = list(os.scandir(project))
    except OSError:
        return
    ids = sorted(e.name for e in entries if _ID.match(e.name) and e.is_dir())
    for name in ids[:-keep] if keep else ids:
        shutil.rmtree(project / name, ignore_errors=True)
    now = time.time()
    for e in entries:
        if e.name.endswith((".partial", ".old")) and _age(e.path, now) > 3600:
            shutil.rmtree(e.path, ignore_errors=True)
    try:
        ledger = list(os.scandir(project / LEDGER))
    except OSError:
        ledger = []
    for e in ledger:  # a digest outlives its artefacts: `accept --from` a copy kept elsewhere
        if _age(e.path, now) > _STALE_S:
            try:
                os.unlink(e.path)
            except OSError:
                pass
    try:
        others = [e for e in os.scandir(project.parent) if e.is_dir() and e.path != str(project)]
    except OSError:
        return
    for e in others:
        if _age(e.path, now) > _STALE_S:
            shutil.rmtree(e.path, ignore_errors=True)


def _age(path: str, now: float) -> float:
    try:
        return now - os.stat(path).st_mtime
    except OSError:
        return 0.0


def last_check(root: Path) -> Path:
    """The artefact directory of the project's latest `check`."""
    pointer = project_dir(root) / LAST_CHECK
    try:
        directory = Path(pointer.read_text(encoding="utf-8").strip())
    except FileNotFoundError:
        raise ArtifactError(f"no check of {root} has kept artefacts (one answered wholly "
                            "from the goldens keeps none); run `lockguard check` first (--rerun "
                            "runs unchanged scenarios), or name a report with --from") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{pointer}: cannot read: {exc}") from None
    if not (directory / "report.json").is_file():
        raise ArtifactError(f"{directory}: the last check's artefacts are gone (pruned or "
                            "removed); run `lockguard check` again, or name a report with --from")
    return directory
