"""Pinned requirement locks, by concern. Import from the module that defines a name:

- model: `Pin`, `LockOptions`, `Lock` (fingerprint: `lock_hash`) and `LockError`;
- parser: `parse_lock`, `parse_lock_text`, the one parser of lock text; `lock_writer` (the
  resolver a lock's header names) and `read_requirements_input` (a requirements.in);
- families: `package_families`, `framework_version`, `cuda_major`, the framework distributions;
- diff: `diff_locks`, `bump_kind` and the `LockDiff` the reports carry;
- rules: `check_family_rules`, framework pairings decidable from the lock alone (`RULES`);
- resolve: `compile_lock` and `propose_lock` through pip-tools or uv (subprocesses);
- outdated: newer releases of the pinned framework packages, from the index.

Everything but resolve and outdated is pure; parse_lock and read_requirements_input read
the files they are given.
"""
