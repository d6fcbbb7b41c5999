"""`check --base` (flows/git_base.py) where mutation testing found no test that would fail
(benchmarks/bench_mutation.py): the base branch's name as a reader sees it, the note of an
uncommitted lock, the refusal of a checkout's own scenario script outside the repository, the
golden folder left out of the scenario-code changes, a lock renamed away from a configuration
that no longer names it, and an export that never pinned what its uv.lock pinned. Each a real
git repository, as tests/test_gate_policy.py builds them; the expected texts are written out
here, from the commits' own hashes."""
from __future__ import annotations

from pathlib import Path

import pytest

from fakes import FakeBackend
from lockguard.config import load_config
from lockguard.files import EscapeError
from lockguard.flows.git_base import _listed, check_base, open_gate, short_ref
from lockguard.settings import Settings
from test_gate_policy import DATA_LOCKS, NUMPY, commit_all, git, pairs, project, repository

SCRIPT = "def run(steps, seed):\n    return {'losses': [1.0] * steps}\n"
TABLE = ('[tool.lockguard]\nlock = "a.txt"\nscenarios = ["mine"]\n'
         '[tool.lockguard.scenario.mine]\nscript = "sc/mine.py"\nframework = "numpy"\n')


@pytest.mark.parametrize("ref, shown", [
    ("main", "main"), ("origin/main", "main"), ("refs/heads/main", "main"),
    ("refs/remotes/origin/main", "main"), ("refs/remotes/upstream/dev", "upstream/dev"),
    ("refs/tags/v1", "tags/v1"), ("refs/heads/refs/x", "refs/x"),
])
def test_the_base_branch_is_named_without_its_namespace(ref, shown):
    assert short_ref(ref) == shown


def test_changed_code_is_listed_ten_files_then_a_count():
    ten = [f"sc/f{i}.py" for i in range(10)]
    assert _listed(ten) == ten  # exactly `most`: all of them, no count line
    twelve = [f"sc/f{i}.py" for i in range(12)]
    assert _listed(twelve) == ten + ["... and 2 more changed files of scenario code"]
    assert _listed(twelve, most=3) == ["sc/f0.py", "sc/f1.py", "sc/f2.py",
                                       "... and 9 more changed files of scenario code"]


def test_nothing_moved_names_the_merge_base_by_twelve_hex_digits(tmp_path):
    root = project(tmp_path, 'lock = "a.txt"', {"a.txt": "numpy==1.26.4\n"})
    merge_base = git(root, "rev-parse", "main").strip()
    gate = open_gate(load_config(start=root), "main", [])
    report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=FakeBackend())
    assert f"no lock changed since main (merge base {merge_base[:12]}): nothing to check" \
        in report.notes


def test_an_uncommitted_lock_is_said_and_a_committed_one_is_not(tmp_path, monkeypatch):
    root = project(tmp_path, 'lock = "a.txt"', {"a.txt": "numpy==1.26.4\n"})
    monkeypatch.chdir(root)
    gate = open_gate(load_config(start=root), "main", [])
    assert not any(n.startswith("checking what is on disk") for n in gate.notes)
    (root / "a.txt").write_text("numpy==2.0.2\n")
    gate = open_gate(load_config(start=root), "main", [])
    assert "checking what is on disk: uncommitted changes in a.txt" in gate.notes
    commit_all(root)
    gate = open_gate(load_config(start=root), "main", [])
    assert not any(n.startswith("checking what is on disk") for n in gate.notes)


def test_a_checkouts_own_script_outside_the_repository_is_refused(tmp_path):
    """The target judges (its table has no such scenario), but the checkout's configuration
    names a script out of the repository: refused all the same, before anything reads it."""
    root = repository(tmp_path, {"pyproject.toml": '[tool.lockguard]\nlock = "a.txt"\n',
                                 "a.txt": "numpy==1.26.4\n"})
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.py").write_text(SCRIPT)
    (root / "pyproject.toml").write_text(
        '[tool.lockguard]\nlock = "a.txt"\n'
        '[tool.lockguard.scenario.x]\nscript = "../outside/x.py"\nframework = "numpy"\n')
    commit_all(root)
    with pytest.raises(EscapeError, match="a scenario script"):
        open_gate(load_config(start=root), "main", [], start=root)


def test_a_changed_golden_is_no_scenario_code_change(tmp_path):
    root = repository(tmp_path, {"pyproject.toml": TABLE, "a.txt": "numpy==1.26.4\n",
                                 "sc/mine.py": SCRIPT, "golden/cpu/x/mine.json": "{}\n"})
    (root / "golden" / "cpu" / "x" / "mine.json").write_text('{"re": "recorded"}\n')
    commit_all(root)
    gate = open_gate(load_config(start=root), "main", [], start=root)
    assert gate.code_changes == []
    (root / "sc" / "mine.py").write_text(SCRIPT + "# changed\n")
    commit_all(root)
    gate = open_gate(load_config(start=root), "main", [], start=root)
    assert gate.code_changes == ["sc/mine.py"]


def test_a_lock_renamed_out_of_the_configuration_is_checked_where_it_went(tmp_path):
    """The base names a.txt and b.txt; the checkout names a.txt only and renamed b.txt to
    c.txt: the base's policy checks b.txt all the same, against c.txt, which git says it
    became (not as removed)."""
    root = project(tmp_path, 'locks = ["a.txt", "b.txt"]',
                   {"a.txt": "numpy==1.26.4\n", "b.txt": "torch==2.3.0\nsix==1.16.0\n"})
    git(root, "mv", "b.txt", "c.txt")
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlocks = ["a.txt"]\n')
    commit_all(root)
    gate = open_gate(load_config(start=root), "main", [])
    assert pairs(gate) == [("a.txt", "a.txt", "same path"),
                           ("b.txt", "c.txt", "renamed, as git sees it")]


def test_a_config_that_git_records_as_a_link_at_the_tip_names_the_tip(tmp_path):
    root = repository(tmp_path, {"conf/pyproject.toml": '[tool.lockguard]\nlock = "../a.txt"\n',
                                 "a.txt": "numpy==1.26.4\n"})
    git(root, "checkout", "-q", "main")
    (root / "pyproject.toml").symlink_to("conf/pyproject.toml")
    commit_all(root, "the gate, through a link")
    tip = git(root, "rev-parse", "main").strip()
    git(root, "checkout", "-q", "pr")
    git(root, "merge", "-q", "main")
    (root / "pyproject.toml").unlink()
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlock = "a.txt"\n')
    commit_all(root)
    with pytest.raises(EscapeError) as caught:
        open_gate(load_config(start=root), "main", [], start=root)
    assert str(caught.value).startswith(
        f"main@{tip[:7]}:pyproject.toml: the configuration, which git records as a symbolic "
        "link")


def test_an_export_never_in_step_with_the_uv_lock_beside_it_is_not_its_export(tmp_path):
    """pylock.toml beside uv.lock names `uv export` in its header, but at the merge base the
    two did not pin alike (another project's export): the uv.lock moving alone makes no
    "stale export" rule."""
    markers = DATA_LOCKS / "markers"
    uv_lock, pylock = (markers / "uv.lock").read_text(), (markers / "pylock.toml").read_text()
    apart = pylock
    for version in ("2.2.6", "2.4.6", "2.5.5"):
        apart = apart.replace(version, version[:-1] + "7")
    assert apart != pylock
    root = project(tmp_path, 'locks = ["uv.lock", "pylock.toml"]',
                   {"uv.lock": uv_lock, "pylock.toml": apart})
    text = uv_lock
    for version in ("2.2.6", "2.4.6", "2.5.5"):
        text = text.replace(version, version[:-1] + "9")
    (root / "uv.lock").write_text(text)
    gate = open_gate(load_config(start=root), "main", [], start=root)
    report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=FakeBackend())
    assert [r.rule for r in report.rule_failures] == []


def test_dirty_paths_of_the_checkout_stay_relative(tmp_path, monkeypatch):
    root = project(tmp_path, 'lock = "locks/a.txt"', {"locks/a.txt": "numpy==1.26.4\n"})
    monkeypatch.chdir(root / "locks")
    (root / "locks" / "a.txt").write_text("numpy==2.0.2\n")
    gate = open_gate(load_config(start=root), "main", [], start=root)
    assert gate.notes[-1] == "checking what is on disk: uncommitted changes in a.txt"
    assert Path("a.txt").is_file()


def test_a_moved_lock_of_another_framework_no_scenario_runs_is_named_so(tmp_path, monkeypatch):
    """a.txt pins numpy, b.txt torch; both move, only numpy's scenario runs: b.txt's rule says
    no selected scenario runs from it (no other lock pins torch), and a.txt's side at the merge
    base is named main@<7 hex digits>:a.txt."""
    root = project(tmp_path, 'locks = ["a.txt", "b.txt"]',
                   {"a.txt": "numpy==1.26.4\n", "b.txt": "torch==2.3.0\n"})
    monkeypatch.chdir(root)
    (root / "b.txt").write_text("torch==2.4.0\n")
    (root / "a.txt").write_text("numpy==2.0.2\n")
    commit_all(root)
    merge_base = git(root, "rev-parse", "main").strip()
    gate = open_gate(load_config(start=root), "main", [])
    report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=FakeBackend())
    [rule] = report.rule_failures
    assert (rule.lock, rule.rule) == ("b.txt", "moved lock not compared")
    assert rule.message.startswith("it moved, but no selected scenario runs from it: ")
    assert f'"main@{merge_base[:7]}:a.txt"' in report.model_dump_json()



def test_a_configuration_is_named_by_its_file_or_said_to_have_none(tmp_path, monkeypatch):
    from lockguard.flows.git_base import _config_name
    from test_gate_policy import config_of

    root = project(tmp_path, 'lock = "a.txt"', {"a.txt": "numpy==1.26.4\n"})
    monkeypatch.chdir(root)
    assert _config_name(load_config(start=root)) == "pyproject.toml"
    assert _config_name(config_of('lock = "a.txt"\n')) == "no configuration file"


def lock_and_code_project(tmp_path: Path, code_changed: bool) -> Path:
    """A user scenario `mine` (sc/mine.py) on a.txt; the pull request moves numpy 1.26.4 ->
    2.0.2 and, if told, changes the script's losses from 1.0 to 2.0."""
    root = repository(tmp_path, {"pyproject.toml": TABLE, "a.txt": "numpy==1.26.4\n",
                                 "sc/mine.py": SCRIPT})
    (root / "a.txt").write_text("numpy==2.0.2\n")
    if code_changed:
        (root / "sc" / "mine.py").write_text(SCRIPT.replace("[1.0]", "[2.0]"))
    commit_all(root)
    return root


def test_a_lock_change_without_a_code_change_runs_no_code_check(tmp_path):
    """(seed 3 survivor: git_base.py:286 `code_changes and users` made `or`.) The lock A/B
    runs the script once a side (main's code both times, unchanged); no code A/B follows, so
    nothing says the code changed too."""
    from lockguard.scenarios import select

    root = lock_and_code_project(tmp_path, code_changed=False)
    gate = open_gate(load_config(start=root), "main", [], start=root)
    assert gate.code_changes == []
    fake = FakeBackend()
    report = check_base(Settings.resolve(gate.judging), gate, select(gate.judging, []),
                        backend=fake)
    assert [t for _, t in fake.scripts] == [SCRIPT, SCRIPT]
    assert not any(n.startswith("the scenarios' code changed too") for n in report.notes)


def test_under_the_pull_requests_policy_both_sides_run_its_own_code(tmp_path):
    """(seed 3 survivor: git_base.py:402 `policy_from != "base" or repo is None` made `and`.)
    --policy pr: the lock A/B runs this checkout's script on both sides, never main's, and no
    target tree is extracted."""
    from lockguard.flows.git_base import _target_code
    from lockguard.scenarios import select

    root = lock_and_code_project(tmp_path, code_changed=True)
    gate = open_gate(load_config(start=root), "main", [], "pr", start=root)
    mine = select(gate.judging, [])
    with _target_code(gate, mine) as tree:
        assert tree is None
    fake = FakeBackend()
    check_base(Settings.resolve(gate.judging), gate, mine, backend=fake)
    changed = SCRIPT.replace("[1.0]", "[2.0]")
    assert [t for _, t in fake.scripts] == [changed, changed]
    # under the base's policy the tree is main's tip, named by its seven first digits
    base_gate = open_gate(load_config(start=root), "main", [], start=root)
    tip = git(root, "rev-parse", "main").strip()
    with _target_code(base_gate, mine) as tree:
        assert tree is not None and tree.label == f"main@{tip[:7]}"
        assert (tree.root / "sc" / "mine.py").read_text() == SCRIPT


def test_locks_given_on_the_command_line_need_none_in_the_configuration(tmp_path, monkeypatch):
    """(seed 3 survivor: git_base.py:168 `if not pairs` negated.) The configuration names no
    lock; `--lock a.txt` pairs a.txt with itself at main: no "no lock given" error. Without
    any lock the error is the one lock_paths says."""
    from lockguard.config import ConfigError

    root = project(tmp_path, 'steps = 4', {"a.txt": "numpy==1.26.4\n"})
    monkeypatch.chdir(root)
    gate = open_gate(load_config(start=root), "main", ["a.txt"])
    assert pairs(gate) == [("a.txt", "a.txt", "same path")]
    with pytest.raises(ConfigError, match="^no lock given: pass --lock PATH or set `lock`"):
        open_gate(load_config(start=root), "main", [])


def test_a_new_lock_no_selected_scenario_runs_from_is_noted_and_passes(tmp_path, monkeypatch):
    """(seed 3 survivor: git_base.py:215 `if moved` negated.) main checks a.txt (numpy); the
    pull request adds b.txt (torch), which pairs with nothing at main, and leaves a.txt alone:
    numpy's scenario has nothing to compare, and the note says why nothing ran."""
    root = project(tmp_path, 'locks = ["a.txt"]', {"a.txt": "numpy==1.26.4\n"})
    monkeypatch.chdir(root)
    (root / "b.txt").write_text("torch==2.4.0\n")
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlocks = ["a.txt", "b.txt"]\n')
    commit_all(root)
    gate = open_gate(load_config(start=root), "main", [])
    fake = FakeBackend()
    report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=fake)
    assert "no selected scenario runs from a lock new since main" in report.notes
    assert report.passed and report.rule_failures == [] and fake.steps == []


def test_a_lock_pair_is_frozen(tmp_path):
    """(seed 4 survivor: git_base.py's `@dataclass(frozen=True)` made False.) A pair read from
    git is a value: nothing changes it after the gate paired it."""
    import dataclasses

    root = project(tmp_path, 'lock = "a.txt"', {"a.txt": "numpy==1.26.4\n"})
    gate = open_gate(load_config(start=root), "main", [])
    [pair] = gate.pairs
    with pytest.raises(dataclasses.FrozenInstanceError):
        pair.how = "renamed"  # type: ignore[misc]


def test_an_export_in_step_does_not_stop_the_search_for_a_stale_one(tmp_path):
    """(seed 4 survivor: git_base.py's `continue` after an export in step made `break`.) Two
    projects, a/ and b/, each a uv.lock and the pylock.toml exported from it: a/ moves both in
    step, b/ moves its uv.lock alone; b/pylock.toml is named stale all the same."""
    markers = DATA_LOCKS / "markers"
    uv_lock, pylock = (markers / "uv.lock").read_text(), (markers / "pylock.toml").read_text()

    def moved(text: str) -> str:
        for version in ("2.2.6", "2.4.6", "2.5.5"):  # numpy, whichever Python reads it
            text = text.replace(version, version[:-1] + "9")
        return text

    root = project(tmp_path, 'locks = ["a/uv.lock", "a/pylock.toml", "b/uv.lock", '
                   '"b/pylock.toml"]', {"a/uv.lock": uv_lock, "a/pylock.toml": pylock,
                                        "b/uv.lock": uv_lock, "b/pylock.toml": pylock})
    for name in ("a/uv.lock", "a/pylock.toml", "b/uv.lock"):
        (root / name).write_text(moved((root / name).read_text()))
    gate = open_gate(load_config(start=root), "main", [], start=root)
    report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=FakeBackend())
    assert not report.passed
    [rule] = report.rule_failures
    assert rule.lock.endswith("/b/pylock.toml") and rule.rule == "stale export"
    assert "which this change moved: it still holds the old pins" in rule.message
