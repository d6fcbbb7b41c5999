"""Entry point of a harness run inside a target environment.

    python run.py --scenario torch.mlp --steps 30 --out result.json [--seed 0] [--device cpu]
                  [--threads 1] [--script user.py --framework torch]
                  [--entry pkg.train:make --root /project --framework torch]
                  [--time-block K] [--locate-step N]

Imports only the stdlib here; the framework module for the scenario imports its one framework.
A framework module (in the package _lockguard_harness) exposes:
    NAME                     the framework's name in results ("torch", "jax", "tensorflow", "numpy")
    setup(ctx)               determinism, threads, device; fills framework_version, device, fingerprint
    SCENARIOS                {scenario id: function(ctx)} for the bundled scenarios
    run_user(ctx, module)    runs a user script's run(steps, seed) with the framework's diagnostics
    grad_norm_of(params)     optional: the global gradient norm of a Lightning-style module's
                             step (an entry's shape, entry_shapes.py)
A model library's scenarios (torchvision.resnet18, transformers.gpt2, flax.mlp, keras.cnn) live
in lib_<library>.py, which exposes SCENARIOS only: it runs on its framework's module's setup.
Always writes a result file, also when the scenario crashes (status "crashed" with the traceback's
last lines); lockguard treats a missing file as a crash of the harness itself.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _lockguard_harness  # noqa: E402
from _lockguard_harness.common import Context, error_tail, write_result  # noqa: E402

# The package is imported, and its submodules are found through its own __path__: this folder
# leaves sys.path (python put it first), so a user script never imports the harness's modules
# (or this file) under their generic names.
sys.path[:] = [p for p in sys.path
               if os.path.realpath(p or os.curdir) != os.path.realpath(HERE)]

PACKAGE = _lockguard_harness.__name__
MODULE_OF_FRAMEWORK = {"torch": "torch_", "jax": "jax_", "tensorflow": "tf_", "numpy": "numpy_"}
FRAMEWORK_OF_PREFIX = {"torch": "torch", "jax": "jax", "tf": "tensorflow", "numpy": "numpy",
                       "torchvision": "torch", "timm": "torch", "transformers": "torch",
                       "flax": "jax", "keras": "tensorflow"}
# A model library's scenarios (torchvision.resnet18) live in a module of their own, lib_<prefix>,
# imported after the framework's setup (a library may read what setup decided, and imports its
# framework) and before the training starts (its import is not the training's memory or time).
LIBRARIES = ("torchvision", "timm", "transformers", "flax", "keras")


def parse_args(argv: list) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="lockguard harness: run one golden scenario")
    p.add_argument("--scenario", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "tpu"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--script", help="a user scenario script exposing run(steps, seed)")
    p.add_argument("--entry", help="a function of the project's own code, module:function "
                                   "(entry_shapes.py: its shapes)")
    p.add_argument("--root", help="the folder --entry's module is imported from (sys.path)")
    p.add_argument("--framework", choices=sorted(MODULE_OF_FRAMEWORK))
    p.add_argument("--time-block", type=int, default=0,
                   help="also time the steady steps in blocks of this many (a timing run of "
                        "steps too short to time one by one)")
    p.add_argument("--locate-step", type=int, default=None,
                   help="record every module's inputs, output and gradient at this step (a "
                        "torch scenario's; _lockguard_harness/locate_torch.py; N = steps: "
                        "its probe)")
    return p.parse_args(argv)


def framework_of(args: argparse.Namespace) -> str:
    if args.entry and not args.root:
        raise SystemExit("--entry needs --root")
    if args.script or args.entry:
        if not args.framework:
            raise SystemExit("--script and --entry need --framework")
        return args.framework
    prefix = args.scenario.split(".", 1)[0]
    if prefix not in FRAMEWORK_OF_PREFIX:
        raise SystemExit(f"unknown scenario {args.scenario!r}")
    return FRAMEWORK_OF_PREFIX[prefix]


def pin_threads(threads: int) -> None:
    # Must happen before the framework is imported: BLAS pools read these once.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)


def load_script(path: str):
    spec = importlib.util.spec_from_file_location("lockguard_user_scenario", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    if not callable(getattr(module, "run", None)):
        raise AttributeError(f"{path} defines no run(steps, seed) function")
    return module


def load_entry(entry: str, root: str, grad_norm=None, device=None):
    """The project's function `entry` ("pkg.train:make"), imported with `root` first on
    sys.path (as a script's folder is), as the module-like value run_user takes; `grad_norm`:
    the framework module's `grad_norm_of`, if it has one (a Lightning-style module's norms);
    `device`: the device the result reports, where a Lightning-style module is moved."""
    from _lockguard_harness.entry_shapes import entry_run

    module_name, _, attr = entry.partition(":")
    if module_name.split(".")[0] == PACKAGE:  # the project's code, never the harness's
        raise ImportError(f"entry {entry} names the harness's own package, not the project's")
    sys.path.insert(0, os.path.abspath(root))
    module = importlib.import_module(module_name)
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise AttributeError(f"{module_name} ({getattr(module, '__file__', '?')}) defines "
                                 f"no {attr}")
    return entry_run(target, entry, grad_norm, device)


def main(argv: list) -> int:
    args = parse_args(argv)
    framework = framework_of(args)
    pin_threads(args.threads)
    ctx = Context(args.scenario, framework, args.steps, args.seed, args.device, args.threads,
                  args.script or args.entry, args.time_block, args.locate_step)
    network: list = []  # the hosts a user's training reached for
    try:
        start = time.perf_counter()
        module = importlib.import_module(f"{PACKAGE}.{MODULE_OF_FRAMEWORK[framework]}")
        ctx.result["timings"]["import_s"] = time.perf_counter() - start
        module.setup(ctx)
        scenarios = module.SCENARIOS
        prefix = args.scenario.split(".", 1)[0]
        if not ctx.script and prefix in LIBRARIES:
            start = time.perf_counter()
            scenarios = importlib.import_module(f"{PACKAGE}.lib_{prefix}").SCENARIOS
            ctx.result["timings"]["import_s"] += time.perf_counter() - start
        # Host memory counts from here: the framework's import and setup are the same whatever
        # the scenario does, and would drown its figure (common.TrainingMemory).
        ctx.start_training()
        if ctx.script:
            # A user's training reads no network here: its failure should say so (userscript).
            from _lockguard_harness.userscript import watch_network
            network = watch_network()
        if args.entry:
            module.run_user(ctx, load_entry(args.entry, args.root,
                                                getattr(module, "grad_norm_of", None),
                                                ctx.result.get("device")))
        elif args.script:
            module.run_user(ctx, load_script(args.script))
        else:
            if args.scenario not in scenarios:
                raise KeyError(f"unknown scenario {args.scenario!r} for {framework}")
            scenarios[args.scenario](ctx)
    except BaseException as exc:  # noqa: BLE001 - every failure must end up in the result
        if isinstance(exc, KeyboardInterrupt):
            raise
        ctx.result["status"] = "crashed"
        ctx.result["error"] = error_tail(traceback.format_exc())
        if network:
            from _lockguard_harness.userscript import network_hint
            hint = network_hint(network, exc)
            if hint:
                ctx.result["error"] += "\n" + hint
    write_result(args.out, ctx.finish())
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # The result is on disk: skip interpreter teardown, which for torch or tensorflow costs
    # seconds of freeing memory and joining thread pools that nobody waits for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
