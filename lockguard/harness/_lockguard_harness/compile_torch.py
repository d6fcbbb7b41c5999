"""torch.compile diagnostics for the torch harness: graphs, graph breaks, recompiles, fallbacks.

Runs inside the target environment (stdlib + torch; imported by torch_.py only; torch itself is
imported only by the functions that need it, so the text helpers can be tested anywhere). Works on
every torch 2.x by feature detection; each source below is used only where it exists.

How a run is observed
    * A counting backend. `torch.compile` is replaced in this process (before a user script is
      imported) by a thin wrapper that hands dynamo a counting backend delegating to the backend
      the caller asked for (`torch._dynamo.lookup_backend(name)`, the public way to write a custom
      backend). Every graph dynamo hands to the backend is counted, timed and hashed (its FX code),
      and a backend that raises is recorded as an eager fallback (with `suppress_errors` dynamo
      swallows the error and runs the frame eagerly: the silent fallback). The one call shape
      that is passed through untouched is the inductor backend with a non-default `mode` or
      `options` (those are applied by torch's private inductor wrapper); such graphs are counted
      from dynamo's counters instead, and `counted_by` says so.
    * Dynamo's counters (`torch._dynamo.utils.counters`, cumulative, read as a difference from
      when this module started): graph break events and their reasons, unique graphs, frames
      seen and frames converted (total - ok = frames that fell back to eager).
    * Dynamo's "graph_breaks" and "recompiles" log artifacts (torch >= 2.1), captured by a
      handler on those loggers without printing them: where each break happened, and every
      recompile with the guard that failed.
    * The models torch.compile was called with (weakly held): each graph break's user stack is
      placed in the module whose class's method holds it (break_layer.py), the layer that
      breaks, reported beside the reason as `break_locations`.
    * `torch._dynamo.utils.compilation_time_metrics` is not used: its keys change between
      releases. compile_s is the wall time spent in backend calls (inductor's forward and, where
      AOTAutograd compiles it eagerly, backward compilation).

Normalised reasons carry no addresses, no absolute paths, no line numbers and no compile ids:
"mylayer/layer.py:forward: Unsupported Tensor.item() call with capture_scalar_outputs=False".
A path inside site-packages is shown from the package down; any other path by its file name.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import math
import os
import re
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import break_layer

# PyTorch CI's accuracy rule for compiled models (torch._dynamo.utils.same with an fp64
# reference): the compiled result may be at most K times farther from the fp64 result than the
# eager result is, plus a small absolute floor (tol / 10 with same()'s default tol of 1e-4) so
# that an eager run which happens to match fp64 almost exactly does not make any rounding fail.
ACCURACY_K = {"float32": 2.0, "bfloat16": 3.0, "float16": 3.0}
ACCURACY_FLOOR = 1e-5

_MAX_REASON = 300
_MAX_REASONS = 50


# --------------------------------------------------------------------------- normalising text

_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_QUOTED_PATH = re.compile(r"""(["'])((?:[A-Za-z]:)?[/\\][^"'\n]*?)\1""")
_PATH = re.compile(r"(?<![\w.])((?:[A-Za-z]:)?[/\\](?:[^\s:\"'(),\[\]]+[/\\])*[^\s:\"'(),\[\]]+)"
                   r"(?::\d+)?")
_LINE = re.compile(r",? line \d+")
_COMPILE_ID = re.compile(r"\[?\b\d+/\d+\b\]?:?\s?")
_RESUME = re.compile(r"(torch_dynamo_resume_in_\w+?)_at_\d+")
_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")


def short_path(path: str) -> str:
    """site-packages/pkg/mod.py -> pkg/mod.py; anything else -> its file name (a package's
    __init__.py keeps its directory: pkg/__init__.py)."""
    norm = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in norm:
            return norm.rsplit(marker, 1)[1]
    parts = [part for part in norm.split("/") if part]
    if not parts:
        return norm
    if parts[-1] == "__init__.py" and len(parts) > 1:
        return "/".join(parts[-2:])
    return parts[-1]


def normalise(text: str, floats: bool = False) -> str:
    """One line, stable across machines and unrelated edits (see the module docstring)."""
    text = _ADDRESS.sub("0x…", text)
    text = _QUOTED_PATH.sub(lambda m: m.group(1) + short_path(m.group(2)) + m.group(1), text)
    text = _PATH.sub(lambda m: short_path(m.group(1)), text)
    text = _LINE.sub("", text)
    text = _RESUME.sub(r"\1", text)
    if floats:  # guard values on data (a float on the stack after .item()) are not structure
        text = _FLOAT.sub("<float>", text)
    text = _SPACE.sub(" ", text).strip()
    if len(text) > _MAX_REASON:
        text = text[:_MAX_REASON - 1] + "…"
    return text


_function_cache: Dict[str, List[Tuple[int, int, str]]] = {}


def enclosing_function(path: str, line: int) -> Optional[str]:
    """The innermost function (or class) of `path` whose body holds `line`, via ast; None."""
    if path not in _function_cache:
        spans: List[Tuple[int, int, str]] = []
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    spans.append((node.lineno, getattr(node, "end_lineno", node.lineno) or
                                  node.lineno, node.name))
        except (OSError, SyntaxError, ValueError):
            pass
        _function_cache[path] = spans
    inside = [s for s in _function_cache[path] if s[0] <= line <= s[1]]
    if not inside:
        return None
    return min(inside, key=lambda s: s[1] - s[0])[2]


def site(path: str, line: Optional[int], function: Optional[str]) -> str:
    """'pkg/mod.py:forward' for a source location; line numbers are left out on purpose."""
    name = _RESUME.sub(r"\1", function) if function else None
    if name and name.startswith("torch_dynamo_resume_in_"):
        name = name[len("torch_dynamo_resume_in_"):]
    if (not name or name.startswith("<")) and line is not None:
        name = enclosing_function(path, line) or name
    return f"{short_path(path)}:{name}" if name else short_path(path)


# --------------------------------------------------------------------------- log capture

_RECOMPILING = re.compile(r"Recompiling function (\S+) in (\S+?):(\d+)")


class _Capture(logging.Handler):
    """Keeps the text of dynamo's graph-break, recompile and won't-convert log records; each
    graph break is placed (`placer`) as it is logged, while the model being traced is alive."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: List[str] = []
        self.break_places: List[Optional[Dict[str, Any]]] = []  # beside breaks, one each
        self.placer: Optional[Callable[[str], Optional[Dict[str, Any]]]] = None
        self.recompiles: List[str] = []
        self.wont_convert: List[Tuple[str, Optional[BaseException]]] = []
        self.limits: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record must not break the training
            return
        name = record.name
        if name.endswith("__graph_breaks"):
            self.breaks.append(text)
            try:
                self.break_places.append(self.placer(text) if self.placer else None)
            except Exception:  # noqa: BLE001 - a break left unplaced, never a failed training
                self.break_places.append(None)
        elif name.endswith("__recompiles"):
            self.recompiles.append(text)
        elif "recompile_limit" in text or "cache_size_limit" in text:
            self.limits.append(text)  # the frame runs eagerly from now on
        elif "WON'T CONVERT" in text:  # a frame whose error was swallowed: it ran eagerly
            exc = record.exc_info[1] if record.exc_info else None
            self.wont_convert.append((text, exc))


def _artifact_loggers(suffixes: Tuple[str, ...]) -> List[logging.Logger]:
    names = [n for n in list(logging.Logger.manager.loggerDict) if n.endswith(suffixes)]
    return [logging.getLogger(n) for n in names]


# --------------------------------------------------------------------------- the recorder

def _counters() -> Optional[Dict[str, Dict[str, int]]]:
    try:
        from torch._dynamo.utils import counters
    except Exception:  # noqa: BLE001
        return None
    return {group: dict(values) for group, values in counters.items()}


def _delta(now: Optional[Dict[str, Dict[str, int]]], before: Dict[str, Dict[str, int]],
           group: str) -> Dict[str, int]:
    if now is None:
        return {}
    old = before.get(group, {})
    out = {k: v - old.get(k, 0) for k, v in now.get(group, {}).items()}
    return {k: v for k, v in out.items() if v}


def _default_backend() -> Any:
    try:
        from torch._dynamo.backends.registry import get_default_backend
        return get_default_backend()
    except Exception:  # noqa: BLE001 - before torch 2.13 the default was always "inductor"
        return "inductor"


def _backend_name(backend: Any) -> str:
    if isinstance(backend, str):
        return backend
    return getattr(backend, "compiler_name", None) or getattr(backend, "__name__", None) \
        or type(backend).__name__


class Recorder:
    """Everything torch.compile did in this process since `install()`."""

    def __init__(self) -> None:
        self.installed = False
        self.compile_calls = 0  # torch.compile(model) calls seen
        self.passthrough_calls = 0  # calls left with torch's own backend object (see docstring)
        self.requested: List[str] = []  # backend names asked for, in order
        self.graphs: List[Dict[str, Any]] = []  # one per backend call
        self.capture = _Capture()
        self._counters_before: Dict[str, Dict[str, int]] = {}
        self._logs_on = False
        self._original_compile: Optional[Callable[..., Any]] = None
        self.models: List[Any] = []  # weak references to the modules torch.compile was given
        self._index: Optional[break_layer.ModelIndex] = None  # of the models, built on demand
        self.capture.placer = self.place

    # ------------------------------------------------------------------ installation

    def install(self) -> None:
        """Patch torch.compile; call once, before any user code runs."""
        if self.installed:
            return
        import torch

        self.installed = True
        self._counters_before = _counters_if_loaded() or {}
        original = getattr(torch, "compile", None)
        if original is None:  # torch 1.x: nothing to observe
            return
        self._original_compile = original
        recorder = self

        def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:  # noqa: A001
            if args:  # torch.compile's options are keyword-only; keep any future signature
                return original(model, *args, **kwargs)
            backend = kwargs.get("backend")
            wrapped = recorder.counting_backend_for(backend, kwargs.get("mode"),
                                                    kwargs.get("options"))
            if wrapped is not None:
                kwargs["backend"] = wrapped
            if model is not None:
                recorder.remember(model)
                recorder.compile_calls += 1
                recorder.requested.append(_backend_name(backend if backend is not None
                                                        else _default_backend()))
                if wrapped is None:
                    recorder.passthrough_calls += 1
            recorder.enable_logs()
            if model is None:  # decorator form: torch calls compile(fn, ...) again later
                return original(**kwargs)
            return original(model, **kwargs)

        compile.__doc__ = original.__doc__
        compile.__wrapped__ = original  # type: ignore[attr-defined]
        compile._lockguard = True  # type: ignore[attr-defined]
        torch.compile = compile

    def remember(self, model: Any) -> None:
        """Keep a weak reference to the module being compiled (a bound method's module, as
        nn.Module.compile passes its _call_impl), for placing graph breaks in its layers."""
        module = getattr(model, "__self__", model)
        if not hasattr(module, "named_modules"):
            return  # a plain function: its breaks are located to a frame, not a layer
        try:
            ref = weakref.ref(module)
        except TypeError:
            return
        if all(r() is not module for r in self.models):
            self.models.append(ref)
            self._index = None

    def place(self, text: str) -> Optional[Dict[str, Any]]:
        """Where a graph-break record's break is (break_layer.locate), in the models compiled
        so far that are still alive: called as the record is logged, during tracing."""
        if self._index is None:
            self._index = break_layer.ModelIndex(m for m in (r() for r in self.models)
                                                 if m is not None)
        return break_layer.locate(break_layer.frames(text), self._index, short_path,
                                  enclosing_function)

    def enable_logs(self) -> None:
        """Route dynamo's graph-break and recompile artifacts to the capture, silently.

        Dynamo only writes a recompile record when the "recompiles" artifact is enabled in
        torch._logging's state, which the public `set_logs` does (and which TORCH_LOGS set by the
        user overrides: then set_logs is ignored by torch and the user's choice stands). The
        stream handlers torch attaches are taken off the two artifact loggers so that the
        records are collected, not printed.
        """
        if self._logs_on:
            return
        try:
            import torch
            import torch._dynamo  # noqa: F401 - registers the artifact loggers
        except Exception:  # noqa: BLE001
            return
        if not self._counters_before:
            self._counters_before = _counters() or {}
        self._logs_on = True
        set_logs = getattr(getattr(torch, "_logging", None), "set_logs", None)
        if set_logs is not None and "TORCH_LOGS" not in os.environ:
            try:
                set_logs(graph_breaks=True, recompiles=True)
            except Exception:  # noqa: BLE001 - older torch without these artifacts
                pass
        internal = getattr(torch._logging, "_internal", None)
        is_torch_handler = getattr(internal, "_is_torch_handler", None)
        for log in _artifact_loggers(("__graph_breaks", "__recompiles")):
            log.setLevel(logging.DEBUG)
            log.propagate = False  # collected, not printed
            for handler in list(log.handlers):
                if is_torch_handler is not None and is_torch_handler(handler):
                    log.removeHandler(handler)
            if self.capture not in log.handlers:
                log.addHandler(self.capture)
        for name in ("torch._dynamo.convert_frame", "torch._dynamo.eval_frame"):
            log = logging.getLogger(name)
            if self.capture not in log.handlers:
                log.addHandler(self.capture)

    # ------------------------------------------------------------------ the counting backend

    def counting_backend_for(self, backend: Any, mode: Any, options: Any) -> Optional[Callable]:
        """A counting backend for a torch.compile call, or None to leave the call as it is."""
        if getattr(backend, "_lockguard_counting", False):
            return backend
        if backend is None:
            backend = _default_backend()
        if getattr(backend, "_lockguard_counting", False):
            return backend
        name = _backend_name(backend)
        if name == "inductor" and ((mode not in (None, "default")) or options):
            return None
        try:
            from torch._dynamo import lookup_backend
            inner = lookup_backend(backend)
        except Exception:  # noqa: BLE001 - an unknown backend: let torch.compile say so
            return None
        return self.counting_backend(inner, name)

    def counting_backend(self, inner: Callable, name: str) -> Callable:
        recorder = self

        def counting(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
            entry: Dict[str, Any] = {"backend": name, "graph": _graph_hash(gm),
                                     "ops": _op_count(gm), "ok": True, "seconds": None}
            recorder.graphs.append(entry)
            start = time.perf_counter()
            try:
                compiled = inner(gm, example_inputs, **kwargs)
            except Exception as exc:
                entry["ok"] = False
                entry["error"] = normalise(f"{type(exc).__name__}: {_first_line(exc)}")
                raise
            finally:
                entry["seconds"] = time.perf_counter() - start
            return compiled

        counting.__name__ = name
        counting.compiler_name = name  # type: ignore[attr-defined]
        counting._lockguard_counting = True  # type: ignore[attr-defined]
        if hasattr(inner, "reset"):
            counting.reset = inner.reset  # type: ignore[attr-defined]
        return counting

    # ------------------------------------------------------------------ results

    def observed_anything(self) -> bool:
        if self.compile_calls or self.graphs:
            return True
        now = _counters_if_loaded()
        return bool(now and _delta(now, self._counters_before, "frames").get("total"))

    def diagnostics(self) -> Optional[Dict[str, Any]]:
        """The `compile` section of the result, or None when nothing was compiled."""
        if not self.observed_anything():
            return None
        now = _counters_if_loaded()
        breaks = _delta(now, self._counters_before, "graph_break")
        stats = _delta(now, self._counters_before, "stats")
        frames = _delta(now, self._counters_before, "frames")
        # The counting backend saw every graph only if every compile went through it; else
        # (mode/options passed to inductor, or torch._dynamo.optimize called directly) dynamo's
        # own counter of compiled graphs is the count, and unique = graphs.
        counted = self.compile_calls > 0 and not self.passthrough_calls
        graphs = len(self.graphs) if counted else stats.get("unique_graphs", len(self.graphs))
        unique = len({g["graph"] for g in self.graphs}) if counted else graphs
        # ------------------------------------------------------------ graph breaks
        located = self._located_breaks(breaks)
        break_reasons = _reasons(located)
        locations = _first_location_per_reason(located)
        break_events = sum(breaks.values())
        if not breaks and self.capture.breaks:  # counters absent: count the log records
            break_events = len(self.capture.breaks)
        # ------------------------------------------------------------ recompiles
        recompile_reasons = sorted({r for text in self.capture.recompiles
                                    for r in _recompile_reasons(text)})
        # ------------------------------------------------------------ eager fallbacks
        failed = [g for g in self.graphs if not g["ok"]]
        fallback_reasons = [f"backend {g['backend']} failed: {g['error']}" for g in failed]
        not_converted = frames.get("total", 0) - frames.get("ok", 0) if frames else 0
        fallback_reasons += [_wont_convert_reason(t, e, bool(self.graphs))
                             for t, e in self.capture.wont_convert]
        fallback_reasons += [_limit_reason(t) for t in self.capture.limits]
        fallback_reasons = [r for r in fallback_reasons if r]
        fallback_reasons += [normalise(_first_line_of(t)) for t in self.capture.breaks
                             if "fall back to eager" in t or "skip tracing the frame" in t]
        fallbacks = max(len(failed), not_converted)
        if fallbacks and not fallback_reasons:
            fallback_reasons = [f"{fallbacks} frame(s) fell back to eager (dynamo counters)"]
        ok_backends = sorted({g["backend"] for g in self.graphs if g["ok"]})
        if ok_backends:
            backend = "+".join(ok_backends)
        elif failed:
            backend = "eager"  # every graph fell back: nothing ran compiled
        else:
            backend = "+".join(sorted(set(self.requested))) or None
        seconds = [g["seconds"] for g in self.graphs if g["seconds"] is not None]
        out: Dict[str, Any] = {
            "backend": backend,
            "graphs": graphs,
            "unique_graphs": unique,
            "graph_breaks": break_events,
            "break_reasons": break_reasons[:_MAX_REASONS],
            "recompiles": len(self.capture.recompiles) if self._logs_on else None,
            "recompile_reasons": recompile_reasons[:_MAX_REASONS],
            "eager_fallbacks": fallbacks,
            "fallback_reasons": sorted(set(fallback_reasons))[:_MAX_REASONS],
            "compile_s": sum(seconds) if seconds else None,
            "compile_calls": self.compile_calls,
            "counted_by": "backend" if counted else "dynamo_counters",
            "dynamo": {"unique_graphs": stats.get("unique_graphs"),
                       "calls_captured": stats.get("calls_captured"),
                       "graph_break_events": sum(breaks.values()) if now is not None else None,
                       "frames_total": frames.get("total"), "frames_ok": frames.get("ok")},
        }
        if locations:
            out["break_locations"] = [dict(where, reason=reason) for reason, where
                                      in locations if reason in out["break_reasons"]]
        return out

    def _located_breaks(self, counter_reasons: Dict[str, int]
                        ) -> List[Tuple[str, Optional[Dict[str, Any]]]]:
        """('site: reason', where it is or None) per graph-break record, then the counted
        reasons never logged (with no place)."""
        short = {key: normalise(_first_line_of(key)) for key in counter_reasons}
        places = self.capture.break_places
        found: List[Tuple[str, Optional[Dict[str, Any]]]] = []
        for i, text in enumerate(self.capture.breaks):
            if "fall back to eager" in text or "skip tracing the frame" in text:
                continue  # a whole frame skipped: an eager fallback, counted there
            reason = next((s for key, s in short.items() if _first_line_of(key) in text), None)
            if reason is None:
                reason = normalise(_break_text_reason(text))
            where = _break_site(text)
            # A record not placed when logged (no model then) is placed now, if it can be.
            place = places[i] if i < len(places) and places[i] else self.place(text)
            found.append((f"{where}: {reason}" if where else reason, place))
        named = {r.split(": ", 1)[-1] for r, _ in found}
        found += [(s, None) for s in short.values() if s not in named]  # counted, never logged
        return [(_reason_text(reason), place) for reason, place in found]


def _reasons(located: List[Tuple[str, Optional[Dict[str, Any]]]]) -> List[str]:
    """'site: reason' per distinct break (Recorder._located_breaks), sorted."""
    return sorted({reason for reason, _ in located})


# A break reason as results.BreakLocation takes it (one line, at most 400 characters), the
# same in break_reasons and in break_locations, which are matched by it.
def _reason_text(reason: str) -> str:
    return break_layer.cut(reason, 400)


def _first_location_per_reason(located: List[Tuple[str, Optional[Dict[str, Any]]]]
                               ) -> List[Tuple[str, Dict[str, Any]]]:
    """(reason, place) for each reason with a place, in reason order; the record that names
    a layer over one that does not (a repeated break is logged with its innermost place only)."""
    best: Dict[str, Dict[str, Any]] = {}
    for reason, place in located:
        if place is None:
            continue
        if reason not in best or ("module" in place and "module" not in best[reason]):
            best[reason] = place
    return sorted(best.items())[:_MAX_REASONS]


def _counters_if_loaded() -> Optional[Dict[str, Dict[str, int]]]:
    # Reading counters must not import dynamo into an eager run.
    import sys
    if "torch._dynamo" not in sys.modules:
        return None
    return _counters()


def _graph_hash(gm: Any) -> str:
    try:
        code = gm.code
    except Exception:  # noqa: BLE001
        code = repr(getattr(gm, "graph", gm))
    return hashlib.sha256(_ADDRESS.sub("0x", code).encode()).hexdigest()[:16]


def _op_count(gm: Any) -> Optional[int]:
    try:
        return sum(1 for n in gm.graph.nodes if n.op.startswith("call_"))
    except Exception:  # noqa: BLE001
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _first_line_of(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text.strip()


def _break_text_reason(text: str) -> str:
    """The reason in a graph-break log record, across the formats of torch 2.x."""
    if "Graph Break Reason:" in text:
        body = text.split("Graph Break Reason:", 1)[1].split("User code traceback:", 1)[0]
        lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
        # 2.6+: "Encountered graph break when attempting to trace X:" precedes the real reason
        if len(lines) > 1 and lines[0].startswith("Encountered graph break"):
            lines = lines[1:]
        return lines[0] if lines else body
    first = _first_line_of(text)
    first = re.sub(r"^Graph break:?\s*", "", first)
    return re.sub(r"\s*from user code at:?.*$", "", first) or first


def _break_site(text: str) -> Optional[str]:
    stack = break_layer.frames(text)
    if stack:
        path, line, function = stack[-1]
        return site(path, line, function)
    return None


def _recompile_reasons(text: str) -> List[str]:
    """'forward: tensor 'x' size mismatch at index 0. expected 2, actual 3' per failed guard."""
    match = _RECOMPILING.search(text)
    where = site(match.group(2), int(match.group(3)), match.group(1)) if match else None
    reasons = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("- ") or "User stack trace" in line or line.startswith("-   "):
            continue
        guard = line[2:].split("#", 1)[0]  # dynamo appends "# source line  # file:line"
        guard = normalise(_COMPILE_ID.sub("", guard, count=1), floats=True)
        if guard and not guard.startswith("File "):
            reasons.append(f"{where}: {guard}" if where else guard)
    if not reasons:
        reasons.append(normalise(_first_line_of(text), floats=True))
    return reasons


def _limit_reason(text: str) -> str:
    # "torch._dynamo hit config.recompile_limit (8)\n   function: 'f' (/path/file.py:5)\n..."
    head = _first_line_of(text)
    limit = re.search(r"(recompile_limit|cache_size_limit)\s*\((\d+)\)", head)
    what = f"hit the {limit.group(1)} ({limit.group(2)}): runs eagerly from then on" if limit \
        else normalise(head)
    match = re.search(r"function: '([^']+)' \((\S+?):(\d+)\)", text)
    where = site(match.group(2), int(match.group(3)), match.group(1)) if match else None
    return f"{where}: {what}" if where else what


def _wont_convert_reason(text: str, exc: Optional[BaseException], counted: bool) -> str:
    """'file.py:fn: ExceptionType: first line' for a frame dynamo gave up on, or '' when the
    cause is a backend failure the counting backend has already recorded."""
    # "WON'T CONVERT forward /path/file.py line 12 \ndue to: \nTraceback ..."
    match = re.search(r"WON'T CONVERT (\S+) (\S+)", text)
    where = site(match.group(2), None, match.group(1)) if match else None
    if exc is not None:
        name = type(exc).__name__
        if name == "BackendCompilerFailed" and counted:
            return ""
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if name == "BackendCompilerFailed" and inner is not None:
            exc, name = inner, f"backend failed: {type(inner).__name__}"
        why = f"{name}: {_first_line(exc)}"
    else:
        body = text.split("due to:", 1)[-1]
        lines = [ln.strip() for ln in body.splitlines()
                 if ln.strip() and not ln.startswith(" ") and "TORCHDYNAMO_VERBOSE" not in ln
                 and not ln.startswith("Traceback")]
        why = lines[-1] if lines else ""
    reason = normalise(why)
    return f"{where}: {reason}" if where else reason


# --------------------------------------------------------------------------- accuracy

def rmse(values: List[float], reference: List[float]) -> Optional[float]:
    if not values or len(values) != len(reference):
        return None
    total = 0.0
    for a, b in zip(values, reference):
        if not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        total += (a - b) ** 2
    return math.sqrt(total / len(values))


def accuracy(compiled: Dict[str, List[float]], eager: Dict[str, List[float]],
             fp64: Dict[str, List[float]], dtype: str = "float32") -> Dict[str, Any]:
    """PyTorch CI's rule per series: rmse(compiled, fp64) <= K * rmse(eager, fp64) + floor."""
    k = ACCURACY_K.get(dtype, 2.0)
    series: Dict[str, Any] = {}
    ok = True
    for name in ("losses", "outputs"):
        c, e, r = compiled.get(name) or [], eager.get(name) or [], fp64.get(name) or []
        compiled_err, eager_err = rmse(c, r), rmse(e, r)
        if compiled_err is None or eager_err is None:
            continue
        limit = k * eager_err + ACCURACY_FLOOR
        passed = compiled_err <= limit
        ok = ok and passed
        series[name] = {"compiled_vs_fp64": _finite(compiled_err),
                        "eager_vs_fp64": _finite(eager_err),
                        "limit": _finite(limit),
                        "compiled_vs_eager_max_abs": _finite(max(
                            (abs(a - b) if math.isfinite(a) and math.isfinite(b) else math.inf
                             for a, b in zip(c, e)), default=0.0)),
                        "ok": passed}
    return {"rule": f"rmse(compiled, fp64) <= {k:g} * rmse(eager, fp64) + {ACCURACY_FLOOR:g}",
            "k": k, "floor": ACCURACY_FLOOR, "ok": ok, "series": series}


def _finite(value: float) -> Any:
    return value if math.isfinite(value) else str(value)  # strict JSON has no inf


RECORDER = Recorder()
