"""The fleet: the machines a team trains on ([tool.lockguard.fleet.NAME]), this machine's own
entry (`lockguard fleet probe`), and a lock change judged against them from what the changed
wheels' files declare (lockguard/native.py): a GPU architecture left without code, a CUDA
major newer than a driver runs, a glibc older than a manylinux tag needs, an x86-64 level
above the machine's that a library's ISA note says it was compiled for, a Requires-Python the
machine's Python is outside of.

NVIDIA's facts (GPU names, drivers per CUDA release, PTX ISA versions) are nvidia.py's tables;
the x86-64 micro-architecture levels are here, cited where defined.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from lockguard import toml
from lockguard.harness._lockguard_harness.common import nvidia_info
from lockguard.native import Facts, cuda_major_needed, sm
from lockguard.nvidia import (
    GPU_ARCHS, MIN_DRIVER, PTX_ISA, STACK_LIBRARIES, TOOLKIT_DRIVER, ptx_release,
)
from lockguard.process import ProcessError, capture

_VENDOR_WORDS = re.compile(r"NVIDIA|TESLA|GEFORCE|QUADRO|[\s_-]+")
_SM = re.compile(r"sm_(\d{2,3})[af]?")

# The x86-64 psABI's micro-architecture levels (System V AMD64 psABI, "Micro-Architecture
# Levels"; what glibc's `ld.so --help` reports), as /proc/cpuinfo names the features (pni is
# SSE3, abm LZCNT). aarch64 is a level of its own here.
ISA_LEVELS: dict[str, frozenset[str]] = {
    "x86-64-v2": frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
    "x86-64-v3": frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe",
                            "xsave"}),
    "x86-64-v4": frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
}
ISA_NAMES = ("x86-64", *ISA_LEVELS, "aarch64")


def gpu_arch(name: str, model: bool = False) -> int | None:
    """A GPU (a name of GPU_ARCHS as a person writes it, or sm_XX) as a compute capability
    times ten; None when it is neither. `model`: a driver's model name ("Tesla V100-SXM2-32GB"),
    matched by its start, the longest name first (A100 before A10)."""
    m = _SM.fullmatch(name.strip())
    if m:
        return int(m.group(1))
    key = _VENDOR_WORDS.sub("", name.upper())
    if not model:
        return GPU_ARCHS.get(key)
    for known in sorted(GPU_ARCHS, key=len, reverse=True):
        if key.startswith(known):
            return GPU_ARCHS[known]
    return None


def parse_driver(text: str) -> tuple[int, ...] | None:
    """A driver version ("550.54.15") as numbers; None when it is not dotted digits."""
    return tuple(int(p) for p in text.split(".")) if re.fullmatch(r"\d+(\.\d+){0,2}", text) \
        else None


def isa_level(flags: Iterable[str], machine: str = "x86_64") -> str:
    """The highest psABI level every flag of which the CPU has (x86-64 when not even v2);
    aarch64 for an Arm CPU."""
    if machine in ("aarch64", "arm64"):
        return "aarch64"
    have, level = set(flags), "x86-64"
    for name, needs in ISA_LEVELS.items():
        if not needs <= have:
            break
        level = name
    return level


@dataclass(frozen=True)
class Machine:
    """One fleet entry: its name, GPU architectures, driver, CPU ISA level, glibc, Python and
    count."""

    name: str
    gpus: tuple[int, ...] = ()
    gpu_names: tuple[str, ...] = ()  # as the config wrote them, for messages
    driver: tuple[int, ...] | None = None
    isa: str | None = None
    glibc: tuple[int, int] | None = None
    count: int = 1
    python: tuple[int, int] | None = None

    @property
    def arch(self) -> str | None:
        """The CPU architecture its `cpu` says, as wheel tags name it: aarch64, x86_64 for an
        x86-64 level; None where the fleet does not say."""
        return None if self.isa is None else "aarch64" if self.isa == "aarch64" else "x86_64"

    def label(self, what: str) -> str:
        """"fleet: v100-nodes, V100 x 12": how a finding names this entry and its `what`."""
        return f"fleet: {self.name}, {what}" + (f" x {self.count}" if self.count > 1 else "")


@dataclass(frozen=True)
class Finding:
    """What one lock change (`change`: "torch 2.9.0 -> 2.14.1") does to one fleet entry
    (`problem`: "drops sm_70 (fleet: v100-nodes, V100 x 12): broken there"); `broken` fails
    the gate, otherwise it is a note."""

    machine: str
    broken: bool
    change: str
    problem: str


def _dotted(version: Iterable[int]) -> str:
    return ".".join(str(p) for p in version)


def driver_text(version: tuple[int, ...]) -> str:
    """A driver version as NVIDIA writes it: (580, 65, 6) -> "580.65.06"."""
    return ".".join([str(version[0]), *(f"{p:02d}" for p in version[1:])])


def judge(old: Facts | None, new: Facts, machines: Iterable[Machine],
          change: str | None = None) -> list[Finding]:
    """What the change from `old` (None: added, or not read) to `new` does to each fleet
    machine; `change` names it ("torch 2.8.0 -> 2.9.0"; default: from the two). What is
    particular to this wheel (the runtime it links, how much PTX) is said beside the change,
    so that the problem it shares with others groups with theirs (grouped)."""
    change = change or change_text(new.name, old.version if old else None, new.version,
                                   rehashed=old is not None and old.version == new.version)
    return [Finding(machine.name, broken, f"{change} ({detail})" if detail else change, problem)
            for machine in machines for problem, broken, detail in _findings(old, new, machine)]


def change_text(name: str, old: str | None, new: str, rehashed: bool) -> str:
    """A lock change as a finding names it: "torch 2.8.0 -> 2.9.0", "jax 0.7.0" (added, `old`
    None), "torch 2.9.0 (another build: other hashes)" (`rehashed`: the same version)."""
    return (f"{name} {new}" if old is None else f"{name} {new} (another build: other hashes)"
            if rehashed else f"{name} {old} -> {new}")


def listed(names: Sequence[str], shown: int = 4) -> str:
    """The first `shown` of `names`, then how many more: "a, b, c, d and 8 more"."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{', '.join(names[:shown])}{more}"


Found = tuple[str, bool, str]  # a problem, whether it breaks the machine, the wheel's detail


def _findings(old: Facts | None, new: Facts, machine: Machine) -> list[Found]:
    if new.machine and machine.arch and new.machine != machine.arch:
        # The wheel read is another platform's: its code, tags and requirements say nothing
        # certain of the machine's own wheel. The caller reads each machine's own
        # (report_parts.platform_of): this is a wheel chosen wrongly, failed closed.
        return [(f"not judged ({machine.label(machine.isa or '')}): the wheel read is "
                 f"{new.machine}'s, not the machine's own (a wheel lockguard cannot read fails "
                 "closed)", True, "")]
    return _gpu_findings(old, new, machine) + _host_findings(new, machine)


def grouped(findings: Iterable[Finding], shown: int = 4) -> list[tuple[Finding, str]]:
    """One line per machine and problem, naming the changes that cause it (the first `shown`,
    then how many more): a CUDA 13 upgrade drops sm_70 in a dozen nvidia-* wheels at once."""
    groups: dict[tuple[str, str, bool], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.machine, f.problem, f.broken), []).append(f)
    return [(same[0], f"{listed([f.change for f in same], shown)} {same[0].problem}")
            for same in groups.values()]


def _gpu_findings(old: Facts | None, new: Facts, machine: Machine) -> list[Found]:
    out = []
    if new.cuda:
        for arch, name in zip(machine.gpus, machine.gpu_names):
            how = new.cuda.runs_on(arch)
            where = machine.label(name)
            if how is None:
                verb = ("has no code for" if old is None or not old.cuda
                        else "drops" if old.cuda.runs_on(arch) else "still has no code for")
                out.append((f"{verb} {sm(arch)} ({where}): broken there", True, ""))
            elif how == "ptx":
                ptx = max(a for a in new.cuda.ptx if a <= arch)
                size = new.cuda.ptx_size(ptx)
                out.append((*_jit(f"has PTX only for {sm(ptx)} on {sm(arch)} ({where})",
                                  new.cuda.ptx_isa, machine.driver),
                            f"{_megabytes(size)} of PTX" if size else ""))
    if machine.driver is None or not machine.gpus or not new.cuda_major:
        return out
    links = f"it links {new.cuda_linked[1]}" if new.cuda_linked else ""
    driver = machine.label("driver " + driver_text(machine.driver))
    need = MIN_DRIVER.get(new.cuda_major)
    if new.cuda_major > max(MIN_DRIVER):
        out.append((f"is built for CUDA {new.cuda_major}, newer than lockguard's table knows "
                    f"(lockguard/nvidia.py): whether the driver runs it is not known ({driver}): "
                    "broken there until it is", True, links))
    elif need and machine.driver < need:
        out.append((f"needs driver >= {driver_text(need)} for CUDA {new.cuda_major} ({driver}): "
                    "broken there", True, links))
    return out


def _jit(what: str, isa: tuple[int, int] | None, driver: tuple[int, ...] | None
         ) -> tuple[str, bool]:
    """A GPU that runs a wheel's PTX: a note (JIT-compiled on first use), or broken where the
    driver is older than the CUDA release that wrote that PTX ISA (minor version compatibility
    does not JIT a newer minor's PTX), or where the ISA is newer than nvidia.PTX_ISA knows
    (whether the driver takes it is not known: fails closed)."""
    note = (f"{what}: JIT-compiled on first use (each kernel compiled by the driver at a cold "
            "start, then kept in its compute cache, CUDA_CACHE_MAXSIZE permitting)")
    if isa is None or driver is None:
        return note, False
    version = f"PTX ISA {isa[0]}.{isa[1]}"
    if isa > max(PTX_ISA):
        return (f"{what}: {version} is newer than lockguard's table knows (lockguard/"
                f"nvidia.py): whether driver {driver_text(driver)} JIT-compiles it is not "
                "known: broken there until it is", True)
    release = ptx_release(isa)
    need = TOOLKIT_DRIVER.get(release) if release else None
    if need is None or driver >= need:
        return note, False
    return (f"{what}: its {version} (CUDA {release[0]}.{release[1]}) needs driver >= "
            f"{driver_text(need)} to JIT-compile (driver {driver_text(driver)}): broken there",
            True)


def _megabytes(size: int) -> str:
    """A size as a finding says it: "237 MB", "40 kB", "120 bytes"."""
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB" if size >= 1e3 \
        else f"{size} bytes"


def _host_findings(new: Facts, machine: Machine) -> list[Found]:
    out = []
    if new.glibc and machine.glibc and machine.glibc < new.glibc:
        why = "its libraries' symbol versions" if new.glibc_from else "its manylinux tag"
        out.append((f"needs glibc >= {_dotted(new.glibc)} ({why}; "
                    f"{machine.label('glibc ' + _dotted(machine.glibc))}): broken there", True,
                    f"{new.glibc_from} requires GLIBC_{_dotted(new.glibc)}"
                    if new.glibc_from else ""))
    # An x86 level (native.x86_isa_needed: 2..4 are ISA_NAMES[1..3]) above the machine's own.
    if new.x86_isa and machine.isa in ISA_NAMES[:4] \
            and ISA_NAMES.index(machine.isa) < new.x86_isa[0] - 1:
        need = ISA_NAMES[new.x86_isa[0] - 1]
        out.append((f"needs {need} ({new.x86_isa[1]} was compiled for it: its ISA note; "
                    f"{machine.label(machine.isa)}): broken there (an illegal instruction)",
                    True, ""))
    if machine.python and new.requires_python and not _admits(new.requires_python,
                                                              machine.python):
        here = _dotted(machine.python)
        out.append((f"needs Python {new.requires_python} (its Requires-Python; "
                    f"{machine.label('Python ' + here)}): broken there (no release of it "
                    f"installs on {here})", True, ""))
    return out


def _admits(requires_python: str, python: tuple[int, int]) -> bool:
    """Whether a Requires-Python admits the machine's Python (any of its patch releases: the
    fleet names X.Y); one that packaging cannot read admits it (a note elsewhere would be all
    it could say)."""
    try:
        spec = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return True
    return any(spec.contains(f"{python[0]}.{python[1]}.{patch}", prereleases=True)
               for patch in range(0, 30))


def judge_changes(changes: Iterable[tuple[str, Facts | None, Facts | None]],
                  machines: list[Machine]) -> tuple[list[Finding], list[tuple[str, str | None]]]:
    """Every lock change (what it is, "torch 2.8.0 -> 2.14.1"; the old wheel's facts, None
    when added or not read; the new one's, None when its files could not be had) against the
    fleet: the findings, and the changes not judged with why (Facts.unread: some of its files
    could not be read; None: its wheel could not be had). A change not judged fails closed
    (the caller's rule failure): what its unread files hold is not known."""
    findings: list[Finding] = []
    unread: list[tuple[str, str | None]] = []
    for what, old, new in changes:
        if new is None or new.unread:
            unread.append((what, new.unread if new else None))
        else:
            findings += judge(old, new, machines, what)
    return findings, unread


def stack_line(pins: Iterable[tuple[str, str]]) -> str | None:
    """The CUDA libraries of a lock's stack (nvidia.STACK_LIBRARIES) among `pins` (canonical
    name, version), with the CUDA major their names or versions say and the oldest driver
    that runs it: "cuDNN 9.24.0.43, cuBLAS 13.1.1.3, NCCL 2.30.7: CUDA 13, driver >=
    580.65.06"; None when the lock pins none of them."""
    parts, majors = [], set()
    for name, version in sorted(pins):
        base = re.sub(r"-cu\d{2}$", "", name)
        if base in STACK_LIBRARIES:
            parts.append(f"{STACK_LIBRARIES[base]} {version}")
            majors.add(cuda_major_needed(version, (), name))
    if not parts:
        return None
    known = sorted(m for m in majors if m)
    need = [f"CUDA {m}, driver >= {driver_text(MIN_DRIVER[m])}" for m in known
            if m in MIN_DRIVER]
    return ", ".join(parts) + (f": {'; '.join(need)}" if need else "")


def this_machine(name: str) -> Machine:
    """This machine's fleet entry: the GPUs and driver from /proc/driver/nvidia (nvidia-smi where
    that is not visible), the ISA level
    from /proc/cpuinfo's flags, glibc from the C library itself, Python the one lockguard runs
    on (the trainings' too, where lockguard is installed beside them)."""
    nvidia = nvidia_info() or _nvidia_smi() or {}
    archs = {n: gpu_arch(n, model=True) for n in nvidia.get("gpus") or []}
    known = {n: a for n, a in archs.items() if a is not None}  # one entry per model
    return Machine(name=name, gpus=tuple(known.values()),
                   gpu_names=tuple(_short(n) for n in known),
                   driver=parse_driver(nvidia.get("driver") or "") if nvidia else None,
                   isa=isa_level(_cpu_flags(), platform.machine()), glibc=_glibc(),
                   python=sys.version_info[:2])


def _nvidia_smi() -> dict | None:
    """The driver and GPU models from nvidia-smi, where /proc/driver/nvidia is not visible
    (some containers) but the tool is; None without it or when it fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = capture([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                       timeout=30)
    except ProcessError:
        return None
    rows = [[c.strip() for c in line.split(",")] for line in
            done.stdout.decode("utf-8", "replace").splitlines() if line.count(",") == 1]
    if done.code != 0 or not rows:
        return None
    return {"driver": rows[0][1], "gpus": [name for name, _ in rows]}


def _short(model: str) -> str:
    """A driver's model name as the fleet table writes it: "NVIDIA H100 80GB HBM3" -> "H100"."""
    key = _VENDOR_WORDS.sub("", model.upper())
    return next((k for k in sorted(GPU_ARCHS, key=len, reverse=True) if key.startswith(k)),
                model)


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.split(":")[0].strip() == "flags"), "")
    return set(line.partition(":")[2].split())


def _glibc() -> tuple[int, int] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    except (ValueError, OSError):
        text = " ".join(platform.libc_ver())
    m = re.search(r"glibc\s+(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def machine_toml(machine: Machine, table: str = "tool.lockguard.fleet") -> str:
    """The machine as its [<table>.NAME] table (a pyproject.toml's table by default; a
    lockguard.toml's is "fleet")."""
    entry: dict = {"gpus": list(machine.gpu_names)}
    if machine.driver is not None:
        entry["driver"] = driver_text(machine.driver)
    if machine.isa:
        entry["cpu"] = machine.isa
    if machine.glibc:
        entry["glibc"] = _dotted(machine.glibc)
    if machine.python:
        entry["python"] = _dotted(machine.python)
    if machine.count > 1:
        entry["count"] = machine.count
    document: dict = {machine.name: entry}
    for key in reversed(table.split(".")):
        document = {key: document}
    return toml.dumps(document)
