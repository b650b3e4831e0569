"""Memory timelines as pictures: :func:`plot_memory` (matplotlib).

A picture of one call's plan, from :class:`~tenure.linkers.timeline.Timeline`:
the schedule's steps across (op names along the axis), bytes up, each buffer
a band from the step that writes it to its last use, coloured by how it is
held (the legend), the predicted peak marked (a line at exactly the report's
``predicted_peak``) and the measured one beside it.  Below zero lies what
exists before the call (inputs, shared variables, buffers kept from the last
call), which the peak does not count.  Several functions (say, one training
step compiled without and with an activation-memory budget) are drawn side by
side on one byte scale.

matplotlib is the ``[plot]`` extra, imported only when a picture is drawn.
The figure is a ``matplotlib.figure.Figure`` made without ``pyplot``: no GUI
backend, no global state, safe on a headless machine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from tenure.function import Function
from tenure.linkers.timeline import (KINDS, Timeline, band_polygons, byte_limits, byte_ticks,
                                     format_bytes)

#: what a picture is written as, by the path's suffix
FORMATS = (".png", ".svg", ".pdf")

#: inches (the op names along the axis take the lower third)
FIGURE_HEIGHT = 6.5

#: at most this many op names along one axis (every k-th step past it)
MAX_STEP_LABELS = 60


def require_matplotlib():
    """matplotlib, or an ImportError that names the extra."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("plot_memory needs matplotlib, which is not installed: "
                          "pip install matplotlib (or pip install -e \".[plot]\" in "
                          "tenure's source tree)") from exc
    return matplotlib


def timelines_of(functions, inputs=None, who: str = "plot_memory") -> list[Timeline]:
    """One timeline per function (or :class:`Timeline` given as is), each
    function run on ``inputs``: a sequence of positional arguments or a
    mapping of keyword arguments."""
    items = list(functions) if isinstance(functions, (list, tuple)) else [functions]
    if not items:
        raise ValueError(f"{who}: expected a function or a list of functions, got an "
                         "empty list")
    args, kwargs = _arguments(inputs, who)
    result = []
    for item in items:
        if isinstance(item, Timeline):
            result.append(item)
        elif isinstance(item, Function):
            result.append(item.memory_timeline(*args, **kwargs))
        else:
            raise TypeError(f"{who}: expected a compiled function or a Timeline, got "
                            f"{type(item).__name__}")
    return result


def _arguments(inputs, who: str) -> tuple[list, dict]:
    if inputs is None:
        return [], {}
    if isinstance(inputs, Mapping):
        return [], dict(inputs)
    if isinstance(inputs, Sequence) and not isinstance(inputs, str):
        return list(inputs), {}
    raise TypeError(f"{who}: inputs must be a list of the function's arguments (or a "
                    f"dict of keyword arguments), got {type(inputs).__name__}")


def picture_format(path) -> str:
    """The suffix of ``path`` if it is one :data:`FORMATS` can write."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in FORMATS:
        raise ValueError(f"plot_memory: cannot write {os.fspath(path)!r}: the file name must "
                         f"end in one of {', '.join(FORMATS)}")
    return suffix


def plot_memory(functions, inputs=None, path=None, *, labels=None, figure=None):
    """Draw the memory timeline of one call of each function, side by side.

    ``functions``: a compiled function, a :class:`Timeline`, or a list of
    them (one panel each, sharing the byte scale).  ``inputs``: the
    arguments to call them with (a list, or a dict of keywords; the calls
    change nothing visible, as :meth:`~tenure.function.Function.memory_report`).
    ``path``: write the figure there, as PNG, SVG or PDF by its suffix.
    ``labels``: panel titles (default: each function's name and mode).
    ``figure``: an empty matplotlib figure to draw into (say
    ``plt.figure()``, to show it with pyplot), resized to fit the panels;
    by default a new ``Figure`` outside pyplot.
    Returns the figure.
    """
    suffix = picture_format(path) if path is not None else None
    require_matplotlib()
    from matplotlib.figure import Figure

    timelines = timelines_of(functions, inputs)
    titles = _titles(functions, timelines, labels)
    size = (sum(_panel_width(len(t.steps)) for t in timelines), FIGURE_HEIGHT)
    if figure is None:
        figure = Figure(figsize=size, layout="constrained")
    else:
        figure.set_size_inches(size)
        figure.set_layout_engine("constrained")
    axes = figure.subplots(1, len(timelines), sharey=True, squeeze=False)[0]
    limits = byte_limits(timelines)
    for ax, timeline, title in zip(axes, timelines, titles):
        draw_timeline(ax, timeline, title, limits)
    axes[0].set_ylabel("bytes (below 0: held before the call)")
    _legend(figure, timelines)
    if path is not None:
        figure.savefig(path, format=suffix[1:], dpi=110)
    return figure


def _titles(functions, timelines, labels) -> list[str]:
    if labels is not None:
        labels = [str(label) for label in labels]
        if len(labels) != len(timelines):
            raise ValueError(f"plot_memory: {len(labels)} labels for {len(timelines)} "
                             "functions")
        return labels
    items = list(functions) if isinstance(functions, (list, tuple)) else [functions]
    titles = []
    for item, timeline in zip(items, timelines):
        if isinstance(item, Function):
            titles.append(f"{item.given_name or 'function'} ({item.mode})")
        else:
            titles.append(timeline.title)
    return titles


def _panel_width(n_steps: int) -> float:
    """Inches: room for the op names, within reason."""
    return min(max(4.0, 0.12 * n_steps + 2.0), 14.0)


def draw_timeline(ax, timeline: Timeline, title: str = "", limits=None) -> None:
    """Draw ``timeline`` on a matplotlib ``Axes``, from ``limits = (low, high)``
    bytes (default: its own)."""
    from matplotlib.collections import PolyCollection

    polygons = band_polygons(timeline)
    collection = PolyCollection([vertices for vertices, _, _ in polygons],
                                facecolors=[KINDS[seg.kind] for _, _, seg in polygons],
                                edgecolors="white", linewidths=0.4)
    ax.add_collection(collection)
    n = max(len(timeline.steps), 1)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.axhline(timeline.predicted_peak, color="black", linestyle="--", linewidth=1)
    ax.annotate(f"predicted peak {format_bytes(timeline.predicted_peak)} "
                f"(step {timeline.peak_step})",
                (0, timeline.predicted_peak), xytext=(2, 3), textcoords="offset points",
                fontsize=8)
    if timeline.measured_peak:
        ax.axhline(timeline.measured_peak, color="#555555", linestyle=":", linewidth=1)
        ax.annotate(f"measured peak {format_bytes(timeline.measured_peak)}",
                    (n, timeline.measured_peak), xytext=(-2, 3), textcoords="offset points",
                    fontsize=8, ha="right", color="#555555")
    ax.set_xlim(0, n)
    low, high = limits or byte_limits([timeline])
    ax.set_ylim(low, high)
    _step_ticks(ax, timeline.steps)
    ticks = byte_ticks(low, high)
    ax.set_yticks(ticks)
    ax.set_yticklabels([format_bytes(tick) for tick in ticks], fontsize=8)
    ax.set_title(title, fontsize=10)


def _step_ticks(ax, steps) -> None:
    every = max(1, -(-len(steps) // MAX_STEP_LABELS))
    shown = range(0, len(steps), every)
    ax.set_xticks([i + 0.5 for i in shown])
    ax.set_xticklabels([f"{i} {_short(steps[i])}" for i in shown], rotation=90, fontsize=7)


def _short(text: str, width: int = 28) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _legend(figure, timelines) -> None:
    from matplotlib.patches import Patch
    present = {kind for t in timelines for kind in t.kinds()}
    handles = [Patch(facecolor=colour, label=kind) for kind, colour in KINDS.items()
               if kind in present]
    figure.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
