"""Culprit bisection's logic, fast: the search on counted oracles, change units on parsed locks,
mix locks, the metadata consistency check, and the whole flow on the fake backend (report shape
in every format). Real environments: tests/test_bisect.py."""

from __future__ import annotations

import json
import math
from itertools import combinations

import pytest

from fakes import FakeBackend
from lockguard.config import Config, Options
from lockguard.flows.ab import check_ab
from lockguard.flows.bisect import bisect_search, change_units, ddmin, inconsistency, mix_text
from lockguard.locks.ref import LockRef, read_lock
from lockguard.locks.diff import diff_locks
from lockguard.locks.parser import parse_lock_text
from lockguard.names import Verdict
from lockguard.report import render
from lockguard.scenarios import bundled
from lockguard.settings import Settings

NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]


class Counted:
    """An oracle that fails when the subset holds every index of `needed`; counts the distinct
    subsets asked (each would be an environment build)."""

    def __init__(self, needed: set[int], unresolved: set[frozenset[int]] = frozenset()):
        self.needed = needed
        self.unresolved = unresolved
        self.asked: list[frozenset[int]] = []

    def __call__(self, subset: frozenset[int]) -> str:
        assert subset not in self.asked, "a mix was asked twice"
        assert subset and len(subset) < self.n, "the empty and full mixes are known"
        self.asked.append(subset)
        if subset in self.unresolved:
            return "unresolved"
        return "fail" if self.needed <= subset else "pass"


@pytest.mark.parametrize("n", [2, 3, 5, 6, 7, 8, 13, 16, 33])
def test_a_single_culprit_takes_at_most_log2_n_plus_one_mixes(n):
    for culprit in range(n):
        oracle = Counted({culprit})
        oracle.n = n
        found, strategy = bisect_search(n, oracle)
        assert found == {culprit} and strategy == "binary search"
        assert len(oracle.asked) <= math.ceil(math.log2(n)) + 1, (culprit, oracle.asked)


@pytest.mark.parametrize("n", [2, 4, 6, 9])
def test_two_packages_needed_together_are_found_as_the_pair(n):
    for pair in combinations(range(n), 2):
        oracle = Counted(set(pair))
        oracle.n = n
        found, _ = bisect_search(n, oracle)
        assert found == set(pair), (pair, oracle.asked)


def test_ddmin_is_one_minimal_with_three_needed_and_an_unresolved_mix():
    n = 8
    oracle = Counted({1, 4, 6}, unresolved={frozenset(range(4))})
    oracle.n = n
    found, strategy = bisect_search(n, oracle)
    assert found == {1, 4, 6} and strategy == "ddmin"
    # 1-minimal: removing any one element no longer fails
    for x in found:
        assert not {1, 4, 6} <= found - {x}


def test_ddmin_alone_on_a_single_element():
    oracle = Counted({3})
    oracle.n = 99
    assert ddmin([0, 1, 2, 3, 4], oracle) == {3}


# ----------------------------------------------------------------------------- units

OLD = """\
numpy==1.26.4
torch==2.3.0
torchvision==0.18.0
triton==2.3.0
nvidia-cublas-cu12==12.1.3.1
jax==0.4.30
jaxlib==0.4.30
six==1.16.0
idna==3.6
attrs==23.1.0
"""
NEW = """\
numpy==2.0.2
torch==2.4.0
torchvision==0.19.0
triton==3.0.0
nvidia-cublas-cu12==12.4.2.65
jax==0.4.30
jaxlib==0.4.30
six==1.17.0
idna==3.7
packaging==24.0
"""


def test_units_move_a_framework_family_and_its_cuda_wheels_together():
    diff = diff_locks(parse_lock_text(OLD, "old.txt"), parse_lock_text(NEW, "new.txt"))
    units = {u.label: [c.name for c in u.changes] for u in change_units(diff)}
    assert units == {
        "attrs": ["attrs"],  # removed
        "idna": ["idna"],
        "numpy": ["numpy"],
        "packaging": ["packaging"],  # added
        "six": ["six"],
        "torch family": ["nvidia-cublas-cu12", "torch", "torchvision", "triton"],
    }


def test_cuda_wheels_alone_are_one_unit_and_ml_dtypes_joins_jax_and_tensorflow():
    old = "nvidia-cudnn-cu12==9.1.0.70\nnvidia-nccl-cu12==2.20.5\njax==0.4.30\nml-dtypes==0.4.0\n" \
          "keras==3.3.0\nsix==1.16.0\n"
    new = "nvidia-cudnn-cu12==9.1.1.17\nnvidia-nccl-cu12==2.21.5\njax==0.4.31\nml-dtypes==0.4.1\n" \
          "keras==3.4.0\nsix==1.16.0\n"
    diff = diff_locks(parse_lock_text(old, "o"), parse_lock_text(new, "n"))
    units = {u.label: sorted(c.name for c in u.changes) for u in change_units(diff)}
    # jax moved, so the CUDA wheels go with it; ml-dtypes ties jax to tensorflow, whose own
    # packages did not move: the unit is named for jax. Keras 3 is released on its own
    # (tensorflow asks for keras>=3): a unit of its own, named as Keras.
    assert units == {"jax family": [
        "jax", "ml-dtypes", "nvidia-cudnn-cu12", "nvidia-nccl-cu12"], "keras": ["keras"]}
    only_cuda = diff_locks(parse_lock_text(old, "o"), parse_lock_text(
        old.replace("9.1.0.70", "9.1.1.17").replace("2.20.5", "2.21.5"), "n"))
    assert {u.label: len(u.changes) for u in change_units(only_cuda)} == {"CUDA wheels": 2}


def test_a_mix_is_the_baseline_with_the_chosen_units_from_the_candidate(tmp_path):
    h = {c: "sha256:" + c * 64 for c in "abcdef"}
    (tmp_path / "wheels").mkdir()
    (tmp_path / "old.txt").write_text(
        f"--find-links wheels\nsix==1.16.0 --hash={h['a']}\nattrs==23.1.0 --hash={h['b']}\n"
        f"numpy==1.26.4 --hash={h['c']}\n")
    (tmp_path / "new.txt").write_text(
        f"--extra-index-url https://example.org/simple\nsix==1.17.0 --hash={h['d']}\n"
        f"numpy==2.0.2 --hash={h['e']}\npackaging==24.0 --hash={h['f']}\n")
    old = LockRef(tmp_path / "old.txt", read_lock(tmp_path / "old.txt"))
    new = LockRef(tmp_path / "new.txt", read_lock(tmp_path / "new.txt"))
    units = {u.label: u for u in change_units(diff_locks(old.lock, new.lock))}
    form, text = mix_text(old, new, [units["numpy"], units["attrs"], units["packaging"]])
    assert form == "requirements.txt" and text.startswith("# lockguard bisect: ")
    mix = parse_lock_text(text, "mix.txt")
    pins = {p.name: (p.version, p.hashes) for p in mix.pins}
    assert pins == {"six": ("1.16.0", (h["a"],)), "numpy": ("2.0.2", (h["e"],)),
                    "packaging": ("24.0", (h["f"],))}  # attrs removed, packaging added
    # made absolute: it lies beside the baseline lock (locks.writer.find_link, pip's rule)
    assert mix.options.find_links == (str(tmp_path / "wheels"),)
    assert mix.options.extra_index_urls == ("https://example.org/simple",)
    everything = parse_lock_text(mix_text(old, new, units.values())[1], "all.txt")
    assert {(p.name, p.version, p.hashes) for p in everything.pins} == {
        (p.name, p.version, p.hashes) for p in new.lock.pins}


def test_the_consistency_check_reads_dependency_metadata():
    requires = {("lg-b", "2.0"): ("lg-a>=2.0", 'colorama; sys_platform == "win32"'),
                ("lg-b", "1.0"): ("lg-a",), ("lg-a", "1.0"): (), ("lg-a", "2.0"): ()}
    old = parse_lock_text("lg-a==1.0\nlg-b==1.0\n", "old")
    new = parse_lock_text("lg-a==2.0\nlg-b==2.0\n", "new")
    known = {"lg-a", "lg-b"}
    assert inconsistency(old, requires, "3.11", known) is None
    assert inconsistency(new, requires, "3.11", known) is None
    half = parse_lock_text("lg-a==1.0\nlg-b==2.0\n", "mix")
    assert inconsistency(half, requires, "3.11", known) == (
        "lg-b==2.0 requires lg-a>=2.0; the mix pins lg-a==1.0")
    gone = parse_lock_text("lg-b==1.0\nsix==1.0\n", "mix")
    assert "which the mix does not pin" in inconsistency(gone, requires, "3.11", known)
    assert inconsistency(gone, requires, "3.11", {"lg-b"}) is None  # neither lock pins lg-a


# ------------------------------------------------------------------------------ flow

HARMLESS = ["attrs", "idna", "iniconfig", "packaging", "pyparsing", "six"]


def test_the_flow_names_numpy_among_harmless_bumps_in_every_format(tmp_path):
    """On the fake backend a run depends only on the numpy version: numpy is the culprit."""
    old_lines = [f"{p}==1.0" for p in HARMLESS] + ["numpy==1.26.4"]
    new_lines = [f"{p}==1.1" for p in HARMLESS] + ["numpy==2.0.2"]
    (tmp_path / "old.txt").write_text("\n".join(old_lines) + "\n")
    (tmp_path / "new.txt").write_text("\n".join(new_lines) + "\n")
    config = Config(root=tmp_path, golden_dir="golden", steps=6)
    old = LockRef(tmp_path / "old.txt", read_lock(tmp_path / "old.txt"))
    new = LockRef(tmp_path / "new.txt", read_lock(tmp_path / "new.txt"))
    fake = FakeBackend()
    report = check_ab(Settings.resolve(config, Options(bisect=True)), [new], [old], NUMPY,
                      backend=fake)
    assert not report.passed and report.verdicts[0].verdict == Verdict.drift
    [b] = report.bisection
    assert b.culprit == ["numpy 1.26.4 → 2.0.2"] and b.found
    assert b.sentence() == ("drift in numpy.mlp caused by numpy 1.26.4 → 2.0.2 "
                            "(the 6 other changes reproduce the baseline)")
    assert b.builds == len(b.trials) <= math.ceil(math.log2(7)) + 2 == b.bound
    assert {t.status for t in b.trials} <= {"reproduces", "baseline"}
    assert all(t.status == ("reproduces" if "numpy" in t.units else "baseline")
               for t in b.trials)
    # every mix ran the failing scenario once (no baseline re-run for a drift)
    assert len(fake.runs) == 2 + len(b.trials)

    text = render(report, "text")
    assert b.sentence() in text and "mix build(s)" in text
    assert b.sentence() in render(report, "markdown")
    junit = render(report, "junit")
    assert "caused by numpy 1.26.4 → 2.0.2" in junit
    assert "caused by numpy 1.26.4 → 2.0.2" in render(report, "github")
    html = render(report, "html")
    assert "caused by numpy 1.26.4 → 2.0.2" in html and "reproduces" in html
    document = json.loads(render(report, "json"))
    assert document["bisection"][0]["culprit"] == ["numpy 1.26.4 → 2.0.2"]
    assert len(document["bisection"][0]["trials"]) == len(b.trials)


def test_without_bisect_nothing_more_runs(tmp_path):
    (tmp_path / "old.txt").write_text("six==1.0\nnumpy==1.26.4\n")
    (tmp_path / "new.txt").write_text("six==1.1\nnumpy==2.0.2\n")
    config = Config(root=tmp_path, golden_dir="golden", steps=6)
    old = LockRef(tmp_path / "old.txt", read_lock(tmp_path / "old.txt"))
    new = LockRef(tmp_path / "new.txt", read_lock(tmp_path / "new.txt"))
    fake = FakeBackend()
    report = check_ab(Settings.resolve(config), [new], [old], NUMPY, backend=fake)
    assert report.bisection == [] and len(fake.runs) == 2


def test_a_mix_keeps_both_locks_indexes_reachable(tmp_path):
    """Each lock names its own index: a mix keeps pins of both, so both indexes stay in it."""
    (tmp_path / "old.txt").write_text("--index-url https://old.example/simple\nsix==1.16.0\n"
                                      "numpy==1.26.4\n")
    (tmp_path / "new.txt").write_text("--index-url https://new.example/simple\nsix==1.17.0\n"
                                      "numpy==2.0.2\n")
    old = LockRef(tmp_path / "old.txt", read_lock(tmp_path / "old.txt"))
    new = LockRef(tmp_path / "new.txt", read_lock(tmp_path / "new.txt"))
    units = {u.label: u for u in change_units(diff_locks(old.lock, new.lock))}
    mix = parse_lock_text(mix_text(old, new, [units["numpy"]])[1], "mix.txt")
    assert mix.options.index_url == "https://new.example/simple"
    assert mix.options.extra_index_urls == ("https://old.example/simple",)


def test_a_nondeterministic_failure_is_not_bisected_and_says_why(tmp_path):
    (tmp_path / "old.txt").write_text("six==1.16.0\nnumpy==1.26.4\n")
    (tmp_path / "new.txt").write_text("six==1.17.0\nnumpy==2.0.2\n")
    config = Config(root=tmp_path, golden_dir="golden", steps=6)
    old = LockRef(tmp_path / "old.txt", read_lock(tmp_path / "old.txt"))
    new = LockRef(tmp_path / "new.txt", read_lock(tmp_path / "new.txt"))
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "noisy",
                                  ("numpy.mlp", "2.0.2"): "noisy:-0.01"})
    report = check_ab(Settings.resolve(config, Options(bisect=True, repeat=3)), [new], [old], NUMPY,
                      backend=fake)
    assert not report.passed and report.verdicts[0].envelope is not None
    assert report.bisection == []
    assert any(n.startswith("numpy.mlp not bisected: its runs are nondeterministic")
               for n in report.notes)
    assert len(fake.runs) == 6  # the check's own runs, no mix was built or run


def test_bisect_with_nothing_failing_says_there_is_nothing_to_bisect(tmp_path):
    refs = {}
    for name, text in (("old", "six==1.0\nnumpy==1.26.4\n"), ("new", "six==1.1\nnumpy==1.26.4\n")):
        (tmp_path / f"{name}.txt").write_text(text)
        refs[name] = LockRef(tmp_path / f"{name}.txt", read_lock(tmp_path / f"{name}.txt"))
    settings = Settings.resolve(Config(root=tmp_path, golden_dir="golden", steps=6),
                                Options(bisect=True))
    report = check_ab(settings, [refs["new"]], [refs["old"]], NUMPY, backend=FakeBackend())
    assert report.passed and report.bisection == []
    assert "nothing to bisect: no verdict fails the gate" in report.notes


# ------------------------------------------------ coupled culprits (issue 42), on the fake backend

JAX_OLD = "jax==0.4.35\njaxlib==0.4.35\nml-dtypes==0.5.4\nnumpy==1.26.4\n"
JAX_NEW = "jax==0.5.0\njaxlib==0.5.0\nml-dtypes==0.7.0\nnumpy==2.0.2\n"
# Their own Requires-Dist (as PyPI's wheels declare them, trimmed to the packages pinned).
JAX_REQUIRES = {
    ("jax", "0.4.35"): ("jaxlib<=0.4.35,>=0.4.34", "ml_dtypes>=0.4.0", "numpy>=1.24"),
    ("jax", "0.5.0"): ("jaxlib<=0.5.0,>=0.5.0", "ml_dtypes>=0.4.0", "numpy>=1.25"),
    ("jaxlib", "0.4.35"): ("ml-dtypes>=0.2.0", "numpy>=1.24"),
    ("jaxlib", "0.5.0"): ("ml-dtypes>=0.2.0", "numpy>=1.25"),
    ("ml-dtypes", "0.5.4"): ("numpy>=1.21",),
    ("ml-dtypes", "0.7.0"): ("numpy>=2.0.0",),
}


def coupled(tmp_path, old_text: str, new_text: str, scenario_ids: list[str],
            requires: dict) -> list:
    for name, text in (("old", old_text), ("new", new_text)):
        (tmp_path / f"{name}.txt").write_text(text)
    refs = {n: LockRef(tmp_path / f"{n}.txt", read_lock(tmp_path / f"{n}.txt"))
            for n in ("old", "new")}
    config = Config(root=tmp_path, golden_dir="golden", steps=6)
    chosen = [s for s in bundled() if s.id in scenario_ids]
    fake = FakeBackend(requires=requires, site_root=tmp_path / "sites")
    report = check_ab(Settings.resolve(config, Options(bisect=True)), [refs["new"]],
                      [refs["old"]], chosen, backend=fake)
    return report.bisection


def test_a_family_unit_is_split_to_repair_its_mix_and_each_culprit_is_isolated(tmp_path):
    """jax 0.5.0 with jaxlib and ml-dtypes moved beside numpy 2: the jax family's mix pins
    ml-dtypes 0.7.0, which requires numpy 2, so it is repaired (ml-dtypes kept at 0.5.4, which
    jax 0.5.0 accepts) rather than skipped: the RNG scenario's culprit is the jax family alone,
    numpy never named; the numpy scenario's is numpy; each isolated."""
    found = {b.scenario: b for b in coupled(tmp_path, JAX_OLD, JAX_NEW, ["jax.rng", "numpy.mlp"],
                                            JAX_REQUIRES)}
    rng = found["jax.rng"]
    assert rng.culprit_units == ["jax family"] and rng.found, rng
    assert not any("numpy" in c for c in rng.culprit)
    assert rng.confidence == "isolated"
    repaired = [t for t in rng.trials if t.kept]
    assert [t.units for t in repaired] == [["jax family"]]
    assert repaired[0].status == "reproduces"
    assert repaired[0].kept == ["ml-dtypes kept at 0.5.4 (ml-dtypes==0.7.0 requires "
                                "numpy>=2.0.0; the mix pins numpy==1.26.4)"]
    assert repaired[0].changes == ["jax 0.4.35 → 0.5.0", "jaxlib 0.4.35 → 0.5.0"]
    # ml-dtypes, kept back in the mix that reproduced it, is not named either.
    assert rng.sentence() == ("drift in jax.rng caused by jax 0.4.35 → 0.5.0 + jaxlib 0.4.35 → "
                              "0.5.0 (the 2 other changes reproduce the baseline)")
    assert any(n.startswith("not named: ml-dtypes kept at 0.5.4") for n in rng.notes)
    assert rng.builds <= rng.bound
    numpy = found["numpy.mlp"]
    assert numpy.culprit == ["numpy 1.26.4 → 2.0.2"] and numpy.confidence == "isolated"


def test_a_unit_that_cannot_run_apart_is_implicated_with_its_constraint(tmp_path):
    """scipy 1.10 requires numpy < 2: numpy 2 cannot be mixed in without scipy 1.14, and
    numpy is a unit of its own (no package of it to keep back). The two are named together as
    implicated, with the constraint that ties them; never as an isolated culprit."""
    requires = {("scipy", "1.10.0"): ("numpy<2,>=1.19.5",), ("scipy", "1.14.0"): ("numpy>=1.23.5",)}
    [b] = coupled(tmp_path, "numpy==1.26.4\nscipy==1.10.0\n", "numpy==2.0.2\nscipy==1.14.0\n",
                  ["numpy.mlp"], requires)
    assert b.culprit == ["numpy 1.26.4 → 2.0.2", "scipy 1.10.0 → 1.14.0"]
    assert b.confidence == "implicated"
    assert b.sureness == ("they cannot be run apart: scipy==1.10.0 requires numpy<2,>=1.19.5; "
                          "the mix pins numpy==2.0.2")
    assert "(implicated: they cannot be run apart" in b.sentence()
    assert not any(t.kept for t in b.trials)


def test_two_independent_culprits_are_both_named(tmp_path):
    """transformers.gpt2 moves with torch and with transformers, each alone: the first found,
    the other changes still reproduce the failure, so the second is searched among them."""
    [b] = coupled(tmp_path, "six==1.0\ntorch==2.13.0\ntransformers==4.57.6\n",
                  "six==1.1\ntorch==2.14.0\ntransformers==5.0.0\n", ["transformers.gpt2"], {})
    named = sorted([*b.culprit, *b.also])
    assert named == ["torch 2.13.0 → 2.14.0", "transformers 4.57.6 → 5.0.0"], (b.culprit, b.also)
    assert b.confidence == "implicated"
    assert ", and independently by " in b.sentence()
    assert "six 1.0 → 1.1" not in b.sentence()


def test_bisection_mixes_share_compile_caches_and_the_ab_sides_never(tmp_path, monkeypatch):
    """The one place compile caches are shared (envs/compile_cache.py): the backend the A/B's
    two sides run on is made without sharing, the one bisection's mixes run on with it."""
    from lockguard.flows import pipeline

    made = []

    def backend_for(kind, **options):
        made.append(options["share_compile_caches"])
        return FakeBackend()

    monkeypatch.setattr(pipeline, "backend_for", backend_for)
    (tmp_path / "old.txt").write_text("six==1.0\nnumpy==1.26.4\n")
    (tmp_path / "new.txt").write_text("six==1.1\nnumpy==2.0.2\n")
    config = Config(root=tmp_path, golden_dir="golden", steps=6)
    old = LockRef(tmp_path / "old.txt", read_lock(tmp_path / "old.txt"))
    new = LockRef(tmp_path / "new.txt", read_lock(tmp_path / "new.txt"))
    report = check_ab(Settings.resolve(config, Options(bisect=True)), [new], [old], NUMPY)
    assert report.bisection and report.bisection[0].culprit == ["numpy 1.26.4 → 2.0.2"]
    assert made == [False, True]
