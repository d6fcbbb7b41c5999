"""Compare a scenario's candidate run(s) with its baseline run(s) and give one verdict, by concern.
Import from the module that defines a name:

- tolerance: `Tolerance` (validated here only), the per-dtype defaults, `Policy`;
- numerics: `bitwise_equal`, `ulp_distance`, `compare_series` → `SeriesDiff`;
- compile: `compare_compile` → `CompileDiff`, `accuracy_failure` (miscompile evidence);
- verdicts: `compare_runs` → `ScenarioVerdict`, `skipped`, `is_failure`, `gate_passes`.

`Verdict` and its `PRECEDENCE` are in lockguard.names. Everything here is pure: no I/O, no
clock, no framework import.
"""
