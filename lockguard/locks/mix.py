"""`mix_locks`: the baseline lock with some of the candidate's changes, as a Lock (what culprit
bisection builds and runs; lockguard.locks.writer writes it in the locks' install form).
"""

from __future__ import annotations

from collections.abc import Iterable

from lockguard.locks.diff import Change
from lockguard.locks.model import Lock, LockOptions, Pin
from lockguard.locks.writer import find_link


def mix_locks(old: Lock, new: Lock, changes: Iterable[Change]) -> Lock:
    """`old` with `changes` (of diff_locks(old, new)) taken from `new`: their pins and files,
    added packages added, removed ones removed.

    Installer options are the union of both locks' (the candidate's first: its index has the
    new pins, the baseline's still serves the old ones); a relative find-links is resolved
    against its own lock's folder (locks.writer.find_link), since the mix is written elsewhere.
    The mix keeps the locks' format when they share one (a uv.lock mix is installed as its
    pylock.toml, as a uv.lock is), else it is requirements text.
    """
    pins: dict[tuple[str, str | None], Pin] = {(p.name, p.marker): p for p in old.pins}
    new_pins = {(p.name, p.marker): p for p in new.pins}
    for change in changes:
        key = (change.name, change.marker)
        if change.kind == "removed":
            pins.pop(key, None)
        else:
            pins[key] = new_pins[key]
    return Lock(source="mix", pins=tuple(pins[k] for k in sorted(pins, key=lambda k: (
        k[0], k[1] or ""))), options=_union(new, old),
        format=new.format if new.format == old.format else "requirements.txt",
        environment=new.environment or old.environment)


def _union(first: Lock, second: Lock) -> LockOptions:
    index = first.options.index_url or second.options.index_url
    extra: list[str] = []
    links: list[str] = []
    other: list[str] = []
    for lock in (first, second):
        opts = lock.options
        # The other lock's own index stays reachable as an extra one, or the pins a mix keeps
        # from it could not be found.
        own = [opts.index_url] if opts.index_url and opts.index_url != index else []
        extra += [u for u in own + list(opts.extra_index_urls) if u != index and u not in extra]
        links += [link for link in (find_link(x, lock.source) for x in opts.find_links)
                  if link not in links]
        other += [o for o in opts.other_options if o not in other]
    return LockOptions(index_url=index, extra_index_urls=tuple(extra), find_links=tuple(links),
                       other_options=tuple(sorted(other)))
