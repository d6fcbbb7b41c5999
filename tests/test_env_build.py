"""Environment builds at installer speed: uv by default, found in lockguard's own venv, one
wheel cache per installer under lockguard's cache shared by every environment, and a check's
environments built in parallel (tests/test_flows.py checks the scheduling on a fake backend;
here the real installers and a real check)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import DATA, make_project, prepared_venv, run_cli

from lockguard.config import Config
from lockguard.envs import venv
from lockguard.locks.parser import parse_lock_text
from lockguard import installers
from lockguard.installers import find_uv, require_uv

NUMPY_LOCK = (DATA / "numpy-2.0.2.txt").read_text()
BESIDE = Path(sys.executable).parent / "uv"


def path_without_uv() -> str:
    """PATH less every folder holding a uv (lockguard's venv bin/ among them)."""
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not (Path(d) / "uv").exists())


def test_uv_is_the_default_installer():
    assert Config().installer == "uv"
    assert Config(installer="pip").installer == "pip"


def test_uv_is_found_in_lockguards_own_venv_without_path(monkeypatch):
    assert BESIDE.is_file(), "uv is a dependency of lockguard: pip install -e ."
    monkeypatch.setenv("PATH", path_without_uv())
    assert find_uv() == str(BESIDE)
    assert require_uv('installer = "uv"') == str(BESIDE)


def test_a_missing_uv_is_one_error_naming_the_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(installers, "find_uv", lambda: None)
    with pytest.raises(venv.EnvError, match=r'^installer = "uv" needs the uv command, which is '
                       r'neither beside .* nor on PATH \(it is a dependency of lockguard: '
                       r'reinstall lockguard, or set installer = "pip" in \[tool.lockguard\]\)$'):
        prepared_venv(parse_lock_text(NUMPY_LOCK, "lock.txt"))
    assert not (tmp_path / "cache").exists()  # known before anything is built


def test_the_installers_share_wheel_caches_under_lockguards_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    for name in ("UV_CACHE_DIR", "PIP_CACHE_DIR", "UV_LINK_MODE"):
        monkeypatch.delenv(name, raising=False)
    env = installers.installer_env()
    assert env["UV_CACHE_DIR"] == str(tmp_path / "cache" / "wheels" / "uv")
    assert env["PIP_CACHE_DIR"] == str(tmp_path / "cache" / "wheels" / "pip")
    assert env["UV_LINK_MODE"] == "hardlink"
    assert "PYTHONPATH" not in env  # still the harness's isolation
    # A cache the user chose for an installer is theirs to keep.
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "mine"))
    assert installers.installer_env()["UV_CACHE_DIR"] == str(tmp_path / "mine")


def test_uv_gets_none_of_the_settings_that_change_what_it_installs(monkeypatch, tmp_path):
    """Kept: where uv caches, how it fetches, its credential stores. Dropped: everything else
    (named indexes' credentials too: uv is given no named index), from the builds and from
    the resolver alike (installers.run_tool)."""
    from lockguard import installers

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    for name in [k for k in os.environ if k.startswith("UV_")]:
        monkeypatch.delenv(name)  # whatever this machine's shell sets
    kept = {"UV_CACHE_DIR": "/c", "UV_HTTP_TIMEOUT": "60", "UV_OFFLINE": "1",
            "UV_CREDENTIALS_DIR": "/creds", "UV_S3_ENDPOINT_URL": "https://s3.example"}
    dropped = {"UV_CONFIG_FILE": "/x/uv.toml", "UV_NO_BINARY": "1", "UV_INDEX_URL": "https://x",
               "UV_OVERRIDE": "/x/o.txt", "UV_TORCH_BACKEND": "cu126",
               "UV_NO_VERIFY_HASHES": "1", "UV_INSECURE_HOST": "x.example",
               "UV_INDEX_CORP_PASSWORD": "pw", "UV_SOMETHING_NEW": "1"}
    for name, value in {**kept, **dropped}.items():
        monkeypatch.setenv(name, value)
    env = installers.installer_env()
    assert {k: env.get(k) for k in kept} == kept
    assert not set(dropped) & set(env)
    mine = dict(os.environ)
    assert installers.drop_uv_settings(mine) == sorted(dropped)
    assert installers.uv_settings_note(["UV_INDEX_URL"]) == (
        "not passed to uv: UV_INDEX_URL (settings that would change what a lock installs; uv "
        "installs from pip's index settings)")


@pytest.mark.slow
def test_a_second_lock_installs_its_shared_wheels_from_the_cache_with_no_index(
        monkeypatch, tmp_path):
    """uv from lockguard's venv with no uv on PATH; the first build fills the wheel cache under
    lockguard's cache, and a second lock pinning the same wheel builds with uv offline."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LOCKGUARD_CACHE", str(cache))
    monkeypatch.setenv("PATH", path_without_uv())
    for name in ("UV_CACHE_DIR", "PIP_CACHE_DIR", "UV_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    first = prepared_venv(parse_lock_text(NUMPY_LOCK, "first.txt"))
    ready = json.loads((first.path / venv.READY).read_text())
    assert ready["installer"] == "uv"
    assert str(BESIDE) in (first.path / "install.log").read_text().splitlines()[0]
    wheels = cache / "wheels" / "uv"
    assert any(wheels.rglob("numpy*")), f"no numpy in {wheels}"

    # Another lock (a marker changes its hash, not its wheel): another env, nothing fetched.
    second_text = re.sub(r"numpy==2\.0\.2", 'numpy==2.0.2 ; python_version >= "3.9"', NUMPY_LOCK)
    second_lock = parse_lock_text(second_text, "second.txt")
    monkeypatch.setenv("UV_OFFLINE", "1")
    second = prepared_venv(second_lock)
    assert second.path != first.path
    assert venv.verify(second.path, second_lock, allow_sdist=False) is None


def _fake_venv(root: Path, modules: dict[str, Path]) -> Path:
    """A venv of this interpreter whose site-packages holds `modules` {name: a file to link}."""
    site = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(sys.executable)
    for name, source in modules.items():
        os.link(source, site / f"{name}.py")
    return root


class _Step:
    """A build step that shows nothing (what the progress display gives compile_all)."""

    def update(self, detail: str) -> None:
        pass


def _imports(venv_root: Path, module: str, *, from_pyc: bool = True) -> str:
    import subprocess

    site = next(venv_root.glob("lib/python*/site-packages"))
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-v", "-c",
                           f"import sys; sys.path.insert(0, {str(site)!r}); import {module}; "
                           f"print({module}.VALUE)"], capture_output=True, text=True,
                          env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    pyc = site / "__pycache__" / f"{module}.{sys.implementation.cache_tag}.pyc"
    taken = f"{pyc} matches {site / module}.py" in proc.stderr
    assert taken == from_pyc, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_bytecode_is_compiled_once_per_content_and_linked_into_each_venv(tmp_path):
    """lockguard/envs/bytecode.py on venvs of this interpreter, their modules hard links as uv
    makes them: every module compiled at build, into the store, and linked into each later
    venv of the same bytes; the same inode, mtime and size with other bytes (a restored cache)
    are never served another's code; a stored .pyc changed through a venv's link is dropped
    and compiled again; a stale .pyc a wheel shipped is replaced; a module that does not
    compile is left without; with the store off, each venv compiles its own."""
    from lockguard.envs.bytecode import compile_all

    store = tmp_path / "store"
    tag = sys.implementation.cache_tag
    wheel = tmp_path / "wheel"  # uv's cache: one file, linked into each venv
    wheel.mkdir()
    (wheel / "lg_shared.py").write_text("VALUE = 'one'\n")
    (wheel / "lg_broken.py").write_text("def (:\n")
    (wheel / "lg_unused.py").write_text("VALUE = 'unused'\n")
    modules = {"lg_shared": wheel / "lg_shared.py", "lg_broken": wheel / "lg_broken.py",
               "lg_unused": wheel / "lg_unused.py"}

    def pyc(venv_root: Path, module: str) -> Path:
        return next(venv_root.glob("lib/*/site-packages")) / "__pycache__" / f"{module}.{tag}.pyc"

    first = _fake_venv(tmp_path / "first", modules)
    assert compile_all(first, sys.executable, store, _Step()) == (0, 3)  # broken: tried
    assert not pyc(first, "lg_broken").exists()
    assert _imports(first, "lg_shared") == "one"
    second = _fake_venv(tmp_path / "second", modules)
    assert compile_all(second, sys.executable, store, _Step()) == (2, 1)  # broken: again
    assert pyc(first, "lg_shared").stat().st_ino == pyc(second, "lg_shared").stat().st_ino
    assert _imports(second, "lg_unused") == "unused"

    # Other bytes in the same inode, with the same mtime and size (what a cache restored over
    # freed inode numbers can give): not linked, its own code compiled.
    before = (wheel / "lg_shared.py").stat()
    with open(wheel / "lg_shared.py", "r+b") as f:
        f.write(b"VALUE = 'two'\n")
    os.utime(wheel / "lg_shared.py", ns=(before.st_atime_ns, before.st_mtime_ns))
    after = (wheel / "lg_shared.py").stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
        before.st_ino, before.st_mtime_ns, before.st_size)
    third = _fake_venv(tmp_path / "third", modules)
    assert compile_all(third, sys.executable, store, _Step()) == (1, 2)
    assert _imports(third, "lg_shared") == "two"

    # A stored .pyc rewritten in place through a venv's link (a run without the sandbox), its
    # header kept: the next build drops it and compiles its own.
    damaged = pyc(second, "lg_unused")
    forged = bytearray(damaged.read_bytes())
    forged[-1] ^= 1
    with open(damaged, "r+b") as f:
        f.write(bytes(forged))
    fourth = _fake_venv(tmp_path / "fourth", modules)
    assert compile_all(fourth, sys.executable, store, _Step()) == (1, 2)
    assert pyc(fourth, "lg_unused").read_bytes() != bytes(forged)
    assert _imports(fourth, "lg_unused") == "unused"

    # A stale .pyc shipped in the wheel is replaced.
    for stale in ("lg_shared", "lg_unused"):
        pyc(fourth, stale).unlink()
        pyc(fourth, stale).write_bytes(b"\0" * 16)
    assert compile_all(fourth, sys.executable, store, _Step()) == (2, 1)
    assert _imports(fourth, "lg_shared") == "two"
    assert _imports(fourth, "lg_unused") == "unused"
    for gone in (first, second, third):
        shutil.rmtree(gone)
    compile_all(fourth, sys.executable, store, _Step())
    kept = {p.stat().st_ino for p in (store / tag).iterdir()}
    assert kept == {p.stat().st_ino for p in  # the "one" bytecode went with its venvs
                    next(fourth.glob("lib/*/site-packages/__pycache__")).iterdir()}
    assert len(kept) == 2

    # The store off: the venv's own compile, nothing kept.
    own = _fake_venv(tmp_path / "own", modules)
    assert compile_all(own, sys.executable, None, _Step()) == (0, 3)
    assert pyc(own, "lg_shared").stat().st_nlink == 1
    assert _imports(own, "lg_shared") == "two"
    assert {p.stat().st_ino for p in (store / tag).iterdir()} == kept


def test_bytecode_that_cannot_be_compiled_fails_the_build_in_one_line(tmp_path):
    from lockguard.envs.bytecode import compile_all

    (tmp_path / "m.py").write_text("VALUE = 1\n")
    broken = _fake_venv(tmp_path / "v", {"m": tmp_path / "m.py"})
    (broken / "bin" / "python").unlink()
    (broken / "bin" / "python").write_text("#!/bin/sh\necho 'no interpreter here' >&2\nexit 3\n")
    (broken / "bin" / "python").chmod(0o755)
    with pytest.raises(venv.EnvError, match=rf"^{broken}: could not compile its modules' "
                                            r"bytecode: no interpreter here$"):
        compile_all(broken, sys.executable, tmp_path / "store", _Step())


@pytest.mark.slow
def test_a_second_venv_links_the_bytecode_the_first_compiled(monkeypatch, tmp_path):
    """uv installs a wheel's files as links to its cache, so two venvs of one numpy hold one
    inode per module. A venv's build compiles every module's .pyc into the store (its manifest
    lists them), its runs write none; the next venv of that numpy links numpy's and compiles
    its own package's; the interpreter takes them as current. With share_bytecode off, a
    venv compiles its own and links none."""
    import hashlib
    import subprocess

    from conftest import build_wheels

    from lockguard.envs.base import RunRequest

    cache = tmp_path / "cache"
    monkeypatch.setenv("LOCKGUARD_CACHE", str(cache))
    for name in ("UV_CACHE_DIR", "UV_LINK_MODE"):
        monkeypatch.delenv(name, raising=False)
    tag = sys.implementation.cache_tag

    def compiled(env, module: str) -> Path:
        site = next(env.path.glob("lib/python*/site-packages"))
        return site / module / "__pycache__" / f"__init__.{tag}.pyc"

    first = prepared_venv(parse_lock_text(NUMPY_LOCK, "first.txt"))
    built = compiled(first, "numpy").stat()
    assert built.st_nlink == 2  # the venv and the store
    manifest = (first.path / venv.MANIFEST).read_text()
    assert f'"{venv.BYTECODE_OWNER}"' in manifest and f"__init__.{tag}.pyc" in manifest
    request = RunRequest(scenario_id="numpy.mlp", framework="numpy", steps=2, seed=0,
                         device="cpu", threads=1, timeout=300)
    out = tmp_path / "run"
    out.mkdir()
    result = first.run(request, out)
    assert result.status.value == "ok", result.error
    assert compiled(first, "numpy").stat().st_mtime_ns == built.st_mtime_ns  # nothing written
    wheel = build_wheels({"lg-own": ("1.0", "VALUE = 1\n", (), None)}, tmp_path / "wheels")
    digest = hashlib.sha256(wheel["lg-own"].read_bytes()).hexdigest()
    second_lock = parse_lock_text(
        f"{NUMPY_LOCK}\n--find-links {tmp_path / 'wheels'}\nlg-own==1.0 --hash=sha256:{digest}\n",
        "second.txt")
    second = prepared_venv(second_lock)
    assert compiled(second, "numpy").stat().st_ino == built.st_ino
    assert compiled(second, "lg_own").stat().st_nlink == 2
    proc = subprocess.run([str(second.python), "-v", "-c", "import numpy, lg_own"],
                          capture_output=True, text=True, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{compiled(second, 'numpy')} matches " in proc.stderr
    assert f"{compiled(second, 'lg_own')} matches " in proc.stderr
    assert "bytecode is stale" not in proc.stderr
    shutil.rmtree(second.path)
    own = prepared_venv(second_lock, share_bytecode=False)
    assert compiled(own, "numpy").stat().st_nlink == 1
    # The same bytecode, but for the source's path each compile names (the import system gives
    # a code object the path it was loaded from: a stored .pyc is relocatable).
    assert compiled(own, "numpy").read_bytes().replace(
        bytes(own.path), bytes(first.path)) == compiled(first, "numpy").read_bytes()


@pytest.mark.slow
def test_a_sandboxed_run_has_its_bytecode_from_the_build_and_the_same_numbers(monkeypatch,
                                                                             tmp_path):
    """A sandboxed run cannot write its venv, and needs not: the build compiled its modules.
    Its results are bitwise those of an unsandboxed run of the same venv on this machine."""
    import subprocess

    from lockguard.envs.base import RunRequest
    from lockguard.sandbox import resolve

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    for name in ("UV_CACHE_DIR", "UV_LINK_MODE"):
        monkeypatch.delenv(name, raising=False)
    confined = resolve("required")
    lock = parse_lock_text(NUMPY_LOCK, "lock.txt")
    sandboxed = prepared_venv(lock, sandbox=confined)
    site = next(sandboxed.path.glob("lib/python*/site-packages"))
    pyc = site / "numpy" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    built = pyc.stat().st_mtime_ns
    request = RunRequest(scenario_id="numpy.mlp", framework="numpy", steps=3, seed=0,
                         device="cpu", threads=1, timeout=300)
    results = []
    for run in range(2):
        out = tmp_path / f"run{run}"
        out.mkdir()
        results.append(sandboxed.run(request, out))
        assert results[-1].status.value == "ok", results[-1].error
        assert pyc.stat().st_mtime_ns == built
    proc = subprocess.run([str(sandboxed.python), "-v", "-c", "import numpy"],
                          capture_output=True, text=True, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert f"{pyc} matches " in proc.stderr and "bytecode is stale" not in proc.stderr
    out = tmp_path / "bare"
    out.mkdir()
    bare = prepared_venv(lock).run(request, out)
    for result in results:
        assert (result.losses, result.outputs, result.param_digest) == (
            bare.losses, bare.outputs, bare.param_digest)
        # What the run was confined to is part of what it was (and of a golden recorded so).
        assert result.fingerprint["sandbox"] == confined.describe()
    assert "sandbox" not in bare.fingerprint


@pytest.mark.slow
def test_a_checks_two_venvs_are_built_in_parallel(tmp_path):
    """A/B of two numpy locks: both venvs are built, at once where there are two cores."""
    project = make_project(tmp_path / "p", """
        lock = "new.txt"
        scenarios = ["numpy.mlp"]
        steps = 3
        """, locks={"new.txt": DATA / "numpy-2.0.2.txt", "old.txt": DATA / "numpy-1.26.4.txt"})
    env = {"LOCKGUARD_CACHE": str(tmp_path / "cache"), "UV_CACHE_DIR": str(tmp_path / "uv"),
           "COLUMNS": "300"}  # progress lines unwrapped
    proc = run_cli("check", "--baseline-lock", "old.txt", "--format", "text", cwd=project,
                   env=env)
    assert proc.returncode in (0, 1), proc.stderr  # a verdict, whichever it is
    assert "numpy.mlp" in proc.stdout
    # Progress (no terminal: a line when a build starts, one when it ends) shows both builds
    # under their own "environment n of 2", and, with two cores, the second starting before
    # the first ended.
    lines = proc.stderr.splitlines()
    # (each stage names the lock it builds: "environment 1 of 2 (old.txt): ")
    stage = r"environment [12] of 2 \((?:old|new)\.txt\): Building venv"
    started = [i for i, ln in enumerate(lines) if re.match(stage + r" .* …$", ln)]
    ended = [i for i, ln in enumerate(lines) if re.match(stage + r" .*: done in ", ln)]
    assert len(started) == 2 and len(ended) == 2, proc.stderr
    if (os.cpu_count() or 1) >= 2:
        assert max(started) < min(ended), f"the builds did not overlap:\n{proc.stderr}"
    venvs = [p for p in (tmp_path / "cache" / "venvs").iterdir()
             if p.is_dir() and not p.name.endswith(".compile-cache")]
    assert len(venvs) == 2


@pytest.mark.slow
def test_the_host_interpreters_venv_is_made_in_process_another_interpreters_by_uv(
        monkeypatch, tmp_path):
    """`uv venv` is a process start on every build; the host interpreter's venv is made as
    `python -m venv` makes it, in-process. Another interpreter (here the same one by another
    path) still gets `uv venv`. Both envs import the lock's numpy from their own prefix."""
    import subprocess

    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))
    for python in (sys.executable, os.path.realpath(sys.executable)):
        host = python == sys.executable
        monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / ("host" if host else "other")))
        env = prepared_venv(parse_lock_text(NUMPY_LOCK, "numpy.txt"), python=python)
        assert (env.path.parent / f"{env.path.name}.uv.log").exists() is not host
        assert ("\nuv = " in (env.path / "pyvenv.cfg").read_text()) is not host
        out = subprocess.run([str(env.python), "-c", "import numpy, sys; "
                              "print(numpy.__version__, sys.prefix)"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert out == ["2.0.2", str(env.path)]


def _wheel(directory: Path, version: str, tag: str, text: str) -> Path:
    """A one-module wheel of lgfb-pkg, written by hand (no build backend, no index)."""
    import base64
    import hashlib
    import zipfile

    info = f"lgfb_pkg-{version}.dist-info"
    files = {"lgfb_pkg.py": text.encode(),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: lgfb-pkg\nVersion: {version}\n"
                                 .encode(),
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              f"Tag: {tag}\n".encode()}
    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{name},sha256={digest(data)},{len(data)}\n"
                     for name, data in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    wheel = directory / f"lgfb_pkg-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return wheel


def _index(root: Path, wheel: Path) -> str:
    """A one-project PEP 503 index at `root` serving `wheel` with its sha256, as a URL."""
    import hashlib

    page = root / "lgfb-pkg" / "index.html"
    page.parent.mkdir(parents=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    page.write_text(f'<!DOCTYPE html><html><body><a href="{wheel.as_uri()}#sha256={digest}">'
                    f"{wheel.name}</a></body></html>\n")
    return root.as_uri()


@pytest.mark.slow
def test_a_release_split_over_two_indexes_installs_the_file_the_lock_hashes(
        monkeypatch, tmp_path, capsys):
    """A release whose pure wheel is on one index and platform wheel on another, the lock
    hashing the platform one (as a lock compiled against the second index is): uv takes the
    release's files from the first index that has it, even under unsafe-best-match
    (astral-sh/uv#14000), and fails on the hash; the build falls back to pip, which chooses
    among every index's files those the lock hashes, and says so. The hash is still enforced:
    the env holds the platform wheel's module, and a lock hashing neither file fails."""
    import hashlib
    import subprocess
    import sysconfig

    from lockguard.progress import Progress

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))
    (tmp_path / "wheels").mkdir()
    pure = _wheel(tmp_path / "wheels", "1.0", "py3-none-any", "WHICH = 'pure'\n")
    platform = _wheel(tmp_path / "wheels", "1.0",
                      f"py3-none-{re.sub(r'[-.]', '_', sysconfig.get_platform())}",
                      "WHICH = 'platform'\n")
    indexes = (f"--extra-index-url {_index(tmp_path / 'first', pure)}\n"
               f"--extra-index-url {_index(tmp_path / 'second', platform)}\n\n")
    digest = hashlib.sha256(platform.read_bytes()).hexdigest()
    lock = parse_lock_text(f"{indexes}lgfb-pkg==1.0 \\\n    --hash=sha256:{digest}\n",
                           str(tmp_path / "lock.txt"))
    env = prepared_venv(lock, progress=Progress())
    err = capsys.readouterr().err
    assert "uv took a file the lock does not hash; installing with pip" in err
    out = subprocess.run([str(env.python), "-c", "import lgfb_pkg; print(lgfb_pkg.WHICH)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "platform"
    assert venv.verify(env.path, lock, allow_sdist=False) is None
    assert json.loads((env.path / venv.READY).read_text())["installer"] == "pip"  # what built it

    bad = parse_lock_text(f"{indexes}lgfb-pkg==1.0 \\\n    --hash=sha256:{'0' * 64}\n",
                          str(tmp_path / "bad.txt"))
    with pytest.raises(venv.EnvError, match=r"bad\.txt: pip could not install the lock"):
        prepared_venv(bad)


@pytest.mark.slow
def test_a_wrong_hash_from_one_place_fails_at_once_without_a_pip_rebuild(monkeypatch, tmp_path,
                                                                         capsys):
    """Only several indexes give uv's first-index choice its way to miss the hashed file: from
    one place a hash mismatch is the lock's own, and is said as uv said it."""
    import hashlib

    from lockguard import installers
    from lockguard.progress import Progress

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))
    monkeypatch.setattr(installers, "pip_config", lambda: {})  # this machine's pip.conf aside
    (tmp_path / "wheels").mkdir()
    wheel = _wheel(tmp_path / "wheels", "1.0", "py3-none-any", "WHICH = 'pure'\n")
    good = hashlib.sha256(wheel.read_bytes()).hexdigest()
    one = f"--no-index\n--find-links {tmp_path / 'wheels'}\n\nlgfb-pkg==1.0 \\\n"
    assert venv.file_sources(parse_lock_text(one + f"    --hash=sha256:{good}\n", "a.txt")) == 1
    two = one.replace("--no-index\n", "")  # PyPI and the folder: two places
    assert venv.file_sources(parse_lock_text(two + f"    --hash=sha256:{good}\n", "b.txt")) == 2
    bad = parse_lock_text(one + f"    --hash=sha256:{'0' * 64}\n", str(tmp_path / "bad.txt"))
    with pytest.raises(venv.EnvError, match=r"bad\.txt: uv could not install the lock") as e:
        prepared_venv(bad, progress=Progress())
    assert "hash" in str(e.value).lower()
    assert "installing with pip" not in capsys.readouterr().err
