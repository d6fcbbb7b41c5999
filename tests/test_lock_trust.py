"""Locks that would install unchecked files (locks/trust.py), and credentials in URLs
(errors.redact): refused by default before anything is built, allowed by an explicit opt-in
that every report then warns of; a URL's password never shown, in any format or log line.

The refusals of whole runs are in the bad-input corpus (tests/test_bad_input.py); here the
mechanisms, the pipeline's order (refused before the first build) and the warnings in every
report format, on the fake backend (no environment is built).
"""

from __future__ import annotations

import json

import pytest

from conftest import DATA, run_cli
from fakes import FakeBackend, lock
from lockguard.config import Config, Options
from lockguard.errors import one_line, redact
from lockguard.flows import pipeline
from lockguard.flows.ab import check_ab
from lockguard.flows.record import record
from lockguard.locks.model import LockError
from lockguard.locks.parser import parse_lock_text
from lockguard.locks.trust import require_trusted, warnings, weaknesses
from lockguard.names import FORMATS
from lockguard.report import render
from lockguard.scenarios import bundled
from lockguard.settings import Settings

NUMPY_LOCK = (DATA / "numpy-2.0.2.txt").read_text()
NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]
SECRET = "s3cret-Pa55"


def kinds(text: str) -> list[tuple[str, int | None]]:
    return [(w.kind, w.line) for w in weaknesses(parse_lock_text(text, "lock.txt"))]


def test_a_hashed_https_lock_has_no_weakness():
    assert kinds("--index-url https://pypi.org/simple\n--find-links wheels\n"
                 "--find-links file:///srv/wheels\n" + NUMPY_LOCK) == []


def test_what_makes_a_lock_untrusted_names_its_line():
    assert kinds("numpy==2.0.2\n") == [("unhashed", 1)]
    assert kinds("# freeze\nsix==1.16.0\nnumpy==2.0.2\n") == [("unhashed", 2)]
    assert kinds("--index-url http://idx.example/simple\n" + NUMPY_LOCK) \
        == [("insecure_index", 1)]
    assert kinds(NUMPY_LOCK + "--extra-index-url HTTP://idx.example/simple\n"
                 "--find-links http://wheels.example/\n--trusted-host idx.example\n") \
        == [("insecure_index", n) for n in range(NUMPY_LOCK.count("\n") + 1,
                                                 NUMPY_LOCK.count("\n") + 4)]
    assert kinds("--index-url http://idx.example/simple\nnumpy==2.0.2\n") \
        == [("insecure_index", 1), ("unhashed", 2)]


def test_require_trusted_refuses_unless_that_weakness_is_opted_into():
    both = parse_lock_text(f"--index-url http://alice:{SECRET}@idx.example/simple\n"
                           "numpy==2.0.2\n", "lock.txt")
    with pytest.raises(LockError) as info:
        require_trusted(both, allow_unhashed=True, allow_insecure_index=False)
    text = one_line(str(info.value))
    assert text.startswith("lock.txt:1: --index-url http://alice:***@idx.example/simple is "
                           "plain http")
    assert "allow_insecure_index = true" in text and SECRET not in text
    with pytest.raises(LockError, match=r"lock.txt:2: numpy==2.0.2 has no --hash.*"
                                        r"allow_unhashed = true"):
        require_trusted(both, allow_unhashed=False, allow_insecure_index=True)
    require_trusted(both, allow_unhashed=True, allow_insecure_index=True)
    assert warnings(both, "lock.txt", allow_unhashed=True, allow_insecure_index=True) == [
        "warning: lock.txt:1: --index-url http://alice:***@idx.example/simple is plain http "
        "(whoever is on the path can serve other files); allowed by allow_insecure_index = true",
        "warning: lock.txt:2: numpy==2.0.2 has no --hash, nor has any pin of the lock (an "
        "install takes whatever file the index serves); allowed by allow_unhashed = true"]
    # No opt-in, no warning: such a lock is refused before it installs anything.
    assert warnings(both, "lock.txt", allow_unhashed=False, allow_insecure_index=False) == []


def test_the_opt_ins_take_only_a_literal_true():
    for key in ("allow_unhashed", "allow_insecure_index"):
        assert getattr(Config(**{key: True}), key) is True
        for value in ("yes", 1, "true"):
            with pytest.raises(ValueError):
                Config(**{key: value})


def test_no_environment_is_built_before_every_lock_is_admitted(tmp_path, monkeypatch):
    """The real backend checks every lock of a check before it builds the first environment:
    an A/B whose candidate is unhashed builds not even its (hashed) baseline."""
    from lockguard.envs import local, venv

    built = []
    monkeypatch.setattr(venv, "_prepare",
                        lambda lock, **_: built.append(lock) or pytest.fail("built"))
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    good = lock(tmp_path, "old.txt", NUMPY_LOCK)
    bad = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    backend = pipeline.run_backend(Settings.resolve(Config(root=tmp_path)))
    assert isinstance(backend, venv.VenvBackend)
    envs = pipeline.Environments(backend)
    with pytest.raises(LockError, match=r"new.txt:1: numpy==2.0.2 has no --hash"):
        envs.prepare_all([(good, "numpy", "cpu"), (bad, "numpy", "cpu")])
    assert built == []
    # --env local installs nothing from the lock: nothing to refuse.
    here = pipeline.run_backend(Settings.resolve(Config(root=tmp_path),
                                                      Options(env="local")))
    assert isinstance(here, local.LocalBackend)
    here.admit([bad.lock])


def test_every_report_format_warns_of_an_opted_in_lock(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # locks are named relative to the working directory
    config = Config(root=tmp_path, golden_dir="golden", steps=4, allow_unhashed=True,
                    allow_insecure_index=True)
    new = lock(tmp_path, "new.txt", f"--index-url http://bob:{SECRET}@idx.example/simple\n"
                                    "numpy==2.0.2\n")
    old = lock(tmp_path, "old.txt", NUMPY_LOCK)
    expected = ["warning: new.txt:1: --index-url http://bob:***@idx.example/simple is plain "
                "http", "warning: new.txt:2: numpy==2.0.2 has no --hash"]
    for report in (record(Settings.resolve(config), [new], NUMPY, backend=FakeBackend()),
                   check_ab(Settings.resolve(config), [new], [old], NUMPY, backend=FakeBackend())):
        notes = [n for n in report.notes if n.startswith("warning:")]
        assert [n[:len(e)] for n, e in zip(notes, expected)] == expected, report.notes
        for fmt in FORMATS:
            shown = render(report, fmt)
            assert SECRET not in shown, fmt
            if fmt == "json":
                shown = " ".join(json.loads(shown)["notes"])
            shown = shown.replace("\\", "").replace("\n", " ")  # Markdown escapes * and _
            for line in expected:
                assert line.removeprefix("warning: ") in shown, (fmt, line)
    # Without the opt-in (a fake backend installs nothing, so nothing refuses) no warning.
    quiet = record(Settings.resolve(Config(root=tmp_path, golden_dir="g2", steps=4)), [new], NUMPY,
                   backend=FakeBackend())
    assert not [n for n in quiet.notes if n.startswith("warning:")]


# ----------------------------------------------------------------------------- redaction

@pytest.mark.parametrize("text, shown", [
    ("https://alice:pw@idx.example/simple", "https://alice:***@idx.example/simple"),
    ("https://ghp_tok3n@github.com/org/repo", "https://***@github.com/org/repo"),
    ("https://user:p@ss@idx.example/x", "https://user:***@idx.example/x"),
    ("https://idx.example/simple?token=abc&page=2", "https://idx.example/simple?token=***&page=2"),
    ("https://b.s3.example/k?X-Amz-Signature=ab12&X-Amz-Date=1",
     "https://b.s3.example/k?X-Amz-Signature=***&X-Amz-Date=1"),
    ("--index-url https://idx.example/simple?api_key=zz (line 3)",
     "--index-url https://idx.example/simple?api_key=*** (line 3)"),
    # Left alone: no URL credentials in them.
    ("mail bob@example.com", "mail bob@example.com"),
    ("numpy==2.0.2 --hash=sha256:abcd", "numpy==2.0.2 --hash=sha256:abcd"),
    ("https://idx.example/simple", "https://idx.example/simple"),
])
def test_redact(text, shown):
    assert redact(text) == shown
    assert one_line(text) == shown  # every error line goes through it


def test_lockguard_diff_shows_no_password_in_any_format(tmp_path):
    (tmp_path / "old.txt").write_text(NUMPY_LOCK)
    (tmp_path / "new.txt").write_text(
        f"--index-url https://alice:{SECRET}@idx.example/simple\n"
        f"--extra-index-url https://idx.example/extra?token={SECRET}\n" + NUMPY_LOCK)
    for fmt in FORMATS:
        proc = run_cli("diff", "old.txt", "new.txt", "--format", fmt, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert SECRET not in proc.stdout + proc.stderr, fmt
        if fmt != "junit":  # junit lists no lock options
            assert "alice:" in proc.stdout, fmt  # the account is shown, its password is not
    assert "alice:***@idx.example" in run_cli("diff", "old.txt", "new.txt", cwd=tmp_path).stdout


def test_progress_lines_are_redacted(capsys):
    from lockguard.progress import Progress

    progress = Progress(verbose=True)
    progress.info(f"resolving from https://u:{SECRET}@idx.example/simple")
    progress.detail(f"index https://idx.example/?token={SECRET}")
    with progress.step(f"Installing from https://u:{SECRET}@idx.example/simple"):
        pass
    err = capsys.readouterr().err
    assert SECRET not in err and "u:***@idx.example" in err and "token=***" in err


def test_a_lock_from_the_cli_is_refused_before_the_cache_is_touched(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.lockguard]\nlock = "lock.txt"\n')
    (project / "lock.txt").write_text("numpy==2.0.2\n")
    cache = tmp_path / "cache"
    proc = run_cli("build", "--framework", "numpy", cwd=project,
                   env={"LOCKGUARD_CACHE": str(cache)})
    assert proc.returncode == 2 and "lock.txt:1" in proc.stderr and "allow_unhashed" in \
        proc.stderr, proc.stderr
    assert not cache.exists()
