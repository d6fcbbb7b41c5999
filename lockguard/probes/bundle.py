"""The head of every probe run as `python -c` (in a container, where the probe's file is not):
lockguard.probes.Probe.program appends one call, `run(siblings, name, text)`, that carries the
texts. Stdlib only, like every probe."""

import sys
import types


def run(siblings, name, text):
    """Define each sibling ({module name: its text}) as a module, then run the probe's `text`
    as __main__ under its file's `name`, so that a traceback names the probe's lines."""
    for sibling, source in siblings.items():
        module = types.ModuleType(sibling)
        module.__file__ = sibling + ".py"
        sys.modules[sibling] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)
    main = sys.modules["__main__"]
    main.__file__ = name
    exec(compile(text, name, "exec"), main.__dict__)
