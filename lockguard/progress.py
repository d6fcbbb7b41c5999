"""Progress for long steps (env builds, training runs): shown on a terminal, plain lines in a log.

Machine-readable formats (json, junit, github) must stay clean on stdout, so progress always
goes to stderr, and is switched off entirely with quiet=True. On a terminal a step shows a
spinner, its elapsed time and, when it counts something, "n of N"; in a log (no terminal) it
prints one line when it starts and one with its duration when it ends. Colour follows NO_COLOR.
With verbose=True every command lockguard runs (installers, harness processes) is shown.
Every line goes through errors.redact: an index URL's password never reaches a CI log.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from lockguard.errors import redact

if TYPE_CHECKING:
    from rich.console import Console


class Progress:
    """Where lockguard says what it is doing, on stderr (module docstring); QUIET says nothing,
    for machine-readable output and tests."""

    def __init__(self, quiet: bool = False, verbose: bool = False) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self._local = threading.local()  # stage: one per thread (envs are built in parallel)
        self._live = threading.Lock()  # held by the one step a terminal shows as a spinner
        self._console: _Lines | Console | None = None
        if not quiet:
            self._console = _console()
            if verbose:
                _watch(self)

    @property
    def stage(self) -> str:
        """e.g. "environment 1 of 2: ", put in front of each step's message (this thread's)."""
        return getattr(self._local, "stage", "")

    @stage.setter
    def stage(self, value: str) -> None:
        """Set this thread's prefix; steps of other threads keep theirs."""
        self._local.stage = value

    def info(self, message: str) -> None:
        """A line of plain text (no markup: "[candidate lock.txt]" is shown as it is)."""
        if self._console is not None:
            self._console.print(redact(message), markup=False)

    def detail(self, message: str) -> None:
        """A dim line shown only with verbose=True (the commands lockguard runs, notes on
        settings), redacted like every line."""
        if self._console is None or not self.verbose:
            return
        if isinstance(self._console, _Lines):
            self._console.print(redact(message))
            return
        from rich.markup import escape

        self._console.print(f"[dim]{escape(redact(message))}[/dim]", soft_wrap=True)

    def command(self, argv: Sequence[str], where: str | None = None) -> None:
        """Show a command about to run (verbose only), as a shell would take it."""
        self.detail("$ " + shlex.join(str(a) for a in argv) + (f"   ({where})" if where else ""))

    @contextlib.contextmanager
    def counting(self, index: int, total: int, what: str,
                 name: str | None = None) -> Iterator[None]:
        """Steps inside are the index-th of `total` (e.g. environment 1 of 2), of `name`."""
        before = self.stage
        of = f" ({name})" if name else ""
        self.stage = f"{what} {index} of {total}{of}: " if total > 1 else \
            (f"{what}{of}: " if name else before)
        try:
            yield
        finally:
            self.stage = before

    @contextlib.contextmanager
    def step(self, message: str, total: int | None = None) -> Iterator[StepHandle]:
        """A long step: spinner, elapsed time and n of `total` on a terminal; a line before
        and a line with the duration after it elsewhere."""
        message = self.stage + redact(message)
        start = time.perf_counter()
        handle = StepHandle(total)
        if self._console is None:
            yield handle
            return
        # A terminal shows one live spinner at a time; steps running beside it (parallel env
        # builds) print a line when they start and one when they end, as in a log.
        live = self._console.is_terminal and self._live.acquire(blocking=False)
        if live:
            from rich.markup import escape
            from rich.progress import (
                MofNCompleteColumn, Progress as Bar, SpinnerColumn, TextColumn, TimeElapsedColumn,
            )

            columns = [SpinnerColumn(), TextColumn("{task.description}")]
            if total:
                columns.append(MofNCompleteColumn())
            columns.append(TimeElapsedColumn())
            try:
                with Bar(*columns, console=self._console, transient=True) as bar:
                    handle._bar = bar
                    handle._task = bar.add_task(escape(message), total=total)
                    handle._base = escape(message)
                    yield handle
            finally:
                self._live.release()
        else:
            self._console.print(f"{message} …", markup=False)
            beat = threading.Event()
            threading.Thread(target=self._heartbeat, args=(message, handle, start, beat),
                             daemon=True).start()
            try:
                yield handle
            finally:
                beat.set()
        counted = f" ({handle.done} of {total})" if total and handle.done != total else ""
        self._console.print(f"{message}: done in {time.perf_counter() - start:.1f} s{counted}",
                            markup=False)


    def _heartbeat(self, message: str, handle: StepHandle, start: float,
                   stop: threading.Event) -> None:
        """In a log, a line every HEARTBEAT_S while a step runs: a 60 s compile must not look
        like a hang. It says what is running and for how long."""
        assert self._console is not None
        while not stop.wait(HEARTBEAT_S):
            now = time.perf_counter()
            counted = f"{handle.done} of {handle.total} done, " if handle.total else ""
            running = handle.running(now)
            self._console.print(f"{message}: {counted}{now - start:.0f} s"
                                + (f"; running {running}" if running else ""), markup=False)


HEARTBEAT_S = 10.0  # between a step's "still running" lines in a log


def _console() -> _Lines | Console:
    """rich's console on a terminal (spinners, colour); whole plain lines in a log. A log
    never needs rich, and not importing it keeps 20-30 ms out of every check's start."""
    try:
        terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        terminal = False
    if not (terminal or os.environ.get("FORCE_COLOR") is not None
            or os.environ.get("TTY_COMPATIBLE") == "1"):  # rich's own reasons for a terminal
        return _Lines()
    from rich.console import Console

    console = Console(stderr=True, highlight=False,
                      no_color=bool(os.environ.get("NO_COLOR")) or None)
    # A log (no terminal) gets whole lines: a CI viewer wraps them itself, and a line cut at
    # 80 columns mid-phrase reads as two.
    console.soft_wrap = not console.is_terminal
    return console


_CONTROL = dict.fromkeys(map(ord, "\a\b\v\f\r"))  # what rich strips from a line: \r above all


class _Lines:
    """Progress in a log: each message as one whole line on stderr, control characters dropped
    and tabs expanded much as rich writes one there (it counts wide characters' columns), but
    with no emoji codes replaced; written at once so parallel steps never interleave."""

    is_terminal = False

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def print(self, text: str, markup: bool = False) -> None:
        text = text.translate(_CONTROL).expandtabs(8)  # as rich prints ASCII in a log
        with self._lock:
            try:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass  # a closed or broken stderr must not fail the training it reports on


class StepHandle:
    """Lets a long step update its spinner text (e.g. pip's current line) and count, and say
    what it is running (parallel runs: each names itself while it runs)."""

    def __init__(self, total: int | None = None) -> None:
        self.total = total
        self.done = 0
        self._lock = threading.Lock()
        self._bar = None
        self._task = None
        self._base = ""
        self._running: dict[str, float] = {}  # name -> when it started

    def begin(self, name: str) -> None:
        """Say that `name` started running within the step: shown beside the spinner, and in a
        log's heartbeat lines with how long it has run, until `end(name)`."""
        with self._lock:
            self._running[name] = time.perf_counter()
        self._show_running()

    def end(self, name: str) -> None:
        """Say that `name` (as given to begin) is no longer running."""
        with self._lock:
            self._running.pop(name, None)
        self._show_running()

    def running(self, now: float | None = None) -> str:
        """'torch.lm.compile [candidate requirements.txt] 41 s, ...', longest first."""
        now = time.perf_counter() if now is None else now
        with self._lock:
            items = sorted(self._running.items(), key=lambda item: item[1])
        return ", ".join(f"{name} {now - began:.0f} s" for name, began in items)

    def _show_running(self) -> None:
        if self._bar is not None:
            from rich.markup import escape

            with self._lock:
                names = list(self._running)
            self._bar.update(self._task, description=self._base + (
                f" [dim]{escape(', '.join(names))[:80]}[/dim]" if names else ""))

    def update(self, detail: str) -> None:
        """Show `detail` (cut to 80 characters) after the step's message on a terminal's
        spinner; a log gets nothing, its heartbeat says enough."""
        if self._bar is not None:
            from rich.markup import escape

            self._bar.update(self._task,
                             description=f"{self._base} [dim]{escape(redact(detail)[:80])}[/dim]")

    def advance(self) -> int:
        """One more of `total` done; returns how many are done now (thread-safe)."""
        with self._lock:
            self.done += 1
            done = self.done
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
        return done


QUIET = Progress(quiet=True)

# The verbose Progress of this process, if any: backends deep below the flows (a harness
# process, an installer) report the commands they run here without a Progress in hand.
_watcher: Progress | None = None


def _watch(progress: Progress) -> None:
    global _watcher
    _watcher = progress


def show_command(argv: Sequence[str], where: str | None = None) -> None:
    """Show a command about to run, when the user asked for -v."""
    if _watcher is not None:
        _watcher.command(argv, where)
