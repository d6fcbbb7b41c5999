"""The listings some commands print instead of a Report: the scenario catalogue
(`lockguard scenarios`) and the newer releases of a lock's framework families
(`lockguard outdated`), each as a text table for people and JSON for programs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockguard.locks.outdated import OutdatedRow
    from lockguard.locks.ref import LockRef
    from lockguard.scenarios import Scenario


def scenarios(items: Sequence[Scenario], fmt: str) -> str:
    """The catalogue, one scenario a line (text) or a JSON list."""
    if fmt == "json":
        return json.dumps([{"id": s.id, "framework": s.framework, "source": s.source,
                            "steps": s.steps, "dtype": s.dtype, "requires": list(s.requires),
                            "description": s.description} for s in items], indent=2) + "\n"
    width = max((len(s.id) for s in items), default=0)
    return "".join(f"{s.id:<{width}}  {s.framework:<10}  {s.source:<7}  {s.steps:>3} steps  "
                   f"{s.description}\n" for s in items)


def outdated(rows: Sequence[tuple[LockRef, OutdatedRow]], fmt: str) -> str:
    """Per lock and framework-family package: its pin and the newer releases on the index."""
    if fmt == "json":
        return json.dumps([{"lock": str(ref.path), **dataclasses.asdict(row)}
                           for ref, row in rows], indent=2, default=str) + "\n"
    lines = []
    shown = None
    for ref, row in rows:
        if ref.path != shown:  # each lock's rows under its name (a project may have several)
            lines += ([""] if shown is not None else []) + [f"{ref.name}:"]
            shown = ref.path
        if row.error:
            lines.append(f"  {row.name:<22} {row.current:<14} (index error: {row.error})")
            continue
        latest = row.latest_stable or "—"
        series = row.latest_in_series or "—"
        pre = row.latest_prerelease or ""
        flag = "" if row.is_outdated else "  up to date"
        lines.append(f"  {row.name:<22} {row.current:<14} latest {latest:<12} same series "
                     f"{series:<12}{(' pre ' + pre) if pre else ''}{flag}")
    return "".join(line + "\n" for line in lines)
