"""Reading a drawn matplotlib figure in tests: its texts, bars and whiskers, as the figure modules drew them (not the
rendered file)."""

from __future__ import annotations

import numpy as np


def words(fig) -> str:
    """Every text of a drawn figure (title, takeaway, labels), its wrapped lines joined by spaces (a line broken after a
    hyphen rejoined)."""
    from matplotlib.text import Text

    return " ".join(" ".join(t.get_text().replace("-\n", "-").split()) for t in fig.findobj(Text))


def bars(ax) -> list:
    """The panel's bars (rectangles drawn by bar/barh), in drawing order."""
    from matplotlib.patches import Rectangle

    return [p for p in ax.patches if isinstance(p, Rectangle)]


def segments(ax) -> list[np.ndarray]:
    """The line segments of the panel's collections: an errorbar's whiskers, one per point."""
    return [np.asarray(s) for c in ax.collections if hasattr(c, "get_segments") for s in c.get_segments()]
