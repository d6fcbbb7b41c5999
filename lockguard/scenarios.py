"""The scenarios lockguard knows: bundled golden mini-trainings and the user's own scripts."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from lockguard.compare.tolerance import Tolerance
from lockguard.config import (
    Config, ConfigError, data_files, entry_module, entry_root, registered_trainings,
    scenario_tables, tolerance_value,
)
from lockguard.envs.base import RunRequest
from lockguard.envs.harness import harness_files, implements
from lockguard.errors import did_you_mean, one_line
from lockguard.files import MiB, listing, read_bytes, sha256_file
from lockguard.locks.families import REACH_WORDS, reaches

if TYPE_CHECKING:
    from lockguard.locks.diff import Change

# A user's scenario script and each file beside it, hashed into its inputs digest by content
# up to this size (a larger one, a dataset, by its size and modification time).
MAX_SCRIPT_BYTES = 16 * MiB


@dataclass(frozen=True)
class Scenario:
    """A mini-training lockguard can run: a bundled one (the harness's code) or a user's
    script, with the defaults it runs and is judged by."""

    id: str
    framework: str  # torch | jax | tensorflow | numpy
    description: str
    steps: int
    dtype: str = "float32"
    family: str | None = None  # mlp | lm | cnn: one family's scenarios share data and weights
    script: Path | None = None  # user scenarios only; an entry's: its module's file
    # A user scenario that names a function of the project's code ("pkg.train:make") rather
    # than a script: the harness imports it with `root` on sys.path (the config's folder, or
    # its src/ for a src layout: config.entry_root).
    entry: str | None = None
    root: Path | None = None
    # The files a user scenario's `data` names (its globs expanded, config.ScenarioConfig):
    # their bytes are in the inputs digest, relative to `data_root` (the config's folder).
    data: tuple[Path, ...] = ()
    data_root: Path | None = None
    # The `data` patterns as written: check --base expands them anew in the target's tree
    # (flows/pipeline.CodeTree), where other files may match.
    data_patterns: tuple[str, ...] = ()
    tolerance: Tolerance | None = None  # the scenario's own (config: "exact" normalised)
    device: str | None = None  # overrides the lock's / config's expected device
    # How the bundled training executes ("eager", "torch.compile (inductor)", "jax.jit (XLA)"),
    # and for a compiled path the scenario that runs the same training without it (torch eager,
    # tf.function without XLA): what compare-frameworks sets side by side.
    execution: str | None = None
    plain_twin: str | None = None
    # Devices the training runs on at once (the data-parallel scenarios: 2). On the CPU they
    # are the CPU split in workers; on cuda, GPUs (NCCL refuses two workers on one GPU), so a
    # host that shows fewer GPUs skips the scenario, saying so.
    replicas: int = 1
    # The model libraries a library scenario builds its model with (torchvision, transformers,
    # flax and optax...): it runs from the lock that pins its framework and these
    # (locks.ref.lock_for), and plans as skipped where none does.
    requires: tuple[str, ...] = ()
    # A costly bundled scenario (compiled, data parallel, a data pipeline, a model library):
    # the path it trains through beyond `covered_by`, the eager scenario that trains the rest
    # alike (locks.families.REACHES). An A/B whose change reaches neither that path nor the
    # framework runs the twin and leaves this one out (flows/ab.py); None: always run.
    reach: str | None = None
    covered_by: str | None = None

    @property
    def source(self) -> str:
        """Where the scenario comes from: "user" (a script the config names) or "bundled"."""
        return "user" if self.script else "bundled"

    def request(self, *, steps: int, seed: int, device: str, threads: int,
                timeout: float, memory_limit: int | None = None,
                memory_limit_source: str = "config key memory_limit",
                project: Path | None = None) -> RunRequest:
        """This scenario as a harness run, in the env layer's terms (`project`: the folder of
        the config that names a user scenario)."""
        return RunRequest(scenario_id=self.id, framework=self.framework, steps=steps, seed=seed,
                          device=device, threads=threads, timeout=timeout, dtype=self.dtype,
                          script=self.script, entry=self.entry, entry_root=self.root,
                          memory_limit=memory_limit,
                          memory_limit_source=memory_limit_source,
                          project=project if self.script is not None else None)

    def unreached(self, changes: Sequence[Change]) -> str | None:
        """Why an A/B whose locks differ by `changes` (locks.diff, with the startup files the
        candidate's environment installed) may leave this scenario out while its twin
        `covered_by` runs: none of the packages reaches its own path or its framework, and
        none installs a startup file that runs code (which runs before this training's own
        path is imported, and does there what only this run would show). None when one does,
        when nothing changed, and for a scenario without a reach (eager, the user's)."""
        if self.reach is None or not changes or any(
                reaches(self.reach, self.framework, c.name)
                or any(f.runs_code for f in c.startup_files) for c in changes):
            return None
        names = sorted({c.name for c in changes})
        moved = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return (f"not run: no {REACH_WORDS[self.reach]} changed, only {moved}, which the eager "
                "twin that ran sees alike (--all-scenarios runs it)")


_MLP_OF = {"torch": "torch.mlp", "jax": "jax.mlp", "tensorflow": "tf.mlp"}


def _b(id: str, framework: str, description: str, steps: int, family: str | None,
       dtype: str = "float32", execution: str = "eager", plain_twin: str | None = None,
       replicas: int = 1, reach: str | None = None) -> Scenario:
    if plain_twin is not None:
        reach = "compiler"
    # The eager MLP of the framework trains what a data-parallel or data-pipeline run adds to.
    covered_by = plain_twin or (_MLP_OF[framework] if reach else None)
    return Scenario(id=id, framework=framework, description=description, steps=steps,
                    dtype=dtype, family=family, execution=execution, plain_twin=plain_twin,
                    replicas=replicas, reach=reach, covered_by=covered_by)


def _lib(id: str, framework: str, requires: tuple[str, ...], description: str, steps: int,
         execution: str = "eager") -> Scenario:
    return Scenario(id=id, framework=framework, description=description, steps=steps,
                    execution=execution, requires=requires, reach="library",
                    covered_by=_MLP_OF[framework])


TORCH_COMPILE = "torch.compile (inductor)"
JAX_JIT = "jax.jit (XLA)"
TF_FUNCTION = "tf.function (graph)"


BUNDLED: tuple[Scenario, ...] = (
    _b("torch.mlp", "torch", "MLP classifier, eager, Adam", 30, "mlp"),
    _b("torch.lm", "torch", "tiny causal transformer LM, AdamW", 20, "lm"),
    _b("torch.lm.bf16", "torch", "tiny LM under bf16 autocast", 20, "lm", "bfloat16"),
    _b("torch.rng", "torch", "MLP initialised by torch's own RNG", 30, None),
    # Compiled twins: torch.compile (default inductor backend) with graph/break/recompile
    # diagnostics, and compiled-vs-eager accuracy against an fp64 run in the same environment.
    _b("torch.mlp.compile", "torch", "torch.mlp through torch.compile (inductor)", 30, "mlp",
       execution=TORCH_COMPILE, plain_twin="torch.mlp"),
    _b("torch.lm.compile", "torch", "torch.lm through torch.compile (inductor)", 20, "lm",
       execution=TORCH_COMPILE, plain_twin="torch.lm"),
    # The cnn family: conv -> BatchNorm -> ReLU -> max pool and a residual block on synthetic
    # 8x8 images (harness gen.CNN); the probe runs in eval mode and the digest covers the
    # BatchNorm running statistics, where framework releases move things.
    _b("torch.cnn", "torch", "small residual conv net with BatchNorm on synthetic images, Adam",
       20, "cnn"),
    _b("torch.cnn.bf16", "torch", "torch.cnn under bf16 autocast", 20, "cnn", "bfloat16"),
    _b("torch.cnn.compile", "torch", "torch.cnn through torch.compile (inductor)", 20, "cnn",
       execution=TORCH_COMPILE, plain_twin="torch.cnn"),
    # Data pipelines: the MLP trained from the framework's input pipeline, 2 epochs of 12
    # batches (harness gen.DATA); each batch's sample ids are recorded and compared exactly.
    _b("torch.data", "torch", "torch.mlp fed by a DataLoader (seeded shuffle, 2 workers, "
       "collate)", 24, None, execution="DataLoader + eager", reach="data"),
    # Data parallel: the MLP's batch split over 2 workers whose gradients are all-reduced by
    # the framework's own synchronisation path: on the CPU torch DDP over gloo, jax sharded over
    # 2 host devices, TF MirroredStrategy over 2 logical CPUs; on cuda the same over 2 GPUs
    # (NCCL for torch and XLA, TF's choice of cross-device ops for MirroredStrategy).
    _b("torch.ddp", "torch", "torch.mlp under DistributedDataParallel, 2 processes (gloo on "
       "the CPU, NCCL on GPUs)", 30, None, execution="DDP (2 processes)", replicas=2,
       reach="parallel"),
    _b("jax.dp", "jax", "jax.mlp jitted over 2 devices: batch sharded, gradients all-reduced",
       30, None, execution="jax.jit sharded over 2 devices", replicas=2, reach="parallel"),
    _b("tf.dp", "tensorflow", "tf.mlp under MirroredStrategy over 2 devices (logical CPUs or "
       "GPUs)", 30, None, execution="MirroredStrategy (2 replicas)", replicas=2,
       reach="parallel"),
    _b("numpy.mlp", "numpy", "MLP with hand-written backprop and Adam in numpy", 30, "mlp"),
    _b("jax.mlp", "jax", "MLP, jitted train step, Adam", 30, "mlp", execution=JAX_JIT),
    _b("jax.lm", "jax", "tiny causal transformer LM, jitted, AdamW", 20, "lm",
       execution=JAX_JIT),
    _b("jax.lm.bf16", "jax", "tiny LM with bf16 matmuls", 20, "lm", "bfloat16", JAX_JIT),
    _b("jax.cnn", "jax", "small residual conv net with BatchNorm, jitted, Adam", 20, "cnn",
       execution=JAX_JIT),
    _b("jax.cnn.bf16", "jax", "jax.cnn with bf16 convolutions (autocast's policy)", 20, "cnn",
       "bfloat16", JAX_JIT),
    _b("jax.rng", "jax", "MLP initialised by jax.random", 30, None, execution=JAX_JIT),
    _b("jax.data", "jax", "jax.mlp fed by a numpy pipeline (Generator shuffle, map, "
       "prefetch thread)", 24, None, execution="numpy pipeline + jax.jit", reach="data"),
    _b("tf.mlp", "tensorflow", "MLP in tf.function, Adam", 30, "mlp", execution=TF_FUNCTION),
    # Its plain twin is tf.mlp: the same tf.function, without XLA.
    _b("tf.mlp.xla", "tensorflow", "MLP in tf.function(jit_compile=True)", 30, "mlp",
       execution="tf.function + XLA", plain_twin="tf.mlp"),
    _b("tf.keras", "tensorflow", "Keras model and Keras Adam in a custom loop", 30, "mlp",
       execution="Keras in tf.function"),
    _b("tf.lm", "tensorflow", "tiny causal transformer LM in tf.function, AdamW", 20, "lm",
       execution=TF_FUNCTION),
    _b("tf.cnn", "tensorflow", "small residual conv net with BatchNorm in tf.function, Adam",
       20, "cnn", execution=TF_FUNCTION),
    _b("tf.cnn.xla", "tensorflow", "tf.cnn in tf.function(jit_compile=True)", 20, "cnn",
       execution="tf.function + XLA", plain_twin="tf.cnn"),
    _b("tf.cnn.bf16", "tensorflow", "tf.cnn with bf16 convolutions (autocast's policy)", 20,
       "cnn", "bfloat16", TF_FUNCTION),
    _b("tf.rng", "tensorflow", "MLP initialised by TensorFlow's RNG", 30, None,
       execution=TF_FUNCTION),
    _b("tf.data", "tensorflow", "tf.mlp fed by tf.data (shuffle, map, batch, prefetch, "
       "deterministic)", 24, None, execution="tf.data + tf.function", reach="data"),
    # Models constructed by the libraries pinned beside the framework, from a config, with the
    # library's own random initialisation (nothing downloaded), on synthetic data: a release
    # that changes a default (initialisation, attention, an epsilon) moves them with the
    # framework untouched. They run only where a lock pins the library.
    _lib("torchvision.resnet18", "torch", ("torchvision",),
         "torchvision ResNet-18 (weights=None, 10 classes) on 32x32 images, SGD momentum", 6),
    _lib("transformers.gpt2", "torch", ("transformers",),
         "2-layer GPT-2 built from a transformers GPT2Config, causal LM loss, AdamW", 10),
    _lib("transformers.bert", "torch", ("transformers",),
         "2-layer BERT masked LM built from a transformers BertConfig, AdamW", 10),
    _lib("timm.vit", "torch", ("timm",),
         "timm ViT-Tiny (patch 8, pretrained=False) on 32x32 images, AdamW", 6),
    _lib("flax.mlp", "jax", ("flax", "optax"),
         "MLP as a flax.linen module (flax's init), optax.adamw, jitted", 30, JAX_JIT),
    _lib("keras.cnn", "tensorflow", ("keras",),
         "conv net of Keras layers with Keras' defaults (init, BatchNorm) on 32x32 images, "
         "Keras Adam", 10, "Keras in tf.function"),
)


def bundled() -> list[Scenario]:
    """The bundled scenarios whose framework the harness implements, in BUNDLED's order
    (whether a lock pins the framework is decided later, per run)."""
    return [s for s in BUNDLED if implements(s.framework)]


def model_libraries() -> frozenset[str]:
    """Every model library (canonical name) a bundled library scenario trains with."""
    return frozenset(canonicalize_name(r) for sc in BUNDLED for r in sc.requires)


def libraries_of(scenario_id: str) -> frozenset[str]:
    """The model libraries (canonical names) a bundled library scenario trains with beside its
    framework; empty for any other scenario."""
    found = next((sc for sc in BUNDLED if sc.id == scenario_id), None)
    return frozenset(canonicalize_name(r) for r in found.requires) if found else frozenset()


def user_scenarios(config: Config) -> list[Scenario]:
    """The config's own scenarios (20 steps unless set), in the config's order, then the
    trainings the pytest fixture registered in the golden store (config.registered_trainings);
    a ConfigError naming the file and key (config.scenario_tables) when a script is not a
    file, an entry's module is not in the project or `data` names no file of it."""
    out = []
    for name, sc, source, prefix in scenario_tables(config):
        if sc.entry is not None:
            key, script = "entry", entry_module(config.root, sc.entry)
        else:
            key, script = "script", config.resolve(sc.script)
        try:
            found = script is not None and script.is_file()
        except OSError as exc:  # a name too long, a symlink loop
            raise ConfigError(f"{source}: key '{prefix}{key}': {script}: "
                              f"{exc.strerror or exc}") from None
        if not found:
            what = (f"{sc.entry}: no module {sc.entry.partition(':')[0]} in {config.root} "
                    "(nor in its src/)"
                    if sc.entry is not None else f"{script} not found")
            raise ConfigError(f"{source}: key '{prefix}{key}': {what}")
        described = (f"user script {sc.script}" if sc.entry is None else f"user entry {sc.entry}"
                     if prefix else f"the test suite's training {sc.entry}")
        out.append(Scenario(id=name, framework=sc.framework, description=sc.description or
                            described,
                            steps=sc.steps or 20, script=script, entry=sc.entry,
                            root=entry_root(config.root, sc.entry) if sc.entry else None,
                            data=data_files(config.root, sc.data,
                                            f"{source}: key '{prefix}data'"),
                            data_patterns=tuple(sc.data),
                            data_root=config.root if sc.data else None,
                            tolerance=tolerance_value(sc.tolerance), device=sc.device))
    return out


def entry_files(root: Path, entry: str) -> list[Path]:
    """Every file an entry's run can import from its project: each module at `root` (sys.path
    holds it) and every file below the entry's top-level package (its modules and the data
    inside it), sorted; caches (__pycache__) and hidden entries left out."""
    files = [p for p in listing(root, "*.py") if p.is_file()]
    top = root / entry.partition(":")[0].split(".")[0]
    if top.is_dir():
        files += [p for p in listing(top, "**/*") if p.is_file()
                  and not any(part == "__pycache__" or part.startswith(".")
                              for part in p.relative_to(top).parts)]
    return files


def all_scenarios(config: Config) -> list[Scenario]:
    """The bundled scenarios, then the user's; a ConfigError when a user scenario takes a
    bundled one's id."""
    users = user_scenarios(config)
    ids = {s.id for s in bundled()}
    for name, _, source, prefix in scenario_tables(config):
        if name in ids:
            # A registration's id is its file's name.
            where = f"scenario.{name}" if prefix else f"the id {name} (the file's name)"
            raise ConfigError(f"{source}: {where}: name taken by a bundled scenario")
    return bundled() + users


def select(config: Config, requested: list[str]) -> list[Scenario]:
    """The scenarios asked for on the command line, or in config, or all of them."""
    known = {s.id: s for s in all_scenarios(config)}
    wanted = requested or config.scenarios or []
    if not wanted:
        return list(known.values())
    if not requested:
        # The trainings the team's test suite registered are the team's own: the gate runs
        # them whatever the config's `scenarios` selects (docs/scenarios.md).
        wanted = [*wanted, *(sid for sid in registered_trainings(config) if sid not in wanted)]
    where = "" if requested else f"{config.source}: key 'scenarios': "
    out = []
    for name in wanted:
        if name in known:
            out.append(known[name])
            continue
        # A prefix such as "torch" or "jax.lm" selects every scenario below it.
        matches = [s for sid, s in known.items() if sid.startswith(name + ".")]
        if not matches:
            hint = _spelling(name, known.values())
            raise ConfigError(f"{where}unknown scenario {one_line(repr(name), 80)}"
                              f"{': ' + hint if hint else ''} (see `lockguard scenarios`)")
        out.extend(matches)
    return list({s.id: s for s in out}.values())


def _spelling(name: str, known) -> str:
    """What an unknown scenario id was likely meant to be: a close id or prefix (`torch.mpl`,
    `loss-ema`), or for a framework's name its scenarios' prefix (`tensorflow` → tf)."""
    prefixes = sorted({s.id.split(".", 1)[0] for s in known
                       if s.framework == name.lower() and not s.requires})
    if prefixes and name not in prefixes:
        return f"did you mean {' or '.join(prefixes)}?"
    ids = [s.id for s in known]
    parents = {sid.rsplit(".", k)[0] for sid in ids for k in range(1, sid.count(".") + 1)}
    return did_you_mean(name, ids + sorted(parents))


def harness_digest(scenario: Scenario) -> str:
    """A hash of the harness code a run of `scenario` can import (envs/harness.harness_files):
    a golden recorded by other code of its framework's harness is not a shortcut; an edit of
    another framework's module leaves it one."""
    h = hashlib.sha256()
    for name, path in harness_files(scenario.framework, scenario.id,
                                    user_script=scenario.script is not None):
        h.update(name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def inputs_digest(scenario: Scenario, *, lock_hash: str, steps: int, seed: int, device: str,
                  threads: int, harness: str, environment: str) -> str:
    """Everything that determines a run's result besides the machine: equal digests, equal runs.

    `environment` names the backend and interpreter (a cp311 venv and a cp312 one install other
    wheels from one lock). A user script is hashed with every file beside it, which it may
    import (the harness puts its folder on sys.path) or read (a table, a config): a file up to
    MAX_SCRIPT_BYTES by its content, a larger one by its size and modification time. The files
    a scenario's `data` names are hashed by every byte, whatever their size."""
    h = hashlib.sha256()
    parts = [lock_hash, harness, scenario.id, scenario.framework, str(steps), str(seed), device,
             str(threads), environment]
    h.update("\0".join(parts).encode())
    if scenario.entry is not None and scenario.root is not None:
        h.update(b"\0entry\0" + scenario.entry.encode())
        for path in entry_files(scenario.root, scenario.entry):
            _hash_file(h, path, path.relative_to(scenario.root).as_posix(), "a project file")
    elif scenario.script:
        h.update(read_bytes(scenario.script, "scenario script", MAX_SCRIPT_BYTES))
        for sibling in listing(scenario.script.parent, "*"):
            if sibling == scenario.script or not sibling.is_file():
                continue
            _hash_file(h, sibling, sibling.name, "file beside a scenario script")
    for path in scenario.data:
        # Every byte, whatever the size: the team named these files (a small fixed slice).
        name = path.relative_to(scenario.data_root) if scenario.data_root else path
        h.update(b"\0data\0" + Path(name).as_posix().encode() + b"\0")
        try:
            h.update(sha256_file(path).encode())
        except OSError:  # gone since the config was read: a digest no golden has
            h.update(b"\0gone")
    return h.hexdigest()


def _hash_file(h, path: Path, name: str, what: str) -> None:
    """Add `path`, named `name`, to the digest `h`: up to MAX_SCRIPT_BYTES by its content, a
    larger one (a dataset, not read on every check) by its size and modification time."""
    h.update(b"\0" + name.encode() + b"\0")
    try:
        stat = path.stat()
    except OSError:  # gone since it was listed: a digest no golden has
        h.update(b"\0gone")
        return
    if stat.st_size > MAX_SCRIPT_BYTES:
        h.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    else:
        h.update(read_bytes(path, what, MAX_SCRIPT_BYTES))
