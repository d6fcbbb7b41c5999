"""What an image holds, asked with its venv's interpreter: platform_info() with the installed
distributions ({name: version}) and whether the framework (argv[1]) imports ("import_error":
None, or its type and first line). Prints one JSON line; lockguard/envs/docker/conformance.py
judges it against the lock."""

import importlib
import importlib.metadata as md
import json
import os
import sys

# The shared part beside this file (python -I leaves the script's folder off sys.path), or the
# module bundle.run defined (python -c). This folder then leaves sys.path (where python itself
# put it, too, for `python conformance.py`) and the module sys.modules, so that nothing the
# framework imports finds a module of ours by name.
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
from platform_info import platform_info  # noqa: E402
sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) != HERE]
sys.modules.pop("platform_info", None)


def conformance(module):
    """platform_info(), the distributions installed, and `module`'s import error (or None)."""
    report = platform_info()
    report["dists"] = {d.metadata["Name"]: d.version for d in md.distributions()
                       if d.metadata["Name"]}
    try:
        importlib.import_module(module)
        report["import_error"] = None
    except BaseException as exc:
        first = (str(exc).splitlines() or [""])[0][:200]
        report["import_error"] = "%s: %s" % (type(exc).__name__, first)
    return report


if __name__ == "__main__":
    print(json.dumps(conformance(sys.argv[1])))
