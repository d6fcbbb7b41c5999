"""Compiles a venv's listed modules to bytecode on every core: run as
`python -I -S compile_bytecode.py LIST_FILE` with the venv's interpreter, LIST_FILE a JSON list
of [module, its .pyc] pairs; each is compiled to the .pyc named with it, in the timestamp mode
uv writes. Prints one line per module that did not compile (it is left without bytecode).

compileall compiles listed files one at a time, and passing over a directory's current .pyc
files cost 6 s of a torch venv's 19 (lockguard/envs/bytecode.py keeps the results).
"""

import concurrent.futures
import json
import multiprocessing
import os
import py_compile
import sys


def compile_one(pair):
    """Compile one [module, pyc] pair; None, or a line saying which pair failed and why."""
    try:
        module, pyc = pair
        py_compile.compile(module, cfile=pyc, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    except Exception as exc:  # a module that does not compile is left without bytecode
        return f"{pair!r}: {type(exc).__name__}"


def main(list_file):
    """Compile every pair listed in `list_file`; print the failures, one a line."""
    with open(list_file, encoding="utf-8") as f:
        pairs = json.load(f)
    try:
        cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count())
        with concurrent.futures.ProcessPoolExecutor(
                cores, mp_context=multiprocessing.get_context("fork")) as pool:
            problems = list(pool.map(compile_one, pairs, chunksize=64))
    except (OSError, ImportError):  # no semaphores here (a container without /dev/shm)
        problems = [compile_one(pair) for pair in pairs]
    print("".join(f"{p}\n" for p in problems if p), end="")


if __name__ == "__main__":
    main(sys.argv[1])
