"""Prints the interpreter's bytecode cache tag (cpython-311): the folder of the shared .pyc
store a venv's modules are compiled for (lockguard/envs/bytecode.py)."""

import sys

print(sys.implementation.cache_tag)
