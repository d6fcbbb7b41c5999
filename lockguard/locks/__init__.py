"""Pinned locks, by concern, in reading order. Import from the module that defines a name:

- model: `Pin`, `PinFile`, `LockOptions`, `Lock` (fingerprint: `lock_hash`), `LockError`, the
  formats (`LOCK_FORMATS`) and the framework distributions (`FRAMEWORK_DISTS`);
- target: `Target`, the platform a multi-platform lock is read for (`host_target`,
  `target_for` the config's `python`);
- parser: `parse_lock`, `parse_lock_text`, the one parser of locks in any format (requirements
  text here; `lock_writer`, the resolver a lock's header names; `read_requirements_input`, a
  requirements.in), with the TOML readers beside it: formats (`lock_format`, what they share),
  pylock (PEP 751), uvlock (uv.lock), poetry (poetry.lock);
- writer: the one writer, the parser's inverse: `requirements_text`, `pylock_text`,
  `install_form`, `write_lock`, `option_args` and the one `--find-links` rule (`find_link`);
- ref: where a run's locks come from: `LockRef`, `lock_paths`, `load_locks`, `read_lock`,
  `lock_for`, `lock_target`;
- families: `package_families`, `framework_version`, `cuda_major`;
- diff: `diff_locks`, `bump_kind` and the `LockDiff` the reports carry;
- mix: `mix_locks`, the baseline with some of the candidate's changes (bisection);
- rules: `check_family_rules`, framework pairings decidable from the lock alone (`RULES`);
- trust, installable: what a lock must carry before anything is installed from it (hashes,
  https, a wheel for this platform);
- resolvers: `compile` and `propose` through pip-tools or uv (subprocesses); relock:
  the proposals of a uv.lock (`uv lock`) and a pylock.toml (`uv pip compile`);
- outdated: newer releases of the pinned framework packages, from the index.

Everything but target (for another interpreter), resolvers, relock and outdated is pure;
parse_lock and read_requirements_input read the files they are given.
"""
