"""Which of lockguard's environment variables its children see: the one allowlist.

A training runs user code and every wheel of a lock (a `.pth` file runs at interpreter start),
and a lock-only pull request can change those wheels; installers and resolvers fetch what the
lock names, and under `allow_sdist` run its build code. None of them may read what the CI job
holds for other purposes (GITHUB_TOKEN, ACTIONS_RUNTIME_TOKEN, AWS_SECRET_ACCESS_KEY, ...), so
none inherits lockguard's environment: each gets the variables of the families below that its
kind of process needs, and nothing else. An unknown variable is withheld; that is the point.

    trainings (the harness: venv, local)      TRAINING
    installers, resolvers, `pip index`        TRAINING + INSTALL (+ LOCKGUARD_INSTALLER_ENV)
    the `docker run` client                   TRAINING + DOCKER_CLIENT
    inside a container                        CONTAINER (its paths are the image's, not ours)

A family that admits a prefix (OMP_*, PIP_*) never admits a name one of whose parts reads as a
credential (TOKEN, SECRET, PASSWORD, KEY, ...): a prefix shared by accident (NVIDIA_API_KEY
beside NVIDIA_VISIBLE_DEVICES) cannot carry a secret through. Names given exactly are passed as
they are (PIP_INDEX_URL may hold an index's credentials: the installer needs them, a training
never sees them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Variables named in LOCKGUARD_INSTALLER_ENV (whitespace or comma separated) are passed to the
# installers and resolvers too, never to a training: an index whose credential helper needs a
# variable of its own (a keyring plugin reading AWS_PROFILE, say).
INSTALLER_ENV = "LOCKGUARD_INSTALLER_ENV"

_CREDENTIAL_PART = re.compile(
    r"(?:^|_)(?:TOKEN|TOKENS|SECRET|SECRETS|PASSWORD|PASSWD|PASS|PWD|KEY|KEYS|APIKEY|AUTH|"
    r"CREDENTIAL|CREDENTIALS|CRED|CREDS|COOKIE|SESSION|SIGNATURE|PRIVATE)(?:_|$)")


@dataclass(frozen=True)
class Family:
    """Variables passed for one reason: exact names, and prefixes (credential-like names
    excluded, see the module docstring)."""

    name: str
    why: str
    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    def admits(self, key: str) -> bool:
        """Whether this family passes variable `key`: a name listed exactly, or one under a
        prefix that has no credential-like part (TOKEN, SECRET, KEY, ...)."""
        if key in self.names:
            return True
        return key.startswith(self.prefixes) and not _CREDENTIAL_PART.search(key.upper())


def _family(name: str, why: str, names: Iterable[str] = (), prefixes: Iterable[str] = ()
            ) -> Family:
    return Family(name, why, frozenset(names), tuple(prefixes))


SYSTEM = _family(
    "system", "where programs, libraries, the home directory and temporary files are: "
    "torch.compile runs a C++ compiler found on PATH (or named by CC/CXX), many GPU hosts "
    "find the driver's libraries through LD_LIBRARY_PATH, caches live under HOME",
    ["PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TMP", "TEMP", "LD_LIBRARY_PATH", "CC", "CXX",
     "XDG_CACHE_HOME"])
LOCALE = _family(
    "locale", "how text is encoded and time is told",
    ["LANG", "LANGUAGE", "TZ", "PYTHONIOENCODING", "PYTHONUTF8"], ["LC_"])
THREADS = _family(
    "threads", "thread pools and their affinity (the harness pins the pool sizes itself)",
    ["GOTO_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"],
    ["OMP_", "MKL_", "OPENBLAS_", "KMP_", "BLIS_", "GOMP_", "NUMEXPR_"])
ACCELERATORS = _family(
    "accelerators", "which devices a run may use and how their runtimes behave",
    ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_TF32_OVERRIDE",
     "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "LIBTPU_INIT_ARGS"],
    ["CUDA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "NCCL_", "HSA_", "ROCM_", "TPU_"])
FRAMEWORK_SETTINGS = _family(
    "frameworks", "the frameworks' own settings, as a user runs them (several shape numerics and "
    "are recorded in the fingerprint), and the model hubs' caches and offline switches (their "
    "tokens excluded, as every credential-like name is); TensorFlow's are named one by one, "
    "because TF_ is Terraform's prefix too (TF_VAR_*, TF_TOKEN_*)",
    ["TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE",
     "TF_ENABLE_ONEDNN_OPTS", "TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC",
     "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "TF_GPU_THREAD_MODE", "TF_XLA_FLAGS",
     "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_USE_LEGACY_KERAS"],
    ["XLA_", "JAX_", "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "PYTORCH_", "TRITON_", "KERAS_",
     "HF_", "TRANSFORMERS_"])
# Forwarded into containers, as they were before this module: the variables that change
# numerics. Everything else in TRAINING is a host fact (paths, the host's device numbering).
NUMERICS = _family(
    "numerics", "variables that change numerics: set on the host, they reach a container as "
    "they reach a venv",
    ["CUBLAS_WORKSPACE_CONFIG", "XLA_FLAGS", "TF_DETERMINISTIC_OPS", "TF_ENABLE_ONEDNN_OPTS",
     "JAX_ENABLE_X64", "JAX_PLATFORMS", "KMP_DETERMINISTIC_REDUCTION", "OPENBLAS_CORETYPE"])

PROXIES = _family(
    "proxies", "how the network is reached (a proxy URL may carry the proxy's credentials: the "
    "install needs them)",
    ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
     "all_proxy", "no_proxy"])
CERTIFICATES = _family(
    "certificates", "which certificate authorities TLS trusts (a company's index or proxy)",
    ["SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
PIP = _family(
    "pip", "pip's own configuration, as pip.conf holds it; where that file is (XDG_CONFIG_*); "
    "PIP_INDEX_URL may carry the index's credentials",
    ["XDG_CONFIG_HOME", "XDG_CONFIG_DIRS"], ["PIP_"])
# uv's environment settings that change how it fetches, caches and reports, never what it
# installs or whether it builds: passed on. Every other UV_* variable is not (UV_INDEX_URL,
# UV_NO_BINARY, UV_OVERRIDE, UV_TORCH_BACKEND, UV_NO_VERIFY_HASHES, UV_CONFIG_FILE, ...): each
# would change what a lock installs, or let a source build run, behind the lock and the
# command line's --no-config. Where to install from comes from pip's settings, for uv as for
# pip (installers.pip_config_as_uv_args).
# (UV_INSECURE_HOST is not: TLS is checked as pip checks it, a lock's own --trusted-host aside.)
UV_PASSED = frozenset({
    "UV_CACHE_DIR", "UV_NO_CACHE", "UV_LINK_MODE", "UV_OFFLINE", "UV_HTTP_TIMEOUT",
    "UV_HTTP_CONNECT_TIMEOUT", "UV_REQUEST_TIMEOUT", "UV_HTTP_RETRIES",
    "UV_CONCURRENT_DOWNLOADS", "UV_CONCURRENT_BUILDS", "UV_CONCURRENT_INSTALLS",
    "UV_NATIVE_TLS", "UV_SYSTEM_CERTS", "UV_KEYRING_PROVIDER", "UV_CREDENTIALS_DIR",
    "UV_S3_ENDPOINT_URL", "UV_GCS_ENDPOINT_URL", "UV_AZURE_ENDPOINT_URL", "UV_NO_PROGRESS",
    "UV_NO_WRAP", "UV_LOG_CONTEXT"})
UV = _family("uv", "how uv fetches, caches and reports (never what it installs)", UV_PASSED)
CREDENTIAL_STORES = _family(
    "credential stores", "where pip and uv find an index's credentials (a .netrc, the "
    "keyring and the session bus it talks over): the store's location, not a secret",
    ["NETRC", "PYTHON_KEYRING_BACKEND", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR",
     "XDG_DATA_HOME"])

DOCKER = _family(
    "docker", "where the Docker engine is and how the client reaches it",
    ["DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY",
     "DOCKER_API_VERSION"])

TRAINING = (SYSTEM, LOCALE, THREADS, ACCELERATORS, FRAMEWORK_SETTINGS, NUMERICS)
INSTALL = (PROXIES, CERTIFICATES, PIP, UV, CREDENTIAL_STORES)
DOCKER_CLIENT = (DOCKER,)
CONTAINER = (NUMERICS,)

# What a training sees that says where, not what: paths of the user's own folders, who runs
# it, log verbosity and the model hubs' caches, which differ between invocations and machines
# and change no number a training computes. Everything else a training sees is part of its
# backend's identity, and so of a golden's inputs digest (envs/base.variables_identity).
WHERE_ONLY = frozenset({
    "HOME", "USER", "LOGNAME", "TMPDIR", "TMP", "TEMP", "XDG_CACHE_HOME", "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE", "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE",
    "TRANSFORMERS_CACHE"})

# What every harness run (and every installer's Python) is given, whatever the host sets:
# hashing, imports and logging that do not vary from run to run. (A venv's own modules have
# their bytecode from its build: envs/bytecode.py.)
HARNESS_SETTINGS = {"PYTHONHASHSEED": "0", "PYTHONNOUSERSITE": "1",
                    "PYTHONDONTWRITEBYTECODE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def _admitted(families: tuple[Family, ...], environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if any(f.admits(k) for f in families)}


def training_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a training (the harness, user code, the lock's wheels) sees of `environ`."""
    return _admitted(TRAINING, os.environ if environ is None else environ)


def install_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What an installer or resolver sees of `environ`: a training's variables, the install
    families, and the names LOCKGUARD_INSTALLER_ENV lists."""
    environ = os.environ if environ is None else environ
    env = _admitted(TRAINING + INSTALL, environ)
    env.update({k: environ[k] for k in installer_extra(environ) if k in environ})
    return env


def installer_extra(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names LOCKGUARD_INSTALLER_ENV lists."""
    environ = os.environ if environ is None else environ
    return [n for n in re.split(r"[\s,]+", environ.get(INSTALLER_ENV, "")) if n]


def docker_client_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the `docker run` client process sees (the container gets container_env)."""
    return _admitted(TRAINING + DOCKER_CLIENT, os.environ if environ is None else environ)


def container_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The host variables forwarded into a container."""
    return _admitted(CONTAINER, os.environ if environ is None else environ)


def withheld(environ: Mapping[str, str] | None = None) -> int:
    """How many of `environ`'s variables a training does not see (a count for -v: never the
    names' values)."""
    environ = os.environ if environ is None else environ
    return len(environ) - len(training_env(environ))


def own_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names of `environ` that read as credentials (a part TOKEN, SECRET, PASSWORD, KEY...)
    and that no child of lockguard's is given: lockguard drops them from its own environment
    before the first training (drop_own_secrets)."""
    environ = os.environ if environ is None else environ
    given = set(install_env(environ)) | set(docker_client_env(environ))
    return sorted(k for k in environ
                  if k not in given and _CREDENTIAL_PART.search(k.upper()))


def drop_own_secrets() -> int:
    """Remove own_secrets from this process's environment (what later children would inherit
    and what os.environ shows); how many. /proc/<pid>/environ still holds the values the
    process started with: the process is made undumpable (process.guard_self), which hides it
    from every process but root's, and the sandbox hides it from a root training."""
    names = own_secrets()
    for name in names:
        os.environ.pop(name, None)
    return len(names)

