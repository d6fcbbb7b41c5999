"""The probes (lockguard/probes/) run for real: each as a file with this interpreter or a fresh
venv's (how the host runs them), the container ones also as `python -c` their bundled program
(how an image runs them), in a venv whose site holds fake distributions and fake frameworks
with real shared libraries, so that each branch of the stack probe says what it found; and what
they print judged by the host's code (conformance_problems, stack_problems).

References are independent of the probes: packaging's default_environment for the markers,
this interpreter's own answers, importlib's MAGIC_NUMBER for a .pyc header.
"""

from __future__ import annotations

import glob
import json
import marshal
import os
import platform
import subprocess
import sys
import sysconfig
import textwrap
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import pytest
from packaging.markers import default_environment

from lockguard.envs.base import interpreter_tag
from lockguard.envs.docker.conformance import conformance_problems
from lockguard.envs.docker.stack import stack_problems
from lockguard.envs.docker.wheelhouse import Target, expected_pins
from lockguard.locks.parser import parse_lock_text
from lockguard.locks.target import _other_target
from lockguard.probes import (CACHE_TAG, COMPILE_BYTECODE, CONFORMANCE, PLATFORM_INFO,
                              PROBES_DIR, STACK, Probe)

PYTHON = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def run(argv: list[str], cwd: Path | None = None) -> str:
    """The probe's stdout; the test fails with its stderr when it exits non-zero."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def in_image(python: Path, probe: Probe, *args: str, cwd: Path) -> dict:
    """What an image does (engine.probe): `python -c` the bundled program, with site."""
    return json.loads(run([str(python), "-c", probe.program(), *args], cwd=cwd))


def as_file(python: Path, probe: Probe, *args: str) -> dict:
    """The probe run as its file with site (a venv's interpreter, as in an image)."""
    return json.loads(run([str(python), str(probe.path), *args]))


# ---------------------------------------------------------------------------------------------
# Host probes: this interpreter, isolated
# ---------------------------------------------------------------------------------------------


def test_platform_info_is_what_packaging_and_pip_see_of_the_interpreter(tmp_path):
    info = json.loads(run(PLATFORM_INFO.argv(sys.executable)))
    assert info["markers"] == dict(default_environment())
    assert info["python"] == "%d.%d" % sys.version_info[:2]
    assert info["arch"] == platform.machine()
    assert info["implementation"] == sys.implementation.name
    assert info["glibc"] == platform.libc_ver()[1]
    # Bundled for `python -c` (no sibling to ship), the same answer.
    assert json.loads(run([sys.executable, "-I", "-S", "-c", PLATFORM_INFO.program()],
                          cwd=tmp_path)) == info
    assert Target.from_probe(info).python == info["python"]


def test_the_cache_tag_is_the_interpreters():
    assert run(CACHE_TAG.argv(sys.executable)).strip() == sys.implementation.cache_tag


def test_host_probes_run_isolated_from_the_probes_folder():
    argv = PLATFORM_INFO.argv("/x/python", "a")
    assert argv == ["/x/python", "-I", "-S", str(PROBES_DIR / "platform_info.py"), "a"]
    assert Path(argv[3]).is_file()


def test_compile_bytecode_writes_timestamp_pycs_and_names_what_does_not_compile(tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text("VALUE = 6 * 7\n")
    bad.write_text("def (:\n")
    pairs = [[str(good), str(tmp_path / "out" / "good.pyc")],
             [str(bad), str(tmp_path / "out" / "bad.pyc")]]
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(pairs))
    out = run(COMPILE_BYTECODE.argv(sys.executable, str(listed)))
    assert out.splitlines() == [f"{pairs[1]!r}: PyCompileError"]
    data = (tmp_path / "out" / "good.pyc").read_bytes()
    st = good.stat()
    assert data[:16] == MAGIC_NUMBER + (0).to_bytes(4, "little") \
        + int(st.st_mtime).to_bytes(4, "little") + st.st_size.to_bytes(4, "little")
    namespace: dict = {}
    exec(marshal.loads(data[16:]), namespace)
    assert namespace["VALUE"] == 42
    assert not (tmp_path / "out" / "bad.pyc").exists()


# ---------------------------------------------------------------------------------------------
# A venv with fake distributions: the target interpreter of the container probes
# ---------------------------------------------------------------------------------------------


def a_shared_library() -> Path:
    """A real shared library that loads into any interpreter of this one's build (one of its
    own extension modules: dlopen resolves their Py* symbols in the process)."""
    found = sorted(glob.glob(os.path.join(sysconfig.get_config_var("DESTSHARED"), "*.so")))
    preferred = [p for p in found if os.path.basename(p).startswith(("_json", "_bisect"))]
    assert found, "this interpreter has no extension module to copy"
    return Path((preferred or found)[0])


def dist(site: Path, name: str, version: str, files: dict[str, str | bytes],
         requires: tuple[str, ...] = ()) -> None:
    """A distribution installed as a wheel installs it: its files, METADATA and RECORD."""
    for rel, content in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content))
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    record = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in record))


# The jax CUDA plugin's surface the stack probe uses: what its initialize() calls, the versions
# its extension reports (cuSPARSE's fails), its PJRT library.
JAX_PLUGIN = """
import os, types
def _load_nvidia_libraries():
    pass
def _import_extensions():
    global cuda_versions
    def fail():
        raise RuntimeError("no cusparse here")
    cuda_versions = types.SimpleNamespace(
        cuda_runtime_get_version=lambda: 13000, cuda_runtime_build_version=lambda: 13000,
        cudnn_get_version=lambda: 92400, cudnn_build_version=lambda: 92000,
        cublas_get_version=lambda: 130101, cublas_build_version=lambda: 130100,
        cufft_get_version=lambda: 12000, cufft_build_version=lambda: 12000,
        cusparse_get_version=fail, cusparse_build_version=lambda: 12600)
def _get_library_path():
    return os.path.join(os.path.dirname(__file__), "xla_cuda_plugin.so")
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv (no pip) whose site holds fake frameworks and stack wheels: torch that
    cannot import for want of cuDNN, jax with a CUDA plugin, tensorflow's CUDA build, libtpu,
    nvidia-* wheels (one library real, one not a library), and a framework that fails when it
    finds a probe's module or folder where it could import them."""
    root = tmp_path_factory.mktemp("probe-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
                   check=True, timeout=120)
    site = root / "venv" / "lib" / PYTHON / "site-packages"
    lib = a_shared_library().read_bytes()
    dist(site, "torch", "2.14.1+cu130", {
        "torch/__init__.py": "raise ImportError('libcudnn.so.9: cannot open shared object "
                             "file: No such file or directory')\n",
        "torch/version.py": "__version__ = '2.14.1+cu130'\ncuda = '13.0'\n"},
        requires=("nvidia-cudnn-cu13==9.24.0.1; platform_system == 'Linux'",))
    dist(site, "nvidia-cuda-runtime-cu13", "13.0.96",
         {"nvidia/cuda_runtime/lib/libcudart.so.13": lib})
    dist(site, "nvidia-cudnn-cu13", "9.24.0.1",
         {"nvidia/cudnn/lib/libcudnn.so.9": b"not a library"})
    dist(site, "jax", "0.10.2", {
        "jax/__init__.py": "__version__ = '0.10.2'\n",
        "jax/_src/__init__.py": "",
        "jax/_src/lib/__init__.py": "",
        "jax/_src/lib/xla_client.py": "def load_pjrt_plugin_dynamically(name, path):\n"
                                      "    return 1\n"},
        requires=("jax-cuda13-plugin==0.10.2; extra == 'cuda13'",))
    dist(site, "jax-cuda13-plugin", "0.10.2", {
        "jax_plugins/xla_cuda13/__init__.py": JAX_PLUGIN,
        "jax_plugins/xla_cuda13/xla_cuda_plugin.so": lib},
        requires=("nvidia-cuda-runtime-cu13>=13.0; extra == 'with-cuda'",))
    dist(site, "tensorflow", "2.21.0", {
        "tensorflow/__init__.py": "from . import sysconfig\n__version__ = '2.21.0'\n",
        "tensorflow/sysconfig.py": "def get_build_info():\n"
                                   "    return {'cuda_version': '12.5', 'is_cuda_build': True}\n",
        "tensorflow/libtensorflow_framework.so.2": lib})
    dist(site, "fakefw-dist", "1.2.3", {"fakefw/__init__.py": "__version__ = '1.2.3'\n"},
         requires=("libtpu==0.0.9; extra == 'tpu'",))
    dist(site, "libtpu", "0.0.9", {
        "libtpu/__init__.py": "import os\ndef get_library_path():\n"
                              "    return os.path.join(os.path.dirname(__file__), 'libtpu.so')\n",
        "libtpu/libtpu.so": lib})
    dist(site, "spyfw", "1.0", {"spyfw/__init__.py": """
        import importlib.util
        if importlib.util.find_spec("platform_info") is not None:
            raise ImportError("a probe's module is where the framework could import it")
        """})
    return root / "venv" / "bin" / "python"


def test_conformance_reports_the_site_and_whether_the_framework_imports(venv, tmp_path):
    report = in_image(venv, CONFORMANCE, "spyfw", cwd=tmp_path)
    assert report == as_file(venv, CONFORMANCE, "spyfw")
    assert report["import_error"] is None  # nothing of the probe's left where it could import
    assert report["dists"] == {"torch": "2.14.1+cu130", "nvidia-cuda-runtime-cu13": "13.0.96",
                               "nvidia-cudnn-cu13": "9.24.0.1", "jax": "0.10.2",
                               "jax-cuda13-plugin": "0.10.2", "tensorflow": "2.21.0",
                               "fakefw-dist": "1.2.3", "libtpu": "0.0.9", "spyfw": "1.0"}
    assert report["markers"] == dict(default_environment())  # same base interpreter
    broken = in_image(venv, CONFORMANCE, "torch", cwd=tmp_path)["import_error"]
    assert broken == "ImportError: libcudnn.so.9: cannot open shared object file: No such " \
                     "file or directory"
    # Judged on the host: the lock that pins exactly these, and one that differs.
    lock = parse_lock_text("".join(f"{n}=={v}\n" for n, v in report["dists"].items()), "l.txt")
    target = Target.from_probe(report)
    assert conformance_problems(expected_pins(lock, target), report["dists"]) == []
    other = parse_lock_text("spyfw==1.1\n", "other.txt")
    assert conformance_problems(expected_pins(other, target), {"spyfw": "1.0"}) == \
        ["spyfw: lock 1.1, image 1.0"]


def test_the_stack_probe_on_a_torch_that_cannot_load_its_cudnn(venv, tmp_path):
    report = in_image(venv, STACK, "torch", "cuda", cwd=tmp_path)
    assert report["module"] == "torch" and report["accelerator"] == "cuda"
    # What torch was built for, from its version file although it does not import.
    assert report["view"] == {"version": "2.14.1+cu130", "cuda_build": "13.0"}
    assert report["errors"][0] == ("import torch: ImportError: libcudnn.so.9: cannot open "
                                   "shared object file: No such file or directory")
    libraries = {e["file"]: e for e in report["libraries"]}
    assert set(libraries) == {"nvidia/cuda_runtime/lib/libcudart.so.13",
                              "nvidia/cudnn/lib/libcudnn.so.9"}
    runtime = libraries["nvidia/cuda_runtime/lib/libcudart.so.13"]
    assert runtime == {"file": "nvidia/cuda_runtime/lib/libcudart.so.13",
                       "dist": "nvidia-cuda-runtime-cu13", "version": "13.0.96", "error": None}
    cudnn = libraries["nvidia/cudnn/lib/libcudnn.so.9"]
    assert cudnn["dist"] == "nvidia-cudnn-cu13" and "libcudnn.so.9" in cudnn["error"]
    # Step 4 asked the copy step 3 loaded, which has no cudaRuntimeGetVersion.
    assert report["errors"][1].startswith("cudart version: AttributeError: ")
    assert "cudaRuntimeGetVersion" in report["errors"][1] and len(report["errors"]) == 2
    assert report["versions"] == {}
    # torch's, and a jax CUDA plugin's whatever the framework (as the probe always did).
    assert report["requires"] == {"torch": ["2.14.1+cu130", [
        "nvidia-cudnn-cu13==9.24.0.1; platform_system == 'Linux'"]], "jax-cuda13-plugin": [
        "0.10.2", ["nvidia-cuda-runtime-cu13>=13.0; extra == 'with-cuda'"]]}
    assert report["markers"] == dict(default_environment())
    assert not any(e["file"].startswith("nvidia/") for e in report["loaded"])
    # Judged on the host, each problem names its wheel and library.
    lock = parse_lock_text("torch==2.14.1+cu130\nnvidia-cuda-runtime-cu13==13.0.96\n"
                           "nvidia-cudnn-cu13==9.24.0.1\n", "cuda.txt")
    _, problems = stack_problems(report, lock, "torch")
    assert problems[0].startswith("import torch: ImportError: libcudnn.so.9")
    assert any(p.startswith("libcudnn.so.9 from nvidia-cudnn-cu13==9.24.0.1 does not load")
               for p in problems)
    # Run as its file, the same report but for the interpreter's own modules it loaded.
    as_a_file = as_file(venv, STACK, "torch", "cuda")
    assert {**as_a_file, "loaded": None} == {**report, "loaded": None}


def test_the_stack_probe_follows_jax_s_cuda_plugin(venv, tmp_path):
    report = in_image(venv, STACK, "jax", "cuda", cwd=tmp_path)
    assert report["view"] == {
        "version": "0.10.2", "plugin": "xla_cuda13", "cuda": 13000, "cuda_build": 13000,
        "cudnn": 92400, "cudnn_build": 92000, "cublas": 130101, "cublas_build": 130100,
        "cufft": 12000, "cufft_build": 12000, "cusparse_build": 12600,
        "pjrt": "xla_cuda_plugin.so"}
    assert report["errors"][0] == "cusparse: RuntimeError: no cusparse here"
    files = [e["file"] for e in report["libraries"]]
    assert files[0] == "jax_plugins/xla_cuda13/xla_cuda_plugin.so"
    assert "nvidia/cuda_runtime/lib/libcudart.so.13" in files
    assert report["libraries"][0]["dist"] == "jax-cuda13-plugin"
    assert report["libraries"][0]["error"] is None
    # jax itself and its CUDA plugin, found by name although no module of jax names it.
    assert sorted(report["requires"]) == ["jax", "jax-cuda13-plugin"]


def test_the_stack_probe_reads_tensorflow_s_build_info(venv, tmp_path):
    report = in_image(venv, STACK, "tensorflow", "cuda", cwd=tmp_path)
    assert report["view"] == {"version": "2.21.0", "cuda_build": "12.5", "is_cuda_build": True,
                              "build_info": {"cuda_version": "12.5", "is_cuda_build": True}}
    files = [e["file"] for e in report["libraries"]]
    assert files[0] == "tensorflow/libtensorflow_framework.so.2"
    assert report["libraries"][0]["error"] is None


def test_the_stack_probe_finds_libtpu_and_its_wheel(venv, tmp_path):
    report = in_image(venv, STACK, "fakefw", "tpu", cwd=tmp_path)
    assert report["view"] == {"version": "1.2.3", "libtpu_path": "libtpu/libtpu.so"}
    assert report["errors"] == []
    assert report["libraries"] == [{"file": "libtpu/libtpu.so", "dist": "libtpu",
                                    "version": "0.0.9", "error": None}]
    assert report["versions"] == {}  # asked of CUDA's libraries only
    assert report["requires"]["fakefw-dist"] == ["1.2.3", ["libtpu==0.0.9; extra == 'tpu'"]]
    lock = parse_lock_text("fakefw-dist==1.2.3\nlibtpu==0.0.8\n", "tpu.txt")
    stack, problems = stack_problems(report, lock, "fakefw")
    assert problems == ["fakefw-dist 1.2.3 requires libtpu==0.0.9, the lock pins libtpu==0.0.8"]


def test_another_interpreter_s_tag_and_markers_come_from_the_platform_probe(venv):
    """A venv's interpreter (another path to this one's base): the same tag and markers as
    this process computes for itself."""
    assert interpreter_tag(str(venv)) == interpreter_tag(sys.executable)
    assert dict(_other_target(str(venv)).markers) == dict(default_environment())


def test_a_probe_that_fails_says_so_on_stderr(venv, tmp_path):
    """A probe's own failure is a non-zero exit with its traceback naming the probe's file (the
    bundle compiles it under its name), not a JSON line the host could take for an answer."""
    done = subprocess.run([str(venv), "-c", STACK.program()], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode != 0 and done.stdout == ""
    assert 'File "stack.py"' in done.stderr and "IndexError" in done.stderr


def test_every_probe_file_is_one_of_the_declared_probes():
    declared = {p.name for p in (PLATFORM_INFO, CONFORMANCE, STACK, COMPILE_BYTECODE,
                                 CACHE_TAG)}
    files = {p.stem for p in PROBES_DIR.glob("*.py")} - {"__init__", "bundle"}
    assert files == declared


def test_the_probes_are_clean_of_pyflakes_warnings():
    from pyflakes.api import checkPath
    from pyflakes.reporter import Reporter

    class Collect(Reporter):
        def __init__(self):
            self.found: list[str] = []

        def unexpectedError(self, filename, message):
            self.found.append(f"{filename}: {message}")

        def syntaxError(self, filename, msg, lineno, offset, text):
            self.found.append(f"{filename}:{lineno}: {msg}")

        def flake(self, message):
            self.found.append(str(message))

    reporter = Collect()
    for path in sorted(PROBES_DIR.glob("*.py")):
        checkPath(str(path), reporter)
    assert reporter.found == []
