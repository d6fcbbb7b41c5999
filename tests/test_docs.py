"""The README and the documentation site.

The site (docs/, mkdocs.yml) builds with `mkdocs build --strict`, whose validation settings turn
every broken link or anchor and every page left out of the nav into a failure; a broken link
planted in a copy shows that it does. The README stays a five-minute read (at most 200 lines)
with exactly two set-up commands, the second being the one .ci/run runs; its links into docs/
resolve to built pages and anchors. No example, page or the README relies on a machine-local
package source (a wheel folder, a file index), and the example's locks come from PyPI alone,
hashed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from readme import README, set_up_commands

DOCS = REPO / "docs"
EXAMPLES = REPO / "examples"
# What only this machine kind has: its local wheel folder and file indexes, or any index or
# wheel folder on a local disk.
MACHINE_LOCAL = re.compile(r"/opt/wheels|/opt/pypi|(index-url|find-links)[ =]+(file:|/)")


def mkdocs_build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=root, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    proc = mkdocs_build(REPO, site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return site


def test_the_docs_build_strictly(site: Path) -> None:
    pages = sorted(p.relative_to(DOCS) for p in DOCS.rglob("*.md"))
    assert Path("index.md") in pages and Path("architecture.md") in pages
    for page in pages:
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page} was not built"


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(DOCS, root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    index = root / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [the missing page](nowhere.md) and "
                     "[a missing anchor](verdicts.md#no-such-section).\n")
    proc = mkdocs_build(root, tmp_path / "site")
    assert proc.returncode != 0
    assert "nowhere.md" in proc.stderr + proc.stdout


def test_the_readme_is_short_with_two_set_up_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    example, suite = set_up_commands(text)  # exactly two
    assert "cd examples/quickstart" in example and example.count("lockguard check") == 2
    assert suite.endswith("-m pytest -q -n auto -ra")
    # .ci/run runs the README's test command as it is written.
    assert suite in (REPO / ".ci" / "run").read_text()


def test_the_readme_links_resolve_to_built_pages_and_anchors(site: Path) -> None:
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", README.read_text())
    assert len(links) >= 10
    for target, anchor in links:
        page = REPO / target
        assert page.is_file(), target
        stem = Path(target).stem
        built = site / ("index.html" if stem == "index" else f"{stem}/index.html")
        if anchor:
            assert f'id="{anchor}"' in built.read_text(), f"{target}#{anchor}"


def test_no_example_or_page_relies_on_a_machine_local_package_source() -> None:
    files = [README, REPO / "mkdocs.yml", *DOCS.rglob("*"), *EXAMPLES.rglob("*")]
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
             for path in files if path.is_file()
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if MACHINE_LOCAL.search(line)]
    assert found == []


def test_the_example_locks_are_hashed_and_name_no_index_of_their_own() -> None:
    from lockguard.locks.parser import parse_lock

    locks = sorted((EXAMPLES / "quickstart").glob("*.txt"))
    assert [p.name for p in locks] == ["requirements.txt", "upgrade-jax.txt", "upgrade-numpy.txt"]
    for path in locks:
        lock = parse_lock(path)
        assert lock.has_hashes and all(pin.hashes for pin in lock.pins), path
        options = lock.options
        assert not (options.index_url or options.extra_index_urls or options.find_links
                    or options.other_options), (path, options)


def test_the_architecture_map_names_every_module() -> None:
    # The map a newcomer walks the code by (docs/architecture.md) names each module of the host
    # side, or it drifts from the code unnoticed. The harness is described as a whole there.
    text = (DOCS / "architecture.md").read_text()
    package = REPO / "lockguard"
    # json_.py is named "json": a trailing underscore only dodges a stdlib module's name.
    missing = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
               if "harness" not in p.relative_to(package).parts and p.stem != "__init__"
               and not re.search(r"(?<![\w-])(%s|%s)(?![\w-])" % (
                   re.escape(p.stem), re.escape(p.stem.removesuffix("_"))), text)]
    assert missing == []
