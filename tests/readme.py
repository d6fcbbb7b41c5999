"""The README's set-up commands, read from README.md itself, so that what the tests and the
quickstart benchmark run is what a reader copies.

A set-up command is a fenced code block whose first line starts with `python3 -m venv .venv`;
its lines (continued after a trailing `&&`) are one shell command line. The README has two: the
bundled example first, the tests second.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
START = "python3 -m venv .venv"


def set_up_commands(text: str | None = None) -> list[str]:
    """Every set-up command in the README, in order, each as one shell command line."""
    text = README.read_text(encoding="utf-8") if text is None else text
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S)
    return [" ".join(line.strip() for line in block.strip().splitlines())
            for block in blocks if block.startswith(START)]


def example_command() -> str:
    """The README's first command: set up lockguard and run the bundled example."""
    return set_up_commands()[0]


def suite_command() -> str:
    """The README's second command: set up lockguard and run the test suite."""
    return set_up_commands()[1]
