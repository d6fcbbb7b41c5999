"""A user scenario that reports the sandbox it runs in, for tests/test_docker.py.

metrics: network (1 if a socket reached outside), interfaces (how many; only "lo" without a
network), harness_writable and root_writable (1 if a file could be written there), uid.
steps > 500 sleeps for ten minutes: for the timeout test.
"""

import os
import socket
import time


def _writable(directory):
    path = os.path.join(directory, ".lockguard-probe")
    try:
        with open(path, "w") as f:
            f.write("x")
        os.remove(path)
        return 1.0
    except OSError:
        return 0.0


def _network():
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()
        return 1.0
    except OSError:
        return 0.0


def run(steps, seed):
    if steps > 500:
        time.sleep(600)
    harness = os.path.dirname(os.path.abspath(__import__("_lockguard_harness").__file__))
    interfaces = [name for _, name in socket.if_nameindex()]
    return {"losses": [float(seed)] * steps,
            "metrics": {"network": _network(), "interfaces": float(len(interfaces)),
                        "harness_writable": _writable(harness), "root_writable": _writable("/"),
                        "uid": float(os.getuid())}}
