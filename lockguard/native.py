"""What a distribution's native files declare, read as bytes (no package code runs): the CUDA
architectures compiled into its ELF libraries' fatbins, the x86-64 level its libraries' GNU
property notes say they need, the libraries they link (and so the CUDA runtime they load), the
glibc its manylinux tags and its libraries' symbol versions require, and the CUDA major its
name, requirements or local version say.

Why our own reader. PyPI has ELF readers (pyelftools, lief) but no reader of NVIDIA's fatbin
container (nvidia-nvfatbin only creates them; cuobjdump is a toolkit binary that a laptop or a
CI runner does not have). Finding one section needs only the ELF section header table, which
the System V ABI fixes (gABI "Sections": e_shoff, e_shentsize, e_shnum, e_shstrndx in the
ELF header; sh_name, sh_offset, sh_size per entry), so a new dependency is not worth it.

The fatbin container is undocumented by NVIDIA; the layout below is the one reverse-engineered
in n-eiling/cuda-fatbin-decompression (fatbin-decompress.h: `fat_elf_header`,
`fat_text_header`, Apache-2.0) and matches what cuobjdump lists on real libraries:

    container header (16 bytes): u32 magic 0xBA55ED50 · u16 version · u16 header size ·
                                 u64 size of the entries that follow
    entry header:                u16 kind (1 PTX, 2 ELF/SASS) · u16 · u32 header size ·
                                 u64 payload size · u64 compressed size · u16 minor · u16 major
                                 (the code version: a PTX entry's PTX ISA version, 9.0 in
                                 CUDA 13.0's cuBLAS; a cubin's ELF ABI) · u32 arch (90 for
                                 sm_90) · u32 name offset · u32 name size · u64 flags · u64 ·
                                 u64 decompressed size (at 56: the payload's size once
                                 decompressed. The reference's compression flag, 0x2000, is
                                 not set on CUDA 13.0's cuBLAS, whose entries' flags read
                                 0x8011 with payloads a tenth of that size: so the larger of
                                 the two sizes is taken, not the flag. libcublasLt.so.13 of
                                 nvidia-cublas 13.1.1.3 holds 26 MB of PTX for sm_120 that is
                                 237 MB as text)

The x86 ISA level: the System V x86-64 psABI's GNU property GNU_PROPERTY_X86_ISA_1_NEEDED
(0xc0008002; its value a bit set, bit 0 the baseline, bits 1-3 x86-64-v2..v4: binutils
include/elf/common.h), in an NT_GNU_PROPERTY_TYPE_0 note ("GNU", type 5) of the
.note.gnu.property section, which GCC 11+ writes with -mneeded from the -march the code was
compiled for: the compiler may have used those instructions anywhere, so the library needs them.
The note GNU_PROPERTY_X86_ISA_1_USED (what the assembler saw) is not read: a library that picks
kernels at run time (numpy, torch) holds AVX-512 code it never runs on an older CPU, and no
instruction scan can tell. A library without the NEEDED note says nothing; none of the real
wheels read so far (numpy 2.4, torch 2.14, jaxlib's CUDA plugins) carries it.

The libraries it links: the DT_NEEDED entries of its dynamic section (gABI "Dynamic Section":
SHT_DYNAMIC holds 16-byte entries of two 8-byte fields, d_tag and d_val; DT_NEEDED = 1, its
d_val an offset into the string table the section's sh_link names). The soname of a CUDA
toolkit library carries the toolkit's major (libcudart.so.12, libcublas.so.13, auditwheel's
vendored libcudart-1a2b3c4d.so.13: nvidia.CUDA_SONAMES), so a wheel that names no CUDA wheel
among its requirements (torchvision requires torch alone) still says which CUDA runtime it
loads; cuDNN's and NCCL's sonames (libcudnn.so.9) carry their own majors. A linked runtime is
evidence where present, never proof of none where absent: nvcc links cudart statically by
default.

The glibc a library needs: the symbol versions it requires (gABI's GNU extension "Symbol
Versioning": .gnu.version_r, SHT_GNU_verneed, holds Elf64_Verneed records (u16 version, u16
count, u32 file, u32 aux, u32 next) each followed by `count` Elf64_Vernaux (u32 hash, u16
flags, u16 other, u32 name, u32 next), names in .dynstr). The newest GLIBC_X.Y among them is
the oldest glibc the dynamic loader accepts it on, whatever the wheel's tag says: PyPI's torch
2.6.0 is tagged manylinux1 (glibc 2.5) and the libgomp it bundles requires GLIBC_2.17
(auditwheel checks the same records when it tags a wheel).

The next entry starts header size + payload size after one; a container ends header size +
size after its start. Containers are found by their magic in every data section, not only in
`.nv_fatbin`: cuFFT keeps its kernels' fatbins in `.ldata`, and its .nv_fatbin holds one
sm_75 stub (read on cuFFT 12.0 from CUDA 13). Only the headers are parsed; the payloads
(compressed or not) are skipped.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NamedTuple

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.nvidia import CUDA_SONAMES, TOOLKIT_VERSIONED

FATBIN_MAGIC = 0xBA55ED50
_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
_KIND_PTX, _KIND_SASS = 1, 2
_ELF_MAGIC = b"\x7fELF"
_ET_EXEC, _ET_DYN, _SHN_XINDEX = 2, 3, 0xFFFF
MAX_ENTRIES = 1_000_000  # a corrupt size loop stops here rather than running forever


@dataclass(frozen=True)
class CudaCode:
    """The CUDA code a library (or a distribution's libraries) carries: the architectures with
    SASS (run as they are) and those with PTX (JIT-compiled by the driver on first use), as
    compute capabilities times ten (sm_90 is 90)."""

    sass: frozenset[int] = frozenset()
    ptx: frozenset[int] = frozenset()
    # The newest PTX ISA version (major, minor) among its PTX: the driver that JIT-compiles it
    # must know it (nvidia.PTX_ISA). None without PTX.
    ptx_isa: tuple[int, int] | None = None
    # (arch, bytes) of PTX text per architecture, sorted: what a GPU that runs it JIT-compiles
    # at its first use (the cost a PTX-only finding names). An annotation of the code, not
    # part of its identity: two reads of the same architectures compare equal.
    ptx_bytes: tuple[tuple[int, int], ...] = field(default=(), compare=False)

    def __bool__(self) -> bool:
        return bool(self.sass or self.ptx)

    def union(self, other: CudaCode) -> CudaCode:
        """Both libraries' code together."""
        isa = max((v for v in (self.ptx_isa, other.ptx_isa) if v is not None), default=None)
        sizes = dict(self.ptx_bytes)
        for arch, size in other.ptx_bytes:
            sizes[arch] = sizes.get(arch, 0) + size
        return CudaCode(self.sass | other.sass, self.ptx | other.ptx, isa,
                        tuple(sorted(sizes.items())))

    def ptx_size(self, arch: int) -> int:
        """The bytes of PTX text for `arch` (0 when none was measured)."""
        return dict(self.ptx_bytes).get(arch, 0)

    def runs_on(self, arch: int) -> str | None:
        """How code for `arch` is found: "sass" (a cubin of the same major and no newer minor:
        CUDA's binary compatibility within a major), "ptx" (PTX of an older or equal arch,
        JIT-compiled) or None (none: the library's kernels fail there)."""
        if any(a // 10 == arch // 10 and a <= arch for a in self.sass):
            return "sass"
        if any(a <= arch for a in self.ptx):
            return "ptx"
        return None


@dataclass(frozen=True)
class Facts:
    """What one distribution's files declare (envs/installed.dist_facts reads them): its
    CUDA code, the CUDA major it is built for, the glibc its manylinux tags need, the x86-64
    level its libraries need, the Pythons its metadata admits; `unread` when some of them
    could not be read."""

    name: str
    version: str
    cuda: CudaCode = field(default_factory=CudaCode)
    cuda_major: int | None = None
    glibc: tuple[int, int] | None = None
    machine: str | None = None  # x86_64 or aarch64, from its platform tags; None: any or unsaid
    # (level, library): the highest x86_isa_needed among its libraries (2 = x86-64-v2 ... 4)
    # and the first library that needs it; None when none says more than the baseline
    x86_isa: tuple[int, str] | None = None
    # the library whose GLIBC_X.Y symbol versions need a newer glibc than its tag says (glibc
    # is then that version): "torch/lib/libtorch_cpu.so"; None when the tag says enough
    glibc_from: str | None = None
    # (major, soname): the CUDA major of the toolkit libraries its libraries link (cuda_linked;
    # the oldest where they disagree, a library per major), when newer than what its name and
    # requirements say (cuda_major is then that major: the runtime it loads decides the driver)
    cuda_linked: tuple[int, str] | None = None
    requires_python: str | None = None  # its METADATA's Requires-Python, as written
    # why some of its files could not be read (a library unreadable or too large, no RECORD):
    # what they hold is not known, so the distribution is not judged (fleet.py fails closed)
    unread: str | None = None


def wheel_machine(tags: Iterable[str]) -> str | None:
    """The CPU architecture a wheel's Linux platform tags are for (x86_64, aarch64...); None
    for a pure wheel or one without a Linux tag."""
    for tag in tags:
        # PEP 600's manylinux_X_Y_<arch> (musllinux_X_Y_<arch>) or a legacy alias's
        m = re.search(r"(?:many|musl)linux(?:_\d+_\d+|1|2010|2014)_([a-z0-9_]+)$", tag)
        if m:
            return m.group(1)
    return None


def sm(arch: int) -> str:
    """An architecture as NVIDIA writes it: 90 -> "sm_90"."""
    return f"sm_{arch}"


class Section(NamedTuple):
    """One entry of an ELF file's section header table, as native.py reads it."""

    name: bytes
    sh_type: int
    flags: int
    offset: int
    size: int
    # (sh_type, offset, size) of the section its sh_link names (a dynamic section's string
    # table); None where it names none
    link: tuple[int, int, int] | None


@dataclass(frozen=True)
class Library:
    """What one ELF library declares: its CUDA code (cuda_code), its x86-64 level
    (x86_isa_needed: 0 unsaid, 1-4), the sonames it links (needed) and the newest glibc its
    symbol versions require (glibc_needed)."""

    code: CudaCode
    level: int
    needed: tuple[str, ...]
    glibc: tuple[int, int] | None = None


def library_facts(path: Path) -> Library:
    """One ELF library's CUDA code, x86-64 level, linked sonames and glibc symbol versions, its
    file opened and its section table read once."""
    with open(path, "rb") as f:
        sections = _sections(f)
        return Library(_code_in(f, sections), _level_in(f, sections), _needed_in(f, sections),
                       _glibc_in(f, sections))


def data_sections(sections: list[Section]) -> list[tuple[bytes, int, int]]:
    """(name, offset, size) of the sections whose bytes are in the file and are not code
    (SHT_PROGBITS without SHF_EXECINSTR): where fatbins are."""
    return [(name, offset, size) for name, sh_type, flags, offset, size, _ in sections
            if sh_type == 1 and not flags & 0x4 and size]  # SHT_PROGBITS, not SHF_EXECINSTR


MAX_SECTION_NAMES = 1 << 20  # a section name table is kilobytes; a larger one is corrupt


def _sections(f: BinaryIO) -> list[Section]:
    """(name, type, flags, offset, size, link) of every section of a 64-bit little-endian ELF
    file, in the table's order; empty when it is not one. A library or executable without a
    section table, or an ELF file whose table or name table lies outside it, is an OSError:
    the wheel is the lock's (possibly a hostile index's), and what cannot be read is never
    taken for "declares nothing". More than 65,279 sections are counted in the first entry's
    sh_size (and the name table's index in its sh_link), as the gABI's extended numbering
    says."""
    f.seek(0)
    head = f.read(64)
    if len(head) < 64 or head[:4] != _ELF_MAGIC or head[4] != 2 or head[5] != 1:
        return []  # not ELF, not 64-bit (EI_CLASS 2) or not little-endian (EI_DATA 1)
    e_type, = struct.unpack_from("<H", head, 0x10)
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    size = os.fstat(f.fileno()).st_size
    if not shoff:
        if e_type in (_ET_EXEC, _ET_DYN):  # the loader needs none; we cannot read without
            raise OSError("it has no ELF section table (stripped of it): its code cannot be "
                          "read")
        return []
    if shentsize != 64 or shoff + 64 > size:
        raise OSError("its ELF section table is corrupt (outside the file or malformed)")
    if shnum == 0 or shstrndx == _SHN_XINDEX:  # extended numbering: in section 0's header
        f.seek(shoff)
        first = struct.unpack_from("<IIQQQQII", f.read(64))
        shnum = shnum or first[5]
        shstrndx = first[6] if shstrndx == _SHN_XINDEX else shstrndx
    if shnum == 0 or shstrndx >= shnum or shoff + 64 * shnum > size:
        raise OSError("its ELF section table is corrupt (outside the file or malformed)")
    f.seek(shoff)
    table = f.read(64 * shnum)
    # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link
    sections = [struct.unpack_from("<IIQQQQI", table, i * 64) for i in range(shnum)]
    names_at, names_size = sections[shstrndx][4], sections[shstrndx][5]
    if names_size > MAX_SECTION_NAMES or names_at + names_size > size:
        raise OSError("its ELF section name table is corrupt (outside the file or too large)")
    f.seek(names_at)
    names = f.read(names_size)
    out = []
    for sh_name, sh_type, flags, _, offset, length, link in sections:
        end = names.find(b"\0", sh_name)
        linked = sections[link] if 0 < link < shnum else None
        out.append(Section(names[sh_name:end if end >= 0 else None], sh_type, flags, offset,
                           length, (linked[1], linked[4], linked[5]) if linked else None))
    return out


_SHT_NOTE, _NT_GNU_PROPERTY_TYPE_0 = 7, 5
_X86_ISA_1_NEEDED = 0xC0008002
MAX_NOTE_BYTES = 1 << 16  # a property note is tens of bytes; a larger one is corrupt


def x86_isa_needed(path: Path) -> int:
    """The x86-64 level (1 the baseline, 2-4 x86-64-v2..v4) the GNU property notes of one ELF
    library say it needs (module docstring); 0 when it says nothing (no note, not ELF)."""
    with open(path, "rb") as f:
        return _level_in(f, _sections(f))


def _level_in(f: BinaryIO, sections: list[Section]) -> int:
    level = 0
    for name, sh_type, _, offset, size, _ in sections:
        if sh_type != _SHT_NOTE or name != b".note.gnu.property":
            continue
        if size > MAX_NOTE_BYTES:  # unread, never "needs nothing"
            raise OSError(f"its .note.gnu.property section of {size} bytes is too large")
        f.seek(offset)
        level = max(level, _isa_in_notes(f.read(size)))
    return level


def _isa_in_notes(data: bytes) -> int:
    """The ISA_1_NEEDED level in a section of ELF notes (namesz, descsz, type, name, desc; each
    padded to 4 bytes, a 64-bit property to 8), 0 without one."""
    level, pos = 0, 0
    while pos + 12 <= len(data):
        namesz, descsz, kind = struct.unpack_from("<III", data, pos)
        name_at = pos + 12
        desc_at = name_at + (namesz + 3) // 4 * 4
        desc_at = (desc_at + 7) // 8 * 8 if kind == _NT_GNU_PROPERTY_TYPE_0 else desc_at
        end = desc_at + descsz
        if end > len(data):
            break
        if kind == _NT_GNU_PROPERTY_TYPE_0 and data[name_at:name_at + namesz] == b"GNU\0":
            prop = desc_at
            while prop + 8 <= end:
                pr_type, size = struct.unpack_from("<II", data, prop)
                if pr_type == _X86_ISA_1_NEEDED and size >= 4 and prop + 12 <= end:
                    bits, = struct.unpack_from("<I", data, prop + 8)
                    level = max([level, *(i + 1 for i in range(4) if bits >> i & 1)])
                prop += 8 + (size + 7) // 8 * 8
        pos = (end + 3) // 4 * 4 if kind != _NT_GNU_PROPERTY_TYPE_0 else (end + 7) // 8 * 8
    return level


_SHT_DYNAMIC, _SHT_STRTAB, _DT_NEEDED, _DT_NULL = 6, 3, 1, 0
MAX_DYNAMIC_BYTES = 1 << 20  # .dynamic, .gnu.version_r: a real one holds tens of records
_MAX_SONAME = 255


def needed(path: Path) -> tuple[str, ...]:
    """The sonames one ELF library links (its DT_NEEDED entries, in order); () when it links
    none or is not ELF."""
    with open(path, "rb") as f:
        return _needed_in(f, _sections(f))


def _needed_in(f: BinaryIO, sections: list[Section]) -> tuple[str, ...]:
    found = _section(f, sections, _SHT_DYNAMIC, b".dynamic")
    if found is None:
        return ()
    dynamic, strings = found
    out = []
    for at in range(0, len(dynamic) - 15, 16):
        tag, value = struct.unpack_from("<qQ", dynamic, at)
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            out.append(_string(f, strings, value, "a DT_NEEDED entry"))
    return tuple(out)


_SHT_GNU_VERNEED = 0x6FFFFFFE
MAX_VERSION_RECORDS = 1 << 16  # a real library requires tens of versions
_GLIBC_VERSION = re.compile(r"^GLIBC_(\d+)\.(\d+)")


def glibc_needed(path: Path) -> tuple[int, int] | None:
    """The newest glibc symbol version (GLIBC_X.Y) one ELF library requires; None when it
    requires none (or is not ELF)."""
    with open(path, "rb") as f:
        return _glibc_in(f, _sections(f))


def _glibc_in(f: BinaryIO, sections: list[Section]) -> tuple[int, int] | None:
    found = _section(f, sections, _SHT_GNU_VERNEED, b".gnu.version_r")
    if found is None:
        return None
    records, strings = found
    newest, at, seen = None, 0, 0
    while True:
        if at + 16 > len(records):
            raise OSError("its .gnu.version_r records run past the section")
        _, count, _, aux, following = struct.unpack_from("<HHIII", records, at)
        there = at + aux
        for _ in range(count):
            seen += 1
            if there + 16 > len(records) or seen > MAX_VERSION_RECORDS:
                raise OSError("its .gnu.version_r records run past the section")
            _, _, _, name_at, next_aux = struct.unpack_from("<IHHII", records, there)
            version = _GLIBC_VERSION.match(_string(f, strings, name_at, "a symbol version"))
            if version:
                newest = max(newest or (0, 0), (int(version.group(1)), int(version.group(2))))
            if not next_aux:
                break
            there += next_aux
        if not following:
            return newest
        at += following


def _section(f: BinaryIO, sections: list[Section], sh_type: int, name: bytes
             ) -> tuple[bytes, tuple[int, int]] | None:
    """The bytes of the one section of `sh_type` (its usual `name`), read whole, and the
    (offset, size) of the string table its sh_link names, as the loader's DT_STRTAB does: not
    a section found by its name. None when the file has no section of that type or name; an
    OSError (unread) for two of that type, one of that name and another type, one outside the
    file or over MAX_DYNAMIC_BYTES, or a link that is no string table inside the file."""
    typed = [x for x in sections if x.sh_type == sh_type]
    named = [x for x in sections if x.name == name]
    if not typed and not named:
        return None
    label = name.decode()
    if len(typed) != 1 or any(x.sh_type != sh_type for x in named):
        raise OSError(f"its ELF {label} section is ambiguous ({len(typed)} of its type, "
                      f"{len(named)} of its name)")
    offset, size, link = typed[0].offset, typed[0].size, typed[0].link
    end = os.fstat(f.fileno()).st_size
    if size > MAX_DYNAMIC_BYTES or offset + size > end:
        raise OSError(f"its ELF {label} section is corrupt (outside the file or too large)")
    if link is None or link[0] != _SHT_STRTAB or link[1] + link[2] > end:
        raise OSError(f"its ELF {label} section links no string table inside the file")
    f.seek(offset)
    return f.read(size), (link[1], link[2])


def _string(f: BinaryIO, strings: tuple[int, int], at: int, what: str) -> str:
    """The string at offset `at` of .dynstr, as one printable word (a report quotes it)."""
    if at >= strings[1]:
        raise OSError(f"{what} of its dynamic section points outside .dynstr")
    f.seek(strings[0] + at)
    raw = f.read(min(_MAX_SONAME + 1, strings[1] - at))
    name = raw.split(b"\0", 1)[0].decode("ascii", "replace")
    return "".join(c if c.isprintable() and not c.isspace() else "?" for c in name[:_MAX_SONAME])


# lib<name>.so.<major>, or auditwheel's vendored copy lib<name>-<8 hex>.so.<major>
_SONAME = re.compile(r"^(lib[A-Za-z_]+)(?:-[0-9a-f]{8})?\.so\.(\d+)")


def cuda_linked(sonames: Iterable[str]) -> tuple[int, str] | None:
    """(major, soname) of the newest CUDA toolkit major among one library's `sonames`
    (libcudart.so.12: 12; nvidia.CUDA_SONAMES); None when none of them is a CUDA toolkit
    library."""
    found = [(int(m.group(2)), name) for name in sonames
             if (m := _SONAME.match(name)) and m.group(1) in CUDA_SONAMES]
    return max(found) if found else None


def _containers(data: mmap.mmap | bytes, start: int, end: int
                ) -> Iterator[tuple[int, int, tuple[int, int], int]]:
    """(kind, arch, code version, size) of every entry of the fatbin containers found by their
    magic in [start, end), its size the larger of its payload's and its decompressed size: a
    container whose header or first entry is not plausible is not one."""
    pos, seen = start, 0
    while seen < MAX_ENTRIES:
        pos = data.find(_MAGIC_BYTES, pos, end)
        if pos < 0 or pos + 16 > end:
            return
        _, version, header, payload = struct.unpack_from("<IHHQ", data, pos)
        stop = pos + header + payload
        if version != 1 or header != 16 or stop > end or payload < 64:
            pos += 4
            continue
        entry = pos + header
        while entry + 32 <= stop and seen < MAX_ENTRIES:
            kind, _, ehead, esize, _, minor, major, arch = struct.unpack_from("<HHIQQHHI", data,
                                                                             entry)
            if ehead < 64 or kind not in (_KIND_PTX, _KIND_SASS) or not 10 <= arch < 1000:
                break  # not an entry header: the rest of this container is not read
            seen += 1
            inflated = struct.unpack_from("<Q", data, entry + 56)[0] if entry + 64 <= stop else 0
            # a decompressed size over a terabyte is no size (the header is the lock's): only
            # a note quotes it, never a verdict
            yield kind, arch, (major, minor), max(esize, inflated if inflated < 1 << 40 else 0)
            entry += ehead + esize
        pos = max(stop, pos + 4)


def cuda_code(path: Path) -> CudaCode:
    """The CUDA architectures compiled into one ELF library: the fatbins in its .nv_fatbin
    section and those a library keeps as data (cuFFT's are in .ldata); an empty CudaCode when
    it is not 64-bit little-endian ELF or holds none. The data sections are mapped, not read:
    a scan for the magic touches each page once."""
    with open(path, "rb") as f:
        return _code_in(f, _sections(f))


def _code_in(f: BinaryIO, sections: list[Section]) -> CudaCode:
    sass: set[int] = set()
    ptx: dict[int, int] = {}
    isa: tuple[int, int] | None = None
    data_only = data_sections(sections)
    if not data_only or os.fstat(f.fileno()).st_size == 0:
        return CudaCode()
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for _, offset, size in data_only:
            for kind, arch, version, bytes_ in _containers(data, offset,
                                                           min(offset + size, len(data))):
                if kind == _KIND_SASS:
                    sass.add(arch)
                else:
                    ptx[arch] = ptx.get(arch, 0) + bytes_
                    isa = max(isa or version, version)
    return CudaCode(frozenset(sass), frozenset(ptx), isa, tuple(sorted(ptx.items())))


_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_|manylinux(1|2010|2014)_")
_LEGACY_MANYLINUX = {"1": (2, 5), "2010": (2, 12), "2014": (2, 17)}  # PEP 600's aliases


def manylinux_glibc(tags: Iterable[str]) -> tuple[int, int] | None:
    """The oldest glibc any of a wheel's platform tags accepts (PEP 600: manylinux_2_28_x86_64
    needs glibc 2.28; the legacy manylinux1/2010/2014 names are 2.5/2.12/2.17); None when no
    tag is a manylinux one (musllinux, any, macOS...)."""
    floors = []
    for tag in tags:
        for m in _MANYLINUX.finditer(tag):
            floors.append((int(m.group(1)), int(m.group(2))) if m.group(1)
                          else _LEGACY_MANYLINUX[m.group(3)])
    return min(floors) if floors else None


_CU_NAME = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d+)$|^jax-cuda(\d+)-(?:plugin|pjrt)$")
_CU_LOCAL = re.compile(r"^cu(\d+)(\d)(?![0-9])")  # cu130 -> 13, cu121 -> 12, cu92 -> 9


def named_cuda_major(name: str, version: str) -> int | None:
    """The CUDA major a distribution's own name and version say: a -cuNN or jax-cudaNN name
    (nvidia-cudnn-cu13, jax-cuda12-plugin), a +cuXYZ local version (torch 2.9.0+cu130: 13,
    mmcv 2.1.0+cu121: 12; a major under 9 is no CUDA's), or the version of a toolkit component
    versioned as the toolkit (nvidia-cublas 13.1.1.3: nvidia.TOOLKIT_VERSIONED; not the 0.0.1
    placeholders some of these names carry); None when they say nothing (a CPU build, cuFFT's
    own numbering). The name is canonicalised and the version read as packaging reads it
    (+CU130, 1!13.0.0, v13.0.96, 13), as written where it is not PEP 440."""
    name = canonicalize_name(name)
    found = _CU_NAME.match(name)
    if found:
        return int(found.group(1) or found.group(2))
    try:
        parsed = Version(version)
        local, major = parsed.local or "", parsed.release[0]
    except InvalidVersion:
        text = version.strip().lower()
        local = text.partition("+")[2]
        first = re.match(r"v?(\d+)", text)
        major = int(first.group(1)) if first else None
    cuda = _CU_LOCAL.match(local)
    if cuda and int(cuda.group(1)) >= 9:
        return int(cuda.group(1))
    if name in TOOLKIT_VERSIONED and major is not None and major >= 9:
        return major
    return None


def cuda_major_needed(version: str, requires: Iterable[str], name: str = "") -> int | None:
    """The CUDA major a distribution is built for: the newest its own name and version
    (named_cuda_major: torch 2.9.0+cu130, nvidia-cudnn-cu13, nvidia-cublas 13.1.1.3) or its
    requirements (nvidia-cudnn-cu13, cuda-toolkit==13.0.3, jax-cuda12-plugin,
    nvidia-cublas==12.9.1.4) say; None for a CPU build or nothing said."""
    own = named_cuda_major(name, version)
    majors = [own] if own else []
    for req in requires:
        text = req.split(";")[0].strip().lower()
        pinned = re.search(r"==\s*([0-9][^,\s]*)", text)
        named = named_cuda_major(re.split(r"[\[<>=!~ (]", text, maxsplit=1)[0],
                                 pinned.group(1) if pinned else "")
        if named:
            majors.append(named)
    return max(majors) if majors else None
