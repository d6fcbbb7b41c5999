"""What pip needs to pick wheels for an interpreter, and what environment markers see there
(packaging.markers.default_environment, spelt out: the interpreter may not have packaging).

Run as a file, it prints platform_info() as one JSON line: in a base image (the image's
target), for the `python` setting (its markers, its tag). conformance.py and stack.py import it.
"""

import json
import os
import platform
import sys


def _v(info):
    s = "%d.%d.%d" % (info.major, info.minor, info.micro)
    return s if info.releaselevel == "final" else s + info.releaselevel[0] + str(info.serial)


def platform_info():
    """{"python": X.Y, "glibc", "arch", "implementation", "markers": {marker: value}}."""
    return {"python": "%d.%d" % sys.version_info[:2], "glibc": platform.libc_ver()[1],
            "arch": platform.machine(), "implementation": sys.implementation.name,
            "markers": {"implementation_name": sys.implementation.name,
                        "implementation_version": _v(sys.implementation.version),
                        "os_name": os.name,
                        "platform_machine": platform.machine(),
                        "platform_release": platform.release(),
                        "platform_system": platform.system(),
                        "platform_version": platform.version(),
                        "python_full_version": platform.python_version(),
                        "platform_python_implementation": platform.python_implementation(),
                        "python_version": "%d.%d" % sys.version_info[:2],
                        "sys_platform": sys.platform}}


if __name__ == "__main__":
    print(json.dumps(platform_info()))
