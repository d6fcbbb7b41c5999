"""The sandbox every process that runs a lock's code starts in: what it may read, write and
reach, and with which of the kernel's mechanisms that is held.

Code from a lock runs inside lockguard's check -- a wheel's `.pth` at every interpreter start,
a user scenario's script, an allowed sdist's build -- and must not reach the judge. A sandboxed
process sees

  - the file system read-only, and only where a training needs to read: the system's
    programs and libraries (/usr, /lib*, /bin, /etc, /opt, /proc, /sys, device nodes), the
    interpreter, its environment, the harness and the project (its `.git` left out: a checkout
    keeps its credentials there). The real HOME, /root, /home, /tmp, /var and /run are not
    readable; HOME is an empty folder in the run's scratch;
  - one writable place: the run's own scratch folder (its result, log, TMPDIR and HOME), plus
    its environment's compile cache (envs/compile_cache.py) and /dev/shm, where a DataLoader's
    workers pass tensors. lockguard's install, the cache (venvs, bytecode, wheelhouses), the
    repository, the goldens and the evidence cannot be written;
  - no TCP (bind or connect), no signal or abstract socket out of its own domain, and no other
    process's /proc/<pid>/environ or memory (Landlock's ptrace rule, with every capability of a
    root lockguard's child dropped so that CAP_SYS_PTRACE cannot waive it).

Two well-kept mechanisms hold it, the strongest available used (`Sandbox.describe` says
which, in every report):

  - Landlock (lockguard/landlock.py): unprivileged, Linux >= 5.13, inside Docker's default
    seccomp profile; the base layer, applied in the supervisor's child just before its exec;
  - bubblewrap on top, where user namespaces are allowed (or lockguard is root): a PID
    namespace (no other process is even listed), a network namespace (loopback only: nothing
    leaves the machine, UDP included, which Landlock does not cover), an IPC namespace, a
    private /dev and /dev/shm, and the whole tree mounted read-only but for the writable
    paths. Landlock cannot be entered before bubblewrap (it forbids the mounts bubblewrap
    makes), so bubblewrap execs a small stub of lockguard's (`landlock.main`) that applies it.

`sandbox = "auto" | "required" | "off"` (config, `--sandbox`): auto uses the strongest
available and says what it had; required fails closed (exit 2 with the fix) when neither
mechanism works; off runs bare and says so first in every report. Only Linux has either: on
macOS the docker backend is the hermetic choice (docs/environments.md).
"""

from __future__ import annotations

import functools
import marshal
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from lockguard import process
from lockguard.errors import LockguardError, one_line, tail
from lockguard.names import SANDBOX_MODES
from lockguard.process import IMPORTABLE


# Read (and execute) for every sandboxed process: where programs, libraries and the system's
# configuration live. Absent ones (no /lib32 here) are passed over.
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt",
               "/proc", "/sys", "/nix", "/gnu")
NAME_SERVICE = ("/etc/resolv.conf", "/etc/hosts")  # where they link, for a networked process
DEVICES = ("/dev",)  # read, write and ioctl on device nodes (/dev/null; a GPU's)
SHARED_MEMORY = "/dev/shm"  # DataLoader workers' tensors, multiprocessing's semaphores
GPU_NODES = ("nvidia", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
             "nvidia-caps", "dri", "kfd", "accel", "vfio")
# Inside bubblewrap: apply Landlock, then exec the run (landlock.main).
_STUB = IMPORTABLE + "from lockguard.landlock import main; main()"
REQUIRED_FIX = ("the sandbox needs Linux >= 5.13 with Landlock enabled, or bubblewrap with user "
                "namespaces (apt-get install bubblewrap); on macOS, or where neither can be had, "
                "use --env docker, or set sandbox = \"auto\" to run unsandboxed where it is "
                "missing (docs/environments.md)")


class SandboxError(LockguardError):
    """`sandbox = "required"` and no sandbox can be had here, or a bad sandbox setting."""


@dataclass(frozen=True)
class Policy:
    """What one sandboxed process may do: read `read` (beyond SYSTEM_READ), list the folders
    below `listed` without reading their files, write `write`; `network`: it may open TCP
    connections (an installer fetching what a lock names), else it has none."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    listed: tuple[str, ...] = ()
    network: bool = False


class Sandbox:
    """The sandbox one invocation runs its lock code in: `mode` as set; what this machine
    offers (the Landlock ABI, 0: none; a working bubblewrap, None: none; why the stronger
    layer is missing) is `found` as given (tests), else found out (once a process, by
    _available) the first time a run asks, not before: a check that runs nothing starts
    nothing."""

    def __init__(self, mode: str, found: tuple[int, str | None, str] | None = None) -> None:
        self.mode = mode
        self._found = (0, None, "") if found is None and mode == "off" else found

    def _offers(self) -> tuple[int, str | None, str]:
        return self._found if self._found is not None else _available()

    @property
    def landlock(self) -> int:
        """The Landlock ABI runs are confined with (0: none)."""
        return self._offers()[0]

    @property
    def bwrap(self) -> str | None:
        """The bubblewrap runs are wrapped in (None: none)."""
        return self._offers()[1]

    @property
    def missing(self) -> str:
        """Why what is missing is missing ("" when nothing is)."""
        return self._offers()[2]

    def require(self) -> None:
        """Under "required", SandboxError (with the fix) unless a sandbox can be had here:
        asked before anything is built."""
        if self.mode == "required" and not self.active:
            raise SandboxError(f"sandbox = \"required\", but no sandbox can be had here "
                               f"({self.missing}): {REQUIRED_FIX}")

    @property
    def active(self) -> bool:
        """Whether runs are sandboxed at all."""
        return self.mode != "off" and (self.landlock > 0 or self.bwrap is not None)

    def describe(self) -> str:
        """One line for reports: what each run had ("bwrap (pid, net, ro) + landlock 7 (fs,
        tcp, ptrace)"), or why it had nothing."""
        if self.mode == "off":
            return "off (sandbox = \"off\"): lock code ran with lockguard's own access"
        if not self.active:
            return f"none available ({self.missing}): lock code ran with lockguard's own access"
        layers = []
        if self.bwrap is not None:
            layers.append("bwrap (pid, net, ipc, ro)")
        if self.landlock:
            tcp = self.landlock >= 4 and self.bwrap is None  # else the namespace holds it
            rights = "fs, tcp, ptrace" if tcp else "fs, ptrace"
            if self.landlock >= 6:
                rights += ", signals"
            layers.append(f"landlock {self.landlock} ({rights})")
        text = " + ".join(layers)
        if self.bwrap is None and self.missing:
            text += f"; no bwrap: {self.missing}"
        return text

    def confine(self, scratch: Path, env: dict[str, str], policy: Policy,
                temp: str | None = None) -> tuple[dict[str, str], dict | None]:
        """A sandboxed process's environment and spec (process.run's `sandbox`): HOME an empty
        folder of its `scratch`, which it may write besides `policy.write` (folders made here:
        bubblewrap binds what exists); TMPDIR `temp`, writable too (a training's own, chosen
        by own_temp_dir), else a folder of the scratch, whatever `env` said (the machine's
        /tmp is no process's to write). Not active: `env` as it is, None."""
        if not self.active:
            return env, None
        home = scratch / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {**env, "HOME": str(home), "TMPDIR": temp or str(scratch / "tmp")}
        write = [str(scratch), *policy.write]
        cache = env.get("XDG_CACHE_HOME")
        if cache and not any(Path(cache).is_relative_to(w) for w in write):
            del env["XDG_CACHE_HOME"]  # below the real HOME, most likely: unreadable now
        temp = env["TMPDIR"]
        if not Path(temp).is_relative_to(scratch):
            write.append(temp)  # own_temp_dir left it (no room for a socket path below)
        Path(temp).mkdir(parents=True, exist_ok=True)
        for path in write:
            Path(path).mkdir(parents=True, exist_ok=True)
        return env, self.spec(Policy(read=policy.read, write=tuple(write),
                                     listed=policy.listed, network=policy.network))

    def spec(self, policy: Policy) -> dict | None:
        """What the supervisor applies in the child before its exec (process.run's
        `sandbox`): None when runs are not sandboxed."""
        if not self.active:
            return None
        # A process with network resolves names: /etc/resolv.conf is often a link into /run
        # (systemd-resolved), which nothing else reads.
        named = [os.path.realpath(f) for f in NAME_SERVICE] if policy.network else []
        read = tuple(dict.fromkeys((*SYSTEM_READ, *policy.read, *named)))
        write = tuple(dict.fromkeys((*policy.write, SHARED_MEMORY)))
        # Inside bubblewrap's network namespace only loopback exists, and gloo's ranks (torch.ddp)
        # talk over it: Landlock's TCP rule is for where there is no such namespace.
        network = policy.network or self.bwrap is not None
        confine = {"read": list(read), "write": list(write), "devices": list(DEVICES),
                   "network": network, "level": self.landlock, "listed": list(policy.listed)}
        spec: dict = {"landlock": confine if self.landlock else None, "prefix": None}
        if self.bwrap is not None:
            spec["prefix"] = self._bwrap_prefix(policy, confine)
            spec["landlock"] = None  # applied inside, by the stub the prefix ends with
        return spec

    def _bwrap_prefix(self, policy: Policy, confine: dict) -> list[str]:
        args = [self.bwrap, *_bwrap_base(policy.network)]
        for path in confine["write"]:
            if path != SHARED_MEMORY and os.path.exists(path):
                args += ["--bind", path, path]
        for node in _gpu_nodes():
            args += ["--dev-bind", node, node]
        if not self.landlock:
            return [*args, "--"]
        return [*args, "--", sys.executable, "-I", "-S", "-c", _STUB,
                marshal.dumps(confine).hex(), "--"]


def _bwrap_base(network: bool) -> list[str]:
    args = ["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", SHARED_MEMORY, "--proc", "/proc"]
    if not network:
        args.append("--unshare-net")
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
    return args


def _gpu_nodes() -> list[str]:
    """The accelerator device nodes of this machine, bound into a bubblewrap's private /dev."""
    try:
        names = os.listdir("/dev")
    except OSError:
        return []
    return sorted(f"/dev/{n}" for n in names if n.startswith(GPU_NODES))


def resolve(mode: str) -> Sandbox:
    """The sandbox `mode` gives on this machine (probed when first asked: Sandbox.require,
    describe, spec); SandboxError for a mode lockguard does not know."""
    if mode not in SANDBOX_MODES:
        raise SandboxError(f"sandbox = {mode!r}: expected one of {', '.join(SANDBOX_MODES)}")
    return Sandbox(mode)


@functools.lru_cache(maxsize=1)
def _available() -> tuple[int, str | None, str]:
    """(the Landlock ABI a child can really apply, 0 if none; a bubblewrap that really starts
    a sandbox, or None; why what is missing is missing). Tried once per process, by starting
    one of each: an ABI the kernel answers can still be refused by a seccomp filter, and a
    bubblewrap on PATH by AppArmor's rule on user namespaces."""
    if not sys.platform.startswith("linux"):
        return 0, None, f"{sys.platform} has neither Landlock nor bubblewrap"
    missing = []
    probe = (IMPORTABLE + "from lockguard import landlock; level = landlock.abi(); "
             "landlock.confine(['/usr'], [], False, (), level); print(level)")
    level = 0
    try:
        done = process.capture([sys.executable, "-I", "-S", "-c", probe], timeout=30,
                               env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        if done.code == 0:
            level = int(done.stdout.decode().strip() or 0)
        else:
            missing.append("landlock: " + one_line(tail(done.stderr.decode("utf-8", "replace"), 1) or "unavailable", 200))
    except (process.ProcessError, ValueError) as exc:
        missing.append(f"landlock: {exc}")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        missing.append("bwrap is not installed")
    else:
        try:
            done = process.capture([bwrap, *_bwrap_base(False), "--", "true"], timeout=30,
                                   env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
            if done.code != 0:
                missing.append("bwrap: " + one_line(tail(done.stderr.decode("utf-8", "replace"), 1)
                                            or f"exit code {done.code}", 200))
                bwrap = None
        except process.ProcessError as exc:
            missing.append(f"bwrap: {exc}")
            bwrap = None
    return level, bwrap, "; ".join(missing)


def project_access(script: Path | None, project: Path | None
                   ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what a user scenario's `script` may read, what it may list) of its `project` (the
    config's folder). It reads every entry of the repository holding the project (the folder
    with `.git` at or above it, else the project itself) except `.git`, whose config holds a
    checkout's credentials, and the script's own folder; it lists the repository's root (the
    import system lists a folder on sys.path). ((), ()) for a bundled scenario (no script)."""
    if script is None:
        return (), ()
    here = Path(os.path.abspath(script)).parent
    start = Path(os.path.abspath(project)) if project is not None else here
    root = next((p for p in (start, *start.parents) if (p / ".git").exists()), start)
    try:
        entries = tuple(str(root / name) for name in sorted(os.listdir(root)) if name != ".git")
    except OSError:
        entries = ()
    # The script's folder when it lies outside that repository (inside, the entries hold it:
    # and were it the repository's root, naming it would open `.git` again).
    outside = () if here.is_relative_to(root) else (str(here),)
    return (*entries, *outside), (str(root),)


def interpreter_prefix(python: str) -> str:
    """The installation a (venv's) interpreter runs from: its real binary's prefix, which a
    sandboxed process must read (its standard library, headers a compiler includes)."""
    return str(Path(os.path.realpath(python)).parent.parent)
