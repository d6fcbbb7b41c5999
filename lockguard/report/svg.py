"""Line charts as inline SVG for the HTML report: drawing only, no judgement.

A chart scales to its container's width (viewBox, no fixed size), so it reads on a phone; its
colours come from the page's stylesheet through class names. Values that are None, NaN or
infinite leave a gap in their line. On a log scale a value at or below zero (a step where the
two runs are bitwise equal) sits on the bottom edge, below every plotted difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 480, 230
LEFT, RIGHT, TOP, BOTTOM = 62, 10, 26, 34  # margins for tick labels and the legend


@dataclass(frozen=True)
class Line:
    """One series of a chart: `label` for the legend, a value per step (None leaves a gap), and
    the CSS class that gives its colour and dash."""

    label: str
    values: Sequence[float | None]  # one per step
    css: str  # class name: its colour and dash


@dataclass(frozen=True)
class Mark:
    """A vertical line at `step` (the first divergent step, the first beyond tolerance), `label`
    as its tooltip, `css` its class."""

    step: int
    label: str
    css: str


def chart(title: str, lines: Sequence[Line], *, log: bool = False,
          band: Sequence[float] | None = None, band_label: str = "",
          marks: Sequence[Mark] = ()) -> str:
    """An SVG chart of `lines` over steps 0..n-1; `band` fills the area under its values
    (the allowed difference), `marks` draw vertical lines at steps."""
    steps = max((len(line.values) for line in lines), default=0)
    ys = [v for line in lines for v in line.values] + list(band or [])
    lo, hi = _range(ys, log)
    x = _xscale(steps)

    def y(value: float | None) -> float | None:
        if value is None or math.isnan(value) or math.isinf(value):
            return None
        if log:
            value = math.log10(value) if value > 0 else lo
        value = min(max(value, lo), hi)
        return TOP + (hi - value) / (hi - lo) * (HEIGHT - TOP - BOTTOM)

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>']
    parts += _axes(lo, hi, log, steps, x, y)
    if band:
        parts.append(_area(band, x, y, "band"))
    for mark in marks:
        px = x(mark.step)
        parts.append(f'<line class="mark {mark.css}" x1="{px:.1f}" x2="{px:.1f}" y1="{TOP}" '
                     f'y2="{HEIGHT - BOTTOM}"><title>{escape(mark.label)}</title></line>')
    for line in lines:
        parts.append(_path(line, x, y))
    parts.append(_legend(lines, band_label if band else ""))
    parts.append("</svg>")
    return "".join(parts)


def _range(values: Sequence[float | None], log: bool) -> tuple[float, float]:
    """(low, high) of the y axis: log10 exponents on a log scale, padded, never empty."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if log:
        finite = [math.log10(v) for v in finite if v > 0]
        if not finite:
            return -1.0, 0.0
        return math.floor(min(finite)) - 1.0, math.ceil(max(finite)) + (
            1.0 if max(finite) == math.ceil(max(finite)) else 0.0)
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return lo - pad, hi + pad


def _xscale(steps: int):
    span = max(steps - 1, 1)

    def x(step: float) -> float:
        return LEFT + step / span * (WIDTH - LEFT - RIGHT)
    return x


def _ticks(lo: float, hi: float, log: bool) -> list[tuple[float, str]]:
    if log:
        first, last = math.ceil(lo), math.floor(hi)
        every = max(1, math.ceil((last - first + 1) / 6))
        return [(float(k), f"1e{k}") for k in range(first, last + 1, every)]
    raw = (hi - lo) / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.ceil(lo / step) * step
    count = int((hi - start) / step) + 1
    return [(start + i * step, f"{start + i * step:.4g}") for i in range(count)]


def _axes(lo, hi, log, steps, x, y) -> list[str]:
    bottom, right = HEIGHT - BOTTOM, WIDTH - RIGHT
    parts = [f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{right - LEFT}" '
             f'height="{bottom - TOP}"/>']
    for value, label in _ticks(lo, hi, log):
        py = y(10 ** value if log else value)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{right}" y1="{py:.1f}" y2="{py:.1f}"/>'
                     f'<text class="tick" x="{LEFT - 4}" y="{py + 4:.1f}" '
                     f'text-anchor="end">{escape(label)}</text>')
    last = max(steps - 1, 0)
    for step in sorted({0, last // 2, last}):
        parts.append(f'<text class="tick" x="{x(step):.1f}" y="{bottom + 16}" '
                     f'text-anchor="middle">{step}</text>')
    parts.append(f'<text class="tick" x="{right}" y="{HEIGHT - 2}" text-anchor="end">step</text>')
    return parts


def _path(line: Line, x, y) -> str:
    commands, pen_down = [], False
    for step, value in enumerate(line.values):
        py = y(value)
        if py is None:
            pen_down = False
            continue
        commands.append(f'{"L" if pen_down else "M"}{x(step):.1f} {py:.1f}')
        pen_down = True
    if len(line.values) == 1 and commands:
        commands.append(f"h{WIDTH - LEFT - RIGHT}")  # one step: a level line, not a dot
    return (f'<path class="curve {line.css}" d="{" ".join(commands)}">'
            f'<title>{escape(line.label)}</title></path>')


def _area(values: Sequence[float], x, y, css: str) -> str:
    bottom = HEIGHT - BOTTOM
    points = [(x(step), y(v)) for step, v in enumerate(values)]
    points = [(px, py) for px, py in points if py is not None]
    if not points:
        return ""
    body = " ".join(f"L{px:.1f} {py:.1f}" for px, py in points)
    if len(points) == 1:
        body += f" h{WIDTH - LEFT - RIGHT}"
    end = points[-1][0] if len(points) > 1 else WIDTH - RIGHT
    return (f'<path class="{css}" d="M{points[0][0]:.1f} {bottom} {body} '
            f'L{end:.1f} {bottom} Z"/>')


def _legend(lines: Sequence[Line], band_label: str) -> str:
    parts, px = [], LEFT
    for css, label in [(line.css, line.label) for line in lines] + (
            [("band", band_label)] if band_label else []):
        parts.append(f'<rect class="key {css}" x="{px}" y="8" width="14" height="8"/>'
                     f'<text class="legend" x="{px + 18}" y="16">{escape(label)}</text>')
        px += 26 + 7 * len(label)
    return "".join(parts)
