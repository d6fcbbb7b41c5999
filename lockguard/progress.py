"""Progress for long steps (env builds, training runs): shown on a terminal, silent otherwise.

Machine-readable formats (json) must stay clean on stdout, so progress always goes to stderr,
and is switched off entirely with quiet=True.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Progress:
    def __init__(self, quiet: bool = False, verbose: bool = False) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self._console = None
        if not quiet:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False)

    def info(self, message: str) -> None:
        if self._console is not None:
            self._console.print(message)

    def detail(self, message: str) -> None:
        if self._console is not None and self.verbose:
            self._console.print(f"[dim]{message}[/dim]")

    @contextlib.contextmanager
    def step(self, message: str) -> Iterator["StepHandle"]:
        """A spinner with elapsed time on a terminal; one line before and after elsewhere."""
        start = time.perf_counter()
        handle = StepHandle()
        if self._console is None:
            yield handle
            return
        if self._console.is_terminal:
            with self._console.status(message) as status:
                handle._status = status
                handle._base = message
                yield handle
        else:
            self._console.print(f"{message} …")
            yield handle
        self._console.print(f"{message}: done in {time.perf_counter() - start:.1f} s")


class StepHandle:
    """Lets a long step update its spinner text (e.g. pip's current line)."""

    _status = None
    _base = ""

    def update(self, detail: str) -> None:
        if self._status is not None:
            self._status.update(f"{self._base} [dim]{detail[:80]}[/dim]")


QUIET = Progress(quiet=True)
