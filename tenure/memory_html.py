"""Memory timelines as one self-contained HTML page: :func:`memory_html`.

The page draws the same timeline as :func:`tenure.plot_memory` (bands of
buffers over the schedule, coloured by how they are held, the predicted and
measured peaks) as inline SVG, written here in Python, so it shows with no
script at all and needs nothing from the network: styles, the SVG and a few
lines of script are all inside the file.  The script adds what a picture
cannot: hovering a band shows which buffer it is, which variable holds it
there and how (its kind), the op that made that variable, its bytes and its
lifetime (first and last step, with their ops).  The timeline's data is also
embedded, as JSON in ``<script id="timeline-data">``, for other tools.
"""

from __future__ import annotations

import html
import json
import os

from tenure.linkers.timeline import (KINDS, Timeline, band_polygons, byte_limits, byte_ticks,
                                     format_bytes)
from tenure.memory_plot import timelines_of

#: SVG geometry, in CSS pixels
STEP_WIDTH = 16
PLOT_HEIGHT = 360
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 80, 20, 30, 190

_STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; } h2 { font-size: 15px; margin: 18px 0 4px; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
            vertical-align: -2px; }
.panel { overflow-x: auto; }
svg text { font-size: 10px; fill: #333; }
path.band { stroke: #fff; stroke-width: 0.5; }
path.band:hover, path.band.hovered { stroke: #000; stroke-width: 1.5; }
#tooltip { position: fixed; pointer-events: none; background: #fffff0; border: 1px solid #888;
           padding: 6px 8px; white-space: pre; font: 12px/1.35 ui-monospace, monospace;
           box-shadow: 0 2px 6px rgba(0,0,0,.2); }
"""

# Hovering a band fills the tooltip from the band's data attributes.
_SCRIPT = """
(function () {
  const tip = document.getElementById("tooltip");
  function describe(el) {
    const d = el.dataset;
    return d.buffer + "\\n" +
      "held by " + d.variable + " (" + d.kind +
        (d.how !== d.kind ? ", " + d.how + " buffer" : "") + ")\\n" +
      (d.op ? "made by " + d.op + "\\n" : "") +
      d.bytes + "\\n" +
      "alive from step " + d.start + " (" + d.startOp + ") to step " + d.stop +
      " (" + d.stopOp + ")";
  }
  for (const el of document.querySelectorAll("path.band")) {
    el.addEventListener("mouseenter", function (event) {
      el.classList.add("hovered");
      tip.textContent = describe(el);
      tip.hidden = false;
      tip.style.left = (event.clientX + 14) + "px";
      tip.style.top = (event.clientY + 14) + "px";
    });
    el.addEventListener("mousemove", function (event) {
      tip.style.left = (event.clientX + 14) + "px";
      tip.style.top = (event.clientY + 14) + "px";
    });
    el.addEventListener("mouseleave", function () {
      el.classList.remove("hovered");
      tip.hidden = true;
    });
  }
})();
"""


def memory_html(functions, inputs=None, path=None, *, labels=None, title=None) -> str:
    """Write the memory timeline of one call of each function as one
    self-contained HTML page (no network access needed to open it).

    Arguments as :func:`tenure.plot_memory`: ``functions`` is a compiled
    function, a :class:`~tenure.linkers.timeline.Timeline` or a list of them
    (one panel each), ``inputs`` the arguments to call them with.  ``path``:
    where to write the page (a ``.html`` / ``.htm`` file); ``None`` writes
    nothing.  Returns the page's text.
    """
    if path is not None and os.path.splitext(os.fspath(path))[1].lower() not in (".html",
                                                                                  ".htm"):
        raise ValueError(f"memory_html: cannot write {os.fspath(path)!r}: the file name "
                         "must end in .html or .htm")
    timelines = timelines_of(functions, inputs, "memory_html")
    if labels is not None and len(labels) != len(timelines):
        raise ValueError(f"memory_html: {len(labels)} labels for {len(timelines)} functions")
    titles = [str(label) for label in labels] if labels is not None else \
        [t.title or f"function {i}" for i, t in enumerate(timelines)]
    page = render_page(timelines, titles, title or "tenure memory timeline")
    if path is not None:
        with open(path, "w", encoding="utf-8") as file:
            file.write(page)
    return page


def render_page(timelines: list[Timeline], titles: list[str], title: str) -> str:
    low, high = byte_limits(timelines)
    panels = "\n".join(render_panel(t, heading, i, low, high)
                       for i, (t, heading) in enumerate(zip(timelines, titles)))
    data = json.dumps([t.to_dict() for t in timelines]).replace("</", "<\\/")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<title>{_text(title)}</title>\n<style>{_STYLE}</style></head>\n<body>\n"
            f"<h1>{_text(title)}</h1>\n"
            "<p>Steps of the schedule across, bytes up: each band is a buffer, from the "
            "step that writes it to its last use.  Above zero is what the call allocates "
            "(its highest point is the predicted peak); below zero is what exists before "
            "the call.  Hover a band for details.</p>\n"
            f"{_legend(timelines)}\n{panels}\n"
            "<div id=\"tooltip\" role=\"tooltip\" hidden></div>\n"
            f"<script type=\"application/json\" id=\"timeline-data\">{data}</script>\n"
            f"<script>{_SCRIPT}</script>\n</body></html>\n")


def _legend(timelines) -> str:
    present = {kind for t in timelines for kind in t.kinds()}
    items = "".join(f"<span><i style=\"background:{colour}\"></i>{_text(kind)}</span>"
                    for kind, colour in KINDS.items() if kind in present)
    return f"<div class=\"legend\">{items}</div>"


class _Scale:
    """Steps and bytes to SVG pixels."""

    def __init__(self, timeline: Timeline, low: float, high: float):
        self.n = max(len(timeline.steps), 1)
        self.low, self.high = low, high
        self.width = MARGIN_LEFT + self.n * STEP_WIDTH + MARGIN_RIGHT
        self.height = MARGIN_TOP + PLOT_HEIGHT + MARGIN_BOTTOM

    def x(self, step: float) -> float:
        return MARGIN_LEFT + step * STEP_WIDTH

    def y(self, nbytes: float) -> float:
        return MARGIN_TOP + (self.high - nbytes) / (self.high - self.low) * PLOT_HEIGHT


def render_panel(timeline: Timeline, heading: str, index: int, low: float,
                 high: float) -> str:
    """One timeline as an SVG drawing from ``low`` to ``high`` bytes."""
    scale = _Scale(timeline, low, high)
    parts = [f"<div class=\"panel\" id=\"panel-{index}\"><h2>{_text(heading)}</h2>",
             f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{scale.width}\" "
             f"height=\"{scale.height}\" viewBox=\"0 0 {scale.width} {scale.height}\">"]
    parts += _axes(timeline, scale)
    parts += [_band_path(timeline, vertices, band, seg, scale)
              for vertices, band, seg in band_polygons(timeline)]
    parts += _peaks(timeline, scale)
    parts.append("</svg></div>")
    return "\n".join(parts)


def _band_path(timeline, vertices, band, seg, scale) -> str:
    points = " ".join(f"{scale.x(x):.1f},{scale.y(y):.1f}" for x, y in vertices)
    attributes = {
        "buffer": band.name, "variable": seg.variable, "kind": seg.kind, "how": seg.how,
        "op": seg.op,
        "bytes": f"{band.nbytes:,} bytes ({format_bytes(band.nbytes)})",
        "nbytes": str(band.nbytes), "start": str(seg.start), "stop": str(seg.stop),
        "start-op": timeline.steps[seg.start] if timeline.steps else "",
        "stop-op": timeline.steps[seg.stop] if timeline.steps else "",
        "region": band.region,
    }
    data = " ".join(f"data-{key}=\"{_attr(value)}\"" for key, value in attributes.items())
    return (f"<path class=\"band\" d=\"M{points}Z\" fill=\"{KINDS[seg.kind]}\" {data}>"
            f"<title>{_text(band.name)}: {_text(seg.variable)} ({_text(seg.kind)})</title>"
            "</path>")


def _axes(timeline: Timeline, scale: _Scale) -> list[str]:
    parts = []
    for tick in byte_ticks(scale.low, scale.high):
        y = scale.y(tick)
        parts.append(f"<line x1=\"{MARGIN_LEFT - 4}\" x2=\"{scale.x(scale.n):.1f}\" "
                     f"y1=\"{y:.1f}\" y2=\"{y:.1f}\" stroke=\"#eee\"/>"
                     f"<text x=\"{MARGIN_LEFT - 6}\" y=\"{y + 3:.1f}\" "
                     f"text-anchor=\"end\">{format_bytes(tick)}</text>")
    zero = scale.y(0)
    parts.append(f"<line class=\"zero\" x1=\"{MARGIN_LEFT}\" x2=\"{scale.x(scale.n):.1f}\" "
                 f"y1=\"{zero:.1f}\" y2=\"{zero:.1f}\" stroke=\"#000\"/>")
    base = MARGIN_TOP + PLOT_HEIGHT + 6
    for step, op in enumerate(timeline.steps):
        x = scale.x(step + 0.5) + 3
        label = op if len(op) <= 30 else op[:29] + "…"
        parts.append(f"<text class=\"step\" transform=\"translate({x:.1f},{base}) rotate(-90)\" "
                     f"text-anchor=\"end\">{step} {_text(label)}</text>")
    return parts


def _peaks(timeline: Timeline, scale: _Scale) -> list[str]:
    right = scale.x(scale.n)
    y = scale.y(timeline.predicted_peak)
    parts = [f"<line class=\"predicted-peak\" x1=\"{MARGIN_LEFT}\" x2=\"{right:.1f}\" "
             f"y1=\"{y:.1f}\" y2=\"{y:.1f}\" stroke=\"#000\" stroke-dasharray=\"6 3\"/>",
             f"<text x=\"{MARGIN_LEFT + 4}\" y=\"{y - 4:.1f}\">predicted peak "
             f"{format_bytes(timeline.predicted_peak)} ({timeline.predicted_peak:,} bytes) at "
             f"step {timeline.peak_step}</text>"]
    if timeline.measured_peak:
        y = scale.y(timeline.measured_peak)
        parts += [f"<line class=\"measured-peak\" x1=\"{MARGIN_LEFT}\" x2=\"{right:.1f}\" "
                  f"y1=\"{y:.1f}\" y2=\"{y:.1f}\" stroke=\"#555\" stroke-dasharray=\"2 2\"/>",
                  f"<text x=\"{right - 4:.1f}\" y=\"{y - 4:.1f}\" text-anchor=\"end\">measured "
                  f"peak {format_bytes(timeline.measured_peak)}</text>"]
    return parts


def _text(value: str) -> str:
    return html.escape(str(value), quote=False)


def _attr(value: str) -> str:
    return html.escape(str(value), quote=True)
