"""The compiled path: `compare_compile` (graph breaks, recompiles, retraces, backend, XLA →
`CompileDiff`) and `accuracy_failure`, the harness's miscompile evidence.
"""

import re

from pydantic import BaseModel, ConfigDict, Field, computed_field

from lockguard.compare.figures import mib
from lockguard.results import AccuracyCheck, BreakLocation, CompileDiagnostics, CompileMemory


class CountChange(BaseModel):
    """A count on each side of a comparison (baseline `old`, candidate `new`): how many times
    one user function was traced or compiled."""

    model_config = ConfigDict(defer_build=True)

    old: int
    new: int


class CompileDiff(BaseModel):
    """How the compiled path changed between the baseline's and the candidate's first run."""

    model_config = ConfigDict(defer_build=True)

    graph_breaks_old: int | None = None
    graph_breaks_new: int | None = None
    # Every reason of each side, for the side-by-side view; the two lists below are the diff.
    break_reasons_old: list[str] = Field(default_factory=list)
    break_reasons_new: list[str] = Field(default_factory=list)
    added_break_reasons: list[str] = Field(default_factory=list)
    removed_break_reasons: list[str] = Field(default_factory=list)
    # [old, new] pairs: one break site whose message changed wording (a framework upgrade
    # rephrasing the same graph break), with no more breaks than before; not a regression.
    reworded_break_reasons: list[list[str]] = Field(default_factory=list)
    # Where each side's breaks are (torch): the layer and the frame Dynamo stopped in.
    break_locations_old: list[BreakLocation] = Field(default_factory=list)
    break_locations_new: list[BreakLocation] = Field(default_factory=list)
    recompile_reasons_old: list[str] = Field(default_factory=list)
    recompile_reasons_new: list[str] = Field(default_factory=list)
    recompiles_old: int | None = None
    recompiles_new: int | None = None
    eager_fallbacks_old: int | None = None
    eager_fallbacks_new: int | None = None
    # Per user function whose count changed (a function absent on one side counts 0 there).
    traces: dict[str, CountChange] = Field(default_factory=dict)
    compilations: dict[str, CountChange] = Field(default_factory=dict)
    backend_old: str | None = None
    backend_new: str | None = None
    xla_old: bool | None = None
    xla_new: bool | None = None
    xla_lost: bool = False  # tf: XLA compiled the function before, not any more
    compile_s_old: float | None = None  # time spent compiling (see CompileDiagnostics)
    compile_s_new: float | None = None
    memory_old: CompileMemory | None = None  # compiled vs eager peak device memory (torch)
    memory_new: CompileMemory | None = None
    notes: list[str] = Field(default_factory=list)  # worth saying, not a regression
    regressions: list[str] = Field(default_factory=list)  # "graph breaks 0 → 1", "+ break: ..."
    improvements: list[str] = Field(default_factory=list)  # "- break: ...", "traces of f 2 → 1"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def regressed(self) -> bool:
        """True when the compiled path got worse (any entry in `regressions`); serialised, so
        that report readers need not infer it."""
        return bool(self.regressions)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def improvement(self) -> bool:
        """True when the compiled path got better (any entry in `improvements`); fails the gate
        only under Policy.fail_on_improvement."""
        return bool(self.improvements)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def lines(self) -> list[str]:
        """Every change, regressions first, for a human."""
        return self.regressions + self.improvements



def compare_compile(old: CompileDiagnostics, new: CompileDiagnostics) -> CompileDiff:
    """What got worse and what got better in the compiled path.

    A count is only compared when both runs report it, except eager fallbacks: any fallback in
    the candidate counts against a baseline that reported none.
    """
    worse: list[str] = []
    better: list[str] = []

    def count(label: str, before: int | None, after: int | None) -> None:
        if before is None or after is None or before == after:
            return
        (worse if after > before else better).append(f"{label} {before} → {after}")

    count("graph breaks", old.graph_breaks, new.graph_breaks)
    added, removed, reworded = _break_changes(old, new)
    worse += [_added_break(reason, new.break_locations) for reason in added]
    better += [f"- break: {reason}" for reason in removed]
    count("recompiles", old.recompiles, new.recompiles)
    old_fallbacks = old.eager_fallbacks
    if old_fallbacks is None and new.eager_fallbacks is not None:
        old_fallbacks = 0
    count("eager fallbacks", old_fallbacks, new.eager_fallbacks)
    traces = _per_function_changes(old.traces, new.traces)
    compilations = _per_function_changes(old.compilations, new.compilations)
    for what, changes in (("traces", traces), ("compilations", compilations)):
        for function, change in changes.items():
            count(f"{what} of {function}", change.old, change.new)
    if old.backend and new.backend and old.backend != new.backend:
        # Leaving eager for a real backend is a gain; any other switch is the compiled path
        # silently changing under the user.
        (better if old.backend == "eager" else worse).append(
            f"backend {old.backend} → {new.backend}"
        )
    xla_lost = old.xla is True and new.xla is False
    if xla_lost:
        worse.append("XLA on → off")
    if old.xla is False and new.xla is True:
        better.append("XLA off → on")
    return CompileDiff(
        graph_breaks_old=old.graph_breaks,
        graph_breaks_new=new.graph_breaks,
        break_reasons_old=_unique(old.break_reasons),
        break_reasons_new=_unique(new.break_reasons),
        added_break_reasons=added,
        removed_break_reasons=removed,
        reworded_break_reasons=reworded,
        break_locations_old=old.break_locations,
        break_locations_new=new.break_locations,
        recompile_reasons_old=_unique(old.recompile_reasons),
        recompile_reasons_new=_unique(new.recompile_reasons),
        recompiles_old=old.recompiles,
        recompiles_new=new.recompiles,
        eager_fallbacks_old=old.eager_fallbacks,
        eager_fallbacks_new=new.eager_fallbacks,
        traces=traces,
        compilations=compilations,
        backend_old=old.backend,
        backend_new=new.backend,
        xla_old=old.xla,
        xla_new=new.xla,
        xla_lost=xla_lost,
        compile_s_old=old.compile_s,
        compile_s_new=new.compile_s,
        memory_old=old.memory,
        memory_new=new.memory,
        notes=_memory_notes(old, new),
        regressions=worse,
        improvements=better,
    )


def _break_changes(old: CompileDiagnostics, new: CompileDiagnostics
                   ) -> tuple[list[str], list[str], list[list[str]]]:
    """Graph-break reasons added and removed, and those only reworded (the same break, said
    otherwise by another release), unless breaks were added: (added, removed, reworded)."""
    added = _unique([r for r in new.break_reasons if r not in old.break_reasons])
    removed = _unique([r for r in old.break_reasons if r not in new.break_reasons])
    reworded: list[list[str]] = []
    if (old.graph_breaks is None or new.graph_breaks is None
            or new.graph_breaks <= old.graph_breaks):
        reworded = _reworded(removed, added)
        added = [r for r in added if r not in {new for _, new in reworded}]
        removed = [r for r in removed if r not in {old for old, _ in reworded}]
    return added, removed, reworded


def location_of(reason: str, locations: list[BreakLocation]) -> BreakLocation | None:
    """The place the harness found for a break reason, None when it found none."""
    return next((where for where in locations if where.reason == reason), None)


def layer_text(where: BreakLocation) -> str:
    """"blocks.0.mlp (Mlp.forward → clip, pkg/layers.py:42; 1 of 2 Mlp modules)": the layer
    that breaks and the frame Dynamo stopped in; only the frame when no layer holds it."""
    frame = where.file + (f":{where.line}" if where.line is not None else "")
    if where.module is None:
        return f"{where.function} ({frame})" if where.function else frame
    method = f"{where.module_class}.{where.method}"
    if where.function and where.function != where.method:
        method += f" → {where.function}"
    several = (f"; 1 of {where.modules} {where.module_class} modules"
               if where.modules and where.modules > 1 else "")
    return f"{where.module} ({method}, {frame}{several})"


def _added_break(reason: str, locations: list[BreakLocation]) -> str:
    """A regression line for a new graph break: the layer that breaks when the harness placed
    it ("graph break introduced in blocks.0.mlp (Mlp.forward, pkg/layers.py:42): <message>",
    the site prefix left out as the place says it), else "+ break: <reason>"."""
    where = location_of(reason, locations)
    if where is None:
        return f"+ break: {reason}"
    site = break_site(reason)
    message = reason[len(site) + 2:] if site else reason
    return f"graph break introduced in {layer_text(where)}: {message}"


def _memory_notes(old: CompileDiagnostics, new: CompileDiagnostics) -> list[str]:
    before, after = old.memory, new.memory
    if before is not None and after is not None and _saves_device_memory(before) \
            and _saves_device_memory(after) is False:
        return [
            "compiling no longer saves device memory: the compiled training peaks at"
            f" {mib(after.compiled_device, '?')} against {mib(after.eager_device, '?')} eager"
            f" (baseline: {mib(before.compiled_device, '?')} against {mib(before.eager_device, '?')})"]
    return []


def _saves_device_memory(memory: CompileMemory) -> bool | None:
    """Whether the compiled training peaked below its eager twin on the device; None when
    unknown."""
    if memory.compiled_device is None or memory.eager_device is None:
        return None
    return memory.compiled_device < memory.eager_device


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


# The harness writes a torch break reason as "<file>:<function>: <message>" (compile_torch.py);
# the site is what identifies a break across framework versions, the message is prose.
_BREAK_SITE = re.compile(r"^([\w./<>-]+\.py(?::[\w<>.]+)?): ")


def break_site(reason: str) -> str | None:
    """The "<file>:<function>" a torch graph-break reason starts with, None when it names none:
    what identifies the same break across framework versions whose messages are reworded."""
    match = _BREAK_SITE.match(reason)
    return match.group(1) if match else None


def _reworded(removed: list[str], added: list[str]) -> list[list[str]]:
    """Pair each removed reason with an added one at the same break site, first come first."""
    pairs: list[list[str]] = []
    free = list(added)
    for old in removed:
        where = break_site(old)
        if where is None:
            continue
        new = next((r for r in free if break_site(r) == where), None)
        if new is not None:
            free.remove(new)
            pairs.append([old, new])
    return pairs


def accuracy_text(acc: AccuracyCheck) -> str:
    """The accuracy check in a sentence, for a report: "passed: losses 1.2e-07 from fp64
    (eager 1.1e-07, limit 3.3e-07); outputs …"."""
    verdict = {True: "passed", False: "failed", None: "not decided"}[acc.ok]
    parts = [f"{name} {_fmt_err(s.compiled_vs_fp64)} from fp64 (eager {_fmt_err(s.eager_vs_fp64)},"
             f" limit {_fmt_err(s.limit)})" for name, s in acc.series.items()]
    return f"{verdict}: " + ("; ".join(parts) or "no series checked")


def accuracy_failure(diagnostics: CompileDiagnostics | None) -> str | None:
    """Why the compiled path is numerically wrong (miscompile), from the harness's check of
    compiled against eager and fp64 runs in the same environment; None when it passed or was
    not checked.

    The harness stores it as compile.accuracy (results.AccuracyCheck): PyTorch CI's rule, the
    compiled result may be at most k times farther (rmse) from fp64 than the eager one is.
    """
    acc = diagnostics.accuracy if diagnostics is not None else None
    if acc is None or acc.ok is not False:
        return None
    failed = [
        f"{name} {_fmt_err(s.compiled_vs_fp64)} from fp64 where eager is"
        f" {_fmt_err(s.eager_vs_fp64)} (limit {_fmt_err(s.limit)})"
        for name, s in acc.series.items()
        if s.ok is False
    ]
    rule = acc.rule or "compiled at most k× farther from fp64 than eager"
    return (
        "miscompile: the compiled run is farther from the fp64 reference than eager allows: "
        + ("; ".join(failed) or "accuracy check failed")
        + f" [{rule}]"
    )


def _fmt_err(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.3g}"
    return str(value)


def _per_function_changes(old: dict[str, int], new: dict[str, int]) -> dict[str, CountChange]:
    names = _unique(list(old) + list(new))
    changes = {name: CountChange(old=old.get(name, 0), new=new.get(name, 0)) for name in names}
    return {name: change for name, change in changes.items() if change.old != change.new}

