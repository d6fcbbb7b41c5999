"""The kernel side of the sandbox: Landlock, capabilities and no-new-privileges, applied by the
process that is about to exec code from a lock (standard library only: the supervisor's
forked child calls `confine`, and inside bubblewrap `main` does, before its exec).

Landlock (Linux >= 5.13, no privilege needed, allowed by Docker's default seccomp profile) is
an allowlist: once a ruleset handles an access right, only the paths given a rule keep it, for
this process and everything it starts, irrevocably. `confine` handles every file-system right
the running kernel knows, gives read (and execute) rights below `read`, every right below
`write`, and with ABI 4 and later handles TCP bind and connect so that no port is allowed
(`network` False); ABI 6's scoping keeps signals and abstract Unix sockets inside the domain.
Landlock's ptrace rule (a sandboxed process cannot read another's /proc/<pid>/environ or
memory unless that process is sandboxed below it) is waived for a holder of CAP_SYS_PTRACE,
so the child first drops every capability it has (bounding set included, so an exec
cannot give them back): root in the sandbox is then an ordinary uid 0 that Landlock holds.

A domain cannot be left, so nothing here is undone; a kernel without Landlock raises
`Unavailable`, and the host side (lockguard/sandbox.py) decides whether that is fatal.
"""

import os
import stat
import struct
import sys

# Syscall numbers: the same on every architecture since they were added (5.13).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT = 38, 24, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_LAST = 63  # dropping an unknown capability is EINVAL: tried and passed over

# File-system rights (include/uapi/linux/landlock.h), and the ABI that introduced each.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)  # truncate, ioctl_dev
READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | READ_DIR | (1 << 15)  # /dev: GPUs need their ioctls
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1

_libc = None


class Unavailable(OSError):
    """The kernel (or the C library) offers no Landlock, or refused a step of it."""


def _lib():
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _call(*args):
    import ctypes

    result = _lib().syscall(*args)
    if result < 0:
        errno = ctypes.get_errno()
        raise Unavailable(errno, os.strerror(errno))
    return result


def abi():
    """The Landlock ABI version the running kernel offers; 0 where it offers none."""
    import ctypes

    try:
        return max(0, _call(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION)))
    except (OSError, AttributeError):  # Unavailable is an OSError
        return 0


def drop_capabilities():
    """Give up every capability, for good: the bounding set (so no exec brings one back), the
    ambient set, then the effective, permitted and inheritable sets."""
    import ctypes

    libc = _lib()
    for cap in range(_CAP_LAST + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last: fine
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)  # two zeroed __user_cap_data_struct
    if libc.capset(ctypes.create_string_buffer(header), data) != 0:
        errno = ctypes.get_errno()
        raise Unavailable(errno, f"capset: {os.strerror(errno)}")


def confine(read, write, network, devices=(), level=None, listed=()):
    """Restrict this process (and what it execs) to reading `read`, listing the folders below
    `listed` (not reading their files: a project's root, beside its unreadable `.git`),
    reading and writing `devices` (device nodes, with their ioctls), everything below
    `write`, and no TCP unless `network`; raises Unavailable where Landlock is missing or a
    step fails. A path that does not exist is passed over. `level`: the ABI to use (default:
    the kernel's)."""
    import ctypes

    level = abi() if level is None else level
    if level < 1:
        raise Unavailable(95, "this kernel has no Landlock (Linux 5.13 or later)")
    handled_fs = _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= level)]
    handled_net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if level >= 4 and not network else 0
    scoped = (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if level >= 6 else 0
    if level >= 6:
        attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    elif level >= 4:
        attr = struct.pack("=QQ", handled_fs, handled_net)
    else:
        attr = struct.pack("=Q", handled_fs)
    ruleset = _call(ctypes.c_long(_CREATE_RULESET), ctypes.create_string_buffer(attr, len(attr)),
                    ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    try:
        for paths, rights in ((read, READ), (listed, READ_DIR), (devices, DEVICE),
                              (write, handled_fs)):
            for path in paths:
                _add_path(ruleset, path, rights & handled_fs)
        drop_capabilities()  # any process may drop its own; root's are what matter
        if _lib().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise Unavailable(errno, f"no_new_privs: {os.strerror(errno)}")
        _call(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _add_path(ruleset, path, rights):
    import ctypes

    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # absent here (no /lib32 on this system): nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS  # a rule on a file may carry only a file's rights
        if not rights:
            return
        attr = struct.pack("=Qi", rights, fd)  # struct landlock_path_beneath_attr is packed
        _call(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
              ctypes.create_string_buffer(attr, len(attr)), ctypes.c_uint32(0))
    finally:
        os.close(fd)


def main():
    """Inside bubblewrap: `python -I -S -c '...main()' POLICY -- ARGV...`: confine by the
    marshalled POLICY (hex) as `confine` would, then exec ARGV. Exit 126 with one line on
    stderr when it cannot."""
    import marshal

    try:
        policy = marshal.loads(bytes.fromhex(sys.argv[1]))
        argv = sys.argv[3:]
        confine(**policy)
        os.execvp(argv[0], argv)  # bubblewrap passed the run's environment through
    except BaseException as exc:  # noqa: BLE001 - one line for the log, whatever it was
        sys.stderr.write(f"lockguard sandbox: cannot confine the run: {exc}\n")
        sys.stderr.flush()
        os._exit(126)
