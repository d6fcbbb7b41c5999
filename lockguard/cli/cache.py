"""`lockguard cache`: what the cache holds, and `lockguard cache prune` (cache_entries.py)."""

from __future__ import annotations

import re
import time

import click

from lockguard.cli.edge import handles_errors
from lockguard.errors import UsageError

_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.I)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _age(text: str | None) -> float | None:
    """Seconds of an age written '30d', '12h', '2w' (None: not given); a UsageError when it
    is no such age."""
    if text is None:
        return None
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"--older-than {text!r}: expected a number and a unit: s, m, h, d "
                         "or w (30d, 12h)")
    return float(match.group(1)) * _SECONDS[match.group(2).lower()]


def _size(text: str | None) -> int | None:
    from lockguard.sizes import parse_size

    if text is None:
        return None
    size = parse_size(text)
    if size is None:
        raise UsageError(f"--max-size {text!r}: expected a size: 8GiB, 500MB, or bytes")
    return size


def _when(at: float, now: float) -> str:
    ago = max(0.0, now - at)
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if ago >= scale:
            return f"{ago / scale:.0f} {unit} ago"
    return "just now"


@click.group("cache", invoke_without_command=True)
@click.pass_context
@handles_errors
def cache_group(ctx: click.Context) -> None:
    """List what lockguard's cache holds (venvs, wheelhouses, evidence, installer caches):
    each entry's size, what removing it frees, when it was last used and by which project.

    \b
    Examples:
      lockguard cache                              # the entries, most recently used first
      lockguard cache prune --max-size 8GiB        # least recently used first, down to 8 GiB
      lockguard cache prune --older-than 30d --dry-run
    """
    if ctx.invoked_subcommand is not None:
        return
    from lockguard.cache import cache_root
    from lockguard.cache_entries import entries, total
    from lockguard.sizes import format_size

    found = entries()
    now = time.time()
    click.echo(f"{cache_root()}: {len(found)} entries, {format_size(total(found))}")
    for e in found:
        where = f"  [{e.project}]" if e.project else ""
        kept = f"  ({e.kept})" if e.kept else ""
        click.echo(f"  {e.kind:<15} {format_size(e.size):>10}  frees {format_size(e.frees):>10}"
                   f"  {_when(e.used, now):>12}  {e.name}{where}{kept}")


@cache_group.command("prune")
@click.option("--older-than", metavar="AGE", help="Remove what was last used longer ago (30d, "
              "12h, 2w); the installers' caches are kept.")
@click.option("--keep", type=click.IntRange(min=0), metavar="N",
              help="Keep only the N most recently used venvs.")
@click.option("--max-size", metavar="SIZE", help="Remove the least recently used entries "
              "until the cache holds at most SIZE (8GiB, 500MB); the installers' caches go "
              "last.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@handles_errors
def prune_command(older_than: str | None, keep: int | None, max_size: str | None,
                  dry_run: bool) -> None:
    """Remove cache entries, least recently used first, never one a running check uses nor
    the evidence `lockguard accept` would read.

    \b
    Examples:
      lockguard cache prune --max-size 8GiB
      lockguard cache prune --older-than 30d --keep 5 --dry-run
    """
    from lockguard.cache_entries import entries, prune, total
    from lockguard.sizes import format_size

    age, size = _age(older_than), _size(max_size)
    if age is None and keep is None and size is None:
        raise UsageError("prune what? give --older-than AGE, --keep N or --max-size SIZE")
    found = entries()
    done = prune(found, older_than_s=age, keep=keep, max_size=size, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for e in done.removed:
        click.echo(f"{verb} {e.kind} {e.name} ({format_size(e.frees)})")
    for e, why in done.kept:
        click.echo(f"kept {e.kind} {e.name}: {why}")
    left = total(found) - done.freed
    click.echo(f"{verb} {len(done.removed)} entries, {format_size(done.freed)}; the cache "
               f"{'would hold' if dry_run else 'holds'} about {format_size(left)}")


def trim_cache(max_size: int | None, progress) -> None:
    """After a check or record: the cache pruned to the configuration's `cache_max_size`, least
    recently used first (what this command used goes last, and nothing it holds), said in one
    line when anything went."""
    if max_size is None:
        return
    from lockguard.cache_entries import entries, prune
    from lockguard.sizes import format_size

    done = prune(entries(), max_size=max_size)
    if done.removed:
        progress.info(f"cache_max_size {format_size(max_size)}: removed "
                      f"{len(done.removed)} least recently used cache entries "
                      f"({format_size(done.freed)})")


COMMANDS = (cache_group,)
