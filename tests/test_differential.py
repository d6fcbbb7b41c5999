"""Shortcuts against cold runs, over random mutations (issue 43): the golden check's
provenance shortcut (fake backend, below) and venv reuse with the bytecode store (real venvs,
at the end of this file; docs/performance.md, "Shortcuts").

`check` answers a scenario from its golden's provenance (`unchanged`, nothing run) while its
inputs digest holds. A random walk mutates what a run depends on (the lock, the scenario's
script, a helper module and a data file beside it, a dataset slice outside its folder that its
`data` names, the steps, the harness code, a variable the training sees that changes its
numbers) and after every
step asks both: the check with the shortcut, and the same check with it off (`--rerun`).
Whenever the shortcut answers, the cold run must find the golden still true (identical); where
it does not answer, both must agree. The fake backend's runs move with exactly those inputs
(its results are salted with every file beside a script), so a shortcut that misses one of them
shows here as an `unchanged` the cold run contradicts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fakes import FakeBackend, lock
from lockguard.config import Config, Options
from lockguard.flows import goldens
from lockguard.flows.check import check
from lockguard.flows.record import record
from lockguard.names import Verdict
from lockguard.scenarios import all_scenarios
from lockguard.settings import Settings

SCRIPT = "import helper\n\n\ndef run(steps, seed):\n    return [helper.SCALE * 1.0] * steps\n"
MUTATIONS = ("lock", "script", "helper", "data", "slice", "steps", "harness", "environment")


def project(root: Path, steps: int) -> Config:
    config = Config(root=root, golden_dir="golden", steps=steps,
                    scenario={"mine": {"script": "sc/mine.py", "framework": "numpy",
                                       "data": ["data/*.csv"]}})
    return config


def mutate(what: str, root: Path, state: dict, rng: random.Random) -> None:
    """Change one input of the runs, as a user (or an upgrade) would."""
    n = rng.randrange(1_000_000)
    if what == "lock":
        state["numpy"] = "2.0.2" if state["numpy"] == "1.26.4" else "1.26.4"
    elif what == "script":
        (root / "sc" / "mine.py").write_text(SCRIPT + f"# edit {n}\n")
    elif what == "helper":
        (root / "sc" / "helper.py").write_text(f"SCALE = {n % 7 + 1}\n")
    elif what == "data":
        (root / "sc" / "table.json").write_text(f'{{"rows": {n}}}\n')
    elif what == "slice":  # outside the script's folder: in the digest through `data`
        (root / "data" / "slice.csv").write_text(f"{n},{n % 13}\n")
    elif what == "steps":
        state["steps"] = 4 if state["steps"] == 5 else 5
    elif what == "harness":
        state["harness"] = f"harness-{n}"
    elif what == "environment":  # a variable the training sees that changes its numbers
        state["xla"] = "" if state["xla"] else f"--xla_lg_test={n}"


@pytest.mark.parametrize("seed", range(3))
def test_the_golden_shortcut_answers_only_what_a_cold_run_confirms(tmp_path, monkeypatch, seed):
    rng = random.Random(20261205 + seed)
    root = tmp_path
    (root / "sc").mkdir()
    (root / "sc" / "mine.py").write_text(SCRIPT)
    (root / "sc" / "helper.py").write_text("SCALE = 1\n")
    (root / "sc" / "table.json").write_text('{"rows": 0}\n')
    (root / "data").mkdir()
    (root / "data" / "slice.csv").write_text("0,0\n")
    state = {"numpy": "1.26.4", "steps": 4, "harness": "harness-0", "xla": ""}
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    # The harness's code is part of a golden's inputs: a changed harness is another digest.
    monkeypatch.setattr(goldens, "harness_digest", lambda scenario: state["harness"])

    def now() -> tuple[Settings, list, list]:
        config = project(root, state["steps"])
        ref = lock(root, "lock.txt", f"numpy=={state['numpy']}\n")
        return Settings.resolve(config), [ref], all_scenarios(config)

    settings, refs, scenarios = now()
    assert record(settings, refs, scenarios, backend=FakeBackend()).passed
    answered = 0
    for step in range(24):
        what = rng.choice(MUTATIONS)
        mutate(what, root, state, rng)
        if state["xla"]:
            monkeypatch.setenv("XLA_FLAGS", state["xla"])
        else:
            monkeypatch.delenv("XLA_FLAGS", raising=False)
        settings, refs, scenarios = now()
        fast = check(settings, refs, scenarios, backend=FakeBackend())
        cold = check(Settings.resolve(settings.config, Options(rerun=True)), refs, scenarios,
                     backend=FakeBackend())
        quick = {v.scenario: v.verdict for v in fast.verdicts}
        truth = {v.scenario: v.verdict for v in cold.verdicts}
        for sid, verdict in quick.items():
            if verdict == Verdict.unchanged:
                answered += 1
                assert truth[sid] == Verdict.identical, (step, what, sid, state)
            else:
                assert verdict == truth[sid], (step, sid, state, quick, truth)
        if not cold.passed:  # the walk goes on from goldens of what now runs
            assert record(settings, refs, scenarios, backend=FakeBackend()).passed
    assert answered, "the shortcut never answered: the walk tested nothing"


# ---------------------------------------------------------------------------------------------
# Venv reuse and the bytecode store, with real venvs
# ---------------------------------------------------------------------------------------------

# Appended to numpy/__init__.py's source, then compiled under the header the interpreter
# expects of the real source: np.tanh, which the numpy.mlp scenario calls, scaled. A venv that
# ran it would train to other numbers.
PAYLOAD = ("\n_lg_tanh = tanh\n\n\ndef tanh(x, *args, **kwargs):\n"
           "    return _lg_tanh(x, *args, **kwargs) * x.dtype.type(0.75)\n")
VENV_MUTATIONS = ("store_pyc", "venv_pyc", "removed_pyc", "venv_file", "compile_cache",
                  "lock", "option")


def _forged_pyc(source: Path) -> bytes:
    """Bytecode of `source` with PAYLOAD, under the header this interpreter writes for
    `source` as it is (its mtime and size): the interpreter takes it as current."""
    import importlib.util
    import marshal
    import struct

    code = compile(source.read_text(encoding="utf-8") + PAYLOAD, str(source), "exec")
    st = source.stat()
    header = struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
    return importlib.util.MAGIC_NUMBER + header + marshal.dumps(code)


def _numpy_init(env_path: Path) -> tuple[Path, Path]:
    import sys

    site = next(env_path.glob("lib/python*/site-packages"))
    source = site / "numpy" / "__init__.py"
    return source, source.parent / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"


def _potent(env_path: Path) -> bool:
    """Whether the venv's numpy now runs PAYLOAD (the damage would show if lockguard ran it)."""
    import subprocess

    proc = subprocess.run([str(env_path / "bin" / "python"), "-I", "-c",
                           "import numpy; print(numpy.tanh(numpy.float32(1)) < 0.7)"],
                          capture_output=True, text=True, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip() == "True"


def _damage(what: str, env_path: Path, compile_cache: Path) -> None:
    """Damage the warm cache as a run without the sandbox, a bad disk or a hand could."""
    import os

    source, pyc = _numpy_init(env_path)
    if what == "store_pyc":  # in place: the store's inode, linked by the venv, rewritten
        assert pyc.stat().st_nlink >= 2, "numpy's .pyc is not the store's"
        with open(pyc, "r+b") as f:
            f.truncate(0)
            f.write(_forged_pyc(source))
    elif what == "venv_pyc":  # another file in the .pyc's place: the venv's alone
        planted = pyc.with_name("planted.tmp")
        planted.write_bytes(_forged_pyc(source))
        os.replace(planted, pyc)
    elif what == "removed_pyc":
        pyc.unlink()
    elif what == "venv_file":  # the module itself, replaced by another file
        changed = source.with_name("changed.tmp")
        changed.write_text(source.read_text(encoding="utf-8") + PAYLOAD, encoding="utf-8")
        os.replace(changed, source)
    elif what == "compile_cache":  # an entry no build of this venv wrote
        compile_cache.mkdir(parents=True, exist_ok=True)
        (compile_cache / "lg-stale-entry").write_bytes(os.urandom(64))
    if what in ("store_pyc", "venv_pyc", "venv_file"):
        assert _potent(env_path), f"{what}: the damage would not show"


@pytest.mark.slow
def test_venv_reuse_and_the_bytecode_store_answer_what_a_cold_run_answers(tmp_path, monkeypatch):
    """Real numpy venvs: a random walk of damage to the warm cache (a stored .pyc rewritten
    through a venv's link, a venv's .pyc replaced or removed, a venv's module changed, a stale
    compile-cache entry) and of input changes (the lock's numpy, an installer option). After
    every step, numpy.mlp run with the shortcuts on (the venv reused where its check passes,
    its bytecode linked from the store) equals, bit for bit on this machine, the run of a cold
    cache (LOCKGUARD_CACHE fresh, uv's files copied, share_bytecode off). Every damage is
    first shown potent: the venv's interpreter, left alone, would run the planted code. (No
    compiler here: numpy.mlp compiles nothing; the compile cache's closure is
    test_compile_unit's.)"""
    from lockguard.envs.base import READY, RunRequest
    from lockguard.envs.venv import VenvBackend
    from lockguard.locks.parser import parse_lock_text
    from lockguard.progress import QUIET
    from lockguard.sandbox import resolve

    from conftest import DATA

    rng = random.Random(20261205)
    texts = {v: (DATA / f"numpy-{v}.txt").read_text() for v in ("1.26.4", "2.0.2")}
    request = RunRequest(scenario_id="numpy.mlp", framework="numpy", steps=3, seed=0,
                         device="cpu", threads=1, timeout=300)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))  # wheels fetched once
    sandbox = resolve("auto")
    runs = 0

    def run(backend: VenvBackend, text: str, cache: Path):
        nonlocal runs
        monkeypatch.setenv("LOCKGUARD_CACHE", str(cache))
        env = backend.prepare(parse_lock_text(text, "lock.txt"), "numpy", "cpu", QUIET)
        runs += 1
        out = tmp_path / f"out-{runs}"
        out.mkdir()
        result = env.run(request, out)
        assert result.status.value == "ok", result.error
        return env, (result.losses, result.grad_norms, result.outputs, result.param_digest)

    cold: dict[str, tuple] = {}

    def truth(text: str) -> tuple:
        if text not in cold:
            with monkeypatch.context() as m:
                m.setenv("UV_LINK_MODE", "copy")  # no inode shared with the warm venvs
                cold[text] = run(VenvBackend(sandbox=sandbox, share_bytecode=False), text,
                                 tmp_path / f"cold-{len(cold)}")[1]
        return cold[text]

    warm = VenvBackend(sandbox=sandbox, share_bytecode=True)
    state = {"numpy": "2.0.2", "option": False}

    def lock_text() -> str:
        return texts[state["numpy"]] + ("--prefer-binary\n" if state["option"] else "")

    env, _ = run(warm, lock_text(), tmp_path / "warm")
    walk = [*VENV_MUTATIONS, *rng.choices(VENV_MUTATIONS, k=3)]
    rng.shuffle(walk)
    reused = 0
    for step, what in enumerate(walk):
        if what == "lock":
            state["numpy"] = "1.26.4" if state["numpy"] == "2.0.2" else "2.0.2"
        elif what == "option":
            state["option"] = not state["option"]
        else:
            _damage(what, env.path, env.compile_cache)
        marker = env.path / READY
        before = marker.stat().st_mtime_ns if what not in ("lock", "option") else None
        env, answer = run(warm, lock_text(), tmp_path / "warm")
        assert answer == truth(lock_text()), (step, what, state)
        assert not _potent(env.path), (step, what)
        if what == "compile_cache":
            reused += (env.path / READY).stat().st_mtime_ns == before
        _, pyc = _numpy_init(env.path)
        assert pyc.stat().st_nlink >= 2, (step, what)  # linked from the store: the shortcut ran
    assert reused, "no step reused a venv: the walk tested no reuse"


@pytest.mark.slow
def test_a_shared_compile_cache_answers_what_a_cold_compile_answers(tmp_path, monkeypatch):
    """The third shortcut, with a real compiler: two venvs whose compilers are pinned alike
    (one torch, numpy apart: a bisection's two mixes) share one inductor cache. The second
    venv's torch.mlp.compile, compiled warm from what the first one's run left there, equals
    bit for bit (losses, grad norms, outputs, parameters, what was compiled) its own run
    compiled cold in a cache of its own (share_compile_caches off, as both sides of an A/B
    run). One machine, one interpreter: bitwise is the claim."""
    from lockguard.envs.base import RunRequest
    from lockguard.envs.venv import VenvBackend
    from lockguard.locks.parser import parse_lock_text
    from lockguard.progress import QUIET
    from lockguard.sandbox import resolve

    from conftest import DATA

    from lockguard.cache import cache_dir

    # torch's wheel from the usual wheel cache; every venv and compile cache a new one
    monkeypatch.setenv("UV_CACHE_DIR", str(cache_dir() / "wheels" / "uv"))
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    request = RunRequest(scenario_id="torch.mlp.compile", framework="torch", steps=3, seed=0,
                         device="cpu", threads=1, timeout=900)
    sandbox = resolve("auto")
    first, second = (parse_lock_text((DATA / name).read_text(), name) for name in (
        "torch-2.13.0.txt", "torch-2.13.0-numpy-1.26.4.txt"))
    assert first.lock_hash != second.lock_hash

    def run(env, name: str):
        out = tmp_path / name
        out.mkdir()
        result = env.run(request, out)
        assert result.status.value == "ok", result.error
        compiled = result.compile.model_dump(exclude={"compile_s"}) if result.compile else None
        assert compiled and compiled["backend"] == "inductor", compiled
        return (result.losses, result.grad_norms, result.outputs, result.param_digest,
                compiled)

    shared = VenvBackend(sandbox=sandbox, share_compile_caches=True)
    one = shared.prepare(first, "torch", "cpu", QUIET)
    run(one, "first")  # fills the shared cache
    two = shared.prepare(second, "torch", "cpu", QUIET)
    assert two.compile_cache == one.compile_cache and two.shared_cache
    assert any(two.compile_cache.iterdir()), "the first run left nothing to compile from"
    warm = run(two, "warm")
    own = VenvBackend(sandbox=sandbox, share_compile_caches=False).prepare(
        second, "torch", "cpu", QUIET)
    assert own.path == two.path and own.compile_cache != two.compile_cache
    assert not own.compile_cache.exists() or not any(own.compile_cache.iterdir())
    assert warm == run(own, "cold")
