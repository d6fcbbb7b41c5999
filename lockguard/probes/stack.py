"""A cuda or tpu image's accelerator stack, asked in the image with its venv's interpreter and
no accelerator: `stack.py MODULE ACCELERATOR` (the framework's module, cuda or tpu). It

1. imports the framework and has it load its stack as it does on a GPU host (torch's import,
   jax's CUDA plugin `initialize` steps, libtpu through jax's own PJRT loader), and records what
   it says: the CUDA it was built for, the cuDNN and NCCL it loaded;
2. reads /proc/self/maps: which file each loaded library came from, and which wheel installed
   it (a system copy on the base would show here, not as the lock's);
3. loads every other shared library of the stack's wheels with RTLD_NOW, so that a missing
   dependency or symbol fails now, not in the middle of a GPU run;
4. asks the loaded libraries their own versions (cudaRuntimeGetVersion, cudnnGetVersion,
   cublasGetProperty, ncclGetVersion: none needs a GPU).

Stdlib and the framework only. Prints one JSON line: {"module", "accelerator", "view" (what the
framework says), "errors", "loaded", "libraries", "versions", "requires" (the framework's
distributions' requirements), "markers"}; lockguard/envs/docker/stack.py judges it.
"""

import ctypes
import glob
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import re
import runpy
import sys
import sysconfig

# The shared part beside this file (python -I leaves the script's folder off sys.path), or the
# module bundle.run defined (python -c). This folder then leaves sys.path (where python itself
# put it, too, for `python stack.py`) and the module sys.modules, so that nothing the
# framework imports finds a module of ours by name.
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
from platform_info import platform_info  # noqa: E402
sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) != HERE]
sys.modules.pop("platform_info", None)

SHARED = re.compile(r"\.so(\.[0-9][0-9.]*)?$")  # libx.so, libx.so.13, libx.so.13.0: not x.sort.h


def first_line(exc):
    """An exception as 'Type: its first line' (300 characters at most)."""
    return "%s: %s" % (type(exc).__name__, (str(exc).splitlines() or [""])[0][:300])


class Findings:
    """The report as the probe fills it (`out`, printed at the end), with what every step
    needs: the venv's site-packages and which distribution installed each shared library."""

    def __init__(self, module, accelerator):
        self.site = sysconfig.get_paths()["purelib"]
        self.out = {"module": module, "accelerator": accelerator, "view": {}, "errors": [],
                    "loaded": [], "libraries": [], "versions": {}, "requires": {},
                    "markers": platform_info()["markers"]}
        self.view = self.out["view"]
        self.errors = self.out["errors"]
        # Which distribution installed each shared library (by real path).
        self.owners = {}
        for dist in md.distributions():
            name = dist.metadata["Name"]
            for f in dist.files or ():
                if SHARED.search(str(f)):
                    self.owners[os.path.realpath(str(dist.locate_file(f)))] = [name, dist.version]

    def where(self, path):
        """A library's file (relative to site-packages when inside it) and its distribution."""
        real = os.path.realpath(path)
        rel = os.path.relpath(real, self.site) if real.startswith(self.site + os.sep) else real
        owner = self.owners.get(real) or [None, None]
        return {"file": rel, "dist": owner[0], "version": owner[1]}

    def attempt(self, key, fn):
        """view[key] = fn(), or its failure among the errors."""
        try:
            self.view[key] = fn()
        except BaseException as exc:
            self.errors.append("%s: %s" % (key, first_line(exc)))


def import_framework(findings, module):
    """The framework's module, or None (its import error recorded; for torch, what its version
    file says it was built for, even when it cannot import)."""
    try:
        fw = importlib.import_module(module)
        findings.view["version"] = getattr(fw, "__version__", None)
        return fw
    except BaseException as exc:
        findings.errors.append("import %s: %s" % (module, first_line(exc)))
    if module == "torch":
        try:
            spec = importlib.util.find_spec("torch")
            found = runpy.run_path(os.path.join(os.path.dirname(spec.origin), "version.py"))
            findings.view["version"] = found.get("__version__")
            findings.view["cuda_build"] = found.get("cuda")
        except BaseException:
            pass
    return None


def torch_cuda(findings):
    """torch's CUDA build, cuDNN and NCCL; its lib folder."""
    import torch
    findings.view["cuda_build"] = torch.version.cuda
    findings.attempt("cudnn", lambda: torch.backends.cudnn.version())
    findings.attempt("nccl", lambda: ".".join(str(x) for x in torch.cuda.nccl.version()))
    return [os.path.join(os.path.dirname(torch.__file__), "lib")]


def jax_cuda_plugin(findings, name):
    """The plugin module after what its initialize() does first (load the nvidia wheels'
    libraries and its version-reporting extension; jaxlib then loads the PJRT plugin itself),
    or None with the error recorded."""
    try:
        plugin = importlib.import_module(name)
        plugin._load_nvidia_libraries()
        plugin._import_extensions()
        return plugin
    except BaseException as exc:
        findings.errors.append("%s: %s" % (name, first_line(exc)))
        return None


def jax_cuda(findings):
    """jax's CUDA plugin: the versions it reports and was built against, its PJRT plugin
    loaded; the plugin's folders (none without a plugin)."""
    site, view = findings.site, findings.view
    plugins = sorted(p for p in glob.glob(os.path.join(site, "jax_plugins", "xla_cuda*"))
                     if os.path.isdir(p))
    view["plugin"] = os.path.basename(plugins[-1]) if plugins else None
    if not plugins:
        return []
    name = "jax_plugins." + os.path.basename(plugins[-1])
    plugin = jax_cuda_plugin(findings, name)
    versions = getattr(plugin, "cuda_versions", None) if plugin else None
    if plugin is not None and versions is None:
        findings.errors.append("%s: its CUDA extension (jax_cudaNN_plugin) does not import"
                               % name)
    if versions is not None:
        for key, get, build in (
                ("cuda", "cuda_runtime_get_version", "cuda_runtime_build_version"),
                ("cudnn", "cudnn_get_version", "cudnn_build_version"),
                ("cublas", "cublas_get_version", "cublas_build_version"),
                ("cufft", "cufft_get_version", "cufft_build_version"),
                ("cusparse", "cusparse_get_version", "cusparse_build_version")):
            findings.attempt(key, getattr(versions, get))
            findings.attempt(key + "_build", getattr(versions, build))
    if plugin is not None:
        from jax._src.lib import xla_client
        path = plugin._get_library_path()
        findings.attempt("pjrt", lambda: bool(xla_client.load_pjrt_plugin_dynamically(
            "cuda", str(path))) and os.path.basename(str(path)))
    return plugins + glob.glob(os.path.join(site, "jax_cuda*_plugin"))


def tensorflow_cuda(findings, fw):
    """tensorflow's build info (its CUDA, whether a CUDA build); its package folder."""
    findings.attempt("build_info", lambda: dict(fw.sysconfig.get_build_info()))
    info = findings.view.get("build_info") or {}
    findings.view["cuda_build"] = info.get("cuda_version")
    findings.view["is_cuda_build"] = bool(info.get("is_cuda_build"))
    return [os.path.dirname(fw.__file__)]


def tpu(findings, module):
    """libtpu's library, loaded by jax's own PJRT loader for jax; libtpu's folder."""
    try:
        import libtpu
        findings.view["libtpu_path"] = findings.where(libtpu.get_library_path())["file"]
    except BaseException as exc:
        findings.errors.append("import libtpu: %s" % first_line(exc))
    if module == "jax" and "libtpu_path" in findings.view:
        from jax._src import cloud_tpu_init
        from jax._src.lib import xla_client
        findings.attempt("pjrt", lambda: bool(xla_client.load_pjrt_plugin_dynamically(
            "tpu", cloud_tpu_init.get_tpu_library_path())) and "libtpu")
    return [os.path.join(findings.site, "libtpu")]


def load_stack(findings, fw, module, accelerator):
    """Step 1 for the framework and accelerator: the wheels' folders whose libraries the
    framework may load."""
    roots = []
    if fw is not None and module == "torch" and accelerator == "cuda":
        roots = torch_cuda(findings)
    elif fw is not None and module == "jax" and accelerator == "cuda":
        roots = jax_cuda(findings)
    elif fw is not None and module == "tensorflow" and accelerator == "cuda":
        roots = tensorflow_cuda(findings, fw)
    elif fw is not None and accelerator == "tpu":
        roots = tpu(findings, module)
    if accelerator == "cuda":
        roots += sorted(glob.glob(os.path.join(findings.site, "nvidia", "*")))
    return roots


def requirements(findings, module):
    """What the framework's distributions (and jax's plugins) declare they need of the stack:
    requires[name] = [version, requirements]."""
    names = set(md.packages_distributions().get(module, []))
    for dist in md.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().replace("_", "-").startswith(("jax-cuda", "jax-rocm")):
            names.add(name)
    for name in sorted(names):
        try:
            findings.out["requires"][name] = [md.version(name), md.requires(name) or []]
        except md.PackageNotFoundError:
            pass


def mapped():
    """The shared libraries this process has loaded, from /proc/self/maps ([] elsewhere)."""
    found = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and SHARED.search(parts[5].strip()):
                    found[parts[5].strip()] = True
    except OSError:
        pass
    return list(found)


def load_libraries(findings, roots, loaded):
    """Step 3: every other library of the stack, loaded as the framework would load it later;
    each with its error, or None."""
    seen = set(os.path.realpath(p) for p in loaded)
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "**", "*.so*"), recursive=True)):
            real = os.path.realpath(path)
            if real in seen or not os.path.isfile(real) or not SHARED.search(path):
                continue
            seen.add(real)
            entry = findings.where(path)
            try:
                ctypes.CDLL(path)
                entry["error"] = None
            except OSError as exc:
                entry["error"] = (str(exc).splitlines() or [""])[0][:300]
            findings.out["libraries"].append(entry)


def loaded_path(stem):
    """The loaded copy of library `stem` ("libcudart"), or None."""
    for path in mapped():
        base = path.rsplit("/", 1)[-1]
        if base.startswith(stem + ".so"):
            return path
    return None


def ask(findings, key, stem, call):
    """Step 4: versions[key] = call(the loaded copy of `stem`), and versions[key_file] where it
    is; nothing when `stem` is not loaded."""
    path = loaded_path(stem)
    if path is None:
        return
    try:
        findings.out["versions"][key] = call(ctypes.CDLL(path))
        findings.out["versions"][key + "_file"] = findings.where(path)
    except BaseException as exc:
        findings.errors.append("%s version: %s" % (key, first_line(exc)))


def cudart(lib):
    """The CUDA runtime's version (13000), or None."""
    v = ctypes.c_int(0)
    status = lib.cudaRuntimeGetVersion(ctypes.byref(v))
    return v.value if status == 0 else None


def cudnn(lib):
    """cuDNN's version (92400)."""
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    return int(lib.cudnnGetVersion())


def cublas(lib):
    """cuBLAS's [major, minor, patch], or None."""
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        v = ctypes.c_int(0)
        if lib.cublasGetProperty(prop, ctypes.byref(v)) != 0:
            return None
        parts.append(v.value)
    return parts


def nccl(lib):
    """NCCL's version (23007), or None."""
    v = ctypes.c_int(0)
    return v.value if lib.ncclGetVersion(ctypes.byref(v)) == 0 else None


def main(module, accelerator):
    """The whole report, steps 1 to 4, in the order each needs the one before."""
    findings = Findings(module, accelerator)
    fw = import_framework(findings, module)
    roots = load_stack(findings, fw, module, accelerator)
    requirements(findings, module)
    # What the framework loaded, and from where (before step 3 loads the rest).
    loaded = mapped()
    findings.out["loaded"] = [dict(findings.where(p), path=p) for p in loaded]
    load_libraries(findings, roots, loaded)
    if accelerator == "cuda":  # from the copies in this process, step 3's included
        ask(findings, "cudart", "libcudart", cudart)
        ask(findings, "cudnn", "libcudnn", cudnn)
        ask(findings, "cublas", "libcublas", cublas)
        ask(findings, "nccl", "libnccl", nccl)
    return findings.out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
