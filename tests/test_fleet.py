"""The fleet: [tool.lockguard.fleet] validated, `fleet probe`, the CUDA code, CUDA major and
glibc floor read from a wheel's files (lockguard/native.py), and a lock change judged against
the fleet (`lockguard diff`; check and propose through report_parts.fleet_parts).

The ELF files here are built in the test, byte by byte, after the System V gABI's ELF64
layout and the fatbin header layout native.py documents; the real-wheel tests read torch
2.14.1's CUDA 13 build and 2.6.0's CUDA 12 one and compare with the architecture lists torch
was compiled with."""

from __future__ import annotations

import re
import shutil
import struct
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockguard import native
from lockguard.config import ConfigError, parse_config
from lockguard.fleet import (
    Finding, Machine, gpu_arch, grouped, isa_level, judge, judge_changes, machine_toml,
    parse_driver,
)
from lockguard.native import CudaCode, Facts

PTX, SASS = 1, 2


def fatbin(*entries: tuple[int, int], payload: int = 40, isa: tuple[int, int] = (9, 0)
           ) -> bytes:
    """A fatbin container of (kind, arch) entries, each a 64-byte entry header and `payload`
    bytes of filler code; `isa`: the code version each entry header records (a PTX entry's
    PTX ISA version)."""
    body = b""
    for kind, arch in entries:
        head = struct.pack("<HHIQQHHI", kind, 0x0101, 64, payload, 0, isa[1], isa[0], arch)
        body += head.ljust(64, b"\0") + b"\xaa" * payload
    return struct.pack("<IHHQ", native.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf(*sections: tuple, bits: int = 64) -> bytes:
    """A little-endian ELF shared library (ET_DYN) of `sections` (name, sh_type, sh_flags,
    bytes[, the name of the section its sh_link names]) and its .shstrtab: header, the
    sections' bytes, then the section header table."""
    names = b"\0" + b"".join(s[0].encode() + b"\0" for s in sections) + b".shstrtab\0"
    blobs, offset, table = b"", 64, [struct.pack("<IIQQQQIIQQ", *([0] * 10))]
    name_at = 1
    every = [*sections, (".shstrtab", 3, 0, names)]
    index = {s[0]: i + 1 for i, s in enumerate(every)}
    for name, sh_type, flags, data, *link in every:
        table.append(struct.pack("<IIQQQQIIQQ", name_at, sh_type, flags, 0, offset + len(blobs),
                                 len(data), index[link[0]] if link else 0, 0, 8, 0))
        name_at += len(name) + 1
        blobs += data + b"\0" * (-len(data) % 8)
    shoff = 64 + len(blobs)
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 1, 1]) + b"\0" * 9
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64,
                         len(table), len(table) - 1)
    return header + blobs + b"".join(table)


PROGBITS, EXEC = 1, 0x4


def library(path: Path, nv_fatbin: bytes, ldata: bytes = b"", text: bytes = b"") -> Path:
    path.write_bytes(elf((".text", PROGBITS, EXEC | 0x2, text), (".nv_fatbin", PROGBITS, 0x2,
                                                                  nv_fatbin),
                         (".ldata", PROGBITS, 0x3, b"\x11" * 24 + ldata)))
    return path


# ---------------------------------------------------------------- reading the files


def test_fatbins_in_nv_fatbin_and_in_data_sections_are_read_and_code_is_not(tmp_path):
    lib = library(tmp_path / "libk.so",
                  fatbin((SASS, 80), (SASS, 90), (PTX, 90)) + fatbin((SASS, 86)),
                  ldata=fatbin((SASS, 100)),  # cuFFT keeps its kernels' fatbins in .ldata
                  text=fatbin((SASS, 37)))  # the magic in code is not a fatbin
    assert native.cuda_code(lib) == CudaCode(frozenset({80, 86, 90, 100}), frozenset({90}),
                                             (9, 0))
    newer = library(tmp_path / "libn.so", fatbin((PTX, 80), isa=(8, 7)) + fatbin((PTX, 90)))
    assert native.cuda_code(newer).ptx_isa == (9, 0)  # the newest PTX ISA among its PTX
    # each PTX entry's size: its payload's (40 bytes here), or its decompressed size where
    # the header records a larger one (at offset 56 of the entry header)
    assert native.cuda_code(newer).ptx_bytes == ((80, 40), (90, 40))
    packed = bytearray(fatbin((PTX, 80), (PTX, 80)))
    struct.pack_into("<Q", packed, 16 + 56, 1_000_000)
    assert native.cuda_code(library(tmp_path / "libz.so", bytes(packed))).ptx_bytes == (
        (80, 1_000_040),)


def test_what_is_not_a_64_bit_elf_with_fatbins_declares_no_cuda_code(tmp_path):
    (tmp_path / "text.so").write_text("not ELF")
    (tmp_path / "empty.so").write_bytes(b"")
    (tmp_path / "plain.so").write_bytes(elf((".data", PROGBITS, 0x3, b"\0" * 64)))
    (tmp_path / "elf32.so").write_bytes(elf((".nv_fatbin", PROGBITS, 0x2, fatbin((SASS, 80))),
                                            bits=32))
    for name in ("text.so", "empty.so", "plain.so", "elf32.so"):
        assert not native.cuda_code(tmp_path / name), name


def test_a_cut_or_corrupt_container_is_read_as_far_as_it_is_whole(tmp_path):
    good = fatbin((SASS, 80), (SASS, 90))
    cut = good[:len(good) - 30]  # its stated size runs past the section: not a container
    corrupt = good[:16] + b"\xff" * 64 + good[80:]  # its first entry header is garbage
    lib = library(tmp_path / "libk.so", fatbin((SASS, 75)) + corrupt, ldata=cut)
    assert native.cuda_code(lib) == CudaCode(frozenset({75}))


@pytest.mark.parametrize("sass, ptx, arch, how", [
    ({80}, set(), 86, "sass"),  # binary compatible within a major, to newer minors
    ({86}, set(), 80, None),  # not to older ones
    ({80}, set(), 90, None),  # nor across majors
    ({75}, {80}, 90, "ptx"),  # PTX JIT-compiles for any newer arch
    ({90}, {90}, 70, None),
    ({70, 90}, set(), 70, "sass"),
])
def test_which_code_a_gpu_runs(sass, ptx, arch, how):
    assert CudaCode(frozenset(sass), frozenset(ptx)).runs_on(arch) == how


def test_manylinux_tags_name_the_glibc_they_need():
    assert native.manylinux_glibc(["cp311-cp311-manylinux_2_28_x86_64"]) == (2, 28)
    assert native.manylinux_glibc(["py3-none-manylinux2014_x86_64",
                                   "py3-none-manylinux_2_17_x86_64"]) == (2, 17)
    assert native.manylinux_glibc(["py3-none-manylinux1_x86_64"]) == (2, 5)
    assert native.manylinux_glibc(["py3-none-any", "cp311-cp311-musllinux_1_2_x86_64"]) is None


def test_the_platform_tags_name_the_wheels_cpu():
    assert native.wheel_machine(["cp311-cp311-manylinux_2_28_x86_64"]) == "x86_64"
    assert native.wheel_machine(["py3-none-manylinux2014_aarch64"]) == "aarch64"
    assert native.wheel_machine(["cp312-cp312-manylinux_2_17_aarch64"]) == "aarch64"
    assert native.wheel_machine(["cp312-abi3-musllinux_1_2_x86_64"]) == "x86_64"
    assert native.wheel_machine(["py3-none-any"]) is None


def test_the_cuda_major_comes_from_the_local_version_or_the_requirements():
    assert native.cuda_major_needed("2.9.0+cu130", []) == 13
    assert native.cuda_major_needed("2.5.1+cu121", ["nvidia-cudnn-cu12==9.1"]) == 12
    assert native.cuda_major_needed("2.14.1", [
        'cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"',
        'nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"']) == 13
    assert native.cuda_major_needed("0.5.0", ["jax-cuda12-plugin==0.5.0", "numpy"]) == 12
    assert native.cuda_major_needed("2.5.1+cpu", ["filelock", "sympy"]) is None
    # A CUDA library's own name: -cuNN, or a toolkit component versioned as the toolkit.
    assert native.cuda_major_needed("9.24.0.43", ["nvidia-cublas"], "nvidia-cudnn-cu13") == 13
    assert native.cuda_major_needed("13.1.1.3", [], "nvidia-cublas") == 13
    assert native.cuda_major_needed("2.9", ["nvidia-cublas==12.9.1.4"], "jaxlib-x") == 12
    assert native.cuda_major_needed("12.0.0.61", [], "nvidia-cufft") is None  # CUDA 13's
    assert native.cuda_major_needed("0.0.1", [], "nvidia-nvtx") is None  # a placeholder
    assert native.cuda_major_needed("1.0", ["nvidia-nvtx>=13"]) is None  # no version pinned
    assert native.cuda_major_needed("1.0", ["nvidia_cublas_cu12==12.4.5.8"]) == 12  # a name
    assert native.named_cuda_major("nvidia-cuda-runtime", "v13.0.96") == 13  # as pip reads it


@pytest.mark.parametrize("requirement, major", [
    ("torch==2.9.0+cu130", 13), ("torch==1.13.1+cu117", 11), ("torch==1.4.0+cu92", 9),
    ("torch==2.9.0+cpu", None), ("jaxlib==0.4.20+cuda12.cudnn89", None),
    ("nvidia-cudnn-cu12==9.1.0.70", 12), ("jax-cuda13-plugin==0.10.2", 13),
    ("nvidia-cublas==13.1.1.3", 13), ("cuda-toolkit==13.0.3", 13), ("nvidia-nvtx==0.0.1", None),
    ("nvidia-cufft==12.0.0.61", None), ("numpy==2.4.6", None),
    # as packaging reads a version, not as it is written
    ("torch==2.9.0+CU130", 13), ("nvidia-cublas==13", 13), ("nvidia-cublas==1!13.0.0", 13),
    # a +cuXYZ build of any package; +cu12 is no CUDA (1.2)
    ("mmcv==2.1.0+cu121", 12), ("kit==1.0+cu12", None),
])
def test_a_pins_cuda_major_is_read_once_for_the_lock_rules_and_the_fleet(requirement, major):
    """The lock's family rules (locks/families.cuda_major) and the fleet's judge
    (native.cuda_major_needed) read a CUDA wheel's name and version by one reader."""
    from lockguard.locks.families import cuda_major
    from lockguard.locks.parser import parse_lock_text

    pin = parse_lock_text(requirement + "\n", "t.lock").pins[0]
    assert cuda_major(pin) == major
    assert native.cuda_major_needed(pin.version, [], pin.name) == major


# ---------------------------------------------------------------- the fleet's own facts


def test_gpu_names_resolve_through_the_one_table():
    assert [gpu_arch(n) for n in ("V100", "a100", "H100", "H200", "T4", "L4", "A10",
                                  "RTX 4090", "sm_80", "sm_90a")] \
        == [70, 80, 90, 90, 75, 89, 86, 89, 80, 90]
    assert gpu_arch("A1000") is None and gpu_arch("V1OO") is None  # a typo is not a prefix
    # A driver's model names, matched by their start, longest first:
    assert [gpu_arch(n, model=True) for n in ("Tesla V100-SXM2-32GB", "NVIDIA A100-SXM4-80GB",
                                              "NVIDIA A10", "NVIDIA H100 80GB HBM3",
                                              "NVIDIA GeForce RTX 4090", "NVIDIA L40S")] \
        == [70, 80, 86, 90, 89, 89]


def test_cpu_flags_give_the_psabi_level():
    v2 = {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
    v3 = v2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
    v4 = v3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
    assert [isa_level(f) for f in (set(), v2, v3, v4, v4 - {"avx2"})] \
        == ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "x86-64-v2"]
    assert isa_level(v4, "aarch64") == "aarch64"


FLEET = {"v100": {"gpus": ["V100"], "driver": "550.54.15", "glibc": "2.31", "count": 12},
         "h100": {"gpus": ["H100", "sm_80"], "driver": "580.82.07", "cpu": "x86-64-v3",
                  "glibc": "2.17"}}


def test_the_fleet_table_is_read_into_machines(tmp_path):
    config = parse_config({"fleet": FLEET}, "pyproject.toml [tool.lockguard]", tmp_path)
    assert config.fleet_machines() == [
        Machine("v100", (70,), ("V100",), (550, 54, 15), None, (2, 31), 12),
        Machine("h100", (90, 80), ("H100", "sm_80"), (580, 82, 7), "x86-64-v3", (2, 17), 1)]


@pytest.mark.parametrize("entry, key", [
    ({"gpus": ["V1OO"]}, "fleet.n.gpus"), ({"driver": "550-54"}, "fleet.n.driver"),
    ({"cpu": "x86-64-v5"}, "fleet.n.cpu"), ({"glibc": "2"}, "fleet.n.glibc"),
    ({"count": 0}, "fleet.n.count"), ({"gpu": ["V100"]}, "fleet.n.gpu"),
])
def test_a_bad_fleet_entry_is_one_line_naming_its_key(tmp_path, entry, key):
    with pytest.raises(ConfigError) as caught:
        parse_config({"fleet": {"n": entry}}, "pyproject.toml [tool.lockguard]", tmp_path)
    message = str(caught.value)
    assert "\n" not in message and f"'{key}'" in message, message


def test_a_fleet_machine_name_is_a_plain_word(tmp_path):
    with pytest.raises(ConfigError, match=r"key 'fleet': fleet machine name 'v100 rack' is "):
        parse_config({"fleet": {"v100 rack": {}}}, "pyproject.toml [tool.lockguard]", tmp_path)


def test_fleet_probe_prints_this_machine_and_writes_it_once(tmp_path, monkeypatch):
    from lockguard.cli import cli
    from lockguard.config import load_config

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n\n[tool.lockguard]\nlock = "r.txt"\n')
    monkeypatch.chdir(tmp_path)
    printed = CliRunner().invoke(cli, ["fleet", "probe", "--name", "here"])
    assert printed.exit_code == 0, printed.output
    assert printed.output.startswith("[tool.lockguard.fleet.here]\n")
    assert re.search(r'^cpu = "(x86-64(-v[234])?|aarch64)"$', printed.output, re.M)
    assert pyproject.read_text().endswith('lock = "r.txt"\n')  # printing writes nothing

    written = CliRunner().invoke(cli, ["fleet", "probe", "--name", "here", "--write"])
    assert written.exit_code == 0, written.output
    assert pyproject.read_text().startswith('[project]\nname = "x"\n\n[tool.lockguard]\n')
    assert [m.name for m in load_config(pyproject).fleet_machines()] == ["here"]
    again = CliRunner().invoke(cli, ["fleet", "probe", "--name", "here", "--write"])
    assert again.exit_code == 2 and "'fleet.here' is already there" in again.output


def test_machine_toml_reads_back_as_the_same_machine(tmp_path):
    from lockguard import toml

    machine = Machine("v100.rack", (70,), ("V100",), (550, 54, 15), "x86-64-v3", (2, 31), 12)
    table = toml.loads(machine_toml(machine))["tool"]["lockguard"]
    assert parse_config(table, "x", tmp_path).fleet_machines() == [machine]
    assert parse_driver("580.65.06") == (580, 65, 6) and parse_driver("580.x") is None


# ---------------------------------------------------------------- judging a change


V100 = Machine("v100", (70,), ("V100",), (550, 54, 15), None, (2, 31), 12)
H100 = Machine("h100", (90,), ("H100",), (580, 82, 7), "x86-64-v3", (2, 17), 1)


def facts(version: str, sass=(), ptx=(), major=None, glibc=None) -> Facts:
    return Facts("torch", version, CudaCode(frozenset(sass), frozenset(ptx)), major, glibc)


def test_a_change_that_drops_an_architecture_breaks_the_machines_that_have_it():
    old = facts("2.9.0+cu128", sass={70, 75, 80, 90}, major=12)
    new = facts("2.9.0+cu130", sass={75, 80, 90}, major=13, glibc=(2, 28))
    found = judge(old, new, [V100, H100])
    assert [(f.machine, f.broken, f"{f.change} {f.problem}") for f in found] == [
        ("v100", True, "torch 2.9.0+cu128 -> 2.9.0+cu130 drops sm_70 (fleet: v100, V100 x 12): "
                       "broken there"),
        ("v100", True, "torch 2.9.0+cu128 -> 2.9.0+cu130 needs driver >= 580.65.06 for CUDA 13 "
                       "(fleet: v100, driver 550.54.15 x 12): broken there"),
        ("h100", True, "torch 2.9.0+cu128 -> 2.9.0+cu130 needs glibc >= 2.28 (its manylinux "
                       "tag; fleet: h100, glibc 2.17): broken there")]


def test_ptx_only_coverage_is_a_note_and_full_coverage_says_nothing():
    new = facts("2.10.0", sass={80}, ptx={80}, major=12, glibc=(2, 17))
    found = judge(None, new, [H100])
    assert [(f.broken, f.problem) for f in found] == [
        (False, "has PTX only for sm_80 on sm_90 (fleet: h100, H100): JIT-compiled on first "
                "use (each kernel compiled by the driver at a cold start, then kept in its "
                "compute cache, CUDA_CACHE_MAXSIZE permitting)")]
    # How much PTX that is, where the read measured it (the libraries' sizes summed).
    code = CudaCode(frozenset({80}), frozenset({80}), None, ((80, 200_000_000),)).union(
        CudaCode(frozenset(), frozenset({75, 80}), None, ((75, 5), (80, 37_400_000))))
    assert code.ptx_bytes == ((75, 5), (80, 237_400_000)) and code.ptx_size(86) == 0
    sized = judge(None, replace(new, cuda=code), [H100])
    assert [f.change for f in sized] == ["torch 2.10.0 (237 MB of PTX)"]
    # Beside the change, not in the problem: a dozen wheels' PTX still make one line.
    other = judge(None, replace(new, name="nvidia-x", cuda=replace(
        code, ptx_bytes=((80, 3_000_000),))), [H100])
    assert [line for _, line in grouped(sized + other)] == [
        "torch 2.10.0 (237 MB of PTX), nvidia-x 2.10.0 (3 MB of PTX) has PTX only for sm_80 on "
        "sm_90 (fleet: h100, H100): JIT-compiled on first use (each kernel compiled by the "
        "driver at a cold start, then kept in its compute cache, CUDA_CACHE_MAXSIZE permitting)"]
    # An upgrade that was already broken there says so, and still fails.
    still = judge(facts("2.9.0", sass={75}), facts("2.10.0", sass={75}), [V100])
    assert [(f.broken, f.problem) for f in still] == [
        (True, "still has no code for sm_70 (fleet: v100, V100 x 12): broken there")]
    assert judge(None, facts("2.10.0", sass={90}, major=12, glibc=(2, 17)), [H100]) == []
    # A wheel read for x86_64 says nothing certain of an aarch64 machine's (the flows read
    # each machine's own): given one, the judge fails closed, never passes it.
    arm = Machine("gh200", (90,), ("GH200",), (525, 60, 13), "aarch64", (2, 17), 4)
    cu13 = Facts("torch", "2.9.0", CudaCode(frozenset({75})), 13, (2, 28), "x86_64")
    assert [(f.broken, f.problem) for f in judge(None, cu13, [arm])] == [
        (True, "not judged (fleet: gh200, aarch64 x 4): the wheel read is x86_64's, not the "
               "machine's own (a wheel lockguard cannot read fails closed)")]
    # A CPU-only wheel asks nothing of a GPU or its driver.
    assert judge(None, facts("2.10.0+cpu", glibc=(2, 17)), [V100, H100]) == []


def test_ptx_newer_than_the_driver_breaks_the_machines_that_must_jit_it():
    """A GPU without SASS runs the PTX, JIT-compiled by the driver, which must know its PTX ISA:
    CUDA 12.8's (8.7) needs driver >= 570.26 (minor version compatibility does not JIT a newer
    minor's PTX); an ISA newer than lockguard's table fails closed; a GPU with SASS needs no
    JIT, whatever the PTX."""
    def ptx_only(isa):
        return Facts("kern", "1.0", CudaCode(frozenset({90}), frozenset({80}), isa), 12)

    a100 = Machine("a100", (80, 86), ("A100", "A10"), (550, 54, 15))
    found = [(f.broken, f.problem) for f in judge(None, ptx_only((8, 7)), [a100])]
    assert found == [
        (True, "has PTX only for sm_80 on sm_80 (fleet: a100, A100): its PTX ISA 8.7 (CUDA "
               "12.8) needs driver >= 570.26 to JIT-compile (driver 550.54.15): broken there"),
        (True, "has PTX only for sm_80 on sm_86 (fleet: a100, A10): its PTX ISA 8.7 (CUDA "
               "12.8) needs driver >= 570.26 to JIT-compile (driver 550.54.15): broken there")]
    newer = Machine("a100", (80,), ("A100",), (570, 26))
    assert [f.broken for f in judge(None, ptx_only((8, 7)), [newer])] == [False]
    # CUDA 12.4's PTX (8.4) on 12.4's own driver, 550.54.14: JIT-compiled there.
    assert [f.broken for f in judge(None, ptx_only((8, 4)), [a100])] == [False, False]
    # 8.6, which no table entry names, is judged by the next release the table knows, 8.7's
    # (CUDA 12.8, driver >= 570.26), never the older 8.5's: a 12.6 driver (560.28.03) breaks.
    a100_126 = Machine("a100", (80,), ("A100",), (560, 28, 3))
    assert [(f.broken, "CUDA 12.8" in f.problem)
            for f in judge(None, ptx_only((8, 6)), [a100_126])] == [(True, True)]
    assert [f.broken for f in judge(None, ptx_only((8, 6)), [newer])] == [False]
    assert "newer than lockguard's table knows" in judge(None, ptx_only((9, 9)), [newer])[0].problem
    assert judge(None, ptx_only((9, 9)), [H100]) == []  # sm_90 SASS: nothing JIT-compiled


def test_the_cuda_stack_line_names_its_libraries_and_the_driver_they_need():
    from lockguard.fleet import stack_line

    assert stack_line([("nvidia-cudnn-cu13", "9.24.0.43"), ("nvidia-cublas", "13.1.1.3"),
                       ("nvidia-nccl-cu13", "2.30.7"), ("torch", "2.14.1")]) == (
        "cuBLAS 13.1.1.3, cuDNN 9.24.0.43, NCCL 2.30.7: CUDA 13, driver >= 580.65.06")
    assert stack_line([("nvidia-cudnn-cu12", "9.10.2.21"), ("nvidia-nccl-cu12", "2.27.3")]) \
        == "cuDNN 9.10.2.21, NCCL 2.27.3: CUDA 12, driver >= 525.60.13"
    assert stack_line([("torch", "2.14.1+cpu")]) is None


def test_the_same_problem_of_many_changes_is_one_line():
    wheels = [Facts(n, "13", CudaCode(frozenset({75})), 13)
              for n in ("nvidia-a", "nvidia-b", "nvidia-c", "nvidia-d", "nvidia-e", "nvidia-f")]
    findings, unread = judge_changes([(f"{w.name} 13", None, w) for w in wheels]
                                     + [("x 1", None, None)], [V100])
    lines = [line for _, line in grouped(findings)]
    assert lines == [
        "nvidia-a 13, nvidia-b 13, nvidia-c 13, nvidia-d 13 and 2 more has no code for sm_70 "
        "(fleet: v100, V100 x 12): broken there",
        "nvidia-a 13, nvidia-b 13, nvidia-c 13, nvidia-d 13 and 2 more needs driver >= "
        "580.65.06 for CUDA 13 (fleet: v100, driver 550.54.15 x 12): broken there"]
    assert unread == [("x 1", None)]


def installed(site: Path, name: str, version: str, lib: bytes, requires=(), tag="manylinux_2_28"
              ) -> None:
    """A distribution as an installer leaves it: its files and a dist-info naming them."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (site / name).mkdir(exist_ok=True)
    (site / name / f"lib{name}_{version}.so").write_bytes(lib)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: cp311-cp311-{tag}_x86_64\n")
    (info / "RECORD").write_text(f"{name}/lib{name}_{version}.so,,\n../../../../escape.so,,\n"
                                 f"{info.name}/METADATA,,\n")


def venv_of(cache: Path, lock_file: Path) -> Path:
    """A venv folder in lockguard's cache as envs/venv.py marks it built from `lock_file`:
    its ready marker names the lock's hash. Its site-packages."""
    from lockguard.envs.base import READY
    from lockguard.locks.parser import parse_lock

    venv = cache / "venvs" / lock_file.stem
    venv.mkdir(parents=True)
    (venv / READY).write_text(f'{{"lock_hash": "{parse_lock(lock_file).lock_hash}"}}')
    return venv / "lib" / "python3.11" / "site-packages"


def test_diff_judges_the_change_against_the_fleet_from_the_cached_wheels(tmp_path, monkeypatch):
    """`lockguard diff` reads the changed wheels where lockguard's venvs of the same locks
    installed them and fails (exit 1) on a change that breaks a fleet machine, in every format;
    a changed wheel it can neither find nor download (here: no index) fails closed."""
    from lockguard.cli import cli

    (tmp_path / "old.txt").write_text("torch==2.8.0\n")
    (tmp_path / "new.txt").write_text(f"--no-index\n--find-links {tmp_path / 'none'}\n"
                                      "torch==2.9.0\njax==0.7.0\n")
    (tmp_path / "none").mkdir()
    cache = tmp_path / "cache"
    installed(venv_of(cache, tmp_path / "old.txt"), "torch", "2.8.0",
              elf((".nv_fatbin", PROGBITS, 2, fatbin((SASS, 70), (SASS, 90)))),
              tag="manylinux_2_17")
    installed(venv_of(cache, tmp_path / "new.txt"), "torch", "2.9.0",
              elf((".nv_fatbin", PROGBITS, 2, fatbin((SASS, 75), (SASS, 90)))),
              requires=["nvidia-cudnn-cu13==9.13"])
    (tmp_path / "escape.so").write_bytes(b"\x7fELF not followed")
    monkeypatch.setenv("LOCKGUARD_CACHE", str(cache))
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lockguard.fleet.v100]\ngpus = ['V100']\ndriver = '550.54.15'\ncount = 12\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "fleet-v100: torch 2.8.0 -> 2.9.0 drops sm_70 (fleet: v100, V100 x 12): broken " \
           "there" in text
    assert "needs driver >= 580.65.06 for CUDA 13" in text
    assert re.search(r"fleet: jax 0.7.0 not judged against the fleet \(for v100\): pip could "
                     r"not download them: .*jax.*\(a wheel lockguard cannot read fails closed\)",
                     text), text
    as_json = CliRunner().invoke(cli, ["diff", "old.txt", "new.txt", "--format", "json"])
    assert as_json.exit_code == 1 and '"rule": "fleet-v100"' in as_json.output
    assert '"rule": "fleet"' in as_json.output
    assert not list(cache.glob("wheels/fleet/*/wheels")), "a failed download is not kept"
    (tmp_path / "pyproject.toml").write_text("[tool.lockguard]\n")  # no fleet: nothing judged
    assert CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"]).exit_code == 0


# ---------------------------------------------------------------- a real wheel


@pytest.mark.slow
def test_torch_cuda_wheel_code_is_the_arch_list_torch_was_built_with():
    """torch 2.14.1's CUDA 13 build (tests/data/torch-2.14.1-cuda.txt), read from its files:
    the SASS architectures of libtorch_cuda.so are those of its build's CUDA_ARCH_FLAGS, the
    string torch.cuda.get_arch_list() splits (torch/csrc/cuda/Module.cpp keeps it in
    libtorch_python.so; reading it needs no GPU), with no PTX (no compute_XX in the list), no
    sm_70 (CUDA 13 dropped Volta), and the CUDA major and glibc the wheel declares."""
    from conftest import DATA, prepared_venv

    from lockguard.envs.installed import dist_facts, site_packages
    from lockguard.locks.parser import parse_lock

    env = prepared_venv(parse_lock(DATA / "torch-2.14.1-cuda.txt"))
    site = site_packages(env.path)
    lib = site / "torch" / "lib"
    flags = re.search(rb"\0((?:sm|compute)_\d+[a-z]?(?: (?:sm|compute)_\d+[a-z]?)+)\0",
                      (lib / "libtorch_python.so").read_bytes())
    assert flags, "no CUDA_ARCH_FLAGS string in libtorch_python.so"
    listed = flags.group(1).decode().split()
    code = native.cuda_code(lib / "libtorch_cuda.so")
    assert {int(a[3:]) for a in listed if a.startswith("sm_")} <= code.sass
    assert min(code.sass) == 75 and code.ptx == frozenset()
    assert not [a for a in listed if a.startswith("compute_")]
    facts = dist_facts(next(site.glob("torch-2.14.1.dist-info")))
    assert (facts.cuda_major, facts.glibc) == (13, (2, 28))
    assert CudaCode(facts.cuda.sass, facts.cuda.ptx).runs_on(70) is None
    assert facts.cuda.runs_on(90) == "sass"
    # what libtorch_cuda.so links (readelf -d's NEEDED): CUDA 13's runtime, cuDNN 9, NCCL 2
    linked = native.needed(lib / "libtorch_cuda.so")
    assert {"libcudart.so.13", "libcudnn.so.9", "libnccl.so.2"} <= set(linked), linked
    assert native.cuda_linked(linked)[0] == 13 and facts.glibc <= (2, 28)


def test_an_ab_check_fails_on_a_change_that_breaks_the_fleet_though_its_runs_pass(
        tmp_path, monkeypatch):
    """check (A/B) and propose judge the fleet through report_for, as diff does: the runs here
    agree, and the added wheel's manylinux tag needs a newer glibc than a fleet machine has."""
    from fakes import FakeBackend, lock

    from lockguard.config import Config
    from lockguard.flows.ab import check_ab
    from lockguard.scenarios import bundled
    from lockguard.settings import Settings

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # the lock is named as the report names it: from here
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==1.26.4\nfastmath==1.0\n")
    installed(venv_of(tmp_path / "cache", new.path), "fastmath", "1.0",
              elf((".data", PROGBITS, 3, b"\0" * 8)))
    numpy = [s for s in bundled() if s.id == "numpy.mlp"]
    fleet = {"centos": {"glibc": "2.17", "count": 3}}
    for config, passes in ((Config(root=tmp_path, steps=4), True),
                           (Config(root=tmp_path, steps=4, fleet=fleet), False)):
        report = check_ab(Settings.resolve(config), [new], [old], numpy, backend=FakeBackend())
        assert [v.verdict for v in report.verdicts] == ["identical"]
        assert report.passed is passes
    assert [(f.lock, f.rule, f.message) for f in report.rule_failures] == [
        ("new.txt", "fleet-centos", "fastmath 1.0 needs glibc >= 2.28 (its manylinux tag; "
                                    "fleet: centos, glibc 2.17 x 3): broken there")]


def test_probe_reads_nvidia_smi_where_proc_has_no_driver(tmp_path, monkeypatch):
    """A container may not see /proc/driver/nvidia but have nvidia-smi: the probe asks it (a
    stand-in printing what `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader`
    prints on a two-V100 machine)."""
    import lockguard.fleet as fleet

    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n[ \"$1\" = --query-gpu=name,driver_version ] || exit 9\n"
                   "echo 'Tesla V100-SXM2-32GB, 550.54.15'\necho 'Tesla V100-SXM2-32GB, "
                   "550.54.15'\n")
    smi.chmod(0o755)
    monkeypatch.setattr(fleet, "nvidia_info", lambda: None)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    machine = fleet.this_machine("rack")
    assert (machine.gpus, machine.gpu_names, machine.driver) == ((70,), ("V100",),
                                                                 (550, 54, 15))
    smi.write_text("#!/bin/sh\nexit 3\n")  # a failing nvidia-smi: no GPU known, not an error
    assert fleet.this_machine("rack").gpus == ()


@pytest.mark.slow
def test_diff_of_the_real_cuda_13_upgrade_breaks_a_v100_fleet(tmp_path, monkeypatch):
    """torch 2.13.0 (CPU build) -> 2.14.1 (CUDA 13, from PyPI's default index), judged from
    the real wheels a venv of the lock installed: no sm_70 code (CUDA 13 dropped Volta) and a
    driver too old for CUDA 13 break a V100 fleet; an H100 one on a new driver passes. cuFFT's
    kernels are only found in its .ldata: its .nv_fatbin is one sm_75 stub."""
    from conftest import DATA, prepared_venv

    from lockguard.cli import cli
    from lockguard.envs.installed import dist_facts, site_packages
    from lockguard.locks.parser import parse_lock

    site = site_packages(prepared_venv(parse_lock(DATA / "torch-2.14.1-cuda.txt")).path)
    cufft = dist_facts(next(site.glob("nvidia_cufft-*.dist-info")))
    assert {75, 80, 86, 90, 100, 120} <= cufft.cuda.sass
    # cuBLAS 13 carries PTX, of CUDA 13.0's ISA (9.0); cuDNN's own name says CUDA 13.
    cublas = dist_facts(next(site.glob("nvidia_cublas-13*.dist-info")))
    assert (cublas.cuda.ptx_isa, cublas.cuda_major) == ((9, 0), 13)
    # its PTX for sm_120 as text: about 320 MB that a newer GPU JIT-compiles (26 and 8 MB
    # compressed in libcublasLt and libcublas of 13.1.1.3)
    assert 200e6 < cublas.cuda.ptx_size(120) < 1e9
    assert dist_facts(next(site.glob("nvidia_cudnn_cu13-*.dist-info"))).cuda_major == 13
    # What only the libraries say: cuSOLVER 12.0 (numbered on its own) loads CUDA 13's
    # nvJitLink; cuSPARSELt 0.8.1, tagged manylinux2014 (glibc 2.17), requires GLIBC_2.27.
    cusolver = dist_facts(next(site.glob("nvidia_cusolver-*.dist-info")))
    assert (cusolver.cuda_major, cusolver.cuda_linked) == (13, (13, "libnvJitLink.so.13"))
    sparselt = dist_facts(next(site.glob("nvidia_cusparselt_cu13-*.dist-info")))
    assert (sparselt.glibc, sparselt.glibc_from) == (
        (2, 27), "nvidia/cusparselt/lib/libcusparseLt.so.0")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lockguard.fleet.v100]\ngpus = ['V100']\ndriver = '550.54.15'\ncount = 12\n"
        "[tool.lockguard.fleet.h100]\ngpus = ['H100']\ndriver = '580.82.07'\n")
    result = CliRunner().invoke(cli, ["diff", str(DATA / "torch-2.13.0.txt"),
                                      str(DATA / "torch-2.14.1-cuda.txt"), "--format", "json"])
    assert result.exit_code == 1, result.output
    import json

    failures = json.loads(result.output)["rule_failures"]
    assert {f["rule"] for f in failures} == {"fleet-v100"}
    messages = " | ".join(f["message"] for f in failures)
    assert "torch 2.13.0+cpu -> 2.14.1" in messages
    assert "has no code for sm_70 (fleet: v100, V100 x 12): broken there" in messages
    assert "needs driver >= 580.65.06 for CUDA 13 (fleet: v100, driver 550.54.15 x 12)" \
        in messages
    notes = json.loads(result.output)["notes"]
    assert [n for n in notes if n.startswith("fleet: the CUDA stack of ")][0].endswith(
        ": CUDA 13, driver >= 580.65.06"), notes


def wheel(path: Path, name: str, version: str, *code: tuple[int, int],
          tag: str = "py3-none-any") -> str:
    """A wheel file of one CUDA library holding `code`, its METADATA and WHEEL; its
    "sha256:<hex>" as a lock pins it."""
    import hashlib
    import zipfile

    with zipfile.ZipFile(path / f"{name}-{version}-{tag}.whl", "w") as whl:
        whl.writestr(f"{name}/libk.so", elf((".nv_fatbin", PROGBITS, 2, fatbin(*code))))
        whl.writestr("../evil.so", elf((".nv_fatbin", PROGBITS, 2, fatbin((SASS, 37)))))
        whl.writestr(f"{name}-{version}.dist-info/METADATA", "Metadata-Version: 2.1\n"
                     f"Name: {name}\nVersion: {version}\nRequires-Dist: nvidia-cublas-cu12\n")
        whl.writestr(f"{name}-{version}.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
    data = (path / f"{name}-{version}-{tag}.whl").read_bytes()
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def test_a_cached_wheel_is_the_locks_only_by_its_hash_else_it_is_downloaded(
        tmp_path, monkeypatch):
    """Two builds of gpukit 1.0 (a CUDA one with sm_70 code, one without; the same name and
    version, as torch's +cpu and CUDA builds may be, or a rebuilt wheel): the one a wheelhouse
    holds is read for a lock only when the lock pins its hash. Otherwise the lock's own is
    downloaded, hash-checked (pip, from the lock's find-links: no network), into
    wheels/fleet/, and read from there; the next diff finds it there. The same version with
    other hashes is a change of its own ("another build"), judged too."""
    from lockguard.cli import cli
    from lockguard.envs.installed import dist_facts

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    house = tmp_path / "cache" / "wheelhouses" / "0a1b" / "wheels"
    links = tmp_path / "links"
    house.mkdir(parents=True)
    links.mkdir()
    impostor = wheel(house, "gpukit", "1.0", (SASS, 90))
    own = wheel(links, "gpukit", "1.0", (SASS, 70), (SASS, 90), (PTX, 90))
    (house.parent / "lockguard-ready.json").write_text('{"lock_hash": "another lock"}')
    options = f"--no-index\n--find-links {links}\n"
    (tmp_path / "old.txt").write_text(f"{options}gpukit==0.9 --hash=sha256:{'0' * 64}\n")
    (tmp_path / "new.txt").write_text(f"{options}gpukit==1.0 --hash={own}\n")
    (tmp_path / "other.txt").write_text(f"{options}gpukit==1.0 --hash={impostor}\n")
    (tmp_path / "pyproject.toml").write_text("[tool.lockguard.fleet.v100]\ngpus = ['V100']\n")
    result = CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"])
    assert result.exit_code == 0, result.output
    fetched = list((tmp_path / "cache" / "wheels" / "fleet").glob("*/wheels/gpukit-*.whl"))
    assert len(fetched) == 1
    facts = dist_facts(fetched[0])
    assert (facts.cuda, facts.cuda_major) == (CudaCode(frozenset({70, 90}), frozenset({90}),
                                                       (9, 0)), 12)
    (links / fetched[0].name).unlink()  # found in the cache from now on: no download
    assert CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"]).exit_code == 0
    # The wheelhouse's build is read for the lock that pins its hash, and fails there.
    result = CliRunner().invoke(cli, ["diff", "old.txt", "other.txt"])
    assert result.exit_code == 1
    assert "gpukit 0.9 -> 1.0 has no code for sm_70" in " ".join(result.output.split())
    result = CliRunner().invoke(cli, ["diff", "new.txt", "other.txt"])
    assert result.exit_code == 1
    assert "gpukit 1.0 (another build: other hashes) drops sm_70" in " ".join(
        result.output.split())


def test_a_hashless_pin_is_read_only_from_what_was_made_for_its_request(tmp_path, monkeypatch):
    """A pin without hashes names no bytes: a wheelhouse's wheel answers it only when the
    wheelhouse was made from this very lock, a download only when made for the same
    requirement and index options, a venv only when built from this very lock."""
    from lockguard.envs.wheels import lock_wheels
    from lockguard.locks.parser import parse_lock

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    house = tmp_path / "cache" / "wheelhouses" / "0a1b" / "wheels"
    house.mkdir(parents=True)
    wheel(house, "gpukit", "1.0", (SASS, 90))
    (tmp_path / "new.txt").write_text("gpukit==1.0\n")
    lock = parse_lock(tmp_path / "new.txt")
    marker = house.parent / "lockguard-ready.json"
    marker.write_text('{"lock_hash": "another lock"}')
    assert lock_wheels(lock, lock.pins) == ({}, None)
    marker.write_text(f'{{"lock_hash": "{lock.lock_hash}"}}')
    assert lock_wheels(lock, lock.pins) == ({"gpukit": house / "gpukit-1.0-py3-none-any.whl"},
                                            None)
    site = venv_of(tmp_path / "cache", tmp_path / "new.txt")
    installed(site, "gpukit", "1.0", b"")
    assert lock_wheels(lock, lock.pins)[0] == {"gpukit": site / "gpukit-1.0.dist-info"}


@pytest.mark.slow
def test_jax_cuda_plugin_cuda_12_to_13_judged_from_its_real_wheels(tmp_path, monkeypatch):
    """jax's CUDA plugin 0.10.2, its CUDA 12 build -> its CUDA 13 build (tests/data: every
    file's hash), judged from the real wheels, which `diff` downloads hash-checked into
    lockguard's cache (about 8 MB each; PyPI): the CUDA 12 build has SASS for sm_50 to sm_120
    (V100's sm_70 among them) and CUDA 12.9's PTX (ISA 8.8); the CUDA 13 build starts at sm_75
    with CUDA 13.0's PTX (ISA 9.0). A V100 fleet on a 550 driver breaks (no sm_70 code, a driver
    too old for CUDA 13), an H100 one on 580.82 does not; back to CUDA 12 passes both."""
    import json

    from conftest import DATA

    from lockguard.cli import cli
    from lockguard.envs.installed import dist_facts
    from lockguard.envs.wheels import lock_wheels
    from lockguard.locks.parser import parse_lock

    cu12, cu13 = DATA / "jax-cuda12-plugin-0.10.2.txt", DATA / "jax-cuda13-plugin-0.10.2.txt"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lockguard.fleet.v100]\ngpus = ['V100']\ndriver = '550.54.15'\ncount = 12\n"
        "[tool.lockguard.fleet.h100]\ngpus = ['H100']\ndriver = '580.82.07'\n")
    result = CliRunner().invoke(cli, ["diff", str(cu12), str(cu13), "--format", "json"])
    assert result.exit_code == 1, result.output
    failures = json.loads(result.output)["rule_failures"]
    assert [(f["rule"], f["message"]) for f in failures] == [
        ("fleet-v100", "jax-cuda13-plugin 0.10.2 has no code for sm_70 (fleet: v100, V100 x 12): "
                       "broken there"),
        ("fleet-v100", "jax-cuda13-plugin 0.10.2 needs driver >= 580.65.06 for CUDA 13 (fleet: "
                       "v100, driver 550.54.15 x 12): broken there")]
    back = CliRunner().invoke(cli, ["diff", str(cu13), str(cu12), "--format", "json"])
    assert back.exit_code == 0, back.output
    facts = {}
    for path in (cu12, cu13):
        lock = parse_lock(path)
        files, why = lock_wheels(lock, lock.pins)  # downloaded by the diffs: in the cache now
        assert why is None and len(files) == 1
        facts[path] = dist_facts(next(iter(files.values())))
    old, new = facts[cu12], facts[cu13]
    assert {50, 60, 70, 80, 90, 100, 120} <= old.cuda.sass and min(new.cuda.sass) == 75
    assert (old.cuda.ptx_isa, new.cuda.ptx_isa) == ((8, 8), (9, 0))
    assert (old.cuda_major, new.cuda_major, new.glibc) == (12, 13, (2, 27))


@pytest.mark.slow
def test_torch_cuda_12_and_13_wheels_judged_from_their_real_files(tmp_path, monkeypatch):
    """torch 2.6.0 as PyPI serves it to Linux x86_64 (its CUDA 12.4 build: METADATA requires
    nvidia-*-cu12 12.4 wheels; tests/data/torch-2.6.0-cu124.txt, every file's hash) against
    2.14.1's CUDA 13 build, both read from their real files. The 2.6.0 wheel (767 MB) is
    downloaded hash-checked by the first `diff` into lockguard's cache, and is the old side
    the second one reads from there; 2.14.1 from the venv of its lock. What the 2.6.0 wheel
    holds: SASS for sm_50 to sm_90 (sm_70 among them), exactly its libtorch_python.so's
    CUDA_ARCH_FLAGS, no PTX; CUDA 12; manylinux1 (glibc 2.5) by its file's name, though its
    WHEEL says linux_x86_64. Back to CUDA 12 breaks only the machines whose driver is older
    than CUDA 12's (525.60.13), and a K80 (sm_37: neither build has code for it); the
    CUDA 12 -> 13 upgrade drops sm_70 (V100) and needs driver 580.65.06. An H100 on 580.82
    passes both ways.

    Cost, measured on 2 cores shared with another test run (load 4 to 6): cold (with the
    download) 41 to 75 s, warm (the wheel cached) 20 to 36 s. Each reading of the 2.6.0 wheel
    unpacks its 1.5 GB of libraries (about 12 s), so the facts asserted are those the diffs
    read."""
    import json
    import zipfile

    from conftest import DATA, prepared_venv

    import lockguard.flows.report_parts as report_parts
    from lockguard.cli import cli
    from lockguard.envs.installed import dist_facts
    from lockguard.envs.wheels import lock_wheels
    from lockguard.locks.parser import parse_lock

    cu12, cu13 = DATA / "torch-2.6.0-cu124.txt", DATA / "torch-2.14.1-cuda.txt"
    prepared_venv(parse_lock(cu13))  # 2.14.1 is read from its venv
    read: dict[str, native.Facts] = {}  # what the diffs read, by file: each read costs seconds

    def reading(path: Path) -> native.Facts:
        read[path.name] = dist_facts(path)
        return read[path.name]

    monkeypatch.setattr(report_parts, "dist_facts", reading)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lockguard.fleet.v100]\ngpus = ['V100']\ndriver = '550.54.15'\ncount = 12\n"
        "[tool.lockguard.fleet.h100]\ngpus = ['H100']\ndriver = '580.82.07'\n"
        "[tool.lockguard.fleet.t4]\ngpus = ['T4']\ndriver = '520.61.05'\n"
        "[tool.lockguard.fleet.k80]\ngpus = ['K80']\ndriver = '470.82.01'\n")

    def failures(old: Path, new: Path) -> list[tuple[str, str]]:
        result = CliRunner().invoke(cli, ["diff", str(old), str(new), "--format", "json"])
        assert result.exit_code == 1, result.output
        return [(f["rule"], f["message"]) for f in json.loads(result.output)["rule_failures"]]

    assert failures(cu13, cu12) == [
        ("fleet-t4", "torch 2.14.1 -> 2.6.0 needs driver >= 525.60.13 for CUDA 12 (fleet: t4, "
                     "driver 520.61.05): broken there"),
        ("fleet-k80", "torch 2.14.1 -> 2.6.0 still has no code for sm_37 (fleet: k80, K80): "
                      "broken there"),
        ("fleet-k80", "torch 2.14.1 -> 2.6.0 needs driver >= 525.60.13 for CUDA 12 (fleet: "
                      "k80, driver 470.82.01): broken there")]
    upgrade = failures(cu12, cu13)
    assert {rule for rule, _ in upgrade} == {"fleet-v100", "fleet-t4", "fleet-k80"}
    assert ("fleet-v100", "torch 2.6.0 -> 2.14.1 drops sm_70 (fleet: v100, V100 x 12): broken "
                          "there") in upgrade
    assert ("fleet-k80", "torch 2.6.0 -> 2.14.1 still has no code for sm_37 (fleet: k80, K80): "
                         "broken there") in upgrade
    driver = [(rule, m) for rule, m in upgrade if m.startswith("torch 2.6.0 -> 2.14.1, ")
              and "needs driver >= 580.65.06 for CUDA 13" in m]
    assert [rule for rule, _ in driver] == ["fleet-v100", "fleet-t4", "fleet-k80"], upgrade

    lock = parse_lock(cu12)
    # the first diff downloaded it into the cache; found there only by a sha256 the lock pins
    files, why = lock_wheels(lock, lock.pins)
    assert why is None and files["torch"].name == "torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl"
    with zipfile.ZipFile(files["torch"]) as whl:
        flags = re.search(rb"\0((?:sm|compute)_\d+[a-z]?(?: (?:sm|compute)_\d+[a-z]?)+)\0",
                          whl.read("torch/lib/libtorch_python.so"))
    assert flags, "no CUDA_ARCH_FLAGS string in libtorch_python.so"
    listed = flags.group(1).decode().split()
    assert listed == ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    old = read[files["torch"].name]  # as the diffs read it
    assert old.cuda == CudaCode(frozenset(int(a[3:]) for a in listed))  # no PTX: no compute_XX
    # Tagged manylinux1 (glibc 2.5), but the libgomp it bundles requires GLIBC_2.17 symbols:
    # the glibc it needs is its libraries', which the tag understates.
    assert (old.cuda_major, old.glibc, old.glibc_from, old.machine, old.unread) == (
        12, (2, 17), "torch/lib/libgomp-a34b3233.so.1", "x86_64", None)
    new = read["torch-2.14.1.dist-info"]
    assert min(new.cuda.sass) == 75 and 70 not in new.cuda.sass and new.cuda_major == 13
    # the CUDA runtime each build's libtorch_cuda.so links: its own CUDA major, said already
    assert (old.cuda_linked, new.cuda_linked) == (None, None)


# ---------------------------------------------------------------- the libraries it links


DYNAMIC, STRTAB = 6, 3


VERNEED = 0x6FFFFFFE


def linking(*sonames: str, code: bytes = b"", dangling: bool = False,
            versions: dict[str, list[str]] | None = None) -> bytes:
    """An ELF library whose dynamic section links `sonames` (DT_NEEDED entries, then
    DT_NULL), with `code` in .nv_fatbin; `dangling`: one more entry pointing past .dynstr;
    `versions`: the symbol versions it requires of each library ({"libc.so.6": ["GLIBC_2.2.5",
    ...]}), as .gnu.version_r's Elf64_Verneed records, each followed by its Elf64_Vernaux."""
    strings, entries = b"\0", b""

    def string(text: str) -> int:
        nonlocal strings
        at = len(strings)
        strings += text.encode() + b"\0"
        return at

    for name in sonames:
        entries += struct.pack("<qQ", 1, string(name))
    if dangling:
        entries += struct.pack("<qQ", 1, len(strings) + 40)
    entries += struct.pack("<qQ", 14, 1) + struct.pack("<qQ", 0, 0)  # DT_SONAME, DT_NULL
    records = b""
    for i, (file, names) in enumerate((versions or {}).items()):
        last = i == len(versions) - 1
        records += struct.pack("<HHIII", 1, len(names), string(file), 16,
                               0 if last else 16 + 16 * len(names))
        for j, version in enumerate(names):
            records += struct.pack("<IHHII", 0, 0, 2 + j, string(version),
                                   0 if j == len(names) - 1 else 16)
    more = [(".gnu.version_r", VERNEED, 2, records, ".dynstr")] if versions else []
    return elf((".nv_fatbin", PROGBITS, 2, code), (".dynstr", STRTAB, 2, strings),
               (".dynamic", DYNAMIC, 3, entries, ".dynstr"), *more)


def test_the_libraries_a_library_links_are_its_dt_needed_entries(tmp_path):
    """DT_NEEDED entries name the sonames a library loads; the CUDA toolkit's carry its major
    (libcudart.so.13), others their own (libcufft.so.12 is CUDA 13's cuFFT, libcudnn.so.9);
    an entry outside .dynstr is unread (an OSError, never "links nothing")."""
    lib = tmp_path / "libext.so"
    lib.write_bytes(linking("libc10_cuda.so", "libcudart.so.12", "libcufft.so.12",
                            "libcublasLt.so.13", "libm.so.6"))
    assert native.needed(lib) == ("libc10_cuda.so", "libcudart.so.12", "libcufft.so.12",
                                  "libcublasLt.so.13", "libm.so.6")
    assert native.cuda_linked(native.needed(lib)) == (13, "libcublasLt.so.13")
    assert native.cuda_linked(["libcufft.so.12", "libcudnn.so.9", "libnccl.so.2"]) is None
    assert native.cuda_linked(["libcudart.so.11.0"]) == (11, "libcudart.so.11.0")
    (tmp_path / "plain.so").write_bytes(elf((".data", PROGBITS, 0x3, b"\0" * 64)))
    (tmp_path / "text.so").write_text("not ELF")
    assert native.needed(tmp_path / "plain.so") == native.needed(tmp_path / "text.so") == ()
    (tmp_path / "bad.so").write_bytes(linking("libcudart.so.12", dangling=True))
    with pytest.raises(OSError, match="outside .dynstr"):
        native.needed(tmp_path / "bad.so")
    odd = tmp_path / "odd.so"
    odd.write_bytes(linking("libcudart.so.13\nfleet-x: passed"))
    assert native.needed(odd) == ("libcudart.so.13?fleet-x:?passed",)  # one printable word


def test_a_wheel_of_one_library_per_cuda_major_is_judged_by_its_oldest(tmp_path):
    """bitsandbytes ships a library per CUDA major in one wheel and loads the one that
    matches torch's: its libraries disagreeing, the oldest runtime is what it needs (torch's
    own wheels say the newer), never the newest (which failed every 5xx-driver fleet); where
    they agree, that one. An auditwheel-vendored soname (libcudart-<8 hex>.so.13) counts."""
    from lockguard.envs.installed import Libraries, dist_facts

    site = tmp_path / "site"
    installed(site, "bnb", "1.0", linking("libcudart.so.13", "libcublas.so.13"),
              requires=["torch"])
    (site / "bnb" / "libbnb_cuda121.so").write_bytes(linking("libcudart.so.12"))
    record = site / "bnb-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "bnb/libbnb_cuda121.so,,\n")
    bnb = dist_facts(site / "bnb-1.0.dist-info")
    assert (bnb.cuda_major, bnb.cuda_linked) == (12, (12, "libcudart.so.12"))
    one = Libraries()
    for name in ("a.so", "b.so"):
        (tmp_path / name).write_bytes(linking("libcudart-1a2b3c4d.so.13", "libm.so.6"))
        one = one.with_library(tmp_path / name, name)
    assert one.linked == ((13, "libcudart-1a2b3c4d.so.13"),) * 2


def test_a_cuda_major_newer_than_the_table_knows_breaks_until_it_is_known(tmp_path):
    """A wheel built for (or linking) a CUDA major lockguard's driver table does not know
    cannot be judged against a machine's driver: it fails closed, as an unknown PTX ISA does."""
    from lockguard.envs.installed import dist_facts

    site = tmp_path / "site"
    installed(site, "kit", "1.0", linking("libcudart.so.14"), requires=["torch"],
              tag="manylinux_2_17")
    kit = dist_facts(site / "kit-1.0.dist-info")
    assert [(f.broken, f.change, f.problem) for f in judge(None, kit, [H100])] == [
        (True, "kit 1.0 (it links libcudart.so.14)", "is built for CUDA 14, newer than "
         "lockguard's table knows (lockguard/nvidia.py): whether the driver runs it is not "
         "known (fleet: h100, driver 580.82.07): broken there until it is")]
    assert judge(None, replace(kit, cuda_major=13, cuda_linked=None), [H100]) == []


def test_a_dynamic_section_that_cannot_be_read_is_unread(tmp_path):
    """No string table linked, one outside the file, two dynamic sections, a .dynamic of
    another type, a library without a section table: unread (OSError), never "links
    nothing"; what follows DT_NULL is not an entry."""
    def lib(*sections, strip=False) -> Path:
        path = tmp_path / "lib.so"
        data = bytearray(elf(*sections))
        if strip:
            data[0x28:0x30] = b"\0" * 8  # e_shoff 0: no section table
        path.write_bytes(bytes(data))
        return path

    strings = b"\0libcudart.so.13\0"
    entries = struct.pack("<qQ", 1, 1) + struct.pack("<qQ", 0, 0)
    after_null = entries + struct.pack("<qQ", 1, 99)  # past DT_NULL: garbage, not read
    assert native.needed(lib((".dynstr", STRTAB, 2, strings),
                             (".dynamic", DYNAMIC, 3, after_null, ".dynstr"))) == (
        "libcudart.so.13",)
    for sections, why in [
        (((".dynstr", STRTAB, 2, strings), (".dynamic", DYNAMIC, 3, entries)),
         "links no string table"),
        (((".dynstr", PROGBITS, 2, strings), (".dynamic", DYNAMIC, 3, entries, ".dynstr")),
         "links no string table"),
        (((".dynstr", STRTAB, 2, strings), (".dynamic", DYNAMIC, 3, entries, ".dynstr"),
          (".dyn2", DYNAMIC, 3, entries, ".dynstr")), "ambiguous"),
        (((".dynstr", STRTAB, 2, strings), (".dynamic", PROGBITS, 3, entries, ".dynstr")),
         "ambiguous"),
    ]:
        with pytest.raises(OSError, match=why):
            native.needed(lib(*sections))
    stripped = lib((".dynstr", STRTAB, 2, strings), (".dynamic", DYNAMIC, 3, entries, ".dynstr"),
                   strip=True)
    for read in (native.needed, native.cuda_code, native.library_facts):
        with pytest.raises(OSError, match="no ELF section table"):
            read(stripped)
    outside = bytearray(elf((".dynstr", STRTAB, 2, strings),
                            (".dynamic", DYNAMIC, 3, entries, ".dynstr")))
    table = struct.unpack_from("<Q", outside, 0x28)[0]
    struct.pack_into("<Q", outside, table + 2 * 64 + 24, 1 << 30)  # .dynamic's sh_offset
    (tmp_path / "outside.so").write_bytes(bytes(outside))
    with pytest.raises(OSError, match="outside the file"):
        native.needed(tmp_path / "outside.so")


def test_the_glibc_a_library_needs_is_its_newest_glibc_symbol_version(tmp_path):
    """.gnu.version_r names the symbol versions a library requires of each library it links:
    the newest GLIBC_X.Y is the oldest glibc it loads on (GLIBCXX_, GCC_ and GLIBC_PRIVATE are
    not glibc's releases); a record pointing outside its section is unread."""
    lib = tmp_path / "libk.so"
    lib.write_bytes(linking("libc.so.6", "libstdc++.so.6", versions={
        "libc.so.6": ["GLIBC_2.2.5", "GLIBC_2.28", "GLIBC_2.17", "GLIBC_PRIVATE"],
        "libstdc++.so.6": ["GLIBCXX_3.4.29", "CXXABI_1.3"]}))
    assert native.glibc_needed(lib) == (2, 28)
    assert native.library_facts(lib).glibc == (2, 28)
    (tmp_path / "plain.so").write_bytes(linking("libm.so.6"))
    assert native.glibc_needed(tmp_path / "plain.so") is None
    cut = bytearray(lib.read_bytes())
    records = cut.find(struct.pack("<HHI", 1, 4, 1 + len("libc.so.6") + 1 + len(
        "libstdc++.so.6") + 1))  # the first Verneed record: its aux offset follows
    assert records > 0
    struct.pack_into("<I", cut, records + 8, 1 << 20)  # vn_aux far past the section
    (tmp_path / "cut.so").write_bytes(bytes(cut))
    with pytest.raises(OSError, match="run past the section"):
        native.glibc_needed(tmp_path / "cut.so")


def test_a_library_that_needs_a_newer_glibc_than_its_tag_says_is_judged_by_the_library(
        tmp_path):
    """A wheel tagged manylinux_2_17 (or, as PyPI's torch 2.6.0, manylinux1) whose library
    requires GLIBC_2.28 symbols does not load on glibc 2.17: the finding names the library.
    Where the tag says as much or more, the tag is the reason given."""
    from lockguard.envs.installed import dist_facts

    site = tmp_path / "site"
    installed(site, "kit", "1.0", linking("libc.so.6", versions={
        "libc.so.6": ["GLIBC_2.2.5", "GLIBC_2.28"]}), tag="manylinux_2_17")
    installed(site, "tagged", "1.0", linking("libc.so.6", versions={
        "libc.so.6": ["GLIBC_2.17"]}), tag="manylinux_2_28")
    kit = dist_facts(site / "kit-1.0.dist-info")
    assert (kit.glibc, kit.glibc_from) == ((2, 28), "kit/libkit_1.0.so")
    centos = Machine("centos", (), (), None, "x86-64", (2, 17), 3)
    assert [(f.broken, f.change, f.problem) for f in judge(None, kit, [centos])] == [
        (True, "kit 1.0 (kit/libkit_1.0.so requires GLIBC_2.28)", "needs glibc >= 2.28 (its "
               "libraries' symbol versions; fleet: centos, glibc 2.17 x 3): broken there")]
    tagged = dist_facts(site / "tagged-1.0.dist-info")
    assert (tagged.glibc, tagged.glibc_from) == ((2, 28), None)
    assert [f.problem for f in judge(None, tagged, [centos])] == [
        "needs glibc >= 2.28 (its manylinux tag; fleet: centos, glibc 2.17 x 3): broken there"]


def test_a_cuda_extension_that_links_a_newer_runtime_than_it_names_needs_its_driver(
        tmp_path, monkeypatch):
    """A CUDA extension wheel names torch alone (or an older CUDA wheel) among its
    requirements; the runtime its library links (libcudart.so.13) decides the driver it
    needs, and the finding says why."""
    from lockguard.cli import cli
    from lockguard.envs.installed import dist_facts

    (tmp_path / "old.txt").write_text("flashkit==1.0\n")
    (tmp_path / "new.txt").write_text("flashkit==2.0\n")
    cache = tmp_path / "cache"
    installed(venv_of(cache, tmp_path / "old.txt"), "flashkit", "1.0",
              linking("libcudart.so.12", code=fatbin((SASS, 80), (SASS, 90))),
              requires=["torch"])
    new = venv_of(cache, tmp_path / "new.txt")
    installed(new, "flashkit", "2.0",
              linking("libcudart.so.13", "libc10.so", code=fatbin((SASS, 80), (SASS, 90))),
              requires=["torch", "nvidia-cuda-runtime-cu12"])
    facts = dist_facts(new / "flashkit-2.0.dist-info")
    assert (facts.cuda_major, facts.cuda_linked) == (13, (13, "libcudart.so.13"))
    monkeypatch.setenv("LOCKGUARD_CACHE", str(cache))
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lockguard.fleet.a100]\ngpus = ['A100']\ndriver = '550.54.15'\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert ("fleet-a100: flashkit 1.0 -> 2.0 (it links libcudart.so.13) needs driver >= "
            "580.65.06 for CUDA 13 (fleet: a100, driver 550.54.15): broken there") in text, text
    # A driver new enough for 13 passes; what its requirements say, where the linked runtime
    # is not newer, is said alone (no soname), and a CPU library links no CUDA.
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lockguard.fleet.a100]\ngpus = ['A100']\ndriver = '580.82.07'\n")
    assert CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"]).exit_code == 0
    site = tmp_path / "site"
    installed(site, "kit", "1.0", linking("libcudart.so.13"), requires=["nvidia-cublas==13.1"])
    installed(site, "cpukit", "1.0", linking("libm.so.6", "libgomp.so.1"))
    assert (dist_facts(site / "kit-1.0.dist-info").cuda_major,
            dist_facts(site / "kit-1.0.dist-info").cuda_linked) == (13, None)
    assert dist_facts(site / "cpukit-1.0.dist-info").cuda_major is None


# ---------------------------------------------------------------- the x86-64 level


NOTE, ISA_NEEDED, ISA_USED = 7, 0xC0008002, 0xC0010002


def property_note(*props: tuple[int, int]) -> bytes:
    """An NT_GNU_PROPERTY_TYPE_0 note of (pr_type, u32 value) properties, each padded to 8."""
    desc = b"".join(struct.pack("<III", kind, 4, value) + b"\0" * 4 for kind, value in props)
    return struct.pack("<III", 4, len(desc), 5) + b"GNU\0" + desc


def test_the_x86_level_a_library_needs_is_its_isa_needed_note_alone(tmp_path):
    """GNU_PROPERTY_X86_ISA_1_NEEDED (bits 0-3: baseline, v2, v3, v4) says what the code was
    compiled for; ISA_1_USED (what the assembler saw, AVX-512 kernels picked at run time
    included) is not a need; a cut note or another file says nothing."""
    def level(*sections) -> int:
        path = tmp_path / "lib.so"
        path.write_bytes(elf(*sections))
        return native.x86_isa_needed(path)

    gnu = ".note.gnu.property"
    assert level((gnu, NOTE, 2, property_note((ISA_NEEDED, 0b0111)))) == 3
    assert level((gnu, NOTE, 2, property_note((ISA_USED, 0b1111), (ISA_NEEDED, 0b0011)))) == 2
    assert level((gnu, NOTE, 2, property_note((ISA_USED, 0b1111)))) == 0
    assert level((gnu, NOTE, 2, property_note((ISA_NEEDED, 0b0111))[:-9])) == 0
    assert level((".note.other", NOTE, 2, property_note((ISA_NEEDED, 0b1111)))) == 0
    assert level((".text", PROGBITS, EXEC, b"\x90" * 16)) == 0
    (tmp_path / "text.so").write_text("not an ELF file")
    assert native.x86_isa_needed(tmp_path / "text.so") == 0


def compiled(tmp_path: Path, *flags: str) -> bytes:
    """A shared library GCC compiles here with `flags` (the machine's own compiler: GCC 11 or
    later writes the ISA note with -mneeded)."""
    import subprocess

    source = tmp_path / "core.c"
    source.write_text("double dot(const double *a, const double *b, int n) {\n"
                      "  double s = 0; for (int i = 0; i < n; i++) s += a[i] * b[i];\n"
                      "  return s;\n}\n")
    out = tmp_path / f"core{len(flags)}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", *flags, "-o", str(out), str(source)],
                   check=True, capture_output=True)
    return out.read_bytes()


def test_a_wheel_compiled_for_x86_64_v3_breaks_the_fleets_v2_machines(tmp_path, monkeypatch):
    """A real library compiled for x86-64-v3 (GCC, -march=x86-64-v3 -mneeded) in the new
    lock's wheel: `diff` fails the fleet's x86-64-v2 nodes (an illegal instruction there) and
    passes its v3 ones; going back to the library compiled for the baseline breaks nothing."""
    from lockguard.cli import cli

    v3 = compiled(tmp_path, "-march=x86-64-v3", "-mneeded")
    baseline = compiled(tmp_path)
    lib = tmp_path / "v3.so"
    lib.write_bytes(v3)
    assert native.x86_isa_needed(lib) == 3
    (tmp_path / "old.txt").write_text("fastdot==1.0\n")
    (tmp_path / "new.txt").write_text("fastdot==2.0\n")
    cache = tmp_path / "cache"
    installed(venv_of(cache, tmp_path / "old.txt"), "fastdot", "1.0", baseline)
    installed(venv_of(cache, tmp_path / "new.txt"), "fastdot", "2.0", v3)
    monkeypatch.setenv("LOCKGUARD_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lockguard.fleet.old-cpus]\ncpu = 'x86-64-v2'\ncount = 2\n"
        "[tool.lockguard.fleet.new-cpus]\ncpu = 'x86-64-v3'\n")
    result = CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert ("fleet-old-cpus: fastdot 1.0 -> 2.0 needs x86-64-v3 (fastdot/libfastdot_2.0.so was "
            "compiled for it: its ISA note; fleet: old-cpus, x86-64-v2 x 2): broken there") \
        in text, text
    assert "fleet-new-cpus" not in text
    # Back to the build compiled for the baseline: the v2 nodes run it.
    back = CliRunner().invoke(cli, ["diff", "new.txt", "old.txt"])
    assert back.exit_code == 0 and "x86-64-v" not in back.output, back.output


def test_a_release_whose_requires_python_leaves_out_a_machines_python_breaks_it(tmp_path):
    """The new wheel's Requires-Python (its METADATA, read from the installed dist-info or the
    .whl) against each machine's `python`: outside it, no release of that version installs."""
    from lockguard.envs.installed import dist_facts

    site = tmp_path / "site"
    installed(site, "numpy", "2.3.0", b"", tag="manylinux_2_28")
    meta = site / "numpy-2.3.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text() + "Requires-Python: >=3.11\n")
    new = dist_facts(site / "numpy-2.3.0.dist-info")
    assert new.requires_python == ">=3.11"
    old_python = Machine("py310-nodes", python=(3, 10), count=4)
    assert judge(None, new, [old_python, Machine("py312", python=(3, 12))],
                 "numpy 2.2.6 -> 2.3.0") == [Finding(
        "py310-nodes", True, "numpy 2.2.6 -> 2.3.0",
        "needs Python >=3.11 (its Requires-Python; fleet: py310-nodes, Python 3.10 x 4): broken "
        "there (no release of it installs on 3.10)")]
    # A patch-level bound admits the minor release; an unreadable one judges nothing.
    assert judge(None, replace(new, requires_python=">=3.10.2,<3.14"), [old_python]) == []
    assert judge(None, replace(new, requires_python="3.11 or later"), [old_python]) == []


def test_the_fleet_python_key_is_read_and_checked(tmp_path):
    where = "pyproject.toml [tool.lockguard]"
    [machine] = parse_config({"fleet": {"n": {"python": "3.10"}}}, where,
                             tmp_path).fleet_machines()
    assert machine.python == (3, 10)
    with pytest.raises(ConfigError, match=r"fleet\.n\.python"):
        parse_config({"fleet": {"n": {"python": "3"}}}, where, tmp_path)


# ---------------------------------------------------------------- each machine's own wheel


def other_arch() -> tuple[str, str, str, str]:
    """This machine's architecture and another, each with the fleet `cpu` that names it:
    the tests hold on an x86_64 runner and an aarch64 one alike."""
    from lockguard.envs.wheels import host_arch

    cpu = {"x86_64": "x86-64", "aarch64": "aarch64"}
    here = host_arch()
    there = "aarch64" if here == "x86_64" else "x86_64"
    return here, cpu.get(here, "x86-64"), there, cpu[there]


def gpukit_diff(tmp_path: Path, monkeypatch, links: Path, new: str, fleet: str,
                marker: str = "") -> tuple[int, str]:
    """`lockguard diff` of gpukit 0.9 -> 1.0 (`new`: the 1.0 pin's hashes) from the wheels
    in `links` (no index), against `fleet` ([tool.lockguard.fleet.*] tables), in tmp_path
    with a cache of its own: the exit code and the output on one line. Called again, the
    same diff (the cache as the last one left it)."""
    from lockguard.cli import cli

    options = f"--no-index\n--find-links {links}\n"
    (tmp_path / "old.txt").write_text(f"{options}gpukit==0.9 {marker} --hash=sha256:{'0' * 64}\n")
    (tmp_path / "new.txt").write_text(f"{options}gpukit==1.0 {marker} {new}\n")
    (tmp_path / "pyproject.toml").write_text(fleet)
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"])
    return result.exit_code, " ".join(result.output.split())


def test_a_machine_of_another_architecture_is_judged_by_its_own_wheel(tmp_path, monkeypatch):
    """gpukit 1.0's wheel for this machine's architecture has sm_70 code, its wheel for the
    other architecture has none (a lock pins both files' hashes). A V100 machine of each: the
    one of the other architecture is judged by its own wheel, downloaded for its platform
    (pip download --platform, hash-checked, from the lock's find-links), and breaks; the one
    like this machine passes. Without that wheel (gone from the index), the change fails
    closed naming the machine, never passes unjudged."""
    here, here_cpu, there, there_cpu = other_arch()
    links = tmp_path / "links"
    links.mkdir()
    own = wheel(links, "gpukit", "1.0", (SASS, 70), (SASS, 90),
                tag=f"py3-none-manylinux_2_17_{here}")
    theirs = wheel(links, "gpukit", "1.0", (SASS, 90), tag=f"py3-none-manylinux_2_17_{there}")
    fleet = (f"[tool.lockguard.fleet.here]\ngpus = ['V100']\ncpu = '{here_cpu}'\n"
             f"[tool.lockguard.fleet.there]\ngpus = ['V100']\ncpu = '{there_cpu}'\n")
    code, text = gpukit_diff(tmp_path, monkeypatch, links, f"--hash={own} --hash={theirs}", fleet)
    assert code == 1, text
    assert "fleet-there: gpukit 0.9 -> 1.0 has no code for sm_70 (fleet: there, V100): " \
           "broken there" in text, text
    assert "fleet-here" not in text and "not judged" not in text, text
    fetched = sorted(p.name for p in (tmp_path / "cache").glob("wheels/fleet/*/wheels/*.whl"))
    assert fetched == sorted([f"gpukit-1.0-py3-none-manylinux_2_17_{here}.whl",
                              f"gpukit-1.0-py3-none-manylinux_2_17_{there}.whl"])
    # Cached: the next diff reads each machine's wheel from there, the index gone.
    for whl in links.iterdir():
        whl.unlink()
    code, text = gpukit_diff(tmp_path, monkeypatch, links, f"--hash={own} --hash={theirs}", fleet)
    assert code == 1 and "fleet-there" in text
    # Neither cached nor to be had: fails closed, naming the change and the machine.
    for entry in (tmp_path / "cache" / "wheels" / "fleet").iterdir():
        if there in " ".join(p.name for p in entry.glob("wheels/*")):
            shutil.rmtree(entry)
    code, text = gpukit_diff(tmp_path, monkeypatch, links, f"--hash={own} --hash={theirs}", fleet)
    assert code == 1, text
    assert re.search(r"fleet: gpukit 0.9 -> 1.0 not judged against the fleet \(for there\): pip "
                     rf"could not download them for {there}, Python \d+\.\d+: .*\(a wheel "
                     r"lockguard cannot read fails closed\)", text), text


def test_a_machine_of_another_python_is_judged_by_its_own_wheel(tmp_path, monkeypatch):
    """gpukit 1.0 ships a wheel per CPython: this interpreter's has sm_70 code, the other
    Python's none. A V100 machine on each Python, both of this architecture: the one on the
    other Python is judged by its own wheel (downloaded for it) and breaks; this one passes.
    A release with no wheel for a machine's Python fails closed naming it."""
    here, here_cpu, _, _ = other_arch()
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    other = "3.12" if ours != "3.12" else "3.11"
    links = tmp_path / "links"
    links.mkdir()

    def tag(python: str) -> str:
        cp = "cp" + python.replace(".", "")
        return f"{cp}-{cp}-manylinux_2_17_{here}"

    own = wheel(links, "gpukit", "1.0", (SASS, 70), (SASS, 90), tag=tag(ours))
    theirs = wheel(links, "gpukit", "1.0", (SASS, 90), tag=tag(other))
    fleet = (f"[tool.lockguard.fleet.ours]\ngpus = ['V100']\ncpu = '{here_cpu}'\n"
             f"python = '{ours}'\n[tool.lockguard.fleet.theirs]\ngpus = ['V100']\n"
             f"cpu = '{here_cpu}'\npython = '{other}'\n")
    code, text = gpukit_diff(tmp_path, monkeypatch, links, f"--hash={own} --hash={theirs}", fleet)
    assert code == 1, text
    assert "fleet-theirs: gpukit 0.9 -> 1.0 has no code for sm_70 (fleet: theirs, V100): " \
           "broken there" in text, text
    assert "fleet-ours" not in text and "not judged" not in text, text
    # No wheel for the other Python at all: not judged by this one's, fails closed.
    (links / f"gpukit-1.0-{tag(other)}.whl").unlink()
    shutil.rmtree(tmp_path / "cache" / "wheels")
    code, text = gpukit_diff(tmp_path, monkeypatch, links, f"--hash={own} --hash={theirs}", fleet)
    assert code == 1, text
    assert re.search(r"fleet: gpukit 0.9 -> 1.0 not judged against the fleet \(for theirs\): "
                     rf"pip could not download them for {here}, Python {other}: ", text), text
    assert "fleet-ours" not in text, text


def test_a_pin_whose_marker_holds_only_on_another_machine_is_judged_there(tmp_path, monkeypatch):
    """A changed pin under `platform_machine == '<other architecture>'`: this machine
    installs nothing of it, the fleet's machine of that architecture does, so it is judged by
    that machine's wheel (and breaks it), not left a note."""
    _, here_cpu, there, there_cpu = other_arch()
    links = tmp_path / "links"
    links.mkdir()
    theirs = wheel(links, "gpukit", "1.0", (SASS, 90), tag=f"py3-none-manylinux_2_17_{there}")
    marker = f"; platform_machine == '{there}'"
    here_only = f"[tool.lockguard.fleet.here]\ngpus = ['V100']\ncpu = '{here_cpu}'\n"
    fleet = here_only + f"[tool.lockguard.fleet.there]\ngpus = ['V100']\ncpu = '{there_cpu}'\n"
    code, text = gpukit_diff(tmp_path, monkeypatch, links, f"--hash={theirs}", fleet, marker)
    assert code == 1, text
    assert "fleet-there: gpukit 0.9 -> 1.0 has no code for sm_70" in text, text
    assert "fleet-here" not in text and "marker" not in text, text
    # Only on the other machine's architecture, and no fleet machine of it: a note.
    code, text = gpukit_diff(tmp_path, monkeypatch, links, f"--hash={theirs}", here_only, marker)
    assert code == 0, text
    assert "its marker holds on no fleet machine" in text, text


def test_a_cached_wheel_is_read_only_for_the_platform_its_tags_name(tmp_path, monkeypatch):
    """A lock pins every platform's files; a wheelhouse holding the other architecture's
    (its hash among the pin's) is not this machine's wheel, and is read only for a machine of
    that architecture."""
    from lockguard.envs.wheels import Platform, lock_wheels
    from lockguard.locks.parser import parse_lock

    _, _, there, _ = other_arch()
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    house = tmp_path / "cache" / "wheelhouses" / "0a1b" / "wheels"
    house.mkdir(parents=True)
    (house.parent / "lockguard-ready.json").write_text('{"lock_hash": "another lock"}')
    theirs = wheel(house, "gpukit", "1.0", (SASS, 90), tag=f"py3-none-manylinux_2_17_{there}")
    (tmp_path / "new.txt").write_text(f"gpukit==1.0 --hash={theirs} --hash=sha256:{'1' * 64}\n")
    lock = parse_lock(tmp_path / "new.txt")
    assert lock_wheels(lock, lock.pins) == ({}, None)
    assert lock_wheels(lock, lock.pins, platform=Platform(there, "3.11"))[0] == {
        "gpukit": house / f"gpukit-1.0-py3-none-manylinux_2_17_{there}.whl"}
    # A build's stage (.NAME.stage, unfinished) beside the entries is none of them.
    stage = tmp_path / "cache" / "wheelhouses" / ".0a1c.stage"
    (house.parent).rename(stage)
    assert lock_wheels(lock, lock.pins, platform=Platform(there, "3.11")) == ({}, None)


def test_a_fleet_downloads_marker_that_is_not_what_it_wrote_binds_nothing(tmp_path, monkeypatch):
    """A ready marker of wheels/fleet that is JSON of another shape (written by hand, or by
    another version) is ignored, as the marker reader promises: no crash (exit 3)."""
    from lockguard.envs.wheels import lock_wheels
    from lockguard.locks.parser import parse_lock

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    (tmp_path / "new.txt").write_text("gpukit==1.0\n")
    lock = parse_lock(tmp_path / "new.txt")
    entry = tmp_path / "cache" / "wheels" / "fleet" / "0a1b"
    (entry / "wheels").mkdir(parents=True)
    for text in ('{"wheels": ["gpukit-1.0-py3-none-any.whl"]}', '{"wheels": 3}', "[1]", "{"):
        (entry / "lockguard-ready.json").write_text(text)
        assert lock_wheels(lock, lock.pins) == ({}, None)


def test_files_that_cannot_be_read_are_not_taken_for_no_cuda_code(tmp_path, monkeypatch):
    """A library its RECORD lists but that cannot be read, a missing RECORD, a wheel's library
    over MAX_MEMBER_BYTES or libraries over MAX_WHEEL_BYTES together, a file that is no zip:
    each is Facts.unread, which judge_changes does not judge (the flows fail it closed)."""
    from lockguard.envs import installed as installed_py
    from lockguard.envs.installed import dist_facts

    site = tmp_path / "site"
    installed(site, "gpukit", "1.0", elf((".nv_fatbin", PROGBITS, 2, fatbin((SASS, 90)))))
    info = site / "gpukit-1.0.dist-info"
    assert dist_facts(info).unread is None
    (site / "gpukit" / "libgpukit_1.0.so").unlink()
    assert "gpukit/libgpukit_1.0.so could not be read" in dist_facts(info).unread
    (info / "RECORD").unlink()
    assert "RECORD" in dist_facts(info).unread
    found, unread = judge_changes([("gpukit 0.9 -> 1.0", None, dist_facts(info))], [V100])
    assert found == [] and unread == [("gpukit 0.9 -> 1.0", dist_facts(info).unread)]

    wheel(tmp_path, "gpukit", "1.0", (SASS, 90))
    whl = tmp_path / "gpukit-1.0-py3-none-any.whl"
    assert dist_facts(whl).unread is None and dist_facts(whl).cuda.sass == {90}
    monkeypatch.setattr(installed_py, "MAX_MEMBER_BYTES", 100)
    assert "gpukit/libk.so is" in dist_facts(whl).unread
    monkeypatch.setattr(installed_py, "MAX_MEMBER_BYTES", 8 << 30)
    monkeypatch.setattr(installed_py, "MAX_WHEEL_BYTES", 100)
    assert "its libraries unpack to" in dist_facts(whl).unread
    whl.write_bytes(b"not a zip")
    assert "could not be read as a wheel" in dist_facts(whl).unread


def test_a_wheel_files_platform_is_its_names_tags_where_its_wheel_file_says_less(tmp_path):
    """An installer picks a wheel file by the tags of its name (PEP 427); its WHEEL's Tag lines
    may say less: PyPI's torch 2.6.0 is cp311-cp311-manylinux1_x86_64 by its name and says
    `Tag: cp311-cp311-linux_x86_64` inside (no glibc, no CPU read from it: a manylinux_2_28
    wheel of that kind passed a glibc 2.17 machine). A dist-info has only its WHEEL."""
    import zipfile

    from lockguard.envs.installed import dist_facts

    whl = tmp_path / "gpukit-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as archive:
        archive.writestr("gpukit-1.0.dist-info/METADATA", "Metadata-Version: 2.1\n"
                         "Name: gpukit\nVersion: 1.0\n")
        archive.writestr("gpukit-1.0.dist-info/WHEEL",
                         "Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n")
    facts = dist_facts(whl)
    assert (facts.glibc, facts.machine) == ((2, 28), "x86_64")
    centos = Machine("centos", glibc=(2, 17))
    assert [f.problem for f in judge(None, facts, [centos])] == [
        "needs glibc >= 2.28 (its manylinux tag; fleet: centos, glibc 2.17): broken there"]
    odd = whl.rename(tmp_path / "gpukit-1.0.whl")  # not a wheel's name: its WHEEL's tags
    assert (dist_facts(odd).glibc, dist_facts(odd).machine) == (None, None)


def test_a_diff_whose_changed_wheel_has_an_unreadable_library_fails_closed(tmp_path, monkeypatch):
    """`diff` against a fleet, the candidate's venv missing a library its RECORD lists: the
    change is not judged, and the gate fails (rule fleet), not passes on "no CUDA code"."""
    from lockguard.cli import cli

    (tmp_path / "old.txt").write_text("gpukit==0.9\n")
    (tmp_path / "new.txt").write_text("gpukit==1.0\n")
    site = venv_of(tmp_path / "cache", tmp_path / "new.txt")
    installed(site, "gpukit", "1.0", elf((".nv_fatbin", PROGBITS, 2, fatbin((SASS, 90)))))
    (site / "gpukit" / "libgpukit_1.0.so").unlink()
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.lockguard.fleet.v100]\ngpus = ['V100']\n")
    result = CliRunner().invoke(cli, ["diff", "old.txt", "new.txt"])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "fleet: gpukit 0.9 -> 1.0 not judged against the fleet (for v100): " \
           "gpukit/libgpukit_1.0.so could not be read" in text, text


def test_a_diff_of_a_lock_the_run_does_not_hold_is_an_internal_error():
    """Every flow passes fleet_parts the LockRefs of the diffs it judges: one missing is a
    bug (exit 3), not a change skipped unjudged."""
    from lockguard.flows.report_parts import fleet_parts
    from lockguard.locks.diff import LockDiff

    diff = LockDiff.model_construct(new_lock_hash="0" * 12, old_lock_hash="1" * 12,
                                    new_source="new.txt", changed=())
    with pytest.raises(AssertionError, match="new.txt"):
        fleet_parts([V100], [diff], [])


def test_an_elf_whose_tables_lie_outside_it_is_unread_never_read_as_declaring_nothing(tmp_path):
    """A library from a pull request's index is the lock's, not to be trusted: a section table
    or name table pointing past the file's end (or 2**63 bytes in), or an oversized ISA note,
    is an OSError, which dist_facts turns into Facts.unread (the fleet's fail-closed rule)."""
    good = elf((".note.gnu.property", NOTE, 2, property_note((ISA_NEEDED, 0b0111))))
    path = tmp_path / "lib.so"
    for where, value in ((0x28, 2 ** 63), (0x28, len(good) - 8)):  # e_shoff
        bad = bytearray(good)
        struct.pack_into("<Q", bad, where, value)
        path.write_bytes(bytes(bad))
        for read in (native.x86_isa_needed, native.cuda_code):
            with pytest.raises(OSError, match="section table is corrupt"):
                read(path)
    # the name table (.shstrtab, the last entry) claiming a size past the file's end
    bad = bytearray(good)
    shoff, = struct.unpack_from("<Q", bad, 0x28)
    shnum, = struct.unpack_from("<H", bad, 0x3C)
    struct.pack_into("<Q", bad, shoff + 64 * (shnum - 1) + 32, 2 ** 40)  # its sh_size
    path.write_bytes(bytes(bad))
    with pytest.raises(OSError, match="name table is corrupt"):
        native.x86_isa_needed(path)
    path.write_bytes(elf((".note.gnu.property", NOTE, 2, b"\0" * (native.MAX_NOTE_BYTES + 8))))
    with pytest.raises(OSError, match="too large"):
        native.x86_isa_needed(path)
    from lockguard.envs.installed import dist_facts

    site = tmp_path / "site"
    installed(site, "evil", "1.0", bytes(bad))
    facts = dist_facts(site / "evil-1.0.dist-info")
    assert facts.unread and "name table is corrupt" in facts.unread


def test_of_a_releases_cached_files_that_fit_the_one_an_installer_prefers_is_read(
        tmp_path, monkeypatch):
    """A release with a manylinux2014 and a manylinux_2_28 file for one architecture: a
    machine whose glibc takes both installs the 2_28 one (the more specific tag, first in
    packaging.tags' order), so that is the one judged, whatever order the cache lists them in;
    a machine on glibc 2.17 gets the 2014 one."""
    from lockguard.envs.wheels import Platform, lock_wheels
    from lockguard.locks.parser import parse_lock

    here, _, _, _ = other_arch()
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    house = tmp_path / "cache" / "wheelhouses" / "0a1b" / "wheels"
    house.mkdir(parents=True)
    (house.parent / "lockguard-ready.json").write_text('{"lock_hash": "another lock"}')
    old = wheel(house, "gpukit", "1.0", (SASS, 70), tag=f"py3-none-manylinux2014_{here}")
    new = wheel(house, "gpukit", "1.0", (SASS, 90), tag=f"py3-none-manylinux_2_28_{here}")
    (tmp_path / "new.txt").write_text(f"gpukit==1.0 --hash={old} --hash={new}\n")
    lock = parse_lock(tmp_path / "new.txt")
    found = lock_wheels(lock, lock.pins, platform=Platform(here, "3.11", glibc=(2, 31)))[0]
    assert found == {"gpukit": house / f"gpukit-1.0-py3-none-manylinux_2_28_{here}.whl"}
    older = lock_wheels(lock, lock.pins, platform=Platform(here, "3.11", glibc=(2, 17)))[0]
    assert older == {"gpukit": house / f"gpukit-1.0-py3-none-manylinux2014_{here}.whl"}


def test_a_marker_on_the_patch_release_holds_for_a_machine_known_to_x_y():
    """A fleet machine's python is X.Y: a pin under python_full_version >= "3.11.4" may be
    installed there, so it is judged there (before: asked of 3.11.0 only, never)."""
    from lockguard.envs.wheels import Platform, holds_on
    from lockguard.locks.model import Pin

    machine = Platform("x86_64", "3.11")
    for marker, holds in (('python_full_version >= "3.11.4"', True),
                          ('python_full_version < "3.11.2"', True),
                          ('python_full_version >= "3.12"', False),
                          ('platform_machine == "aarch64"', False)):
        pin = Pin(name="gpukit", display_name="gpukit", version="1.0", marker=marker, line=1)
        assert holds_on(pin, machine) is holds, marker
