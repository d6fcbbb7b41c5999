#!/usr/bin/env bash
# Regenerates the lock fixtures of tests/test_lock_formats.py with the real tools, from PyPI
# alone: for each project folder here (its pyproject.toml is the input), the same pins in
# every format lockguard reads.
#
#   uv.lock              uv lock
#   pylock.toml          uv export --format pylock.toml     (every platform's files, the index)
#   pylock.compile.toml  uv pip compile pyproject.toml -o   (this platform's wheel, no index)
#   requirements.txt     uv export --format requirements-txt
#   poetry.lock          poetry lock                         (Poetry 2, lock-version 2.1)
#
# usage: tests/data/locks/make.sh [POETRY]   (POETRY: a poetry executable; default `poetry`)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
uv="${UV:-$(dirname "$(command -v python)")/uv}"
[ -x "$uv" ] || uv=uv
poetry="${1:-poetry}"
for project in "$here"/*/; do
    cd "$project"
    rm -f uv.lock pylock.toml pylock.compile.toml requirements.txt poetry.lock
    "$uv" lock --no-config -q
    "$uv" export --no-config -q --frozen --format pylock.toml -o pylock.toml
    "$uv" export --no-config -q --frozen --format requirements-txt -o requirements.txt
    "$uv" pip compile --no-config -q --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
        pyproject.toml -o pylock.compile.toml
    "$poetry" lock -q
done
