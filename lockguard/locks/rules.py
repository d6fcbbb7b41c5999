"""`check_family_rules`: pairings between framework packages that can be checked from the lock
alone (torch/torchvision, jax/jaxlib, tensorflow/keras, CUDA majors), before any env is built.

`RuleViolation` is part of the Report's JSON, hence a pydantic model.
"""

import re
from collections.abc import Iterator

from packaging.version import Version
from pydantic import BaseModel, ConfigDict

from lockguard.locks.families import cuda_major
from lockguard.locks.model import TENSORFLOW_DISTS, Lock, Pin


class RuleViolation(BaseModel):
    """A pairing of framework packages in one lock that cannot work together (RULES names each
    rule), found before any environment is built; part of the Report's JSON."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    rule: str  # one of RULES
    message: str  # one sentence naming the packages, their versions and lock lines
    lines: tuple[int, ...]


RULES: dict[str, str] = {
    "torchvision-matches-torch": "torchvision 0.(X+15) belongs to torch 2.X (torch 2.0-2.14)",
    "torchaudio-matches-torch": "torchaudio has the same major.minor as torch (torch 2.x)",
    "triton-matches-torch": "triton is the release a torch version was built against",
    "torch-variants-match": "torch, torchvision and torchaudio share one local tag (+cpu, +cu121)",
    "jaxlib-not-newer-than-jax": "jaxlib is not newer than jax",
    "jax-plugin-matches-jaxlib": "jax CUDA plugin and pjrt have jaxlib's version",
    "keras-matches-tensorflow": "keras 3 with TF 2.16+, keras 2.X with TF 2.X (2.6-2.15)",
    "tf-keras-matches-tensorflow": "tf-keras 2.X with TF 2.X",
    "cuda-major-consistent": "one CUDA major across nvidia-*-cuNN wheels, +cuNNN tags, jax plugins",
}


def check_family_rules(lock: Lock) -> list[RuleViolation]:
    """Check framework pairings that are decidable from the lock alone.

    Only pairings confirmed from the projects' own metadata or release notes are encoded;
    versions outside the known tables are skipped, never guessed. When markers split a
    package into several pins, two pins are checked together only if they can be installed
    together: one has no marker, or both have the same marker.
    """
    return [
        *_torch_rules(lock),
        *_jax_rules(lock),
        *_tensorflow_rules(lock),
        *_cuda_rule(lock),
    ]


def _at(pin: Pin) -> str:
    return f"{pin.requirement} (line {pin.line})"


def _coexist(a: Pin, b: Pin) -> bool:
    """Whether two pins may be installed together (markers are compared, not solved)."""
    return a.marker is None or b.marker is None or a.marker == b.marker


def _together(lock: Lock, pin: Pin, name: str) -> list[Pin]:
    """The pins of `name` that may be installed alongside `pin`."""
    return [other for other in lock.by_name.get(name, ()) if _coexist(pin, other)]


def _major_minor(version: Version) -> tuple[int, int]:
    return version.major, version.minor


# torchvision 0.(X+15) goes with torch 2.X: confirmed from PyTorch's compatibility tables for
# 2.0-2.9 and from this project's brief up to 2.14. Beyond that the rule is not assumed.
_TORCHVISION_OFFSET = 15
_LAST_TORCH_MINOR_WITH_KNOWN_TORCHVISION = 14

# triton (major, minor) that torch 2.X requires on Linux: 2.0-2.9 from torch's own
# `triton==` requirement; 2.11 → 3.6 (pip's "torch 2.11.0 requires triton==3.6.0"), 2.12 → 3.7
# (pytorch PRs "[release 2.12] [triton 3.7]" and "Update triton to 3.7.1 release" for 2.12.1),
# 2.13 → 3.7 (2.13.0's shipped triton 3.7.1). torch 2.10 and 2.14 could not be confirmed, so
# their triton is not checked.
_TRITON_FOR_TORCH_MINOR: dict[int, tuple[int, int]] = {
    0: (2, 0), 1: (2, 1), 2: (2, 2), 3: (2, 3), 4: (3, 0), 5: (3, 1), 6: (3, 2), 7: (3, 3),
    8: (3, 4), 9: (3, 5), 11: (3, 6), 12: (3, 7), 13: (3, 7),
}


def _torch_rules(lock: Lock) -> Iterator[RuleViolation]:
    # Only torch 2.x: the 1.x pairings follow other schemes and are not encoded. Patch levels
    # are not compared (torch 2.0.1 shipped with torchvision 0.15.2 and torchaudio 2.0.2), and
    # pip enforces them anyway: each companion wheel requires its exact torch version.
    for torch in lock.by_name.get("torch", ()):
        version = torch.parsed_version
        if version.major != 2:
            continue
        minor = version.minor
        if minor <= _LAST_TORCH_MINOR_WITH_KNOWN_TORCHVISION:
            wanted = (0, minor + _TORCHVISION_OFFSET)
            for vision in _together(lock, torch, "torchvision"):
                if _major_minor(vision.parsed_version) != wanted:
                    yield RuleViolation(
                        rule="torchvision-matches-torch",
                        message=f"{_at(vision)} does not match {_at(torch)}: torch 2.{minor} "
                                f"goes with torchvision 0.{wanted[1]}.*.",
                        lines=(torch.line, vision.line),
                    )
        for audio in _together(lock, torch, "torchaudio"):
            if _major_minor(audio.parsed_version) != (2, minor):
                yield RuleViolation(
                    rule="torchaudio-matches-torch",
                    message=f"{_at(audio)} does not match {_at(torch)}: torch 2.{minor} goes "
                            f"with torchaudio 2.{minor}.*.",
                    lines=(torch.line, audio.line),
                )
        wanted_triton = _TRITON_FOR_TORCH_MINOR.get(minor)
        # Nightly (dev) torch builds pair with nightly triton builds, outside this table.
        if wanted_triton is not None and not version.is_devrelease:
            for triton in _together(lock, torch, "triton"):
                if _major_minor(triton.parsed_version) != wanted_triton:
                    yield RuleViolation(
                        rule="triton-matches-torch",
                        message=f"{_at(triton)} does not match {_at(torch)}: torch 2.{minor} "
                                f"requires triton {wanted_triton[0]}.{wanted_triton[1]}.*.",
                        lines=(torch.line, triton.line),
                    )
        # The local tag names the build (CPU, a CUDA version, ROCm); the companions' compiled
        # operators only load into a torch of the same build.
        for name in ("torchvision", "torchaudio"):
            for companion in _together(lock, torch, name):
                if companion.parsed_version.local != version.local:
                    yield RuleViolation(
                        rule="torch-variants-match",
                        message=f"{_at(companion)} is a different build from {_at(torch)}: "
                                f"{_tag(companion)} vs {_tag(torch)}; install both from the "
                                "same index.",
                        lines=(torch.line, companion.line),
                    )


def _tag(pin: Pin) -> str:
    local = pin.parsed_version.local
    return f"'+{local}'" if local else "no local tag"


_JAX_CUDA_PLUGIN = re.compile(r"^jax-cuda\d+-(plugin|pjrt)$")


def _release(pin: Pin) -> tuple[int, ...]:
    """The numbers of a version without pre/dev/local parts: what jax and jaxlib compare."""
    return pin.parsed_version.release


def _jax_rules(lock: Lock) -> Iterator[RuleViolation]:
    # jax refuses at import a jaxlib newer than itself ("jaxlib version ... is newer than and
    # incompatible with jax version ..."). An older jaxlib can be right: jax 0.4.37 was a
    # jax-only release used with jaxlib 0.4.36, so equality is not required. How old jaxlib
    # may be differs per jax release and is not encoded.
    for jax in lock.by_name.get("jax", ()):
        for jaxlib in _together(lock, jax, "jaxlib"):
            if _release(jaxlib) > _release(jax):
                yield RuleViolation(
                    rule="jaxlib-not-newer-than-jax",
                    message=f"{_at(jaxlib)} is newer than {_at(jax)}, and jax refuses to "
                            "import with a newer jaxlib.",
                    lines=(jax.line, jaxlib.line),
                )
    # jaxlib ignores a CUDA plugin whose release numbers differ from its own (jaxlib's
    # plugin_support.check_plugin_version), silently falling back to CPU; each plugin requires
    # its pjrt at its own version. ROCm plugins are exempt from that check upstream, so here too.
    plugins = [pin for pin in lock.pins if _JAX_CUDA_PLUGIN.match(pin.name)]
    for jaxlib in lock.by_name.get("jaxlib", ()):
        for plugin in plugins:
            if not _coexist(jaxlib, plugin):
                continue
            if _release(plugin) != _release(jaxlib):
                yield RuleViolation(
                    rule="jax-plugin-matches-jaxlib",
                    message=f"{_at(plugin)} does not match {_at(jaxlib)}: jaxlib only loads "
                            "a CUDA plugin of its own version, otherwise jax runs on CPU.",
                    lines=(jaxlib.line, plugin.line),
                )


def _tensorflow_rules(lock: Lock) -> Iterator[RuleViolation]:
    # TF 2.16+ requires keras>=3; TF 2.6-2.15 require keras 2.X of their own minor (before 2.6
    # Keras lived inside TF, so older pairings are not checked). tf-keras versions follow TF's
    # minor (tf-keras 2.X requires tensorflow 2.X).
    # tensorflow and tensorflow-intel (say) are both pinned on Windows-capable locks: report
    # each mismatch once per companion pin and TF minor, not once per TF distribution.
    seen: set[tuple[str, int, int]] = set()
    for tf in (pin for name in TENSORFLOW_DISTS for pin in lock.by_name.get(name, ())):
        version = tf.parsed_version
        if version.major != 2:
            continue
        minor = version.minor
        for keras in _together(lock, tf, "keras"):
            key = ("keras", keras.line, minor)
            if key in seen:
                continue
            seen.add(key)
            keras_version = keras.parsed_version
            if minor >= 16 and keras_version.major != 3:
                expected = "keras 3.x"
            elif 6 <= minor <= 15 and _major_minor(keras_version) != (2, minor):
                expected = f"keras 2.{minor}.*"
            else:
                continue
            yield RuleViolation(
                rule="keras-matches-tensorflow",
                message=f"{_at(keras)} does not match {_at(tf)}: TensorFlow 2.{minor} "
                        f"requires {expected}.",
                lines=(tf.line, keras.line),
            )
        for tf_keras in _together(lock, tf, "tf-keras"):
            key = ("tf-keras", tf_keras.line, minor)
            if key in seen:
                continue
            seen.add(key)
            if _major_minor(tf_keras.parsed_version) != (2, minor):
                yield RuleViolation(
                    rule="tf-keras-matches-tensorflow",
                    message=f"{_at(tf_keras)} does not match {_at(tf)}: tf-keras follows "
                            f"TensorFlow's minor version, so TensorFlow 2.{minor} needs "
                            f"tf-keras 2.{minor}.*.",
                    lines=(tf.line, tf_keras.line),
                )


def _cuda_rule(lock: Lock) -> Iterator[RuleViolation]:
    # One process loads one CUDA runtime: cu11 and cu12 NVIDIA wheels side by side, or a
    # +cu121 torch over cu11 wheels, means some library loads against the wrong one.
    # Reported once per pair of majors, naming the first two pins that disagree.
    evidence = [(major, pin) for pin in lock.pins if (major := cuda_major(pin)) is not None]
    reported: set[tuple[int, int]] = set()
    for i, (major_a, a) in enumerate(evidence):
        for major_b, b in evidence[i + 1:]:
            pair = (min(major_a, major_b), max(major_a, major_b))
            if major_a == major_b or pair in reported:
                continue
            if not _coexist(a, b):
                continue
            reported.add(pair)
            yield RuleViolation(
                rule="cuda-major-consistent",
                message=f"CUDA {major_a} and CUDA {major_b} builds are mixed: {_at(a)} is "
                        f"built for CUDA {major_a} but {_at(b)} for CUDA {major_b}.",
                lines=(a.line, b.line),
            )
