"""The report's bullets on where its results stop holding: "Where the gains hold, vanish or invert"
(computed from the tables, never canned numbers; the section's tables are
:mod:`muon_repro.report.regimes_section`'s, its figures :mod:`muon_repro.report.regime_figures`') and "Limitations"."""

from __future__ import annotations

import pandas as pd

from muon_repro.claims import COMM_RATIO
from muon_repro.hardware import rows_of_profile
from muon_repro.phases import NEWTON_SCHULZ, OPTIMIZER_COMM_PHASES
from muon_repro.report import derive, stated, style
from muon_repro.report.claims_section import claim_measured
from muon_repro.report.data import ReportData, fmetric, is_missing, metric, study_profile
from muon_repro.report.formatting import mb, ms, pct, ratio
from muon_repro.report.profiler_cost import profiler_overhead_line
from muon_repro.report.results_section import adamw_partner, has_values, timed_together
from muon_repro.report.selection import grid_said, pipeline_runs, pp_of, representative_runs, run_label, sort_runs, study_runs
from muon_repro.report.setup_section import timed_steps_per_round
from muon_repro.values import counted


def regimes(data: ReportData, state: pd.DataFrame, bytes_totals: dict[str, float]) -> list[str]:
    """Where Muon's measured gains hold, vanish or invert in these runs: communication per grid, Newton-Schulz
    against forward+backward, the layouts' bytes, pure TP, optimizer state and a compute-bound optimizer."""
    runs, comp = study_runs(data.runs), study_runs(data.comparisons)  # the DP x TP question; PP has its own section
    muon = runs[runs["optimizer"] == "muon"]
    out = [
        *_communication(data, comp),
        *_pipeline_communication(data, pipeline_runs(data.comparisons)),
        *_newton_schulz_scaling(runs),
        *_layout_bytes(muon, bytes_totals),
        *_pure_tp(comp),
        *_state(data, runs, muon, state),
    ]
    shares = pd.Series([derive.optimizer_share(r) for _, r in muon.iterrows()], dtype="float64")
    if len(shares) and float(shares.min()) > 0.05:
        out.append(_optimizer_weight(data, muon, shares))
    if not out:
        out.append("No regime in these runs where Muon's measured gains disappear or invert.")
    return out


def _communication(data: ReportData, comp: pd.DataFrame) -> list[str]:
    """Where Muon communicates as long as AdamW or longer, where less, and which pairs are not compared in time."""
    out: list[str] = []
    worse, better = [], []
    col, what = _comm_ratio(comp)
    what += " in the profiled steps (the comparisons table)"
    apart = []  # recorded by another sweep than their AdamW twin: bytes compared, times not
    for _, c in comp.iterrows():
        where = f"{style.grid_label(int(c['dp']), int(c['tp']))} {str(c['layout']).replace('_', '-')}"
        if not timed_together(c):
            apart.append(f"{where} ({c['muon_run']})")
            continue
        comm_ratio = float(metric(c, col, "comparisons", "muon_run"))
        (worse if comm_ratio >= 1 else better).append(f"{where} ({comm_ratio:.2f}×, {c['muon_run']})")
    if worse:
        out.append(
            f"Muon spends as much {what} as AdamW or more at "
            + "; ".join(worse)
            + f". The original study's {COMM_RATIO:.2f}× at DP2·TP2 on 4 GPUs does not hold there{_study_comm_note(data)}"
            + f"{_claims_comm_note(data)}."
        )
    if better:
        out.append(f"Muon spends less {what} than AdamW at " + "; ".join(better) + ".")
    if apart:
        out.append(
            "Not compared in time, each recorded by another sweep than the AdamW run that did its work (a machine's "
            "speed drifts from one session to the next): " + "; ".join(apart) + "."
        )
    return out


def _comm_ratio(comp: pd.DataFrame) -> tuple[str, str]:
    """The comparisons column the communication bullets read, and what it measures: transfer time (from the group's
    last arrival) when the analysis splits it off, since waiting for a slower rank's Newton-Schulz is not
    communication (docs/method.md#wait-and-transfer); else communication time."""
    if has_values(comp, "comm_transfer_ms_ratio"):
        return "comm_transfer_ms_ratio", "communication transfer time (waiting for other ranks left out)"
    return "comm_ms_ratio", "communication time"


def _pipeline_communication(data: ReportData, comp: pd.DataFrame) -> list[str]:
    """The pipeline group's pairs, apart (their steps train in micro-batches): where Muon's communication time is
    below AdamW's and where not, each beside its bytes ratio, so that an inversion there is not left unsaid; then what
    the ratio measures on each kind of grid. Without stages it is the transfer time (:func:`_comm_ratio`). With stages
    it is not: the stages' point-to-point calls are never matched across ranks (analysis/waits.py), so each counts
    whole, blocked time included, and the per-call sum of overlapping calls exceeds the step; a ratio below 1 there
    says nothing about traffic, which the bytes ratio measures."""
    col, what = _comm_ratio(comp)
    pairs = [c for _, c in comp.iterrows() if timed_together(c) and not is_missing(c.get(col))]
    if not pairs:
        return []

    def said(c: pd.Series) -> str:
        return f"{grid_said(c)} {float(c[col]):.2f}× (bytes {ratio(c['comm_bytes_ratio'], 'comparisons.comm_bytes_ratio')})"

    below = [said(c) for c in pairs if float(c[col]) < 1]
    rest = [said(c) for c in pairs if float(c[col]) >= 1]
    staged = [c for c in pairs if pp_of(c) > 1]
    flat = [c for c in pairs if pp_of(c) <= 1]
    # With stages the column is not what its name says: the bullet names the column, then what it measures per grid
    measure = f"the comparisons table's {col}" if staged else what
    parts = (["less than AdamW at " + ", ".join(below)] if below else []) + (
        ["as much or more at " + ", ".join(rest)] if rest else []
    )
    out = (
        f"The pipeline group's runs (steps of micro-batches; profiled), Muon / AdamW communication time by {measure}: "
        "Muon spends " + "; ".join(parts) + "."
    )
    if staged and flat:
        out += f" Without pipeline stages ({', '.join(grid_said(c) for c in flat)}) that is {what}."
    if staged:
        out += " " + _point_to_point_said(data, staged, col)
    spread = [c for c in flat if float(c[col]) < 1 and float(c["comm_bytes_ratio"]) <= 1]
    if spread:
        out += (
            f" Where Muon sends no more bytes than AdamW ({', '.join(grid_said(c) for c in spread)}), a time ratio below 1 is "
            "the spread of the times, not less traffic."
        )
    return [out]


def _point_to_point_said(data: ReportData, staged: list[pd.Series], col: str) -> str:
    """What the communication ratio of the pairs with pipeline stages is: no transfer time, the stages' point-to-point
    calls counted whole; with the run whose summed transfer exceeds its step the most (runs table, profiled medians)."""
    grids = ", ".join(grid_said(c) for c in staged)
    said = (
        f"With pipeline stages ({grids}) it is no transfer time: the stages' point-to-point sends and receives are not "
        "matched across ranks, so each call counts whole, the time a stage sits blocked on its neighbour included"
    )
    if col == "comm_transfer_ms_ratio":
        said += ", and the calls' times are summed though they overlap, so the total is not comparable to a step"
        names = {str(c[k]) for c in staged for k in ("muon_run", "adamw_run")}
        runs = data.runs[data.runs["run"].isin(names)]
        runs = runs[[derive.has_value(r, "comm_transfer_ms") and fmetric(r, "step_ms") > 0 for _, r in runs.iterrows()]]
        if len(runs):
            r = runs.loc[(runs["comm_transfer_ms"].astype(float) / runs["step_ms"].astype(float)).idxmax()]
            said += (
                f" ({run_label(r)}: {ms(metric(r, 'comm_transfer_ms'))} of such time against its "
                f"{ms(metric(r, 'step_ms'))} profiled step, runs.comm_transfer_ms and step_ms)"
            )
    below = [grid_said(c) for c in staged if float(c[col]) < 1]
    return (
        said
        + ". Its ratios there compare how long the calls lasted, blocked time included"
        + (f", so the ratios below 1 ({', '.join(below)}) cannot be read as less traffic" if below else "")
        + ": the bytes ratio beside each measures the traffic."
    )


def _claims_comm_note(data: ReportData) -> str:
    """The claims table's DP2·TP2 ratio beside the profiled one above: another estimator of the same runs."""
    row = stated.row_of(data.claims, "claim_id", stated.COMM_CLAIM, data.profile)
    if row is None or is_missing(row["measured_value"]):
        return ""
    return (
        "; the claims table's DP2·TP2 figure, from the steps timed without the profiler, paired by round, is "
        f"{claim_measured(row)}"
    )


def _newton_schulz_scaling(runs: pd.DataFrame) -> list[str]:
    """Newton-Schulz against forward+backward on the first Muon run that has both: what makes Muon's optimizer step
    matter, and how it scales."""
    for _, r in representative_runs(runs).iterrows():
        if r["optimizer"] != "muon" or not all(
            derive.has_value(r, c) for c in ("ns_flops_max_rank", "train_flops", "world_size", "tokens_per_step")
        ):
            continue
        per_rank = fmetric(r, "train_flops") / fmetric(r, "world_size")
        if per_rank <= 0:
            return []
        return [
            f"{run_label(r)}: Newton-Schulz does {fmetric(r, 'ns_flops_max_rank') / 1e9:.3g} GFLOP per step "
            f"on the busiest rank, {fmetric(r, 'ns_flops_max_rank') / per_rank:.2g}× that rank's forward+backward "
            f"({per_rank / 1e9:.3g} GFLOP at {int(metric(r, 'tokens_per_step')):,} tokens per step). "
            "Forward+backward FLOPs grow with the tokens per step, "
            "Newton-Schulz FLOPs do not (they depend on the matrices alone): the more tokens a step trains, the smaller "
            "Muon's extra time per token."
        ]
    return []


def _layout_bytes(muon: pd.DataFrame, bytes_totals: dict[str, float]) -> list[str]:
    """What each ZeRO-1 layout costs in bytes against the contiguous layout at the same grid."""
    out = []
    for (dp, tp), g in muon.groupby(["dp", "tp"]):
        by_layout = {
            str(layout): bytes_totals[str(sort_runs(sub).iloc[0]["run"])] for layout, sub in g.groupby("layout", sort=False)
        }
        if "contiguous" in by_layout and len(by_layout) > 1:
            base = by_layout["contiguous"]
            parts = [f"{k.replace('_', '-')} {v / base:.2f}×" for k, v in by_layout.items() if k != "contiguous"]
            out.append(
                f"ZeRO-1 layout at {style.grid_label(int(dp), int(tp))}: optimizer bytes against the contiguous layout: "
                + ", ".join(parts)
                + " (bucketed gathers every matrix on every DP rank; whole-matrix needs no DP gather)."
            )
    return out


def _pure_tp(comp: pd.DataFrame) -> list[str]:
    """Pure TP: AdamW communicates nothing in its optimizer, so every byte of Muon's TP gather is extra."""
    return [
        f"{style.grid_label(1, int(c['tp']))}: with no data parallelism AdamW has no optimizer communication at all, "
        f"so every byte of Muon's TP gather is extra ({ratio(c['comm_bytes_ratio'], 'comparisons.comm_bytes_ratio')} "
        "AdamW's bytes, the model's own TP traffic included)."
        for _, c in comp[(comp["dp"] == 1) & (comp["tp"] > 1)].iterrows()
    ]


def _state(data: ReportData, runs: pd.DataFrame, muon: pd.DataFrame, state: pd.DataFrame) -> list[str]:
    """Optimizer state on the first Muon run with a state row: the 50% saving applies to the matrices only, uneven
    ZeRO-1 chunks, and transient gather buffers larger than the state saved."""
    state_by_run = state.set_index("run")
    for _, r in representative_runs(runs).iterrows():
        if r["optimizer"] != "muon" or r["run"] not in state_by_run.index:
            continue
        muon_state_bytes = float(state_by_run.loc[r["run"], "muon"])
        adamw_state_bytes = float(state_by_run.loc[r["run"], "adamw"])
        if muon_state_bytes + adamw_state_bytes <= 0:
            continue
        out = []
        # fp32: 1 value per Muon element, 2 per AdamW element
        matrix_share = (muon_state_bytes / 4) / (muon_state_bytes / 4 + adamw_state_bytes / 8)
        out.append(
            f"Optimizer state: {100 * matrix_share:.0f}% of the parameters are hidden matrices (Muon, one moment); "
            "embeddings, head and norms keep AdamW's two, "
            f"so the best ratio here is {(matrix_share + 2 * (1 - matrix_share)) / 2:.2f}×, not 0.5×; "
            "the larger the model, the closer to 0.5×."
        )
        uneven = [
            (float(state_by_run.loc[u, "largest"] / (state_by_run.loc[u, "muon"] + state_by_run.loc[u, "adamw"])), u)
            for u in muon["run"]
            if u in state_by_run.index
        ]
        worst, u = max(uneven)
        if worst > 1.2:
            u_row = runs[runs["run"] == u].iloc[0]
            out.append(
                f"{run_label(u_row)} ({u}): ZeRO-1 chunks split the state unevenly; "
                f"the largest rank holds {mb(state_by_run.loc[u, 'largest'])} "
                f"against a mean of {mb(state_by_run.loc[u, 'muon'] + state_by_run.loc[u, 'adamw'])} "
                "(a rank whose chunk is the embedding or head pays AdamW's two moments for it), "
                "so the memory that limits a run saves less than the mean suggests."
            )
        transient = float(state_by_run.loc[r["run"], "transient"])
        twin = adamw_partner(data, r)
        if twin and twin in state_by_run.index:
            saved = float(state_by_run.loc[twin, "adamw"] + state_by_run.loc[twin, "muon"]) - (
                muon_state_bytes + adamw_state_bytes
            )
            if transient > saved > 0:
                # in MB, as the checks table's state_with_transients explanation quotes the same bytes
                out.append(
                    f"{run_label(r)}: Muon's transient Newton-Schulz gather buffers peak at {mb(transient)} per rank, "
                    f"more than the {mb(saved)} of state it saves; at this model size the peak, not the steady state, "
                    "decides memory."
                )
        return out
    return []


def limitations(data: ReportData, everything: ReportData | None = None) -> list[str]:
    """What these runs (``data``: the report's profile) cannot say: the backend and devices, how few trials and steps,
    and their spread. ``everything``: every profile's tables, to name the runs read elsewhere in the report."""
    runs = data.runs
    backends = sorted({f"{b} on {d}" for b, d in zip(runs["backend"], runs["device"])})
    others = everything.runs if everything is not None else runs.iloc[:0]
    elsewhere = sorted(
        {f"{p} ({b} on {d})" for p, b, d in zip(others["profile"], others["backend"], others["device"]) if p != data.profile}
    )
    study = study_profile(everything) if everything is not None else None
    if study is not None and study != data.profile:
        elsewhere.append(f"{study} (the original study's own, nccl on cuda)")
    out = []
    if any(str(d) != "cuda" for d in runs["device"]):
        out.append(
            "gloo on CPU is not NCCL over PCIe or NVLink: collectives are memory copies between processes on the same host, "
            "all ranks share the host's cores (so compute and communication contend), and Newton-Schulz runs in fp32 on the CPU. "
            "Times answer 'how does the data flow behave', not 'how fast is it on GPUs'."
        )
    out.append(
        f"Backends and devices of the {data.profile} runs that this section and the report's main sections read: "
        f"{', '.join(backends)}"
        + (f"; the runs of {', '.join(elsewhere)} are read in their own sections, with their own limits" if elsewhere else "")
        + ". A claim made on GPUs is judged here by the same rule as any other; where it does not hold, its explanation "
        "names the measured cause on the machine that recorded the runs."
    )
    shapes = sorted(
        {(int(metric(r, "trials")), int(metric(r, "steps")) // max(int(metric(r, "trials")), 1)) for _, r in runs.iterrows()}
    )
    rounds = sorted({int(r["rounds"]) for _, r in runs.iterrows() if not is_missing(r.get("rounds"))})
    per_round = sorted(set(timed_steps_per_round(data.timed_steps[data.timed_steps["run"].isin(runs["run"])]).values()))
    of_steps = f" of {' or '.join(per_round)} steps each" if per_round else ""
    out.append(
        "Each run profiles "
        + ", ".join(f"{counted(t, 'trial')} × {counted(s, 'step')}" for t, s in shapes)
        + " after warm-up"
        + (f", and times its steps without the profiler in {', '.join(map(str, rounds))} rounds{of_steps}" if rounds else "")
        + "; the 95% intervals of the claims say how far so few rounds pin the medians down."
    )
    spreads = []
    for _, r in runs.iterrows():
        timed = (data.timed_steps["run"] == r["run"]).any()
        source, table = (data.timed_steps, "timed_steps") if timed else (data.steps, "steps")
        per_trial = derive.trial_medians(source, str(r["run"]), table)
        if len(per_trial) > 1 and float(per_trial.min()) > 0:
            spreads.append((float(per_trial.max() / per_trial.min()), r, per_trial))
    if spreads:
        ratio_, r, per_trial = max(spreads, key=lambda x: x[0])
        out.append(
            f"Round-to-round spread: the median step time of one round differs from another's by up to {ratio_:.2f}× "
            f"({run_label(r)}: {', '.join(ms(v) for v in per_trial)} in its {len(per_trial)} rounds); the machine is shared, "
            "which is why the rounds interleave all configurations and the claims pair them round by round."
        )
    dup = study_runs(runs).groupby(["optimizer", "dp", "tp", "layout", "overlap"])["step_ms"].agg(["count", "min", "max"])
    dup = dup[dup["count"] > 1]
    for (opt, dp, tp, layout, overlap), d in dup.iterrows():
        out.append(
            f"Run-to-run spread: {style.OPTIMIZER_LABELS.get(opt, opt)} {style.grid_label(int(dp), int(tp))} {layout} "
            f"(overlap {overlap}) was recorded {int(d['count'])} times, with median profiled step times from {ms(d['min'])} "
            f"to {ms(d['max'])}."
        )
    if (said := profiler_overhead_line(runs)) is not None:
        out.append(said)
    if (said := loss_line(data)) is not None:
        out.append(said)
    out.append(
        "Bytes count what each rank sends under the ring model (docs/method.md, Communication model); the trace's bytes come "
        "from call sizes, not from a NIC counter."
    )
    return out


def loss_line(data: ReportData) -> str | None:
    """What the runs' own losses show (losses table, the first traced round, the mean over ranks per step): each
    optimizer's first and last recorded loss on its first run in the report's order, and whether it fell. A handful
    of steps after the timed ones; the convergence section trains each optimizer at its best learning rate."""
    losses = data.losses
    if losses.empty:
        return None
    parts, flat = [], []
    for optimizer, runs in sort_runs(study_runs(data.runs)).groupby("optimizer", sort=False):
        run = runs.iloc[0]
        mine = losses[losses["run"] == run["run"]]
        if mine.empty:
            continue
        per_step = mine[mine["trial"] == mine["trial"].min()].groupby("step")["loss"].mean().sort_index()
        first, last = float(per_step.iloc[0]), float(per_step.iloc[-1])
        label = style.OPTIMIZER_LABELS.get(str(optimizer), str(optimizer))
        parts.append(
            f"{label} {first:.2f} to {last:.2f} over {len(per_step)} steps ({run_label(run)}, learning rate {run['lr']})"
        )
        if last >= first:
            flat.append(label)
    if not parts:
        return None
    verdict = (
        f"{' and '.join(flat)}'s loss does not fall over these few steps: the timing claims need only that every run trains "
        "the same work, and the convergence section trains each optimizer at its best learning rate."
        if flat
        else "Both fall; the convergence section compares them at their best learning rates."
    )
    return f"The runs' own loss, the first traced round's recorded steps after the timed ones: {'; '.join(parts)}. {verdict}"


def _study_comm_note(data: ReportData) -> str:
    """What the original study's own traces make of its communication claim, when they found unequal work."""
    study = study_profile(data)
    if study is None:
        return ""
    claims = rows_of_profile(data.claims, study)
    row = claims[claims["claim_id"] == "comm_time_dp2_tp2"]
    if row.empty or str(row["verdict"].iloc[0]) != "unequal work":
        return ""
    return "; on its own traces that figure compares unequal work (the claims table)"


def _optimizer_weight(data: ReportData, muon: pd.DataFrame, shares: pd.Series) -> str:
    """Muon's optimizer share of the step, and whether its Newton-Schulz or its collectives weigh more (phases:
    ms per step, the mean over ranks and traced trials, on each Muon run)."""
    span = pct(shares.min()) if pct(shares.min()) == pct(shares.max()) else f"{pct(shares.min())}–{pct(shares.max())}"
    on_cpu = set(muon["device"].astype(str)) == {"cpu"}
    where = " (Newton-Schulz on CPU cores shared by all ranks)" if on_cpu else ""
    said = (
        "on this hardware, in the DP x TP groups' runs (the pipeline group's, which train in micro-batches, are its "
        f"section's), the Muon optimizer step is {span} of the step{where}"
    )
    phases = data.phases[data.phases["run"].isin(muon["run"])]
    per_rank = phases.groupby(["run", "trial", "rank", "phase"])["ms_per_step"].sum().unstack("phase")
    if NEWTON_SCHULZ not in per_rank.columns:
        return f"Muon's optimizer step: {said}."
    comm_phases = [p for p in OPTIMIZER_COMM_PHASES if p in per_rank.columns]
    per_run = (
        pd.DataFrame({"ns": per_rank[NEWTON_SCHULZ].fillna(0.0), "comm": per_rank[comm_phases].fillna(0.0).sum(axis=1)})
        .groupby(level="run")
        .mean()
    )

    def ms_span(values: pd.Series) -> str:
        low, high = ms(values.min()), ms(values.max())
        return low if low == high else f"{low} to {high}"

    measured = f"Newton-Schulz takes {ms_span(per_run['ns'])} per step, the optimizer's collectives {ms_span(per_run['comm'])}"
    if (per_run["ns"] > per_run["comm"]).all():
        return (
            f"Compute-bound optimizer: {said}. {measured} (phases, mean over ranks): its computation, not its "
            "communication, decides Muon's step time here."
        )
    heavier = muon[muon["run"].isin(per_run.index[per_run["comm"] >= per_run["ns"]])]
    names = ", ".join(run_label(r) for _, r in heavier.iterrows())
    return (
        f"Muon's optimizer step: {said}. {measured} (phases, mean over ranks, waits for slower ranks included): "
        f"Newton-Schulz weighs more on every run but {names}, where the collectives take longer."
    )
