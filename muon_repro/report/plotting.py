"""The report's plotting toolkit, shared by every figure module: a figure at the page's width, the
headline and takeaway above it, a legend beside it, bars grouped by process grid, and saving
(PNG at print resolution + SVG, each written atomically). Colours and sizes: :mod:`muon_repro.report.style`.

Matplotlib draws with Agg (no display); importing this module selects it before pyplot loads.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from muon_repro.report import style
from muon_repro.report.selection import grids
from muon_repro.tables.files import write_atomic

NO_DATA_GID = "muon-repro-no-data"  # the id of a panel's "why it is empty" text (show_no_data)
EMPTY_KEY = "muon-repro empty"  # a PNG text field: why every panel of the figure is empty


def save_figure(fig: plt.Figure, out: str | Path) -> Path:
    """Write ``out`` as .png and .svg, each atomically (temporary name, then rename). A figure whose every panel says
    why it is empty (:func:`show_no_data`) carries that reason in its PNG (:func:`empty_reason`), for the report."""
    png = Path(out).with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    why = [next((t.get_text() for t in ax.texts if t.get_gid() == NO_DATA_GID), None) for ax in panels]
    empty = {EMPTY_KEY: " ".join(why[0].split()).encode("latin-1", "replace").decode("latin-1")} if panels and all(why) else {}
    for path, fmt, meta in ((png, "png", {"Software": None, **empty}), (png.with_suffix(".svg"), "svg", {"Date": None})):
        write_atomic(path, lambda tmp, fmt=fmt, meta=meta: fig.savefig(tmp, format=fmt, dpi=style.DPI, metadata=meta))
    plt.close(fig)
    return png


def styled(draw: Callable[..., Path]) -> Callable[..., Path]:
    """Run a figure function under the report's rcParams (text takes them when it is created)."""

    @functools.wraps(draw)
    def wrapper(*args, **kwargs) -> Path:
        with plt.rc_context(style.RC):
            return draw(*args, **kwargs)

    return wrapper


def new_figure(height: float, ncols: int = 1, **kw) -> tuple[plt.Figure, np.ndarray]:
    """A figure at the page's width and ``height`` inches, with ``ncols`` panels in a row (their axes returned)."""
    fig, axes = plt.subplots(1, ncols, figsize=(style.WIDTH_IN, height), squeeze=False, **kw)
    for ax in axes.flat:
        ax.set_axisbelow(True)
    return fig, axes[0]


TAKEAWAY_CHARS = int(style.WIDTH_IN * 72 / (8.5 * 0.58))  # DejaVu Sans averages ~0.58 em per character


def add_title(fig: plt.Figure, headline: str, takeaway: str, bottom_in: float = 0.0) -> None:
    """Headline says what is plotted; the lines under it say what to see. Margins in inches."""
    h = fig.get_figheight()
    lines = textwrap.wrap(takeaway, TAKEAWAY_CHARS)  # the figure's width at 8.5 pt: the title never widens it
    fig.suptitle(headline, x=0.01, y=1 - 0.04 / h, ha="left", va="top", fontsize=10, fontweight="bold")
    fig.text(0.01, 1 - 0.27 / h, "\n".join(lines), ha="left", va="top", fontsize=8.5, color="#333333")
    fig.tight_layout(rect=(0, bottom_in / h, 1, 1 - (0.36 + 0.15 * len(lines)) / h))


def show_no_data(ax: plt.Axes, message: str) -> None:
    """An empty panel that says why it is empty."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666666", wrap=True, gid=NO_DATA_GID)
    ax.set_xticks([])
    ax.set_yticks([])


def cut_axis(ax: plt.Axes, bottom: float, span: float, highest: float, what: str) -> None:
    """Show ``span`` of the y axis from ``bottom``, or up to ``highest`` when that is at most a quarter more: where
    it is cut below the data, the panel's top right corner says so and how high ``what`` (the data above) reach."""
    if highest <= bottom + 1.25 * span:
        ax.set_ylim(bottom, max(highest, bottom) + 0.05 * span)
        return
    top = bottom + span
    ax.set_ylim(bottom, top)
    ax.text(
        0.98,
        0.97,
        f"axis cut at {top:.2f}:\n{what} reach {highest:.2f}",
        transform=ax.transAxes,
        ha="right",
        va="top",
        fontsize=style.SMALL_PT,
        color="#555555",
    )


def empty_reason(png: str | Path) -> str:
    """Why the figure at ``png`` has no data in any panel, as :func:`save_figure` recorded it; empty when it has."""
    from PIL import Image

    with Image.open(png) as image:
        return str(getattr(image, "text", {}).get(EMPTY_KEY, ""))


def legend_below(fig: plt.Figure, handles: list, ncol: int = 3, fontsize: float = style.SMALL_PT) -> float:
    """One legend for the whole figure, under its panels where it cannot cover data; returns the inches it
    takes, for :func:`add_title`'s ``bottom_in`` (call this first)."""
    if not handles:
        return 0.0
    ncol = fitting_columns([h.get_label() for h in handles], ncol, fontsize, fig.get_figwidth())
    fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, fontsize=fontsize, frameon=False)
    return legend_height(len(handles), ncol, fontsize)


def fitting_columns(labels: list[str], ncol: int, fontsize: float, width_in: float) -> int:
    """At most ``ncol`` legend columns, as many as fit ``width_in`` (a legend wider than the figure would widen the
    saved image, and so shrink every text of it on the page): each column as wide as the longest label plus its
    handle and padding (about 4 em), DejaVu Sans at ~0.58 em per character."""
    longest = max((len(label) for label in labels), default=0)
    column_in = (longest * 0.58 + 4.0) * fontsize / 72
    return max(1, min(ncol, int(width_in // column_in) if column_in > 0 else ncol))


def legends_under_panels(fig: plt.Figure, axes: Iterable[plt.Axes], ncol: int = 3, fontsize: float = style.SMALL_PT) -> None:
    """Each panel's own legend under it, in the band :func:`legend_height` reserved (call after :func:`add_title`)."""
    for ax in axes:
        handles = ax.get_legend_handles_labels()[0]
        if handles:
            box = ax.get_position()
            fig.legend(
                handles=handles,
                loc="lower center",
                bbox_to_anchor=((box.x0 + box.x1) / 2, 0.0),
                ncol=ncol,
                fontsize=fontsize,
                frameon=False,
            )


def legend_height(entries: int, ncol: int, fontsize: float = style.SMALL_PT) -> float:
    """Inches a legend of ``entries`` in ``ncol`` columns takes under the panels."""
    return 0.08 + -(-entries // ncol) * fontsize * 1.9 / 72


def plain_log_ticks(ax: plt.Axes, axis: str, tokens: bool = False) -> None:
    """Tick labels on a log axis as the text writes numbers: ``0.01``, ``1``, ``100`` (percent), or tokens as
    ``256``, ``4.1k``, ``1.05M`` (k = 1,000), never ``10^2``."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    from muon_repro.report.formatting import count, plain

    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_formatter(FuncFormatter(lambda v, _pos: count(v, "tick") if tokens else plain(v)))
    target.set_minor_formatter(NullFormatter())


def add_legend(ax: plt.Axes, handles: list, **kw) -> None:
    """A legend beside the panel, to its right (``kw`` overrides); none when there is nothing to list."""
    if handles:
        ax.legend(handles=handles, **{"loc": "upper left", "bbox_to_anchor": (1.0, 1.0), **kw})


def optimizer_handles(optimizers: Iterable[str]) -> list[Patch]:
    """Legend entries for the optimizers present: each one's outline colour and hatch, Muon first."""
    return [
        Patch(
            facecolor="white",
            edgecolor=style.OPTIMIZER_COLORS[o],
            hatch=style.OPTIMIZER_HATCH[o],
            linewidth=1.5,
            label=style.OPTIMIZER_LABELS[o],
        )
        for o in ("muon", "adamw")
        if o in set(optimizers)
    ]


def grouped_positions(reps: pd.DataFrame) -> tuple[list[float], pd.DataFrame, list[tuple[float, str]]]:
    """Bar positions for runs grouped by grid: (positions, the runs in that order, (center, grid label))."""
    pos, rows, groups, x = [], [], [], 0.0
    for dp, tp in grids(reps):
        members = reps[(reps["dp"] == dp) & (reps["tp"] == tp)]
        start = x
        for _, r in members.iterrows():
            pos.append(x)
            rows.append(r)
            x += 0.8
        groups.append(((start + x - 0.8) / 2, style.grid_label(dp, tp)))
        x += 0.5
    return pos, pd.DataFrame(rows), groups


def set_min_span(ax: plt.Axes, lo: float, hi: float, span: float = 3.2) -> None:
    """Keep bars bar-shaped when there are only one or two of them."""
    center, half = (lo + hi) / 2, max((hi - lo) / 2 + 0.6, span / 2)
    ax.set_xlim(center - half, center + half)


def group_ticks(
    ax: plt.Axes, pos: list[float], runs: pd.DataFrame, groups: list[tuple[float, str]], *, mark_profiled: bool = False
) -> None:
    """Optimizer names under the bars, the grid's name under each group; ``mark_profiled``: bars read from a trace
    (times, not bytes), each run the profiler inflates past the stated level marked (:mod:`~.profiler_cost`)."""
    labels = [style.OPTIMIZER_LABELS.get(o, o) for o in runs["optimizer"]]
    if mark_profiled:
        from muon_repro.report.profiler_cost import marked

        labels = marked(labels, runs)
    ax.set_xticks(pos, labels, fontsize=8)
    set_min_span(ax, min(pos), max(pos))
    for center, label in groups:
        ax.annotate(
            label,
            (center, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -22),
            textcoords="offset points",
            ha="center",
            va="top",
            fontweight="bold",
            fontsize=8.5,
        )
    ax.grid(axis="x", visible=False)
