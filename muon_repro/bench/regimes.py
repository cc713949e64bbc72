"""The regime sweep: where Muon's optimizer step costs little next to AdamW's, and where it dominates.

Muon's extra work per step is Newton-Schulz on every hidden matrix, which does not grow with the
batch, while forward+backward grows with the tokens per step T. So the optimizer's share of a
step falls like ``d_model / T`` (3.75 d_model / T for an MLP matrix, 5 for a square one:
docs/method.md#regimes). The sweep measures that curve:

    widths      d_model in WIDTHS (2 blocks, heads of 32, MLP 4 x d, the small preset's vocabulary)
    tokens      T in TOKENS, global tokens per step (DP2·TP2, contiguous layout), Muon and AdamW
    shapes      DP4 and TP4 at SHAPE_WIDTH, at SHAPE_TOKENS, Muon and AdamW
    layouts     bucketed and whole_matrix at DP2·TP2, SHAPE_WIDTH, SHAPE_TOKENS (Muon)
    held out    FIRST_HELD_OUT and HELD_OUT: widths, token counts and shapes of none of the above; HELD_OUT, added
                after the cost model's last change, validates it on configurations it was never tuned on
                (docs/method.md#validation)

Every point is timed without the profiler (``BenchConfig.profile`` false: no trace files, no
profiler cost in the times) and lands in ``traces/<profile>/regimes/<name>/trial<k>/`` like any run.
"""

from __future__ import annotations

from muon_repro.bench.configs import SCALE_SPECS, BenchConfig
from muon_repro.rundir import REGIMES_GROUP

WIDTHS = (128, 256, 384)
TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
SHAPE_WIDTH = 256
SHAPE_TOKENS = (1024, 8192)
LAYERS = 2
HEAD_DIM = 32
SEQ_LEN = 128
# (optimizer, width, tokens, dp, tp, layout): combinations the cost model was tuned on by no earlier run (new
# widths, token counts beyond the sweep, shapes and layouts at other widths). The first set was seen when the
# bandwidth stretch was dropped (docs/method.md#validation), so it counts as tuned on now; HELD_OUT is the set
# recorded after that change.
FIRST_HELD_OUT = (
    *((opt, 192, 3072, 2, 2, "contiguous") for opt in ("muon", "adamw")),
    *((opt, 320, 6144, 4, 1, "contiguous") for opt in ("muon", "adamw")),
    *((opt, 512, 1536, 1, 4, "contiguous") for opt in ("muon", "adamw")),
    *((opt, 128, 24576, 2, 2, "contiguous") for opt in ("muon", "adamw")),
    *((opt, 448, 2560, 2, 2, layout) for opt, layout in (("muon", "bucketed"), ("adamw", "contiguous"))),
    *((opt, 320, 12288, 2, 2, layout) for opt, layout in (("muon", "whole_matrix"), ("adamw", "contiguous"))),
)
HELD_OUT = (
    *((opt, 576, 4096, 2, 2, "contiguous") for opt in ("muon", "adamw")),
    *((opt, 640, 2048, 1, 4, "contiguous") for opt in ("muon", "adamw")),
    *((opt, 704, 1536, 4, 1, "contiguous") for opt in ("muon", "adamw")),
    *((opt, 256, 32768, 2, 2, "contiguous") for opt in ("muon", "adamw")),
    *((opt, 576, 10240, 2, 2, layout) for opt, layout in (("muon", "bucketed"), ("adamw", "contiguous"))),
    # TP4 at three token counts and a width TP4 was never recorded at: a pure-TP grid was once priced 30% short
    *((opt, 384, tokens, 1, 4, "contiguous") for tokens in (1024, 4096, 12288) for opt in ("muon", "adamw")),
)
QUICK_TOKENS = (512, 2048)  # --quick: a smoke run of the sweep's machinery (seconds per point)
QUICK_WIDTHS = (64,)


def regime_point(
    optimizer: str,
    width: int,
    tokens: int,
    dp: int = 2,
    tp: int = 2,
    layout: str = "contiguous",
    *,
    warmup: int = 1,
    active: int = 4,
) -> BenchConfig:
    """One point of the sweep, named ``<optimizer>_d<width>_t<tokens>_dp<dp>_tp<tp>[_<layout>]``."""
    suffix = "" if layout == "contiguous" else f"_{layout}"
    spec = SCALE_SPECS["cpu"]
    return BenchConfig(
        group=REGIMES_GROUP,
        name=f"{optimizer}_d{width}_t{tokens}_dp{dp}_tp{tp}{suffix}",
        optimizer=optimizer,
        dp=dp,
        tp=tp,
        layout=layout,
        scale="cpu",
        preset=spec.preset,
        tokens_per_step=tokens,
        seq_len=SEQ_LEN,
        bucket_elems=spec.bucket_elems // 4 if layout == "bucketed" else None,  # a few buckets at these widths
        hidden=width,
        n_layers=LAYERS,
        n_heads=width // HEAD_DIM,
        ffn_hidden=4 * width,
        warmup=warmup,
        active=active,
        profile=False,
    )


def regime_points(quick: bool = False) -> list[BenchConfig]:
    """Every point of the sweep, cheapest first: the order the plan starts from (each round then shuffles it,
    bench.sweep.round_order, so the order points are recorded in is not this one)."""
    if quick:
        points = [
            regime_point(opt, w, t, warmup=0, active=2) for w in QUICK_WIDTHS for t in QUICK_TOKENS for opt in ("muon", "adamw")
        ]
        return points
    points = [regime_point(opt, w, t) for w in WIDTHS for t in TOKENS for opt in ("muon", "adamw")]
    points += held_out_points(FIRST_HELD_OUT) + held_out_points()
    for t in SHAPE_TOKENS:
        points += [regime_point(opt, SHAPE_WIDTH, t, dp, tp) for dp, tp in ((4, 1), (1, 4)) for opt in ("muon", "adamw")]
        points += [regime_point("muon", SHAPE_WIDTH, t, layout=layout) for layout in ("bucketed", "whole_matrix")]
    return sorted(points, key=lambda c: c.tokens_per_step * (c.hidden or 0) ** 2)


def held_out_points(points: tuple = HELD_OUT) -> list[BenchConfig]:
    """The points of a held-out set (:data:`HELD_OUT` by default)."""
    return [regime_point(opt, width, tokens, dp, tp, layout) for opt, width, tokens, dp, tp, layout in points]


def validation_set(cfg: BenchConfig) -> str | None:
    """ "held_out" for a point of :data:`HELD_OUT`, "first_held_out" for one of :data:`FIRST_HELD_OUT` (seen when
    the model last changed), None for the sweep's own points and every other run."""
    for name, points in (("held_out", HELD_OUT), ("first_held_out", FIRST_HELD_OUT)):
        if cfg.key in {point.key for point in held_out_points(points)}:
            return name
    return None
