"""The four lock formats read into one model, narrowed as their installers narrow, and written
back as their installers read them (lockguard.locks: formats, pylock, uvlock, poetry, writer,
mix, installable).

The fixtures under tests/data/locks/ were made by the real tools (tests/data/locks/make.sh: uv
lock, uv export, uv pip compile, poetry lock) from PyPI; the slow test at the end makes them
again with uv and reads what it wrote. Narrowing is tested against explicit platforms, never
this machine's, so that every test here passes on any CI machine.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment

from conftest import DATA, NUMERICS_ONLY
from lockguard import toml
from lockguard.locks.diff import diff_locks
from lockguard.locks.formats import format_by_name, lock_format
from lockguard.locks.installable import require_wheels
from lockguard.locks.mix import mix_locks
from lockguard.locks.model import LockError
from lockguard.locks.parser import parse_lock, parse_lock_text
from lockguard.locks.target import Target, host_target
from lockguard.locks.trust import weaknesses
from lockguard.locks.writer import (
    find_link, install_form, option_args, pylock_text, requirements_text, write_lock,
)

LOCKS = DATA / "locks"
FILES = ("uv.lock", "pylock.toml", "pylock.compile.toml", "requirements.txt", "poetry.lock")
PROJECTS = ("numpy-1.26.4", "numpy-2.0.2", "jax-0.9.2", "jax-0.10.2")


def target(python: str = "3.11.7", platform: str = "linux", machine: str = "x86_64",
           tags: tuple[str, ...] | None = None) -> Target:
    markers = dict(default_environment())
    markers.update(python_full_version=python, python_version=".".join(python.split(".")[:2]),
                   implementation_version=python, sys_platform=platform,
                   platform_machine=machine, implementation_name="cpython",
                   platform_python_implementation="CPython",
                   platform_system={"linux": "Linux", "win32": "Windows",
                                    "darwin": "Darwin"}.get(platform, platform),
                   os_name="nt" if platform == "win32" else "posix")
    return Target(markers=markers, tags=tags)


LINUX = target(tags=("cp311-cp311-manylinux_2_17_x86_64", "cp311-abi3-manylinux_2_17_x86_64",
                     "cp311-none-manylinux_2_17_x86_64", "py3-none-any"))
WINDOWS_310 = target("3.10.4", "win32", "AMD64")
MAC_312 = target("3.12.1", "darwin", "arm64")


def pins(lock) -> list[str]:
    return sorted(p.requirement for p in lock.pins)


# ------------------------------------------------------------------------------ one model

@pytest.mark.parametrize("project", PROJECTS)
def test_every_format_of_one_project_reads_to_the_same_pins(project):
    locks = {name: parse_lock(LOCKS / project / name, LINUX) for name in FILES}
    assert len({tuple(pins(lock)) for lock in locks.values()}) == 1, {
        name: pins(lock) for name, lock in locks.items()}
    assert {name: lock.format for name, lock in locks.items()} == {
        "uv.lock": "uv.lock", "pylock.toml": "pylock.toml", "pylock.compile.toml": "pylock.toml",
        "requirements.txt": "requirements.txt", "poetry.lock": "poetry.lock"}
    # uv export writes the uv.lock's own files and index: the same environment, one hash.
    assert locks["uv.lock"].lock_hash == locks["pylock.toml"].lock_hash
    # Every format hashes its files; the same files are hashed whichever tool listed them.
    for name, lock in locks.items():
        assert all(p.hashes for p in lock.pins), name
    wheel = {p.name: set(p.hashes) for p in locks["pylock.compile.toml"].pins}
    for name in ("uv.lock", "requirements.txt", "poetry.lock"):
        assert all(wheel[p.name] <= set(p.hashes) for p in locks[name].pins), name
    # Multi-platform locks say which platform they were read for; the others are as written.
    assert locks["uv.lock"].environment == LINUX.describe() == locks["poetry.lock"].environment
    assert locks["requirements.txt"].environment is None


def test_a_uv_lock_is_narrowed_as_uv_sync_installs_it():
    lock = parse_lock(LOCKS / "markers" / "uv.lock", LINUX)
    # The project's dependencies for CPython 3.11 on Linux (numpy's 3.11 fork, requests with
    # its socks extra), its dev group; not colorama (win32), tomli (< 3.11), six (an extra
    # nobody asks for), pyflakes (a group uv does not install by default), nor the project.
    assert pins(lock) == ["attrs==25.3.0", "certifi==2026.10.19.post1",
                          "charset-normalizer==3.5.3", "idna==3.20", "numpy==2.4.6",
                          "pysocks==1.7.1", "requests==2.32.3", "urllib3==2.8.0"]
    assert lock.left_out == 6  # colorama, tomli, six, pyflakes, numpy 2.2.6 and 2.5.5
    assert lock.options.index_url == "https://pypi.org/simple"
    assert {p.index for p in lock.pins} == {"https://pypi.org/simple"}
    numpy = lock.pin("numpy")
    assert numpy.line == next(n for n, text in enumerate(
        (LOCKS / "markers" / "uv.lock").read_text().splitlines(), 1)
        if text == 'version = "2.4.6"') - 2  # its [[package]] header
    windows = parse_lock(LOCKS / "markers" / "uv.lock", WINDOWS_310)
    assert {"colorama==0.4.6", "tomli==2.2.1", "numpy==2.2.6"} <= set(pins(windows))
    assert "numpy==2.5.5" in pins(parse_lock(LOCKS / "markers" / "uv.lock", MAC_312))


@pytest.mark.parametrize("platform", [LINUX, WINDOWS_310, MAC_312], ids=lambda t: t.describe())
def test_a_uv_lock_and_its_uv_export_read_alike_on_every_platform(platform):
    mine = parse_lock(LOCKS / "markers" / "uv.lock", platform)
    exported = parse_lock(LOCKS / "markers" / "pylock.toml", platform)
    assert pins(mine) == pins(exported)
    assert mine.lock_hash == exported.lock_hash


@pytest.mark.parametrize("name", ["uv.lock", "pylock.toml", "poetry.lock"])
def test_a_swapped_file_entry_is_another_lock(name):
    """I12: two of a package's files exchange their hashes (the manylinux wheel's name now
    downloads the musllinux file): the same multiset of hashes, another lock, so neither a
    cached venv nor an unchanged-lock answer stands for it."""
    import re

    text = (LOCKS / "markers" / name).read_text()
    lock = parse_lock_text(text, name, LINUX)
    pin = next(p for p in lock.pins if len(p.files) >= 2 and all(f.hashes for f in p.files))
    first, second = (f.hashes[0].split(":", 1)[1] for f in pin.files[:2])
    swapped = re.sub(first, "@@", text).replace(second, first).replace("@@", second)
    again = parse_lock_text(swapped, name, LINUX)
    assert sorted(h for p in again.pins for h in p.hashes) == sorted(
        h for p in lock.pins for h in p.hashes)
    assert again.lock_hash != lock.lock_hash


def test_a_poetry_lock_is_narrowed_by_its_markers_with_every_group():
    lock = parse_lock(LOCKS / "markers" / "poetry.lock", LINUX)
    # Poetry resolved one numpy for every Python; `poetry install` installs every group (lint
    # too), and no extra.
    assert pins(lock) == ["attrs==25.3.0", "certifi==2026.10.19.post1",
                          "charset-normalizer==3.5.3", "idna==3.20", "numpy==2.2.6",
                          "pyflakes==3.3.2", "pysocks==1.7.1", "requests==2.32.3",
                          "urllib3==2.8.0"]
    assert lock.left_out == 3  # colorama, tomli, six
    assert all(p.files and p.files[0].url is None for p in lock.pins)  # from the index
    assert install_form(lock) == "requirements.txt"
    assert "tomli==2.2.1" in pins(parse_lock(LOCKS / "markers" / "poetry.lock", WINDOWS_310))


def test_a_pylock_is_narrowed_by_its_markers_and_environments():
    text = (LOCKS / "markers" / "pylock.toml").read_text()
    assert pins(parse_lock_text(text, "pylock.toml", WINDOWS_310)).count("colorama==0.4.6") == 1
    only_linux = text.replace('requires-python = ">=3.10, <3.14"',
                              'requires-python = ">=3.10, <3.14"\n'
                              'environments = ["sys_platform == \'linux\'"]')
    assert only_linux != text
    assert parse_lock_text(only_linux, "pylock.toml", LINUX).environment == LINUX.describe()
    with pytest.raises(LockError, match=r"pylock.toml:\d+: environments: this platform "
                                        r"\(cpython 3.10.4 win32 AMD64\) is none of"):
        parse_lock_text(only_linux, "pylock.toml", WINDOWS_310)


def test_markers_in_a_pylock_may_test_extras_and_groups():
    lock = """lock-version = "1.0"
created-by = "hand"
default-groups = ["dev"]

[[packages]]
name = "six"
version = "1.17.0"
marker = "'dev' in dependency_groups"
wheels = [{ url = "https://x.example/six-1.17.0-py2.py3-none-any.whl", hashes = { sha256 = "%s" } }]

[[packages]]
name = "attrs"
version = "25.3.0"
marker = "'cuda' in extras"
wheels = [{ url = "https://x.example/attrs-25.3.0-py3-none-any.whl", hashes = { sha256 = "%s" } }]
""" % ("a" * 64, "b" * 64)
    read = parse_lock_text(lock, "pylock.toml", LINUX)
    assert pins(read) == ["six==1.17.0"] and read.left_out == 1
    assert read.environment == LINUX.describe()  # a marker was evaluated


def test_where_packages_come_from_in_each_format(tmp_path):
    """Indexes per package (uv.lock registries, poetry sources, pylock index) become the
    lock's index options too, so that an installer handed requirements text finds them; a
    pylock's local `path` means a file beside the lock."""
    cpu = "https://download.pytorch.org/whl/cpu"
    uv = UV.replace('dependencies = [\n    { name = "numpy" },\n]',
                    'dependencies = [\n    { name = "numpy" },\n    { name = "six" },\n]')
    uv += ('\n[[package]]\nname = "six"\nversion = "1.17.0"\n'
           f'source = {{ registry = "{cpu}" }}\n'
           'wheels = [{ url = "https://download.pytorch.org/whl/six-1.17.0-py2.py3-none-any.whl"'
           f', hash = "sha256:{"c" * 64}" }}]\n')
    lock = parse_lock_text(uv, "uv.lock", LINUX)
    assert lock.options.index_url == "https://pypi.org/simple"
    assert lock.options.extra_index_urls == (cpu,) and lock.pin("six").index == cpu
    poetry = POETRY.replace("optional = false", "optional = false\n[package.source]\n"
                            f'type = "legacy"\nurl = "{cpu}"\nreference = "torch-cpu"', 1)
    read = parse_lock_text(poetry, "poetry.lock", LINUX)
    assert read.options.extra_index_urls == (cpu,) and read.pin("numpy").index == cpu
    assert "--extra-index-url " + cpu in requirements_text(read)
    (tmp_path / "wheels").mkdir()
    local = """lock-version = "1.0"
created-by = "hand"

[[packages]]
name = "six"
version = "1.17.0"
wheels = [{ path = "wheels/six-1.17.0-py2.py3-none-any.whl", hashes = { sha256 = "%s" } }]
""" % ("d" * 64)
    near = parse_lock_text(local, str(tmp_path / "pylock.toml"), LINUX)
    [wheel] = near.pin("six").files
    assert wheel.url == str(tmp_path / "wheels" / "six-1.17.0-py2.py3-none-any.whl")
    assert "path = " in pylock_text(near)  # written back as a path, absolute
    assert parse_lock_text(pylock_text(near), "pylock.toml", LINUX).lock_hash == near.lock_hash


# ------------------------------------------------------------------------------ telling formats

@pytest.mark.parametrize("name, expected", [
    ("uv.lock", "uv.lock"), ("ml/uv.lock", "uv.lock"), ("main:ml/uv.lock", "uv.lock"),
    ("poetry.lock", "poetry.lock"), ("pylock.toml", "pylock.toml"),
    ("pylock.gpu.toml", "pylock.toml"), ("requirements.txt", "requirements.txt"),
    ("requirements-gpu.in", "requirements.txt"), ("locks/anything", None),
    ("pylock.a.b.toml", None),
])
def test_a_format_is_told_by_the_file_name(name, expected):
    assert format_by_name(name) == expected


@pytest.mark.parametrize("source", ["uv.lock", "pylock.toml", "poetry.lock", "requirements.txt"])
def test_else_by_the_content(source):
    text = (LOCKS / "numpy-2.0.2" / source).read_text()
    assert lock_format(text, "lockfile") == source
    assert parse_lock_text(text, "lockfile", LINUX).format == source


# ------------------------------------------------------------------------------ errors

UV = (LOCKS / "numpy-2.0.2" / "uv.lock").read_text()
PYLOCK = (LOCKS / "numpy-2.0.2" / "pylock.toml").read_text()
POETRY = (LOCKS / "numpy-2.0.2" / "poetry.lock").read_text()


@pytest.mark.parametrize("name, text, match", [
    ("uv.lock", UV.replace('name = "numpy"', 'name = "numpy'),
     r"^uv.lock:\d+: not a valid uv.lock \(TOML\): "),
    ("uv.lock", UV.replace("version = 1\n", "version = 2\n", 1),
     r"^uv.lock:1: version: 2 is not a uv.lock version lockguard reads \(1\)$"),
    ("uv.lock", UV.replace('source = { virtual = "." }', 'source = { registry = "x" }'),
     r"^uv.lock: package: no package is the project itself"),
    ("uv.lock", UV.replace('source = { registry = "https://pypi.org/simple" }',
                           'source = { git = "https://github.com/numpy/numpy?rev=v2#abc" }'),
     r"^uv.lock:\d+: package\[1\] \(numpy\): comes from a git \(https://github.com"),
    ("uv.lock", UV.replace("hash = \"sha256:", "hash = \"sha256:zz", 1),
     r"^uv.lock:\d+: package\[1\] \(numpy\).sdist.hash: bad sha256 hash"),
    ("pylock.toml", PYLOCK.replace('lock-version = "1.0"', 'lock-version = "2.0"'),
     r"^pylock.toml:\d+: lock-version: 2.0 is not a lock version lockguard reads \(1.x"),
    ("pylock.toml", PYLOCK.replace('lock-version = "1.0"\n', ''),
     r"^pylock.toml:1: lock-version: missing"),
    ("pylock.toml", PYLOCK.replace("[[packages]]", "[[packages]\n"),
     r"^pylock.toml:\d+: not a valid pylock.toml \(TOML\)"),
    ("pylock.toml", PYLOCK.replace('version = "2.0.2"\n', ""),
     r"^pylock.toml:\d+: packages\[0\] \(numpy\): names no version"),
    ("pylock.toml", PYLOCK.replace('requires-python = ">=3.11, <3.14"',
                                   'requires-python = ">=3.12"'),
     r"^pylock.toml:\d+: requires-python: >=3.12 excludes this platform's Python \(3.11.7\)"),
    # The structure as packaging.pylock validates it: the key it names, the table's line.
    ("pylock.toml", PYLOCK.replace('created-by = "uv"\n', ""),
     r"^pylock.toml: created-by: Missing required value \(PEP 751\)$"),
    ("pylock.toml", PYLOCK.replace('version = "2.0.2"', 'version = "2.0.2!x"'),
     r"^pylock.toml:7: packages\[0\] \(numpy\).version: Invalid version: '2.0.2!x' \(PEP 751\)$"),
    ("pylock.toml", PYLOCK.replace('index = "https://pypi.org/simple"',
                                   'marker = "python_version <"'),
     r"^pylock.toml:7: packages\[0\] \(numpy\).marker: Expected a marker variable or quoted string "
     r"\(PEP 751\)$"),
    ("pylock.toml", PYLOCK.replace('requires-python = ">=3.11, <3.14"', 'requires-python = 3'),
     r"^pylock.toml:5: requires-python: Unexpected type int \(expected str\) \(PEP 751\)$"),
    ("poetry.lock", POETRY.replace('lock-version = "2.1"', 'lock-version = "2.0"'),
     r"^poetry.lock:\d+: metadata.lock-version: 2.0 \(Poetry 1.x\) records no markers"),
    ("poetry.lock", POETRY.replace('lock-version = "2.1"', 'lock-version = "3.0"'),
     r"^poetry.lock:\d+: metadata.lock-version: 3.0 is not a lock version lockguard reads"),
    ("poetry.lock", POETRY.replace("optional = false", "optional = false\n[package.source]\n"
                                   'type = "git"\nurl = "https://github.com/numpy/numpy"'),
     r"^poetry.lock:3: package\[0\] \(numpy\).source: comes from a git source"),
    ("poetry.lock", POETRY.replace("[[package]]", "[[package]] x"),
     r"^poetry.lock:3: not a valid poetry.lock \(TOML\)"),
])
def test_errors_name_the_line_and_the_key(name, text, match):
    assert text != {"uv.lock": UV, "pylock.toml": PYLOCK, "poetry.lock": POETRY}[name]
    with pytest.raises(LockError, match=match) as caught:
        parse_lock_text(text, name, LINUX)
    assert "\n" not in str(caught.value)


def test_missing_hashes_in_each_format():
    # PEP 751 requires a hash on every file: a pylock without one is malformed.
    hashless = PYLOCK.replace(", hashes = { sha256 = ", ", tool = { x = ")
    # (packaging.pylock says so: the first package's table, and its key)
    line = PYLOCK.splitlines().index("[[packages]]") + 1
    with pytest.raises(LockError, match=rf"^pylock.toml:{line}: packages\[0\] \(numpy\)\.sdist\.hashes: "
                                        r"Missing required value \(PEP 751\)$"):
        parse_lock_text(hashless, "pylock.toml", LINUX)
    # A uv.lock or poetry.lock without hashes reads, and is refused by the trust rules as a
    # requirements lock without --hash is (unless allow_unhashed).
    uv = parse_lock_text(_drop_hashes(UV, ', hash = "sha256:'), "uv.lock", LINUX)
    poetry = parse_lock_text(_drop_hashes(POETRY, ', hash = "sha256:'), "poetry.lock", LINUX)
    for lock in (uv, poetry):
        assert not lock.has_hashes
        [weak] = weaknesses(lock)
        assert weak.kind == "unhashed" and "numpy==2.0.2 has no hash" in weak.what


def _drop_hashes(text: str, marker: str) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        if marker in line:
            start = line.index(marker)
            end = line.index('"', start + len(marker))
            line = line[:start] + line[end + 1:]
        out.append(line)
    return "".join(out)


def test_a_package_hashed_while_another_is_not_is_refused_as_pip_would():
    two = UV.replace('dependencies = [\n    { name = "numpy" },\n]',
                     'dependencies = [\n    { name = "numpy" },\n    { name = "six" },\n]')
    two += ('\n[[package]]\nname = "six"\nversion = "1.17.0"\n'
            'source = { registry = "https://pypi.org/simple" }\n'
            'wheels = [{ url = "https://x.example/six-1.17.0-py2.py3-none-any.whl" }]\n')
    with pytest.raises(LockError, match=r"^uv.lock:\d+: package\[2\] \(six\): six==1.17.0 has "
                                        "no hash although other packages have hashes"):
        parse_lock_text(two, "uv.lock", LINUX)


def test_http_sources_of_a_toml_lock_are_insecure():
    lock = parse_lock_text(UV.replace("https://files.pythonhosted.org",
                                      "http://files.example.invalid"), "uv.lock", LINUX)
    [weak] = weaknesses(lock)
    assert weak.kind == "insecure_index" and weak.line == lock.pin("numpy").line
    assert "http://files.example.invalid" in weak.what


def test_a_pin_with_no_wheel_for_the_platform_is_refused_before_installing():
    lock = parse_lock(LOCKS / "numpy-2.0.2" / "pylock.compile.toml", LINUX)
    require_wheels(lock, LINUX, allow_sdist=False)  # its manylinux wheel fits
    mac = target("3.11.7", "darwin", "arm64", tags=("cp311-cp311-macosx_11_0_arm64",
                                                    "py3-none-any"))
    line = lock.pin("numpy").line
    with pytest.raises(LockError, match=rf"^\S+pylock.compile.toml:{line}: numpy==2.0.2: none "
                                        r"of its 1 wheels installs on cpython 3.11.7 darwin "
                                        r"arm64; only its sdist is left.*allow_sdist = true"):
        require_wheels(lock, mac, allow_sdist=False)
    require_wheels(lock, mac, allow_sdist=True)  # the sdist may be built
    wheel_only = parse_lock_text(PYLOCK.split("sdist = ")[0] + "wheels = [" +
                                 PYLOCK.split("wheels = [", 1)[1], "pylock.toml", LINUX)
    win = target("3.11.7", "win32", "AMD64", tags=("cp311-cp311-win_amd64",))
    require_wheels(wheel_only, win, allow_sdist=True)
    bsd = target("3.11.7", "freebsd14", "amd64", tags=("cp311-cp311-freebsd_14_0_amd64",))
    with pytest.raises(LockError, match="no installer can install it here"):
        require_wheels(wheel_only, bsd, allow_sdist=True)
    require_wheels(wheel_only, target(tags=None), allow_sdist=False)  # tags unknown: not judged


# ------------------------------------------------------------------------------ writing

@pytest.mark.parametrize("project", PROJECTS)
@pytest.mark.parametrize("name", ["uv.lock", "pylock.toml", "pylock.compile.toml"])
def test_the_pylock_writer_is_the_readers_inverse(project, name):
    lock = parse_lock(LOCKS / project / name, LINUX)
    assert install_form(lock) == "pylock.toml"
    again = parse_lock_text(pylock_text(lock), "pylock.toml", LINUX)
    assert again.lock_hash == lock.lock_hash
    assert [(p.name, p.version, p.files, p.index) for p in again.pins] == [
        (p.name, p.version, p.files, p.index) for p in sorted(lock.pins, key=lambda p: p.name)]


CONTROL = "".join(map(chr, range(0x20))) + "\x7f\x80\x9f" + 'é ü 中 "quoted" \\back'


def test_toml_written_here_round_trips_every_control_character():
    """The TOML writer (tomli_w behind lockguard.toml) escapes what TOML forbids raw: the C0
    controls, DEL (U+007F, which JSON's escapes leave raw and tomllib rejects), quotes and
    backslashes, in a value laid out by hand (toml.string) and in a pylock.toml."""
    assert toml.loads(f"k = {toml.string(CONTROL)}\n")["k"] == CONTROL
    assert toml.loads(toml.dumps({"k": [CONTROL], "t": {"u": CONTROL}})) == {
        "k": [CONTROL], "t": {"u": CONTROL}}
    lock = parse_lock(LOCKS / "jax-0.10.2" / "pylock.toml", LINUX)
    pin = lock.pins[0]
    odd = dataclasses.replace(pin, files=(dataclasses.replace(
        pin.files[0], url=f"https://x.example/{CONTROL}/a.whl"),), index=f"https://{CONTROL}")
    text = pylock_text(dataclasses.replace(lock, pins=(odd,)), header=f"mix of {CONTROL}")
    assert text.startswith("# mix of \\u0000")
    [package] = toml.loads(text)["packages"]
    assert package["index"] == f"https://{CONTROL}"
    files = [*package.get("wheels", ()), *([package["sdist"]] if "sdist" in package else [])]
    assert [f["url"] for f in files] == [f"https://x.example/{CONTROL}/a.whl"]


@pytest.mark.parametrize("name", ["requirements.txt", "poetry.lock"])
def test_the_requirements_writer_is_the_readers_inverse(name):
    lock = parse_lock(LOCKS / "jax-0.10.2" / name, LINUX)
    assert install_form(lock) == "requirements.txt"
    text = requirements_text(lock)
    again = parse_lock_text(text, "requirements.txt")
    assert pins(again) == pins(lock)
    # A poetry.lock names each file with its hash, which requirements text cannot: its hash
    # covers them (test_a_swapped_file_entry_is_another_lock), the text's does not.
    assert (again.lock_hash == lock.lock_hash) == (name == "requirements.txt")
    # Each pin on its line of the lock read, so that an installer's "line N" is the lock's.
    assert [p.line for p in again.pins] == [p.line for p in lock.pins]


def test_one_find_links_rule_for_every_copy_of_a_lock(tmp_path):
    """A relative --find-links means the folder beside the lock when there is one (pip's rule
    for a requirements file), else the value as written: the same in the copy a venv installs
    from, the arguments a wheel download gets and a bisection mix."""
    (tmp_path / "wheels").mkdir()
    source = str(tmp_path / "requirements.txt")
    assert find_link("wheels", source) == str(tmp_path / "wheels")
    assert find_link("elsewhere", source) == "elsewhere"
    assert find_link("https://x.example/links", source) == "https://x.example/links"
    assert find_link("/abs/wheels", source) == "/abs/wheels"
    hashed = "six==1.17.0 --hash=sha256:" + "a" * 64 + "\n"
    lock = parse_lock_text(f"--find-links wheels\n-f elsewhere\n{hashed}", source)
    expected = (str(tmp_path / "wheels"), "elsewhere")
    assert parse_lock_text(requirements_text(lock), "x").options.find_links == expected
    args = option_args(lock)
    assert [args[i + 1] for i, a in enumerate(args) if a == "--find-links"] == list(expected)
    other = parse_lock_text(hashed.replace("1.17.0", "1.16.0"), str(tmp_path / "b" / "r.txt"))
    mix = mix_locks(other, lock, diff_locks(other, lock).changed)
    assert mix.options.find_links == expected
    form, text = write_lock(mix, header="mix")
    assert form == "requirements.txt"
    assert parse_lock_text(text, "mix.txt").options.find_links == expected


def test_a_mix_of_uv_locks_is_written_as_the_pylock_uv_installs():
    old = parse_lock(LOCKS / "jax-0.9.2" / "uv.lock", LINUX)
    new = parse_lock(LOCKS / "jax-0.10.2" / "uv.lock", LINUX)
    jaxlib = [c for c in diff_locks(old, new).changed if c.name == "jaxlib"]
    mix = mix_locks(old, new, jaxlib)
    form, text = write_lock(mix, header="lockguard bisect: jaxlib")
    assert form == "pylock.toml" and text.startswith("# lockguard bisect: jaxlib\n")
    read = parse_lock_text(text, "pylock.mix.toml", LINUX)
    assert {p.name: p.version for p in read.pins}["jaxlib"] == "0.10.2"
    assert {p.name: p.version for p in read.pins}["jax"] == "0.9.2"
    assert read.pin("jaxlib").files == new.pin("jaxlib").files
    # A mix of a requirements lock and a uv.lock (a lock renamed in the change) names no URL
    # for some pins: requirements text.
    reqs = parse_lock(LOCKS / "jax-0.9.2" / "requirements.txt", LINUX)
    assert write_lock(mix_locks(reqs, new, jaxlib))[0] == "requirements.txt"


def test_the_narrowed_lock_installs_from_this_interpreters_markers():
    assert host_target().python_version() == ".".join(map(str, sys.version_info[:3]))
    assert host_target().tags and host_target().wheel_fits("x-1-py3-none-any.whl")


def test_another_interpreter_is_asked_for_its_markers_as_packaging_computes_them():
    """The config's `python` may be another interpreter: its markers come from a subprocess
    (without packaging there); asked of this one, they are packaging's own."""
    from lockguard.locks.target import _other_target, target_for

    asked = _other_target(sys.executable)
    assert dict(asked.markers) == dict(default_environment())
    assert asked.tags is None  # unknown there: the installer judges the wheels
    assert target_for(None) is host_target() is target_for(sys.executable)
    with pytest.raises(LockError, match="cannot tell its platform"):
        _other_target("/bin/false")


@pytest.mark.parametrize("name", ["uv.lock", "poetry.lock", "pylock.toml", "pylock.gpu.toml"])
def test_lockguard_lock_never_writes_requirements_text_over_another_format(tmp_path, name):
    from lockguard.locks.resolvers import ResolveError, compile as compile_lock

    (tmp_path / "requirements.in").write_text("numpy\n")
    (tmp_path / name).write_text("kept\n")
    with pytest.raises(ResolveError, match=rf"^\S*{re.escape(name)}: a \S+ is written by "):
        compile_lock(tmp_path / "requirements.in", tmp_path / name)
    assert (tmp_path / name).read_text() == "kept\n"


# ------------------------------------------------------------------------------ the real tools

@pytest.mark.slow
def test_the_real_tools_write_what_is_read(tmp_path):
    """uv (lockguard's own dependency) locks, exports and compiles numpy 2.0.2 from PyPI
    again: what it writes today reads to the pins of the committed fixtures."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv is a dependency of lockguard"
    project = tmp_path / "p"
    project.mkdir()
    shutil.copy(LOCKS / "numpy-2.0.2" / "pyproject.toml", project)
    for cmd in ([uv, "lock", "--no-config", "-q"],
                [uv, "export", "--no-config", "-q", "--frozen", "--format", "pylock.toml",
                 "-o", "pylock.toml"],
                [uv, "pip", "compile", "--no-config", "-q", "--python-version", "3.11",
                 "--python-platform", "x86_64-manylinux_2_28", "pyproject.toml", "-o",
                 "pylock.compile.toml"]):
        done = subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    for name in ("uv.lock", "pylock.toml", "pylock.compile.toml"):
        fresh = parse_lock(project / name, LINUX)
        committed = parse_lock(LOCKS / "numpy-2.0.2" / name, LINUX)
        assert pins(fresh) == pins(committed) == ["numpy==2.0.2"], name
        assert fresh.pin("numpy").hashes == committed.pin("numpy").hashes, name


# ------------------------------------------------------------------------------ the same verdicts

# One upgrade in each format lockguard reads, as a team keeps it: the file the project names.
AS_KEPT = {"requirements.txt": "requirements.txt", "pylock.compile.toml": "pylock.toml",
           "uv.lock": "uv.lock", "poetry.lock": "poetry.lock"}


def _ab(tmp_path: Path, old: str, new: str, source: str, config: str,
        scenarios: list[str]) -> tuple[int, dict]:
    """`check --baseline-lock` of the fixtures `old` -> `new` in the format `source`."""
    from conftest import make_project, run_cli, scenario_args

    kept = AS_KEPT[source]
    project = make_project(tmp_path / source, f'lock = "{kept}"\n' + config,
                           files={"loss_ema.py": (DATA / "loss_ema.py").read_text()},
                           locks={kept: LOCKS / new / source})
    (project / "base").mkdir()
    shutil.copy(LOCKS / old / source, project / "base" / kept)
    proc = run_cli("check", *scenario_args(scenarios), "--baseline-lock", f"base/{kept}",
                   "--format", "json", cwd=project)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    import json

    report = json.loads(proc.stdout)
    assert [lock["format"] for lock in report["locks"]] == [
        None if kept == "requirements.txt" else kept] * 2
    return proc.returncode, report


def _judged(report: dict) -> dict:
    """What a verdict says of the numbers, which the same pins must repeat exactly."""
    keys = ("verdict", "first_divergent_step", "final_loss_old", "final_loss_new", "losses",
            "param_digest_equal", "found_device")
    return {v["scenario"]: {k: v.get(k) for k in keys} for v in report["verdicts"]}


@pytest.mark.slow
def test_numpy_nep50_drift_is_the_same_verdict_in_every_format(tmp_path):
    """numpy 1.26.4 -> 2.0.2 under the user's float32 loss EMA, tolerance exact (as
    tests/test_gate.py checks it for requirements locks): drift, exit 1, whichever format
    carries the pins, with the same numbers to the last bit."""
    config = ('scenarios = ["loss_ema"]\n[scenario.loss_ema]\nscript = "loss_ema.py"\n'
              'framework = "numpy"\ntolerance = "exact"\n')
    outcomes = {source: _ab(tmp_path, "numpy-1.26.4", "numpy-2.0.2", source, config,
                            ["loss_ema"]) for source in AS_KEPT}
    codes = {source: code for source, (code, _) in outcomes.items()}
    assert set(codes.values()) == {1}, codes
    judged = {source: _judged(report) for source, (_, report) in outcomes.items()}
    assert judged["uv.lock"]["loss_ema"]["verdict"] == "drift"
    for source in AS_KEPT:
        assert judged[source] == judged["requirements.txt"], source
        [diff] = outcomes[source][1]["lock_diffs"]
        assert [(c["name"], c["old_version"], c["new_version"]) for c in diff["changes"]] == [
            ("numpy", "1.26.4", "2.0.2")]


@pytest.mark.slow
def test_a_jax_upgrade_is_the_same_verdict_in_every_format(tmp_path):
    """jax/jaxlib 0.9.2 -> 0.10.2 (every other pin the same), a bundled scenario: the same
    verdict, numbers and exit code in the four formats. (One scenario: what a format can change
    is the environment, which every scenario of the lock shares.)"""
    config = NUMERICS_ONLY
    outcomes = {source: _ab(tmp_path, "jax-0.9.2", "jax-0.10.2", source, config,
                            ["jax.mlp"]) for source in AS_KEPT}
    reference = outcomes["requirements.txt"]
    assert set(_judged(reference[1])) == {"jax.mlp"}
    for source, (code, report) in outcomes.items():
        assert code == reference[0], source
        assert _judged(report) == _judged(reference[1]), source
        changed = [(c["name"], c["old_version"], c["new_version"])
                   for c in report["lock_diffs"][0]["changes"] if c["kind"] != "unchanged"]
        assert changed == [("jax", "0.9.2", "0.10.2"), ("jaxlib", "0.9.2", "0.10.2")], source


# ------------------------------------------------------------------------------ the git gate

@pytest.mark.slow
def test_a_uv_lock_bump_goes_through_check_base_beside_a_requirements_lock(tmp_path):
    """A project that mixes formats (a uv.lock for training, a requirements.txt for serving);
    its pull request bumps numpy in the uv.lock. `check --base main` reads each lock at the
    merge base and on disk in its own format, and A/B-checks the one that moved, as it does a
    requirements bump."""
    import json

    from conftest import make_project, run_cli

    project = make_project(tmp_path / "r", """
        locks = ["uv.lock", "serving.txt"]
        scenarios = ["loss_ema"]
        [scenario.loss_ema]
        script = "loss_ema.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"loss_ema.py": (DATA / "loss_ema.py").read_text()},
        locks={"uv.lock": LOCKS / "numpy-1.26.4" / "uv.lock",
               "serving.txt": LOCKS / "jax-0.10.2" / "requirements.txt"})

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=project, check=True, capture_output=True, text=True).stdout

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-qm", "base")
    git("checkout", "-qb", "bump-numpy")
    shutil.copy(LOCKS / "numpy-2.0.2" / "uv.lock", project / "uv.lock")
    git("commit", "-qam", "Bump numpy to 2.0.2")
    cache = tmp_path / "cache"
    proc = run_cli("check", "--base", "main", "--format", "json", cwd=project,
                   env={"LOCKGUARD_CACHE": str(cache)})
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert [v["verdict"] for v in report["verdicts"]] == ["drift"]
    base = git("rev-parse", "main").strip()
    locks = {(lock["role"], lock["path"]): lock for lock in report["locks"]}
    assert set(locks) == {("baseline", "main:uv.lock"), ("candidate", "uv.lock")}
    assert locks[("baseline", "main:uv.lock")]["label"] == f"main@{base[:7]}:uv.lock"
    assert {lock["format"] for lock in report["locks"]} == {"uv.lock"}
    [diff] = report["lock_diffs"]
    [change] = [c for c in diff["changes"] if c["kind"] != "unchanged"]
    assert (change["name"], change["old_version"], change["new_version"], change["new_line"]) \
        == ("numpy", "1.26.4", "2.0.2", parse_lock(project / "uv.lock").pin("numpy").line)
    # Only the environments of the lock that moved were built: the serving lock's jax is not.
    built = sorted(p.name for p in (cache / "venvs").glob("*/pylock.lockguard.toml"))
    assert len(built) == 2 and not list((cache / "venvs").glob("*/lockguard-lock.txt"))
    # The lock that did not move needs nothing: a PR that only touches the serving lock's
    # comments passes from git alone.
    git("checkout", "-q", "main")
    git("checkout", "-qb", "comment")
    (project / "serving.txt").write_text("# serving\n" + (project / "serving.txt").read_text())
    git("commit", "-qam", "A comment")
    quiet = run_cli("check", "--base", "main", "--format", "json", cwd=project,
                    env={"LOCKGUARD_CACHE": str(tmp_path / "cache2")})
    assert quiet.returncode == 0, quiet.stderr
    assert any("only comments or layout changed" in n for n in json.loads(quiet.stdout)["notes"])


# ------------------------------------------------------------------------------ propose

PROPOSE_CONFIG = """
[tool.lockguard]
lock = "{lock}"
scenarios = ["loss_ema"]
[tool.lockguard.scenario.loss_ema]
script = "loss_ema.py"
framework = "numpy"
tolerance = "exact"
"""


@pytest.mark.slow
@pytest.mark.parametrize("kept, fixture", [("uv.lock", "uv.lock"),
                                           ("pylock.toml", "pylock.compile.toml")])
def test_propose_writes_the_format_it_read_as_the_tool_would(tmp_path, kept, fixture):
    """`propose numpy==2.0.2` on a uv project's uv.lock runs `uv lock --upgrade-package`, on a
    pylock.toml `uv pip compile --upgrade-package` with its header's scope: the proposal is
    the lock the tool writes for numpy 2.0.2 (the committed fixture, made by a project that
    asks for it), the project's `numpy==1.26.4` read as asking for the upgrade; the user's
    files are untouched; the A/B says drift."""
    import json

    from conftest import run_cli, snapshot

    project = tmp_path / "p"
    project.mkdir()
    pyproject = (LOCKS / "numpy-1.26.4" / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(pyproject + PROPOSE_CONFIG.format(lock=kept))
    (project / "loss_ema.py").write_text((DATA / "loss_ema.py").read_text())
    shutil.copy(LOCKS / "numpy-1.26.4" / fixture, project / kept)
    before = snapshot(project)
    proc = run_cli("propose", "numpy==2.0.2", "--format", "json", cwd=project)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert [v["verdict"] for v in report["verdicts"]] == ["drift"]
    [said] = [n for n in report["notes"] if n.startswith(f"proposed lock for {kept} (uv): ")]
    proposal = Path(said.rsplit(": ", 1)[1])
    assert proposal.name == kept
    assert any("pyproject.toml:6 requires numpy==1.26.4: proposed with numpy==2.0.2" in n
               for n in report["notes"]), report["notes"]
    made = parse_lock(proposal, LINUX)
    expected = parse_lock(LOCKS / "numpy-2.0.2" / fixture, LINUX)
    assert made.format == expected.format and made.lock_hash == expected.lock_hash
    if kept == "pylock.toml":  # its header is the user's command, as uv writes it
        assert proposal.read_text().splitlines()[:2] == \
            (project / kept).read_text().splitlines()[:2]
    assert snapshot(project) == before


# ------------------------------------------------------------------------------ bisection

def _with_six(uv_lock: str, version: str, digest: str) -> str:
    """A uv.lock whose project also depends on six `version` (one wheel, hash `digest`)."""
    text = uv_lock.replace('dependencies = [\n    { name = "numpy" },\n]',
                           'dependencies = [\n    { name = "numpy" },\n    { name = "six" },\n]')
    assert text != uv_lock
    return text + (f'\n[[package]]\nname = "six"\nversion = "{version}"\n'
                   'source = { registry = "https://pypi.org/simple" }\n'
                   f'wheels = [{{ url = "https://files.example/six-{version}-py2.py3-none-any.whl",'
                   f' hash = "sha256:{digest * 64}" }}]\n')


# Its uv.locks (numpy 1.26.4 and 2.0.2) require Python 3.11 or later: on the floor's CI job
# (3.10) they cannot be read for the running interpreter.
@pytest.mark.skipif(sys.version_info < (3, 11),
                    reason="its fixture locks require Python >= 3.11 (the floor's job is 3.10)")
def test_bisecting_uv_locks_builds_pylock_mixes(tmp_path, monkeypatch):
    """On the fake backend a run depends only on the numpy version. Two uv.locks, numpy and
    six bumped: the mix taking numpy from the candidate is written as the pylock.toml uv
    installs, read back as the same pins, and bisection names numpy."""
    from fakes import FakeBackend
    from lockguard.config import Config, Options
    from lockguard.settings import Settings
    from lockguard.flows.ab import check_ab
    from lockguard.locks.ref import LockRef, read_lock
    from lockguard.names import Verdict
    from lockguard.scenarios import bundled

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "uv.lock").write_text(_with_six(
        (LOCKS / "numpy-1.26.4" / "uv.lock").read_text(), "1.16.0", "a"))
    (tmp_path / "uv.lock").write_text(_with_six(UV, "1.17.0", "b"))
    old = LockRef(tmp_path / "old" / "uv.lock", read_lock(tmp_path / "old" / "uv.lock"))
    new = LockRef(tmp_path / "uv.lock", read_lock(tmp_path / "uv.lock"))
    numpy = [s for s in bundled() if s.id == "numpy.mlp"]
    settings = Settings.resolve(Config(root=tmp_path, golden_dir="golden", steps=6),
                                Options(bisect=True))
    report = check_ab(settings, [new], [old], numpy, backend=FakeBackend())
    assert report.verdicts[0].verdict == Verdict.drift
    [b] = report.bisection
    assert b.culprit == ["numpy 1.26.4 → 2.0.2"] and b.found
    [trial] = [t for t in b.trials if t.status == "reproduces"]
    mix = Path(trial.lock) if Path(trial.lock).is_absolute() else tmp_path / trial.lock
    assert mix.name.startswith("pylock.") and mix.suffix == ".toml", trial.lock
    read = parse_lock(mix)
    assert read.format == "pylock.toml" and pins(read) == ["numpy==2.0.2", "six==1.16.0"]
    assert read.pin("numpy").files == new.lock.pin("numpy").files


def test_the_one_toml_quoter_round_trips_what_tomllib_reads():
    """lockguard.toml.string, what init's config and a pylock.toml mix are written with: every
    string reads back as it was, DEL included (JSON writes it raw, and TOML forbids it: init
    once wrote a config tomllib rejected)."""
    from lockguard import toml

    for text in ("plain", 'a "quoted" \\ path', "tab\tnew\nline", "del \x7f here",
                 "\x00\x1f controls", "ünïcødé ✓", "emoji 🧪", ""):
        quoted = toml.string(text)
        assert toml.loads(f"k = {quoted}") == {"k": text}, quoted
    assert "ü" in toml.string("ü")  # non-ASCII stays readable


def test_a_newer_minor_pylock_is_read_without_packagings_warning(caplog):
    """PEP 751: an installer reads a newer minor lock-version; packaging.pylock, which
    validates the structure, would log that it does not know that minor."""
    newer = PYLOCK.replace('lock-version = "1.0"', 'lock-version = "1.1"')
    with caplog.at_level("DEBUG"):
        lock = parse_lock_text(newer, "pylock.toml", LINUX)
    assert lock.by_name["numpy"][0].version == "2.0.2"
    assert [r.getMessage() for r in caplog.records] == []
