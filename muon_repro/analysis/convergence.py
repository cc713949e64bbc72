"""The convergence tables, from ``muon-repro converge``'s run records (``convergence.json``); torch-free.

* ``convergence``: one row per run and step: training loss (and its EWM), validation and test
  loss and update RMS where evaluated, the step's wall time, the scheduled learning rate.
* ``convergence_runs``: one row per run: optimizer, learning rate, seed, model, corpus, command,
  final losses, FLOPs per step and median step time (built here on the step rows, stored apart:
  :func:`muon_repro.tables.joins.convergence_with_runs` joins them back).
* ``leading_steps``: Moonshot's "Muon leading steps", per seed and smoothing: for each Muon step
  ``m``, the first AdamW step ``a`` whose smoothed training loss is at or below Muon's at ``m``;
  ``leading_steps = a - m`` and ``leading_ratio = (a - m) / m``, and the same lead in FLOPs and in
  wall clock (:func:`cost_ratio`). Each optimizer at its best learning rate (lowest final
  *validation* loss at seed 0; the test split is only reported), the two runs of a pair sharing
  the seed (same initial weights, same batches). Each row also carries, per smoothing, the leading
  ratio at the end in each unit as a mean over seeds with its t interval, and the final test loss
  of each optimizer likewise: the numbers the claim and the report state.

:func:`leading_steps` is the pure definition; :func:`ewm` the smoothing (pandas, ``adjust=False``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from muon_repro.analysis.rounds import mean_interval
from muon_repro.rundir import CONVERGENCE_FILE, CONVERGENCE_GROUP, SideFileError, convergence_profile, load_json
from muon_repro.values import command_line, recorded_commit

EWM_ALPHAS = (0.05, 0.005)
"""Smoothings recorded in ``leading_steps``; the first is the headline (alpha = 0.005 hid a real gap
in a short run of the PR thread that alpha = 0.05 showed)."""
HEADLINE_ALPHA = EWM_ALPHAS[0]
OPTIMIZERS = ("muon", "adamw")
TABLES = ("convergence", "convergence_runs", "leading_steps", "leading_summary", "budget_match")
"""The tables made from convergence records (``convergence`` holds each run's curve, ``convergence_runs`` the rest)."""
UNITS = {"steps": "leading_ratio", "flops": "leading_ratio_flops", "wall": "leading_ratio_wall"}
"""The leading ratio's units, each with its leading_steps column (the end ratios' summaries are ``end_<column>_*``)."""


def ewm(values: Sequence[float], alpha: float) -> np.ndarray:
    """Exponentially weighted mean, ``y_t = alpha x_t + (1 - alpha) y_{t-1}``, ``y_0 = x_0``."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    return pd.Series(np.asarray(values, dtype=float)).ewm(alpha=alpha, adjust=False).mean().to_numpy()


def leading_steps(muon_loss: Sequence[float], adamw_loss: Sequence[float], steps: Sequence[int] | None = None) -> pd.DataFrame:
    """For each Muon step, the first AdamW step whose loss is at or below Muon's loss there.

    ``muon_loss`` and ``adamw_loss`` are (already smoothed) losses at the same ``steps``
    (default 1, 2, ...; steps must be positive for the ratio). Columns: ``muon_step``,
    ``adamw_matching_step`` (null when AdamW never gets that low), ``leading_steps`` (= AdamW
    step - Muon step: positive when Muon is ahead), ``leading_ratio`` (= leading_steps / muon_step).
    """
    m = np.asarray(muon_loss, dtype=float)
    a = np.asarray(adamw_loss, dtype=float)
    if m.shape != a.shape or m.ndim != 1:
        raise ValueError(f"muon_loss and adamw_loss must be 1-D and of one length, got {m.shape} and {a.shape}")
    s = np.arange(1, len(m) + 1) if steps is None else np.asarray(steps, dtype=np.int64)
    if s.shape != m.shape or (len(s) and (s[0] < 1 or np.any(np.diff(s) <= 0))):
        raise ValueError("steps must be increasing positive integers, one per loss value")
    # AdamW's best loss so far never rises, so "first step at or below x" is a binary search.
    best_so_far = np.minimum.accumulate(np.where(np.isfinite(a), a, np.inf)) if len(a) else a
    idx = np.searchsorted(-best_so_far, -m, side="left")
    matched = (idx < len(a)) & np.isfinite(m)
    adamw_step = pd.array(np.where(matched, s[np.minimum(idx, len(s) - 1)] if len(s) else 0, 0), dtype="Int64")
    adamw_step[~matched] = pd.NA
    lead = adamw_step - pd.array(s, dtype="Int64")
    return pd.DataFrame(
        {
            "muon_step": pd.array(s, dtype="Int64"),
            "adamw_matching_step": adamw_step,
            "leading_steps": lead,
            "leading_ratio": lead.astype("Float64") / pd.array(s, dtype="Float64"),
        }
    )


def cost_ratio(leading_ratio: pd.Series | float, muon_cost: float, adamw_cost: float) -> pd.Series | float:
    """The leading ratio counted in a cost per step instead of steps: AdamW's cost to reach Muon's loss over
    Muon's, less 1: ``(a c_a) / (m c_m) - 1 = (1 + leading_ratio) c_a / c_m - 1``, with ``c`` the FLOPs or
    the wall time of one step of each run (null when either is unknown)."""
    if not (muon_cost and adamw_cost and np.isfinite(muon_cost) and np.isfinite(adamw_cost)):
        return leading_ratio * np.nan
    return (1.0 + leading_ratio) * (float(adamw_cost) / float(muon_cost)) - 1.0


def end_ratio(table: pd.DataFrame) -> tuple[float, int | None, bool]:
    """The leading ratio at the last Muon step AdamW matched; that step; and whether Muon's
    last steps were beyond AdamW's reach (Muon ahead at the end, the ratio then a lower bound)."""
    matched = table.dropna(subset=["adamw_matching_step"])
    if matched.empty:
        return float("nan"), None, len(table) > 0
    last = matched.iloc[-1]
    return float(last["leading_ratio"]), int(last["muon_step"]), int(last["muon_step"]) < int(table["muon_step"].iloc[-1])


# ---------------------------------------------------------------- reading the records


def find_records(paths: Iterable[str | Path]) -> list[Path]:
    """Every ``convergence.json`` under ``paths`` (files as given), outside hidden folders, sorted."""
    found: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if p.is_file() and p.name == CONVERGENCE_FILE:
            found.add(p)
        elif p.is_dir():
            found.update(
                f for f in p.rglob(CONVERGENCE_FILE) if not any(part.startswith(".") for part in f.relative_to(p).parts[:-1])
            )
    return sorted(found)


def _run_rows(record: dict) -> pd.DataFrame:
    """One run's rows, one per step (step 0 before any training: its evaluation only), built column by column in one
    frame (a frame grown column by column took most of the convergence tables' time)."""
    cfg, curve, model, corpus = record["config"], record["curve"], record.get("model", {}), record.get("corpus", {})
    steps = [0, *curve["step"]]
    at_eval = {step: i for i, step in enumerate(curve["eval_step"])}
    rows_of_evals = [at_eval.get(step) for step in steps]  # an evaluation at a step the curve lacks is left out

    def evaluated(values: Sequence | None) -> list:
        return [None if i is None or values is None else values[i] for i in rows_of_evals]

    step_ms = curve.get("step_ms")
    flops = record.get("flops_per_step") or {}
    train = np.asarray(curve["train_loss"], dtype=float)
    tokens_per_step = int(cfg["batch"]) * int(cfg["seq_len"])
    columns = {
        "run": record.get("name") or f"{cfg['optimizer']}_lr{cfg['lr']:g}_steps{cfg['steps']}_seed{cfg['seed']}",
        "step": steps,
        "train_loss": [None, *curve["train_loss"]],
        "scheduled_lr": [None, *curve["lr"]],
        "val_loss": evaluated(curve["val_loss"]),
        "update_rms": evaluated(curve["update_rms"]),
        "test_loss": evaluated(curve.get("test_loss") or None),  # records before format 2 have no test split
        "step_ms": [None, *(step_ms or [None] * len(curve["step"]))],
        "step_ms_median": pd.Series(step_ms, dtype="float64").median() if step_ms else None,
        "gflop_per_step": flops["total"] / 1e9 if "total" in flops else None,
        "ns_gflop_per_step": flops["orthogonalization"] / 1e9 if "orthogonalization" in flops else None,
        "train_loss_ewm": [None, *ewm(train, HEADLINE_ALPHA)] if len(train) else [None],
        "tokens": [step * tokens_per_step for step in steps],
        **{key: cfg[key] for key in ("optimizer", "lr", "seed", "dp", "tp", "weight_decay")},
        "steps": int(cfg["steps"]),
        "tokens_per_step": tokens_per_step,
        "backend": record.get("backend"),
        "params": model.get("params"),
        "embedding_share": model.get("embedding_share"),
        "corpus": corpus.get("name"),
        "corpus_version": corpus.get("version"),
        "corpus_license": corpus.get("license"),
        "corpus_sha256": corpus.get("sha256"),
        "vocab_size": model.get("vocab_size"),
        "wall_s": record.get("wall_s"),
        "ewm_alpha": HEADLINE_ALPHA,
        "command": command_line(record.get("command")),
        "git_sha": recorded_commit(record.get("environment")),
    }
    return pd.DataFrame(columns)


def sweep_steps(conv: pd.DataFrame) -> dict[str, int]:
    """Per optimizer, the run length of its learning-rate sweep: among its seed-0 runs, the length
    with the most learning rates (the shorter on a tie; `converge --sweep-steps` may be shorter than --steps)."""
    out = {}
    for opt in OPTIMIZERS:
        runs = conv[(conv["optimizer"] == opt) & (conv["seed"] == 0)].drop_duplicates(["lr", "steps"])
        if len(runs):
            counts = runs.groupby("steps")["lr"].nunique()
            out[opt] = int(counts[counts == counts.max()].index.min())
    return out


def best_lrs(conv: pd.DataFrame) -> dict[str, float]:
    """Per optimizer, the learning rate whose sweep run (seed 0) ends at the lowest validation loss
    (the test loss is never consulted); a run that diverged (no final loss) is never best."""
    best = {}
    for opt, steps in sweep_steps(conv).items():
        winner = _sweep_winner(conv[(conv["optimizer"] == opt) & (conv["seed"] == 0) & (conv["steps"] == steps)], steps)
        if winner is not None:
            best[opt] = winner
    return best


def best_lrs_by_length(conv: pd.DataFrame) -> dict[tuple[str, int], float | None]:
    """Per (optimizer, steps) that has a sweep of its own (seed-0 runs at two or more learning rates), its winner
    (:func:`_sweep_winner`): a longer schedule has its own best. None when every run of the sweep diverged."""
    return {
        (str(opt), int(steps)): _sweep_winner(runs, int(steps))
        for (opt, steps), runs in conv[conv["seed"] == 0].groupby(["optimizer", "steps"])
        if runs["lr"].nunique() >= 2
    }


def _sweep_winner(runs: pd.DataFrame, steps: int) -> float | None:
    """Among one sweep's runs (seed 0, ``steps`` long), the learning rate whose run reached its last step at the lowest
    validation loss, the smaller on a tie; None when every run diverged (no final loss)."""
    finals = runs[runs["step"] == steps].dropna(subset=["val_loss"]).sort_values("lr", kind="stable")
    return float(finals.loc[finals["val_loss"].astype(float).idxmin(), "lr"]) if len(finals) else None


def _leading_table(conv: pd.DataFrame, best: dict[str, float]) -> pd.DataFrame:
    """Per seed both optimizers ran at their best learning rate, its longest pair of runs of one length and schedule:
    per smoothing, the leading steps at each Muon step (:func:`leading_steps`) with the pair's per-step costs."""
    if set(best) != set(OPTIMIZERS):
        return pd.DataFrame()
    at_best = {  # per optimizer, its best learning rate's runs by (seed, steps)
        opt: dict(tuple(conv[(conv["optimizer"] == opt) & (conv["lr"] == best[opt])].groupby(["seed", "steps"])))
        for opt in OPTIMIZERS
    }
    frames = []
    for seed in sorted({seed for seed, _ in at_best["muon"]} & {seed for seed, _ in at_best["adamw"]}):
        common = {n for s, n in at_best["muon"] if s == seed} & {n for s, n in at_best["adamw"] if s == seed}
        if not common:
            continue
        steps = max(common)  # the longest pair of this seed
        m, a = (_trained(at_best[opt][(seed, steps)]) for opt in OPTIMIZERS)
        if len(m) != len(a) or not np.array_equal(m["step"].to_numpy(), a["step"].to_numpy()):
            continue  # only runs of the same length and schedule are compared
        costs = {f"{opt}_{col}": _run_value(run, col) for opt, run in (("muon", m), ("adamw", a)) for col in PER_STEP_COSTS}
        for alpha in EWM_ALPHAS:
            ms, as_ = ewm(m["train_loss"].astype(float), alpha), ewm(a["train_loss"].astype(float), alpha)
            t = leading_steps(ms, as_, m["step"].astype(int).to_numpy())
            ratio = t["leading_ratio"].astype("float64")
            columns = {
                "seed": int(seed),
                "alpha": alpha,
                "muon_lr": best["muon"],
                "adamw_lr": best["adamw"],
                **{name: t[name] for name in t.columns},
                "leading_ratio_flops": cost_ratio(ratio, costs["muon_gflop_per_step"], costs["adamw_gflop_per_step"]),
                "leading_ratio_wall": cost_ratio(ratio, costs["muon_step_ms_median"], costs["adamw_step_ms_median"]),
                **costs,
                "at_end": _end_flags(t),
                "muon_loss_ewm": ms,
                "adamw_loss_ewm": as_,
                "corpus": m["corpus"].iloc[0],
            }
            frames.append(pd.DataFrame(columns))
    if not frames:
        return pd.DataFrame()
    lead = pd.concat(frames, ignore_index=True)
    return _with_summaries(lead, conv, best)


def _trained(run: pd.DataFrame) -> pd.DataFrame:
    """A run's rows after training began (step 0 is the evaluation before it), in step order."""
    return run[run["step"] > 0].sort_values("step")


PER_STEP_COSTS = ("gflop_per_step", "step_ms_median")  # the convergence table's per-run costs the ratios use


def _run_value(run: pd.DataFrame, column: str) -> float:
    """A per-run column's value (the same on each of the run's rows); NaN when the record lacks it."""
    values = pd.to_numeric(run[column], errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) else float("nan")


def _end_flags(table: pd.DataFrame) -> np.ndarray:
    """True on the row :func:`end_ratio` reads: the last Muon step AdamW matched."""
    _, step, _ = end_ratio(table)
    muon_steps = table["muon_step"].to_numpy(dtype=np.int64)  # every Muon step is known: leading_steps makes them
    return muon_steps == step if step is not None else np.zeros(len(table), dtype=bool)


def _with_summaries(lead: pd.DataFrame, conv: pd.DataFrame, best: dict[str, float]) -> pd.DataFrame:
    """Per smoothing, the end ratios in each unit over seeds (mean, t interval, seeds), and each optimizer's
    final test loss over the seeds of the pairs compared, on every row of that smoothing."""
    ends = lead[lead["at_end"]]
    for alpha, rows in lead.groupby("alpha"):
        at = ends[ends["alpha"] == alpha]
        lead.loc[rows.index, "seeds"] = int(at["leading_ratio"].notna().sum())
        one_sided = _bounded_below(rows)
        for column in UNITS.values():
            mean, low, high = mean_interval(at[column].astype("float64").to_numpy(dtype=float, na_value=np.nan))
            high = np.inf if one_sided else high  # stored as null, as the schema says
            lead.loc[rows.index, [f"end_{column}_mean", f"end_{column}_low", f"end_{column}_high"]] = [mean, low, high]
    seeds = sorted(set(lead["seed"]))  # every pair compared, whether or not AdamW matched Muon
    steps = int(lead["muon_step"].max())  # the pairs' length: AdamW's longer budgets are budget_match's
    for opt in OPTIMIZERS:
        mean, low, high = mean_interval(_final_test_losses(conv, opt, best[opt], seeds, steps))
        lead[[f"{opt}_test_loss_mean", f"{opt}_test_loss_low", f"{opt}_test_loss_high"]] = [mean, low, high]
    return lead


def _bounded_below(rows: pd.DataFrame) -> bool:
    """Whether the end ratios over ``rows``' seeds bound the lead from below only: on some seed AdamW never reached
    Muon's last smoothed loss (:func:`end_ratio`'s flag), so the ratio on that seed is a lower bound, or it has none and
    leaving it out biases the mean low. Their interval then has no high end."""
    return any(end_ratio(seed.sort_values("muon_step"))[2] for _, seed in rows.groupby("seed"))


def _final_test_losses(conv: pd.DataFrame, opt: str, lr: float, seeds: list[int], steps: int) -> np.ndarray:
    """The test loss at the last step of each seed's run of ``steps`` at ``lr`` (NaN for a run that stopped early)."""
    runs = conv[(conv["optimizer"] == opt) & (conv["lr"] == lr) & conv["seed"].isin(seeds) & (conv["steps"] == steps)]
    out = []
    for _, run in runs.groupby("seed"):
        last = run[run["step"] == run["steps"]]
        out.append(float(pd.to_numeric(last["test_loss"], errors="coerce").iloc[0]) if len(last) else float("nan"))
    return np.asarray(out, dtype=float)


def convergence_tables(paths: Iterable[str | Path]) -> dict[str, pd.DataFrame]:
    """:data:`TABLES` from every convergence record under ``paths``
    (empty, with their columns, when there is none), conformed to their schemas. Each hardware profile's
    group of runs (``<profile>/<group>/``: one model configuration) is its own sweep: best learning rates and pairs
    never mix profiles or configurations."""
    from muon_repro.analysis.budget_match import budget_match_table

    by_group: dict[tuple[str, str], list[pd.DataFrame]] = {}
    for path in find_records(paths):
        try:
            record = load_json(path)
        except SideFileError as exc:  # says why: truncated, not JSON, too large or too deep
            raise ValueError(f"{exc}; record the run again (muon-repro converge) or move it out") from None
        if "curve" not in record or "config" not in record:
            raise ValueError(f"{path}: not a convergence record (no 'config' or 'curve')")
        group = path.parent.parent.name or CONVERGENCE_GROUP  # <profile>/<group>/<run>/convergence.json
        by_group.setdefault((convergence_profile(record), group), []).append(_run_rows(record))
    tables: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for (profile, group), frames in sorted(by_group.items()):
        conv, lead = _group_tables(pd.concat(frames, ignore_index=True))
        conv = conv.assign(profile=profile, group=group)
        tables["convergence"].append(conv)
        tables["convergence_runs"].append(_runs_of(conv))
        curve, summary = split_leading(lead.assign(profile=profile, group=group))
        tables["leading_steps"].append(curve)
        tables["leading_summary"].append(summary)
        tables["budget_match"].append(budget_match_table(conv).assign(profile=profile, group=group))
    return {name: _conformed(name, frames) for name, frames in tables.items()}


def split_leading(lead: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The leading rows of one configuration as the two tables store them: per Muon step the curve
    (``leading_steps``), and once per seed and alpha what is constant over it (``leading_summary``);
    :func:`muon_repro.tables.joins.leading_with_summary` puts them back together."""
    from muon_repro.tables.joins import LEADING_KEYS
    from muon_repro.tables.schemas import SCHEMAS

    if lead.empty:
        return lead, lead
    curve = [c for c in SCHEMAS["leading_steps"].names if c in lead.columns]
    summary = [c for c in SCHEMAS["leading_summary"].names if c in lead.columns]
    return lead[curve], lead.drop_duplicates(list(LEADING_KEYS))[summary]


def _runs_of(conv: pd.DataFrame) -> pd.DataFrame:
    """One row per run of one configuration's step rows: their run columns, and the last step the run recorded with
    its validation and test loss (``convergence_runs``)."""
    last = conv.sort_values("step", kind="stable").groupby("run", sort=False).tail(1).set_index("run")
    runs = conv.drop_duplicates("run").set_index("run")
    runs["final_step"] = last["step"]
    runs["final_val_loss"] = last["val_loss"]
    runs["final_test_loss"] = last["test_loss"]
    return runs.reset_index()


def _conformed(name: str, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The frames of one table, concatenated and conformed to its schema; empty, with its columns, when none has rows."""
    from muon_repro.tables.schemas import SCHEMAS

    rows = SCHEMAS[name].rows_of(frames)
    return SCHEMAS[name].conform(rows) if len(rows) else rows


def _group_tables(conv: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One profile's and configuration's convergence rows with their best-lr and sweep flags, and its leading steps."""
    best = best_lrs(conv)
    by_length = best_lrs_by_length(conv)  # the main sweep's length among them, with the same winner
    conv["best_lr"] = [
        by_length.get((o, int(n)), best.get(o)) == lr for o, n, lr in zip(conv["optimizer"], conv["steps"], conv["lr"])
    ]
    sweep = sweep_steps(conv)
    conv["sweep"] = [seed == 0 and sweep.get(o) == n for o, seed, n in zip(conv["optimizer"], conv["seed"], conv["steps"])]
    conv = conv.sort_values(["optimizer", "lr", "steps", "seed", "step"], kind="stable").reset_index(drop=True)
    return conv, _leading_table(conv, best)
