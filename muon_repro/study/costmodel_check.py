"""The original study's own runs priced by the cost model, and the study machine's profile fitted to them.

The study (Jen Wei's ``muon_vs_adam.py``, read by :mod:`muon_repro.study`) times one fixed protocol on its machine,
4 RTX A4000s each on PCIe Gen4 x4, whose shipped profile is :data:`~muon_repro.costmodel.records.STUDY_MACHINE`
(datasheet peaks times assumed efficiencies). Its published traces time every kernel, so they say how far those
assumptions are from what the cards did. Per run of the study, one row per quantity:

    fwd_bwd             the simulated forward-backward: a 2048 x 2048 fp32 ``randn``, then 20 chained fp32 matmuls
    optimizer           the optimizer's kernels, NCCL's left out (ranks doing equal work together): AdamW's gradient
                        divide and ``torch.optim.AdamW`` (foreach); Muon's momentum, packing, the TP gathers' copies,
                        Newton-Schulz in bf16 on the full matrices and the update
    transfer <op> ...   one collective of the protocol: its NCCL kernel once the last rank of its group had started it

Measured: the median over steps and ranks of ``study_steps.gpu_kernel_ms`` (less the NCCL kernels of those scopes,
``study_collectives.transfer_span_ms``) and of ``study_collectives.transfer_ms``; the async runs (rank 0 alone) have no
transfer, and their compute ran beside NCCL kernels, so they are shown but left out of the fit.

Priced with the cost model's own machinery: compute as a :class:`~muon_repro.costmodel.workload.Compute` through
:func:`~muon_repro.costmodel.predict.kernel_seconds` (kernel time, not the host's), a collective through the
profile's alpha-beta fit for its op and group (:meth:`~muon_repro.costmodel.machine_profile.MachineProfile.collective`,
``collective_seconds``) on its ring bytes (:func:`muon_repro.formulas.ring_bytes`), Newton-Schulz FLOPs by
:func:`muon_repro.formulas.newton_schulz_flops`. What this module adds is the study's program:
its shapes and shards, its collectives, and the bytes each of its kernels moves (:func:`study_program`).

The fit (:func:`fit_study_factors`): every price is linear in the inverse efficiencies of matmul (fp32 here),
Newton-Schulz (bf16), element-wise and the link (``intra_node``), and in the alphas of the all-gather and the
all-reduce. Their coefficients are the machinery's prices with those factors at 1 and the alphas at 0; the factors are
then the bounded least squares of the relative errors over the synchronous runs' quantities (each quantity weighs the
same; efficiencies in [0.01, 1], alphas in [0, 1e5] us, the profile's ranges: a variable past a bound is held there and
the others refitted; one the quantities price only together with others keeps the profile's value), solved in plain
floats (:mod:`muon_repro.costmodel.least_squares`) so that the table has the same bits on every CPU. Torch-free,
except :func:`study_threshold_shift`, which predicts steps (shard plans, as :mod:`muon_repro.costmodel.records` does).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import dtype_info
from muon_repro.costmodel.least_squares import least_squares
from muon_repro.costmodel.machine import resolve_profile
from muon_repro.costmodel.machine_profile import MachineProfile
from muon_repro.costmodel.predict import kernel_seconds
from muon_repro.costmodel.profile_ranges import ALPHA_US, EFFICIENCY
from muon_repro.costmodel.records import STUDY_MACHINE
from muon_repro.costmodel.workload import COPY_BYTES, MUON_MOMENTUM_BYTES, ROUND_BYTES, Compute
from muon_repro.formulas import NS_STEPS, newton_schulz_flops, ring_bytes
from muon_repro.phases import NEWTON_SCHULZ
from muon_repro.study.scopes import OPTIMIZER_SCOPES, dp_group, tp_group
from muon_repro.study.sources import STUDY_ENVIRONMENT
from muon_repro.study.tables import StudyRun

# ---------------------------------------------------------------- the study's protocol (muon_vs_adam.py)

STUDY_SHAPES = ((4096, 4096), (1024, 324), (456, 1024), (676, 876), (128, 128))  # five fp32 parameters
STUDY_TP_DIMS = (0, 1, -1, 1, 0)  # the dimension TP splits, -1: not split
STUDY_WORLD = int(STUDY_ENVIRONMENT["accelerator_count"])  # 4 ranks, one per GPU
FWD_BWD_SIZE = 2048  # simulate_fwd_bwd: a size x size fp32 randn, then `iterations` chained matmuls
FWD_BWD_MATMULS = 20
FWD_BWD = "FWD_BWD"  # its record_function scope
FP32, BF16 = "float32", "bfloat16"  # dtype names as study_collectives spells them (analysis.collectives.dtype_info)
SCOPE = "intra_node"  # one node: every group's collectives run inside it

# Bytes per element of the study's kernels (read and written, from its code), beyond the cost model's own constants
# (workload.COPY_BYTES: one fp32 read and write; ROUND_BYTES: fp32 read, bf16 write; MUON_MOMENTUM_BYTES: mul_, add_,
# add on fp32, as the study's ``buf.mul_(m).add_(g)`` then ``g.add(buf, alpha=m)``).
# torch.optim.AdamW (foreach), 8 kernels per parameter list: weight decay mul_ (8), lerp_ of the first moment (12), mul_
# and addcmul_ of the second (8 + 12), sqrt, div_, add_ of the denominator (8 each), addcdiv_ of the parameter (16).
# (The bench's own AdamW, workload.ADAMW_STEP_BYTES = 84, counts addcmul_'s gradient twice; the traces time it at 12.)
ADAMW_STEP_BYTES = 80
BF16_COPY_BYTES = 4  # one bf16 read and write: packing into the DP buffer, the TP gather's copies, cat, reshape
UPDATE_BYTES = 8 + 10  # p.mul_(1 - lr wd) on fp32; p.add_(bf16 update): fp32 read, bf16 read, fp32 write
# zeropower_via_newtonschulz5 in bf16 on an m x n matrix (m <= n): the norm reads it (2 mn), the scaling reads and writes
# it (4 mn); each iteration b*A and c*A (4 m^2 each), their sum after the matmul (6 m^2), a*X (4 mn), the sum (6 mn).
NS_PREP_BYTES_PER_ELEM = 6
NS_STEP_BYTES_PER_GRAM_ELEM = 14
NS_STEP_BYTES_PER_ELEM = 10

# ---------------------------------------------------------------- table columns

COLUMNS = (
    "run",
    "profile",
    "quantity",
    "ranks",
    "measured_ms",
    "datasheet_ms",
    "datasheet_rel_error",
    "fitted_ms",
    "fitted_rel_error",
    "fitted_on",
)
THRESHOLD_COLUMNS = (
    "profile",
    "machine",
    "model",
    "d_model",
    "dp",
    "tp",
    "metric",
    "level",
    "datasheet_tokens_per_step",
    "fitted_tokens_per_step",
    "ratio",
)
FWD_BWD_QUANTITY = "fwd_bwd"
OPTIMIZER_QUANTITY = "optimizer"
# The factors the fit moves: efficiency kinds (machine_profile.EFFICIENCY_KINDS), then the ops whose alpha it fits.
FIT_KINDS = ("matmul", NEWTON_SCHULZ, "elementwise", SCOPE)
FIT_ALPHA_OPS = ("all_gather", "all_reduce")
FITTED_SUFFIX = "-fitted-to-study"


# ---------------------------------------------------------------- the program


@dataclass(frozen=True)
class StudyCollective:
    """One collective a rank issues per step: op, dtype (study_collectives' spelling), full-array elements, group."""

    op: str
    dtype: str
    elements: int
    group: tuple[int, ...]

    @property
    def element_size(self) -> int:
        info = dtype_info(self.dtype)
        if info is None:
            raise ValueError(f"unknown dtype {self.dtype!r} of a study collective")
        return info[1]

    @property
    def ring_bytes(self) -> int:
        return int(ring_bytes(self.op, self.elements, self.element_size, len(self.group)) or 0)

    @property
    def quantity(self) -> str:
        return f"transfer {self.op} {self.dtype} x{self.elements} [{_ranks(self.group)}]"


@dataclass(frozen=True)
class RankWork:
    """What one rank of a study run does per step: its forward-backward (full-step runs), its optimizer's kernels
    (NCCL's left out) and its collectives."""

    rank: int
    fwd_bwd: Compute | None
    optimizer: Compute
    collectives: tuple[StudyCollective, ...]


def study_program(optimizer: str, *, full_step: bool, dp: int, tp: int, world_size: int = STUDY_WORLD) -> tuple[RankWork, ...]:
    """Every rank's step of the study's protocol: AdamW all-reduces each full gradient over all ranks, divides it and
    steps on the full parameters; Muon (``dp`` x ``tp``, TP groups of adjacent ranks) keeps a contiguous ZeRO shard
    of its TP-local flat buffer, all-gathers the buffer over DP in bf16, each of its matrices over TP in bf16 where
    TP splits it, and runs Newton-Schulz on every full matrix it holds a piece of."""
    fwd_bwd = _fwd_bwd() if full_step else None
    if optimizer == "adamw":
        everyone = tuple(range(world_size))
        elements = sum(math.prod(s) for s in STUDY_SHAPES)
        work = Compute(vector_bytes=(COPY_BYTES + ADAMW_STEP_BYTES) * elements)  # grad /= world, then the step
        collectives = tuple(StudyCollective("all_reduce", FP32, math.prod(s), everyone) for s in STUDY_SHAPES)
        return tuple(RankWork(r, fwd_bwd, work, collectives) for r in range(world_size))
    if optimizer != "muon":
        raise ValueError(f"unknown optimizer {optimizer!r} of a study run; expected adamw or muon")
    if dp * tp != world_size:
        raise ValueError(f"a study Muon run of dp={dp} x tp={tp} on {world_size} ranks")
    return tuple(_muon_rank(r, dp, tp, fwd_bwd) for r in range(world_size))


def ns_vector_bytes(m: int, n: int) -> int:
    """Bytes the study's Newton-Schulz moves outside its matmuls on an ``m x n`` bf16 matrix (``m <= n``)."""
    return NS_PREP_BYTES_PER_ELEM * m * n + NS_STEPS * (NS_STEP_BYTES_PER_GRAM_ELEM * m * m + NS_STEP_BYTES_PER_ELEM * m * n)


def _fwd_bwd() -> Compute:
    n = FWD_BWD_SIZE
    return Compute(matmul_flops=FWD_BWD_MATMULS * 2 * n**3, vector_bytes=4 * n * n)  # randn writes the fp32 matrix


def _tp_local(shape: tuple[int, int], tp_dim: int, tp: int) -> tuple[int, int]:
    if tp_dim == -1:
        return shape
    if shape[tp_dim] % tp:
        raise ValueError(f"TP {tp} does not divide dimension {tp_dim} of {shape}")
    return tuple(d // tp if i == tp_dim else d for i, d in enumerate(shape))  # type: ignore[return-value]


def _muon_rank(rank: int, dp: int, tp: int, fwd_bwd: Compute | None) -> RankWork:
    dp_rank = rank // tp
    local = [math.prod(_tp_local(s, d, tp)) for s, d in zip(STUDY_SHAPES, STUDY_TP_DIMS)]
    shard = -(-sum(local) // dp)  # the study's cdiv: the flat buffer padded to dp equal shards
    lo, hi = shard * dp_rank, shard * (dp_rank + 1)
    starts = np.cumsum([0, *local[:-1]])
    held = [(i, min(hi, s + n) - max(lo, s)) for i, (s, n) in enumerate(zip(starts, local)) if min(hi, s + n) > max(lo, s)]
    piece = sum(n for _, n in held)
    dp_ranks, tp_ranks = tuple(dp_group(rank, tp, dp * tp)), tuple(tp_group(rank, tp))
    collectives = [StudyCollective("all_gather", BF16, shard * dp, dp_ranks)] if dp > 1 else []
    vector = (MUON_MOMENTUM_BYTES + ROUND_BYTES + BF16_COPY_BYTES + UPDATE_BYTES) * piece  # momentum, bf16, pack, update
    ns_flops = 0
    for i, _ in held:
        shape, tp_dim = STUDY_SHAPES[i], STUDY_TP_DIMS[i]
        full = math.prod(shape)
        if tp_dim != -1 and tp > 1:
            collectives.append(StudyCollective("all_gather", BF16, full, tp_ranks))
            vector += 2 * BF16_COPY_BYTES * full  # out of NCCL's buffer into the list, then torch.cat
        if tp_dim == 1 and tp > 1:
            vector += BF16_COPY_BYTES * local[i]  # the update's column chunk is not contiguous: reshape(-1) copies it
        m, n = sorted(shape)
        ns_flops += newton_schulz_flops((m, n), NS_STEPS)
        vector += ns_vector_bytes(m, n)
    return RankWork(rank, fwd_bwd, Compute(ns_flops=ns_flops, vector_bytes=vector), tuple(collectives))


# ---------------------------------------------------------------- quantities: measured, and their work


@dataclass(frozen=True)
class StudyQuantity:
    """One measured quantity of one run: its median over steps and ``ranks``, and the work that prices it."""

    run: str
    quantity: str
    ranks: tuple[int, ...]
    measured_ms: float
    compute: Compute | None = None
    collective: StudyCollective | None = None
    fitted_on: bool = True
    model_dtype: str = "fp32"  # the study's matmuls and parameters are fp32; Newton-Schulz bf16

    def __post_init__(self) -> None:
        if (self.compute is None) == (self.collective is None):
            raise ValueError(f"{self.run} {self.quantity}: a quantity is priced by compute or by a collective, one of them")


def study_quantities(study_steps: pd.DataFrame, study_collectives: pd.DataFrame) -> list[StudyQuantity]:
    """Every run's measured quantities (see the module docstring), each with the study's work behind it; a quantity
    nothing measured (no step of the scope, no transfer) is left out."""
    if study_steps.empty:
        return []
    colls = study_collectives if not study_collectives.empty else pd.DataFrame(columns=["run", "rank", "step", "scope"])
    out: list[StudyQuantity] = []
    for run_id, steps in study_steps.groupby("run", sort=True):
        run_colls = colls[colls["run"] == run_id]
        traced = tuple(sorted(int(r) for r in steps["rank"].unique()))
        config = StudyRun.from_name(str(run_id).rsplit("/", 1)[-1], STUDY_WORLD)
        program = study_program(config.optimizer, full_step=config.variant == "full_step", dp=config.dp, tp=config.tp)
        fitted_on = not config.async_op
        for name, scopes, part in (
            (FWD_BWD_QUANTITY, (FWD_BWD,), "fwd_bwd"),
            (OPTIMIZER_QUANTITY, OPTIMIZER_SCOPES, "optimizer"),
        ):
            per_rank_step = _compute_ms(steps, run_colls, scopes)
            for ranks, work in _equal_work(program, traced, part):
                values = per_rank_step[per_rank_step.index.get_level_values("rank").isin(ranks)]
                if values.notna().any():
                    quantity = name if len(ranks) == len(traced) else f"{name} [{_ranks(ranks)}]"
                    out.append(
                        StudyQuantity(str(run_id), quantity, ranks, float(values.median()), compute=work, fitted_on=fitted_on)
                    )
        for collective, ranks in _collectives(program, traced):
            measured = _transfer_ms(run_colls, collective, ranks)
            if measured is not None:
                out.append(
                    StudyQuantity(str(run_id), collective.quantity, ranks, measured, collective=collective, fitted_on=fitted_on)
                )
    return out


def _ranks(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in ranks)


def _compute_ms(steps: pd.DataFrame, colls: pd.DataFrame, scopes: Sequence[str]) -> pd.Series:
    """Per (rank, step): the kernel time the scopes launched, less their NCCL kernels."""
    mine = steps[steps["scope"].isin(scopes)]
    kernels = mine.groupby(["rank", "step"])["gpu_kernel_ms"].sum()
    if not len(kernels):
        return kernels
    nccl = colls[colls["scope"].isin(scopes)] if len(colls) else colls
    if len(nccl):
        kernels = kernels.sub(nccl.groupby(["rank", "step"])["transfer_span_ms"].sum(min_count=1), fill_value=0.0)
    return kernels


def _equal_work(program: tuple[RankWork, ...], traced: tuple[int, ...], part: str) -> list[tuple[tuple[int, ...], Compute]]:
    """The traced ranks grouped by equal work of ``part`` (fwd_bwd or optimizer), in rank order."""
    groups: dict[Compute, list[int]] = {}
    for work in program:
        compute = getattr(work, part)
        if compute is not None and work.rank in traced:
            groups.setdefault(compute, []).append(work.rank)
    return [(tuple(ranks), compute) for compute, ranks in groups.items()]


def _collectives(program: tuple[RankWork, ...], traced: tuple[int, ...]) -> list[tuple[StudyCollective, tuple[int, ...]]]:
    """Each distinct collective of the program once, with the traced ranks of its group."""
    seen: dict[StudyCollective, None] = {}
    for work in program:
        for c in work.collectives:
            seen.setdefault(c, None)
    return [(c, tuple(r for r in c.group if r in traced)) for c in seen if any(r in traced for r in c.group)]


def _transfer_ms(colls: pd.DataFrame, c: StudyCollective, ranks: tuple[int, ...]) -> float | None:
    if colls.empty or "transfer_ms" not in colls.columns:
        return None
    sel = colls[
        (colls["op"] == c.op)
        & (colls["dtype"] == c.dtype)
        & (colls["elements"].astype("int64") == c.elements)
        & (colls["group_ranks"].astype(str) == _ranks(c.group))
        & colls["rank"].isin(ranks)
    ]["transfer_ms"].astype("float64")
    sel = sel[np.isfinite(sel)]
    return float(sel.median()) if len(sel) else None


# ---------------------------------------------------------------- prices


def price_ms(q: StudyQuantity, profile: MachineProfile) -> float:
    """The quantity's time on ``profile`` by the cost model: its kernels' time, or its collective's alpha-beta time."""
    if q.compute is not None:
        return sum(kernel_seconds(q.compute, profile, "bf16", q.model_dtype)) * 1e3
    c = q.collective
    assert c is not None
    fit = profile.collective(c.op, len(c.group), SCOPE, STUDY_WORLD)
    return profile.collective_seconds(fit, c.ring_bytes, SCOPE) * 1e3


def _unit_profile(profile: MachineProfile) -> MachineProfile:
    """``profile`` with the fitted kinds at efficiency 1 and every alpha at 0: what prices a factor's coefficient."""
    return replace(
        profile,
        efficiency={**profile.efficiency, **dict.fromkeys(FIT_KINDS, 1.0)},
        collectives=tuple(replace(c, alpha_us=0.0) for c in profile.collectives),
        day_speed=1.0,
    )


def _coefficients(q: StudyQuantity, unit: MachineProfile) -> np.ndarray:
    """The quantity's price as a linear form in (1/efficiency of each FIT_KINDS, alpha_us of each FIT_ALPHA_OPS), ms."""
    row = np.zeros(len(FIT_KINDS) + len(FIT_ALPHA_OPS))
    if q.compute is not None:
        w = q.compute
        parts = (
            Compute(matmul_flops=w.matmul_flops, attention_flops=w.attention_flops),
            Compute(ns_flops=w.ns_flops),
            Compute(vector_bytes=w.vector_bytes),
        )
        for k, part in enumerate(parts):
            row[k] = sum(kernel_seconds(part, unit, "bf16", q.model_dtype)) * 1e3
        return row
    c = q.collective
    assert c is not None
    row[FIT_KINDS.index(SCOPE)] = price_ms(q, unit)  # bytes / beta: what 1/efficiency scales
    if c.op in FIT_ALPHA_OPS:
        row[len(FIT_KINDS) + FIT_ALPHA_OPS.index(c.op)] = 1e-3  # one call's alpha, us in ms
    return row


def _parameters(profile: MachineProfile) -> np.ndarray:
    inverse = [1.0 / profile.efficiency.get(kind, 1.0) for kind in FIT_KINDS]
    alphas = [profile.collective(op, 2, SCOPE).alpha_us for op in FIT_ALPHA_OPS]
    return np.array(inverse + alphas, dtype=np.float64)


# ---------------------------------------------------------------- the fit


@dataclass(frozen=True)
class StudyFit:
    """What the fit found: per kind its efficiency, per op its alpha, over ``rows`` quantities."""

    efficiency: dict[str, float]
    alpha_us: dict[str, float]
    rows: int
    method: str = (
        "bounded least squares of the relative errors, linear in 1/efficiency and alpha, over the synchronous runs' "
        "quantities (each weighs the same)"
    )
    at_bound: tuple[str, ...] = ()  # the factors held at a bound of their range


def fit_study_factors(quantities: Sequence[StudyQuantity], profile: MachineProfile | None = None) -> StudyFit:
    """Fit the profile's efficiencies (FIT_KINDS) and alphas (FIT_ALPHA_OPS) to the quantities ``fitted_on`` (see the
    module docstring). A factor no quantity constrains, or that the quantities cannot tell apart from the others,
    keeps the profile's value."""
    profile = profile or resolve_profile(STUDY_MACHINE)
    used = [q for q in quantities if _fits(q)]
    if not used:
        raise ValueError("no measured quantity to fit the study profile to: are the study tables empty?")
    unit = _unit_profile(profile)
    a = np.array([_coefficients(q, unit) for q in used])
    m = np.array([q.measured_ms for q in used])
    weighted = (a / m[:, None]).tolist()  # element-wise, so the same bits on every CPU, as least_squares is
    names = [*FIT_KINDS, *(f"alpha.{op}" for op in FIT_ALPHA_OPS)]
    low = np.array([1.0] * len(FIT_KINDS) + [ALPHA_US.low] * len(FIT_ALPHA_OPS))
    high = np.array([1.0 / EFFICIENCY.low] * len(FIT_KINDS) + [ALPHA_US.high] * len(FIT_ALPHA_OPS))
    start = _parameters(profile)
    free = np.abs(a).sum(axis=0) > 0
    held = {j: float(start[j]) for j in range(len(names)) if not free[j]}  # nothing depends on it: the profile's value
    bounded: set[int] = set()
    for _ in range(len(names) + 1):
        solve = [j for j in range(len(names)) if j not in held]
        theta = np.array([held.get(j, 0.0) for j in range(len(names))])
        if solve:
            held_part = theta.tolist()
            rest = [1.0 - math.fsum(w * t for w, t in zip(row, held_part)) for row in weighted]
            fit = least_squares([[row[j] for j in solve] for row in weighted], rest)
            if fit.dependent:  # the quantities price it only together with others: the profile's value, the rest refitted
                held.update({solve[i]: float(start[solve[i]]) for i in fit.dependent})
                continue
            theta[solve] = fit.solution
        out = [j for j in solve if not low[j] <= theta[j] <= high[j]]
        if not out:
            break
        held.update({j: float(np.clip(theta[j], low[j], high[j])) for j in out})  # held at its bound, the rest refitted
        bounded.update(out)
    theta = np.clip(theta, low, high)
    fitted = [free[j] and (j not in held or j in bounded) for j in range(len(names))]
    efficiency = {kind: float(1.0 / theta[k]) for k, kind in enumerate(FIT_KINDS) if fitted[k]}
    alpha = {op: float(theta[len(FIT_KINDS) + k]) for k, op in enumerate(FIT_ALPHA_OPS) if fitted[len(FIT_KINDS) + k]}
    return StudyFit(efficiency, alpha, len(used), at_bound=tuple(names[j] for j in sorted(bounded)))


def _fits(q: StudyQuantity) -> bool:
    """Whether the fit uses ``q``: a quantity of a synchronous run, with a measured time."""
    return q.fitted_on and q.measured_ms > 0 and math.isfinite(q.measured_ms)


def apply_fit(profile: MachineProfile, fit: StudyFit) -> MachineProfile:
    """``profile`` with the fitted efficiencies and alphas, renamed ``<name>-fitted-to-study``."""
    shown = ", ".join(f"{k} {v:.3g}" for k, v in fit.efficiency.items())
    alphas = ", ".join(f"{op} {v:.3g} us" for op, v in fit.alpha_us.items())
    return replace(
        profile,
        name=f"{profile.name}{FITTED_SUFFIX}",
        description=f"{profile.description} Efficiencies and alphas fitted to the study's measured kernel times "
        f"(muon_repro.study.costmodel_check): efficiency {shown}; alpha {alphas}.",
        efficiency={**profile.efficiency, **fit.efficiency},
        collectives=tuple(replace(c, alpha_us=fit.alpha_us.get(c.op, c.alpha_us)) for c in profile.collectives),
    )


def fitted_study_profile(
    study_steps: pd.DataFrame, study_collectives: pd.DataFrame, profile: MachineProfile | None = None
) -> MachineProfile:
    """The study machine's profile (default the shipped one) with its efficiencies and alphas fitted to the study's
    measured kernel times (:func:`fit_study_factors`)."""
    profile = profile or resolve_profile(STUDY_MACHINE)
    return apply_fit(profile, fit_study_factors(study_quantities(study_steps, study_collectives), profile))


# ---------------------------------------------------------------- the tables


def study_costmodel_table(
    study_steps: pd.DataFrame, study_collectives: pd.DataFrame, profile: MachineProfile | None = None
) -> pd.DataFrame:
    """One row per (run, quantity): the measured median against the datasheet profile's price and the fitted one's
    (relative errors: predicted / measured - 1); ``fitted_on`` says which rows the fit used. With nothing to fit to
    (only the async runs: the others not given, or left out for a damaged trace) the fitted columns are empty."""
    profile = profile or resolve_profile(STUDY_MACHINE)
    quantities = study_quantities(study_steps, study_collectives)
    if not quantities:
        return pd.DataFrame(columns=list(COLUMNS))
    fitted = apply_fit(profile, fit_study_factors(quantities, profile)) if any(map(_fits, quantities)) else None
    rows = []
    for q in quantities:
        datasheet, refit = price_ms(q, profile), price_ms(q, fitted) if fitted else math.nan
        rows.append(
            {
                "run": q.run,
                "profile": profile.name,
                "quantity": q.quantity,
                "ranks": _ranks(q.ranks),
                "measured_ms": q.measured_ms,
                "datasheet_ms": datasheet,
                "datasheet_rel_error": datasheet / q.measured_ms - 1,
                "fitted_ms": refit,
                "fitted_rel_error": refit / q.measured_ms - 1,
                "fitted_on": q.fitted_on,
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def study_threshold_shift(
    fitted: MachineProfile, datasheet: MachineProfile | None = None, models: Sequence[str] | None = None
) -> pd.DataFrame:
    """How far the fit moves the regime thresholds the cost model computes for the study's machine
    (:data:`~muon_repro.costmodel.records.THRESHOLD_SETTINGS` on :data:`STUDY_MACHINE`; ``models``: their names, default
    all): per metric and level, the tokens per step on the datasheet profile and on ``fitted``, and fitted / datasheet.
    Predicts every grid point (torch at call time, for the shard plans), a few seconds per model."""
    from muon_repro.costmodel.records import THRESHOLD_SETTINGS, threshold_rows, token_grid

    datasheet = datasheet or resolve_profile(STUDY_MACHINE)
    rows = []
    for setting in THRESHOLD_SETTINGS:
        if setting.machine != STUDY_MACHINE or (models is not None and setting.model.name not in models):
            continue
        before = threshold_rows(setting, list(token_grid(setting, datasheet)))
        after = threshold_rows(setting, list(token_grid(setting, fitted)))
        for b, a in zip(before, after):
            was, now = b["tokens_per_step"], a["tokens_per_step"]
            rows.append(
                {
                    "profile": STUDY_MACHINE,
                    "machine": fitted.name,
                    "model": setting.model.name,
                    "d_model": setting.model.d_model,
                    "dp": setting.dp,
                    "tp": setting.tp,
                    "metric": b["metric"],
                    "level": b["level"],
                    "datasheet_tokens_per_step": was,
                    "fitted_tokens_per_step": now,
                    "ratio": now / was if was and now is not None else None,
                }
            )
    return pd.DataFrame(rows, columns=list(THRESHOLD_COLUMNS))
