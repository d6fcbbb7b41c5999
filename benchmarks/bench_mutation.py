"""Mutation testing: how many of cosmic-ray's mutants of the judge the fast tests kill.

    python benchmarks/bench_mutation.py [--only compare.numerics,flows.git_base] [--jobs 1]
                                        [--label current] [--all-operators]

The judge's core -- lockguard/compare/, flows/acceptances.py, flows/accept.py and
flows/git_base.py -- is mutated one change at a time (a `<` made `<=`, a `+` made `-`, a
condition negated, a constant moved by one, a loop that never iterates...), and for each mutant
the fast tests that exercise that module run (`-m "not slow and not docker"`, `-x`): a mutant is
killed when they fail, survives when they pass, and times out when they run past
max(MIN_TIMEOUT_S, TIMEOUT_FACTOR x the unmutated run). Target: >= 90 % killed per module
(issue 43); survivors are reported (file:line, the mutation) so that a test can be written
against each, or the mutant named as equivalent (docs/development.md lists those).

Why cosmic-ray (8.7.0) and not mutmut: the tests run lockguard's CLI through a forked zygote
(tests/forked_cli.py) and in subprocesses. cosmic-ray writes each mutant into the source file
on disk and runs an ordinary test command, so every process the tests start imports the mutant;
mutmut 3 rewrites every function into a trampoline that picks the mutant by an environment
variable, which changes the code the layer tests read (function lengths, docstrings) and relies
on each subprocess importing its `mutants/` copy. It runs in scratch copies of the working tree
(one per job, made with `git ls-files`), never in the checkout: lockguard/integrity.py also
objects to the judge's files changing under a running check.

The operators are a sufficient subset (Offutt et al., "An experimental determination of
sufficient mutant operators", 1996): each arithmetic operator swapped for its inverse (not for
every other one: `a + b` made `a << b` is killed by any test that runs the line), each
comparison moved across its boundary and negated (`<` -> `<=`, `<` -> `>=`; `==` <-> `!=`;
`is` <-> `is not`), `not` added and removed, `and` <-> `or`, True <-> False, constants +-1,
exceptions replaced, decorators removed, loops emptied, break <-> continue. `--all-operators`
runs cosmic-ray's whole set (about four times as many mutants). Scratch copies are
precompiled with their sources' mtimes set to 2000-01-01, so that a mutant written within the
same second as the last one is never served from a stale .pyc.

Writes benchmarks/results/mutation.json (per label: per module mutants, killed, survived,
timeout, score and the survivors) and prints a text table (also results/mutation.txt).
"""

from __future__ import annotations

import argparse
import ast
import compileall
import hashlib
import json
import os
import queue
import random
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
TOOL = "cosmic-ray==8.7.0"
MIN_TIMEOUT_S, TIMEOUT_FACTOR = 60.0, 4.0
OLD_MTIME = 946684800  # 2000-01-01: no mutant's mtime can equal a precompiled source's

# The fast-subset test files that exercise each module, the cheapest and most direct first (-x
# stops at the first failure). Found by tracing the whole fast subset (a profile hook in every
# process, the zygote's forks included, noting which test file called into which module);
# left out for time (a surviving mutant runs them all, so each costs its seconds once per
# survivor) are the files that reach a module only through a whole check or a report:
# test_workflows, test_shards, test_relevance, test_differential (15-45 s each), and for
# compare/ test_report_formats, test_gate_policy, test_bisect_unit, test_flows. The score is
# therefore a lower bound of what the whole fast subset kills.
_COMPARE = ("tests/test_compare.py", "tests/test_mutants_compare.py", "tests/test_hardware.py",
            "tests/test_envelope.py")
TARGETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "compare.tolerance": ("lockguard/compare/tolerance.py", _COMPARE),
    "compare.numerics": ("lockguard/compare/numerics.py", _COMPARE),
    "compare.figures": ("lockguard/compare/figures.py", _COMPARE),
    "compare.envelope": ("lockguard/compare/envelope.py", _COMPARE),
    "compare.timing": ("lockguard/compare/timing.py", _COMPARE + ("tests/test_timing.py",)),
    "compare.compile": ("lockguard/compare/compile.py",
                        _COMPARE + ("tests/test_compile_unit.py",)),
    "compare.verdicts": ("lockguard/compare/verdicts.py", _COMPARE),
    # locate is reached only by its own tests and the A/B flow's localisation (test_locate.py)
    "compare.locate": ("lockguard/compare/locate.py",
                       ("tests/test_locate.py", "tests/test_mutants_locate.py")),
    "flows.git_base": ("lockguard/flows/git_base.py",
                       ("tests/test_gate_review.py", "tests/test_mutants_git_base.py",
                        "tests/test_gate_policy.py")),
    "flows.acceptances": ("lockguard/flows/acceptances.py",
                          ("tests/test_acceptances.py", "tests/test_gate_policy.py",
                           "tests/test_mutants_accept.py", "tests/test_accept.py")),
    "flows.accept": ("lockguard/flows/accept.py",
                     ("tests/test_accept.py", "tests/test_mutants_accept.py",
                      "tests/test_acceptances.py", "tests/test_gate_policy.py")),
}

# Left out of the sufficient subset: the redundant replacements (see the docstring).
_ARITH = ("Add", "Sub", "Mul", "Div", "FloorDiv", "Mod", "Pow", "LShift", "RShift", "BitOr",
          "BitAnd", "BitXor")
_INVERSE = {"Add": "Sub", "Sub": "Add", "Mul": "Div", "Div": "Mul", "FloorDiv": "Div",
            "Mod": "FloorDiv", "Pow": "Mul", "LShift": "RShift", "RShift": "LShift",
            "BitOr": "BitAnd", "BitAnd": "BitOr", "BitXor": "BitOr"}
_KEPT_COMPARISONS = {"Lt": ("LtE", "GtE"), "LtE": ("Lt", "Gt"), "Gt": ("GtE", "LtE"),
                     "GtE": ("Gt", "Lt"), "Eq": ("NotEq",), "NotEq": ("Eq",),
                     "Is": ("IsNot",), "IsNot": ("Is",)}
_COMPARISONS = ("Eq", "NotEq", "Lt", "LtE", "Gt", "GtE", "Is", "IsNot")


def excluded_operators() -> list[str]:
    """cosmic-ray operator names (regular expressions) outside the sufficient subset."""
    out = [f"core/ReplaceBinaryOperator_{a}_{b}$" for a in _ARITH for b in _ARITH
           if a != b and _INVERSE[a] != b]
    out += [f"core/ReplaceComparisonOperator_{a}_{b}$" for a in _COMPARISONS
            for b in (*_COMPARISONS, "In", "NotIn") if a != b and b not in _KEPT_COMPARISONS[a]]
    # unary: `-x` -> `+x` and removing `not` stay; the rest (~x, not -x) are killed by any run
    out += ["core/ReplaceUnaryOperator_.*_(Invert|Not)$", "core/ReplaceUnaryOperator_Invert_.*",
            "core/ReplaceUnaryOperator_Delete_(USub|Invert)$",
            "core/VariableReplacer", "core/VariableInserter"]
    return out


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def tool_python() -> Path:
    """cosmic-ray in a venv of its own under lockguard's cache (made once): its dependencies
    stay out of the project's environment, which runs the tests."""
    from lockguard.cache import cache_dir

    venv = cache_dir() / "tools" / f"{TOOL.replace('==', '-')}-py{sys.version_info.major}." \
        f"{sys.version_info.minor}"
    marker = venv / ".complete"
    if not marker.is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", TOOL],
                       check=True)
        marker.write_text(TOOL + "\n")
    return venv / "bin"


def scratch_copy(into: Path) -> Path:
    """The working tree's files (tracked and untracked, not ignored) copied into `into`,
    precompiled with old mtimes (the module docstring says why)."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src, dst = REPO / name, into / name
        if not src.is_symlink() and not src.is_file():
            continue  # deleted in the working tree, not yet in the index
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():  # as git keeps it (lockguard/envs/docker/templates -> images/)
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
            os.utime(dst, (OLD_MTIME, OLD_MTIME))
    compileall.compile_dir(into / "lockguard", quiet=1)
    compileall.compile_dir(into / "tests", quiet=1, maxlevels=0)
    return into


def test_command(killers: tuple[str, ...]) -> str:
    return shlex.join([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                       "-n", "0", "-m", "not slow and not docker", *killers])


def _survivor(item: dict, result: dict) -> dict:
    spec = item["mutations"][0]
    changed = [ln for ln in (result.get("diff") or "").splitlines()
               if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return {"where": f"{spec['module_path']}:{spec['start_pos'][0]}",
            "operator": spec["operator_name"].removeprefix("core/"),
            "change": " => ".join(ln[1:].strip() for ln in changed),
            # what names this mutant in a later session of the same source (--survivors-of)
            "spec": [spec["operator_name"], *spec["start_pos"], *spec["end_pos"]]}


def tally(dump: str, only: set[tuple] | None = None) -> dict:
    """Counts and survivors from `cosmic-ray dump` (one JSON [work item, result] a line); with
    `only`, of the mutants named there ((spec, change) as _survivor records them: a constant
    made +1 and -1 shares its spec, not its change)."""
    counts = {"mutants": 0, "killed": 0, "survived": 0, "timeout": 0, "incompetent": 0}
    survivors = []
    for line in dump.splitlines():
        item, result = json.loads(line)
        if not result or result.get("worker_outcome") == "skipped":
            continue
        if only is not None:
            named = _survivor(item, result)
            if (tuple(named["spec"]), named["change"]) not in only:
                continue
        counts["mutants"] += 1
        outcome = result.get("test_outcome")
        if result.get("output") == "timeout":
            counts["timeout"] += 1
        elif outcome == "killed":
            counts["killed"] += 1
        elif outcome == "survived":
            counts["survived"] += 1
            survivors.append(_survivor(item, result))
        else:
            counts["incompetent"] += 1
    judged = counts["killed"] + counts["survived"] + counts["timeout"]
    counts["score"] = round((counts["killed"] + counts["timeout"]) / judged, 4) if judged else None
    survivors.sort(key=lambda s: (s["where"].split(":")[0], int(s["where"].split(":")[1])))
    return {**counts, "survivors": survivors}


def annotation_lines(source: str) -> set[tuple[int, int, int, int]]:
    """The spans (line, column to line, column) of the annotations nobody evaluates: under
    `from __future__ import annotations` (all mutated modules but compare/tolerance.py) a
    function's annotations and a variable's are strings, so a mutant there (`float | None` ->
    `float & None`) is equivalent by construction. A pydantic model's fields are evaluated (the
    model is built from them), so those stay mutated, as every annotation of a module without
    that import does."""
    tree = ast.parse(source)
    models = {id(stmt) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
              and any(getattr(b, "id", getattr(b, "attr", "")) == "BaseModel" for b in cls.bases)
              for stmt in cls.body}
    spans = []
    postponed = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                    and any(a.name == "annotations" for a in n.names) for n in tree.body)
    for node in ast.walk(tree) if postponed else ():  # else evaluated: a mutant there counts
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            spans.append(node.returns)
        elif isinstance(node, ast.arg) and node.annotation:
            spans.append(node.annotation)
        elif isinstance(node, ast.AnnAssign) and id(node) not in models:
            spans.append(node.annotation)
    out = {(n.lineno, n.col_offset, n.end_lineno, n.end_col_offset) for n in spans}
    # cosmic-ray reads the bare `*` of a signature (`def f(a, *, b)`) as a multiplication and
    # makes it `/`: positional-only instead of keyword-only, which no call that worked before
    # can tell apart (a mutant of the grammar, not of the code).
    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.args.kwonlyargs \
                and node.args.vararg is None:
            for row in range(node.lineno, node.body[0].lineno):
                for col, char in enumerate(lines[row - 1]):
                    rest = lines[row - 1][col + 1:].lstrip()
                    if char == "*" and rest[:1] in (",", ")") and \
                            lines[row - 1][col - 1:col] in ("", " ", "("):
                        out.add((row, col, row, col + 1))
    return out


def skip_annotations(session: Path, source: str) -> int:
    """Mark the mutants inside annotations (and of a keyword-only marker) skipped in a
    cosmic-ray session, as its own filters do (a work result with outcome "skipped"); how
    many."""
    spans = annotation_lines(source)

    def inside(row: int, col: int) -> bool:
        return any((a, b) <= (row, col) < (c, d) for a, b, c, d in spans)

    with sqlite3.connect(session) as db:
        rows = db.execute("SELECT job_id, start_pos_row, start_pos_col FROM mutation_specs "
                          "WHERE job_id NOT IN (SELECT job_id FROM work_results)").fetchall()
        hits = [job for job, row, col in rows if inside(row, col)]
        db.executemany("INSERT INTO work_results (worker_outcome, output, job_id) "
                       "VALUES ('SKIPPED', 'in an annotation', ?)", [(j,) for j in hits])
    return len(hits)


def keep_only(session: Path, specs: set[tuple] | None, sample: int | None, seed: str) -> int:
    """Mark skipped every pending mutant of a session but those named by `specs` (operator,
    start and end positions, as _survivor records them), or all but a sample of `sample`
    drawn with `seed` (the same mutants on every run of the same source)."""
    with sqlite3.connect(session) as db:
        rows = db.execute("SELECT job_id, operator_name, start_pos_row, start_pos_col, "
                          "end_pos_row, end_pos_col FROM mutation_specs WHERE job_id NOT IN "
                          "(SELECT job_id FROM work_results) ORDER BY start_pos_row, "
                          "start_pos_col, operator_name").fetchall()
        kept = [r for r in rows if specs is None or tuple(r[1:]) in specs]
        population = len(kept)
        if sample is not None and sample < len(kept):
            kept = random.Random(seed).sample(kept, sample)
        chosen = {r[0] for r in kept}
        db.executemany("INSERT INTO work_results (worker_outcome, output, job_id) VALUES "
                       "('SKIPPED', 'not chosen', ?)",
                       [(r[0],) for r in rows if r[0] not in chosen])
    return population


def mutate(name: str, copy: Path, bin_dir: Path, all_operators: bool,
           only: set[tuple[tuple, str]] | None = None, sample: int | None = None,
           seed: str = "1") -> dict:
    """One module's cosmic-ray session in `copy`: the unmutated run first (it must pass, and
    it sets the timeout), then every mutant (or only those named in `only`)."""
    path, killers = TARGETS[name]
    killers = tuple(k for k in killers if (copy / k).is_file())
    command = test_command(killers)
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.perf_counter()
    base = subprocess.run(shlex.split(command), cwd=copy, env=env, capture_output=True,
                          text=True)
    base_s = time.perf_counter() - started
    if base.returncode != 0:
        return {"error": f"the unmutated tests fail: {base.stdout[-1500:]}", "killers": killers}
    timeout = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * base_s)
    work = copy / ".mutation"
    work.mkdir(exist_ok=True)
    config, session = work / f"{name}.toml", work / f"{name}.sqlite"
    session.unlink(missing_ok=True)
    excluded = [] if all_operators else excluded_operators()
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(path)}\ntimeout = {timeout:.0f}\nexcluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n\n"
        "[cosmic-ray.distributor]\nname = \"local\"\n\n"
        "[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = {json.dumps(excluded)}\n")
    for step in (["cosmic-ray", "init", config, session], ["cr-filter-operators", session, config]):
        subprocess.run([str(bin_dir / step[0]), *map(str, step[1:])], cwd=copy, env=env,
                       check=True, stdout=subprocess.DEVNULL)
    skip_annotations(session, (copy / path).read_text())
    source_sha = hashlib.sha256((copy / path).read_bytes()).hexdigest()
    population = keep_only(session, None if only is None else {tuple(k[0]) for k in only},
                           sample, f"{seed}:{name}:{source_sha}")
    subprocess.run([str(bin_dir / "cosmic-ray"), "exec", str(config), str(session)], cwd=copy,
                   env=env, check=True, stdout=subprocess.DEVNULL)
    dump = subprocess.run([str(bin_dir / "cosmic-ray"), "dump", str(session)], cwd=copy,
                          check=True, capture_output=True, text=True).stdout
    return {**tally(dump, None if only is None else {(tuple(k[0]), k[1]) for k in only}),
            "population": population, "killers": list(killers),
            "source_sha256": source_sha, "unmutated_s": round(base_s, 1),
            "timeout_s": round(timeout), "wall_s": round(time.perf_counter() - started)}


def again(name: str, before: dict | None, copy: Path, bin_dir: Path,
          all_operators: bool) -> dict:
    """The mutants that survived `before` run again; the ones it killed stay killed, which
    holds while the module's source is the same (checked) and tests were only added."""
    path = TARGETS[name][0]
    if not before or "survivors" not in before:
        return {"error": "no earlier result to start from"}
    if hashlib.sha256((copy / path).read_bytes()).hexdigest() != before.get("source_sha256"):
        return {"error": f"{path} changed since the earlier result: run every mutant"}
    row = mutate(name, copy, bin_dir, all_operators,
                 {(tuple(s["spec"]), s["change"]) for s in before["survivors"]})
    if "error" in row:
        return row
    carried = {k: before[k] + row[k] for k in ("killed", "timeout")}
    judged = carried["killed"] + carried["timeout"] + row["survived"]
    return {**row, **carried, "mutants": before["mutants"], "population": before["population"],
            "incompetent": before["incompetent"] + row["incompetent"],
            "score": round((carried["killed"] + carried["timeout"]) / judged, 4),
            "rerun": len(before["survivors"])}


def text_table(label: str, modules: dict) -> str:
    lines = [f"mutation score ({label}): killed by the fast subset",
             f"{'module':<20}{'mutants':>8}{'of':>6}{'killed':>8}{'surv.':>7}{'t/o':>5}"
             f"{'score':>8}"]
    totals = {"mutants": 0, "killed": 0, "survived": 0, "timeout": 0}
    for name in sorted(modules):
        row = modules[name]
        if "error" in row:
            lines.append(f"{name:<20} error: {row['error'][:60]}")
            continue
        score = f"{row['score']:.1%}" if row["score"] is not None else "-"
        lines.append(f"{name:<20}{row['mutants']:>8}{row['population']:>6}{row['killed']:>8}"
                     f"{row['survived']:>7}{row['timeout']:>5}{score:>8}")
        for key in totals:
            totals[key] += row[key]
    judged = totals["killed"] + totals["survived"] + totals["timeout"]
    if judged:
        score = (totals["killed"] + totals["timeout"]) / judged
        lines.append(f"{'all':<20}{totals['mutants']:>8}{'':>6}{totals['killed']:>8}"
                     f"{totals['survived']:>7}{totals['timeout']:>5}{score:>8.1%}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated modules: " + ",".join(TARGETS))
    parser.add_argument("--jobs", type=int, default=1,
                        help="modules mutated at once, each in a scratch copy of its own")
    parser.add_argument("--label", default="current",
                        help="the key the results go under in mutation.json (before, after...)")
    parser.add_argument("--all-operators", action="store_true",
                        help="cosmic-ray's every operator, not the sufficient subset")
    parser.add_argument("--survivors-of", metavar="LABEL",
                        help="run only the mutants that survived under LABEL (the module's "
                        "source unchanged since: tests were only added); its killed count "
                        "carries over")
    parser.add_argument("--seed", default="1", help="another seed draws another sample: a "
                        "fresh estimate after tests were written against the first one")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="per module, N mutants drawn at random (seeded by the module's "
                        "source: the same N every run) instead of all: for a busy machine")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(TARGETS)
    unknown = set(chosen) - set(TARGETS)
    if unknown:
        raise SystemExit(f"unknown modules: {', '.join(sorted(unknown))}")
    bin_dir = tool_python()
    path = RESULTS / "mutation.json"
    doc = json.loads(path.read_text()) if path.is_file() else {}
    earlier = doc.get(args.survivors_of, {}).get("modules", {}) if args.survivors_of else None
    started, load_before = time.perf_counter(), load()
    # the commit the scratch copies are made from, now: the checkout may move on while they run
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=REPO, capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory(prefix="lockguard-mutation-") as tmp:
        copies: queue.Queue[Path] = queue.Queue()
        for i in range(max(1, min(args.jobs, len(chosen)))):
            copies.put(scratch_copy(Path(tmp) / f"copy{i}"))

        def one(name: str) -> tuple[str, dict]:
            copy = copies.get()
            try:
                print(f"== {name} ...", flush=True)
                if earlier is None:
                    row = mutate(name, copy, bin_dir, args.all_operators, sample=args.sample,
                                 seed=args.seed)
                else:
                    row = again(name, earlier.get(name), copy, bin_dir, args.all_operators)
                print(f"== {name}: {row.get('score', row.get('error'))}", flush=True)
                return name, row
            finally:
                copies.put(copy)

        # the biggest modules first, so that the jobs finish together
        order = sorted(chosen, key=lambda n: -(REPO / TARGETS[n][0]).stat().st_size)
        with ThreadPoolExecutor(max_workers=copies.qsize()) as pool:
            rows = dict(pool.map(one, order))
    # read again: another run may have written its label meanwhile
    doc = json.loads(path.read_text()) if path.is_file() else {}
    entry = doc.setdefault(args.label, {"modules": {}})
    entry["modules"].update(rows)
    entry.update({"tool": TOOL, "operators": "all" if args.all_operators else "sufficient",
                  "sample": args.sample, "seed": args.seed,
                  "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "commit": commit + ("+changes" if dirty else ""), "jobs": args.jobs,
                  "wall_s": round(time.perf_counter() - started), "load_before": load_before,
                  "load_after": load()})
    path.write_text(json.dumps(doc, indent=1) + "\n")
    text = text_table(args.label, entry["modules"])
    (RESULTS / "mutation.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
