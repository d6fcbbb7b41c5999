"""The layer a torch.compile graph break is in: the module of the compiled model whose class's
method holds the break's user stack frame.

Runs inside the target environment (stdlib; the models it is given are torch modules, but torch
itself is never imported here, so the matching can be tested anywhere). compile_torch.py hands
it the text of each graph-break log record and the models torch.compile was called with.

How a break is placed
    Dynamo's graph-break record carries the user stack ("User code traceback:", File "...",
    line N, in fn), or, for a break it has already reported, only the innermost place ("in user
    code at path:line"). The innermost frame is where Dynamo stopped. Walking the frames from the
    innermost outwards, the first one whose code lies in a method of a module class of the model
    (the method's code object, or one nested in it: same file, line within its lines) names the
    layer; classes of torch.nn itself (Module's call machinery, containers) are skipped, as every
    module would match them. The stack names no instance: when the model holds several modules
    of that class, the first in named_modules() order is named and `modules` says how many there
    are (they run the same code, so each of them breaks).

Bounded: every string is one printable line cut to a fixed length, and the results.py contract
checks it again.
"""

from __future__ import annotations

import dis
import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

MAX_TEXT = 200  # a module path, class, function or file name in a location

_FILE_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_USER_CODE_AT = re.compile(r"in user code at (\S+?):(\d+)")

Frame = Tuple[str, int, Optional[str]]  # path, line, function (None where the record names none)
# One method of a module class: (first line, last line, module path, class, method, instances)
Span = Tuple[int, int, str, str, str, int]


def frames(text: str) -> List[Frame]:
    """The user stack of a graph-break record, outermost first ([] when it names no place)."""
    found = _FILE_FRAME.findall(text.split("Graph Break Reason:", 1)[-1])
    if found:
        return [(path, int(line), function) for path, line, function in found]
    match = _USER_CODE_AT.search(text)
    return [(match.group(1), int(match.group(2)), None)] if match else []


def _code_lines(code: Any) -> Tuple[int, int]:
    """The first and last line of a code object and the code objects nested in it."""
    first = last = code.co_firstlineno
    stack = [code]
    while stack:
        current = stack.pop()
        lines = [line for _, line in dis.findlinestarts(current) if line is not None]
        if lines:
            last = max(last, max(lines))
        stack.extend(c for c in current.co_consts if hasattr(c, "co_firstlineno"))
    return first, last


def _methods(cls: type) -> Iterable[Tuple[str, Any]]:
    """(name, code object) of the functions a class defines itself (properties included)."""
    for name, value in vars(cls).items():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        code = getattr(value, "__code__", None)
        if code is not None:
            yield name, code


def _torch_nn_class(cls: type) -> bool:
    # nn.Module's own machinery (_call_impl, hooks) and torch's containers hold every module.
    return cls is object or cls.__module__.startswith("torch.nn.modules.")


class ModelIndex:
    """The method spans of every module class of some models, by file."""

    def __init__(self, models: Iterable[Any]) -> None:
        self.spans: Dict[str, List[Span]] = {}
        seen: Dict[Tuple[int, str], List[str]] = {}  # (class id, method) -> module paths
        entries: List[Tuple[str, int, int, str, str, Tuple[int, str]]] = []
        for model in models:
            for path, module in _named_modules(model):
                for cls in type(module).__mro__:
                    if _torch_nn_class(cls):
                        continue
                    for name, code in _methods(cls):
                        key = (id(cls), name)
                        if key not in seen:
                            seen[key] = []
                            first, last = _code_lines(code)
                            entries.append((code.co_filename, first, last, cls.__name__, name,
                                            key))
                        seen[key].append(path or "(model)")
        for filename, first, last, cls_name, name, key in entries:
            paths = seen[key]
            self.spans.setdefault(filename, []).append(
                (first, last, paths[0], cls_name, name, len(paths)))

    def module_at(self, path: str, line: int) -> Optional[Span]:
        """The innermost method span of a module class holding path:line, or None."""
        inside = [s for s in self.spans.get(path, ()) if s[0] <= line <= s[1]]
        return min(inside, key=lambda s: s[1] - s[0]) if inside else None


def _named_modules(model: Any) -> List[Tuple[str, Any]]:
    try:
        return list(model.named_modules())
    except Exception:  # noqa: BLE001 - a model whose walk fails names no layer
        return []


def locate(stack: List[Frame], index: ModelIndex, short_path: Any,
           enclosing_function: Any) -> Optional[Dict[str, Any]]:
    """Where a break is: the innermost frame (file shown by `short_path`, line, function) and
    the module whose method holds it or a frame around it; None when the stack is empty."""
    if not stack:
        return None
    path, line, function = stack[-1]
    if function is None or function.startswith("<"):
        function = enclosing_function(path, line) or function
    where: Dict[str, Any] = {"file": cut(short_path(path)), "line": line,
                             "function": cut(function) if function else None}
    for frame_path, frame_line, _ in reversed(stack):
        span = index.module_at(frame_path, frame_line)
        if span is not None:
            where.update(module=cut(span[2]), module_class=cut(span[3]),
                         method=cut(span[4]), modules=span[5])
            break
    return where


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """`text` as one printable line of at most `limit` characters (results.BreakLocation
    refuses anything else: a class or file name is the environment's to choose)."""
    text = _CONTROL.sub("?", text)
    return text if len(text) <= limit else text[:limit - 1] + "…"
