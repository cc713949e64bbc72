"""One convergence run on one rank: the tensor-parallel GPT, Distributed Muon or AdamW, real text.

Runs inside a worker whose ``torch.distributed`` world is initialized (our launcher or torchrun).
Every rank draws the same global batch from the training tokens (seeded by run seed and step)
and keeps its DP rank's rows; TP ranks of one DP rank see the same rows. Held-out loss is the
mean token loss over fixed windows, split over the DP ranks and summed back, on the validation
split (which picks the learning rates) and on the test split (which the results are reported on).
Each step's wall time (forward, backward and optimizer step, rank 0) is recorded, and the record
states the FLOPs of one step (:func:`step_flops`): what the leading ratio in compute and in wall
clock is computed from.

Resumable: every ``checkpoint_every`` steps each rank saves its model shard, its optimizer shard
and the curve so far into the run's hidden ``.partial`` folder (``rundir.checkpoint_name``);
a restart loads them (``torch.load(weights_only=True)``) when every rank has one of the same run
(config, corpus, tokenizer and backend: :mod:`muon_repro.converge.identity`). The sweep renames the
folder into place after removing the checkpoints.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from muon_repro.bench.speed_probe import measure_speed
from muon_repro.converge.config import ConvergeConfig
from muon_repro.converge.identity import run_identity
from muon_repro.formulas import NS_STEPS, muon_matrix_shapes, newton_schulz_flops
from muon_repro.model import GPT
from muon_repro.model_config import GPTConfig
from muon_repro.optim import DistributedAdamW, DistributedMuon, muon_param_groups
from muon_repro.optim.zero1 import ZeroOneOptimizer
from muon_repro.parallel import ParallelDims
from muon_repro.parallel.comm import Group
from muon_repro.rundir import CONVERGENCE_FILE, CONVERGENCE_LOG, checkpoint_name, write_json
from muon_repro.tables.files import write_atomic

EVAL_CHUNK = 32  # held-out windows per forward pass
# Element-wise FLOPs per parameter of one optimizer step, counted from muon_repro.optim.update_rules:
# AdamW: decay 1, first moment (lerp) 3, second moment 4, bias-corrected denominator 3, update (addcdiv) 3.
# Muon: momentum 2, Nesterov input 2, Newton-Schulz's normalization 3, decay 1, scaled update 2.
ADAMW_FLOPS_PER_PARAM = 14
MUON_FLOPS_PER_PARAM = 10


@dataclass(frozen=True)
class TokenData:
    """The tokenized corpus every rank receives (int32 ids) and what the record says about it."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    vocab_size: int
    facts: dict  # corpus facts plus the tokenizer's


def parameter_shares(mcfg: GPTConfig) -> dict:
    """Parameter counts of the full model: embeddings (+ LM head) and everything AdamW manages under Muon."""
    total = mcfg.num_params()
    embedding = 2 * mcfg.vocab_size * mcfg.hidden  # embedding table and LM head (untied)
    norms = (2 * mcfg.n_layers + 1) * mcfg.hidden
    return {
        "params": total,
        "embedding_params": embedding,
        "embedding_share": embedding / total,
        "adamw_managed_share_under_muon": (embedding + norms) / total,
        "muon_matrix_params": total - embedding - norms,
    }


def step_flops(cfg: ConvergeConfig, mcfg: GPTConfig) -> dict[str, int]:
    """FLOPs of one training step over all ranks, as the record states them: forward and backward
    (:meth:`GPTConfig.flops_per_token` x tokens per step), Newton-Schulz on every Muon matrix (Muon
    only, each matrix once, :func:`~muon_repro.formulas.newton_schulz_flops`) and the optimizers' element-wise work."""
    forward_backward = mcfg.flops_per_token(cfg.seq_len) * cfg.tokens_per_step
    shapes = muon_matrix_shapes(mcfg)
    matrix_params = sum(a * b for a, b in shapes)
    if cfg.optimizer == "muon":
        ns = sum(newton_schulz_flops(s, NS_STEPS) for s in shapes)
        elementwise = MUON_FLOPS_PER_PARAM * matrix_params + ADAMW_FLOPS_PER_PARAM * (mcfg.num_params() - matrix_params)
    else:
        ns, elementwise = 0, ADAMW_FLOPS_PER_PARAM * mcfg.num_params()
    return {
        "forward_backward": forward_backward,
        "orthogonalization": ns,  # Newton-Schulz
        "elementwise": elementwise,
        "total": forward_backward + ns + elementwise,
    }


def build_optimizer(cfg: ConvergeConfig, model: GPT, dims: ParallelDims) -> ZeroOneOptimizer:
    """Weight decay on every parameter (matrices, embeddings, head and RMSNorm gains alike)."""
    groups = muon_param_groups(model)
    if cfg.optimizer == "adamw":
        return DistributedAdamW(groups, dims, lr=cfg.lr, weight_decay=cfg.weight_decay)
    # Moonlight's update (0.2*sqrt(max(A,B)) matches AdamW's update RMS); the same lr drives the
    # AdamW-managed embeddings, head and norms, as in the paper.
    return DistributedMuon(groups, dims, lr=cfg.lr, weight_decay=cfg.weight_decay, update_scale="moonlight", ns_steps=NS_STEPS)


def global_batch(train: torch.Tensor, cfg: ConvergeConfig, step: int) -> torch.Tensor:
    """``[batch, seq_len + 1]`` random windows of the training tokens, the same on every rank."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    starts = torch.randint(0, train.numel() - cfg.seq_len - 1, (cfg.batch,), generator=gen)
    return train[starts[:, None] + torch.arange(cfg.seq_len + 1)]


def eval_windows(tokens: torch.Tensor, cfg: ConvergeConfig, split: str = "validation") -> torch.Tensor:
    """The fixed held-out windows, evenly spaced over a held-out split's tokens."""
    last = tokens.numel() - cfg.seq_len - 1
    if last < 0:
        raise ValueError(f"the {split} split has {tokens.numel()} tokens, fewer than seq_len + 1 = {cfg.seq_len + 1}")
    starts = torch.linspace(0, last, cfg.eval_windows).round().long()
    return tokens[starts[:, None] + torch.arange(cfg.seq_len + 1)]


def _dp_sum(values: torch.Tensor, group: Group) -> torch.Tensor:
    if group.size > 1:
        dist.all_reduce(values, group=group.process_group)
    return values


@torch.no_grad()
def held_out_loss(model: GPT, windows: torch.Tensor, dims: ParallelDims, device: torch.device) -> float:
    """Mean next-token loss over every window; DP ranks take every dp-th window and sum back."""
    mine = windows[dims.dp_rank :: dims.dp]
    totals = torch.zeros(2, dtype=torch.float64)
    for chunk in mine.split(EVAL_CHUNK):
        chunk = chunk.to(device)
        loss = model(chunk[:, :-1], chunk[:, 1:])
        totals += torch.tensor([loss.item() * chunk[:, 1:].numel(), chunk[:, 1:].numel()], dtype=torch.float64)
    totals = _dp_sum(totals, dims.dp_group)
    return float(totals[0] / totals[1])


def _evaluate(
    curve: Curve, step: int, model: GPT, held_out: tuple[torch.Tensor, torch.Tensor], dims: ParallelDims, device: torch.device
) -> None:
    """Record the validation and the test loss after ``step``."""
    val, test = (round(held_out_loss(model, windows, dims, device), 5) for windows in held_out)
    curve.eval_step.append(step)
    curve.val_loss.append(val)
    curve.test_loss.append(test)


def hidden_matrices(model: GPT) -> list[torch.Tensor]:
    """The matrices Muon orthogonalizes (the same set under AdamW, for a like-for-like update RMS)."""
    return [p for g in muon_param_groups(model) if g["use_muon"] for p in g["params"]]


def update_rms(before: list[torch.Tensor], after: list[torch.Tensor], lr: float, wd: float, tp_group: Group) -> float:
    """Mean over the hidden matrices of the RMS of the update without weight decay, per unit lr:
    ``(W_old (1 - lr wd) - W_new) / lr``; squares summed over TP shards so each RMS is the full matrix's."""
    sums = torch.tensor(
        [[((b * (1 - lr * wd) - a) / lr).double().square().sum(), a.numel()] for b, a in zip(before, after)], dtype=torch.float64
    )
    if tp_group.size > 1:
        dist.all_reduce(sums, group=tp_group.process_group)
    return float((sums[:, 0] / sums[:, 1]).sqrt().mean())


class Curve:
    """What the run records as it goes (plain lists, so a checkpoint holds them as they are)."""

    def __init__(self, state: dict | None = None) -> None:
        state = state or {}
        self.step: list[int] = list(state.get("step", []))
        self.train_loss: list[float] = list(state.get("train_loss", []))
        self.lr: list[float] = list(state.get("lr", []))
        self.step_ms: list[float] = list(state.get("step_ms", []))  # forward + backward + optimizer step, rank 0
        self.eval_step: list[int] = list(state.get("eval_step", []))
        self.val_loss: list[float] = list(state.get("val_loss", []))
        self.test_loss: list[float] = list(state.get("test_loss", []))
        self.update_rms: list[float | None] = list(state.get("update_rms", []))

    def state(self) -> dict:
        return {k: list(v) for k, v in vars(self).items()}


def _save_checkpoint(
    path: Path, identity: dict, step: int, model: GPT, opt: ZeroOneOptimizer, curve: Curve, elapsed: float
) -> None:
    checkpoint = {
        "config": identity["config"],
        "identity": identity,  # config, corpus, tokenizer, backend: what a resume must share (converge.identity)
        "step": step,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "curve": curve.state(),
        "elapsed_s": elapsed,
    }
    write_atomic(path, lambda tmp: torch.save(checkpoint, tmp))


def _load_checkpoint(path: Path, identity: dict) -> dict | None:
    """The checkpoint at ``path`` if it is of this run (:func:`run_identity`: same config, text, tokenizer and
    backend) and of this curve layout; None to start over (an older checkpoint names no identity)."""
    if not path.is_file():
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a checkpoint cut short by a kill: start over
        return None
    same_curve = set(ckpt.get("curve") or {}) == set(Curve().state())  # an older layout (no test loss) starts over
    return ckpt if ckpt.get("identity") == identity and same_curve else None


def _agreed_resume_step(ckpt: dict | None) -> int:
    """The step every rank can resume from: 0 unless all ranks hold a checkpoint of the same step."""
    step = torch.tensor([ckpt["step"] if ckpt else 0, -(ckpt["step"] if ckpt else 0)], dtype=torch.int64)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(step, op=dist.ReduceOp.MIN)
    low, high = int(step[0]), -int(step[1])
    return low if low == high else 0


def train_run(cfg: ConvergeConfig, data: TokenData, run_dir: str, backend: str, record_base: dict, progress: bool = True) -> None:
    """Train ``cfg`` on this rank; rank 0 writes ``convergence.json`` (+ log) into ``run_dir``."""
    run_path = Path(run_dir)
    dims = ParallelDims(cfg.dp, cfg.tp)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    probe = measure_speed(device.type)  # how fast the machine ran as this run started: beside its wall time
    torch.manual_seed(cfg.seed)
    mcfg = cfg.gpt_config(data.vocab_size)
    model = GPT(mcfg, dims.tp_group, device=device)
    opt = build_optimizer(cfg, model, dims)
    matrices = hidden_matrices(model)
    train = torch.from_numpy(data.train.astype(np.int64))
    val_windows = eval_windows(torch.from_numpy(data.val.astype(np.int64)), cfg)
    test_windows = eval_windows(torch.from_numpy(data.test.astype(np.int64)), cfg, "test")
    rows = slice(dims.dp_rank * (cfg.batch // cfg.dp), (dims.dp_rank + 1) * (cfg.batch // cfg.dp))

    ckpt_path = run_path / checkpoint_name(dims.rank)
    identity = run_identity(cfg, data.facts, backend)
    start, curve, elapsed = _resume(ckpt_path, identity, model, opt)

    t0 = time.perf_counter()
    held_out = (val_windows, test_windows)
    if start == 0:
        _evaluate(curve, 0, model, held_out, dims, device)
        curve.update_rms.append(None)
    log_every = max(1, cfg.steps // 20)
    diverged: int | None = None
    for step in range(start + 1, cfg.steps + 1):
        lr = cfg.lr_at(step)
        for group in opt.param_groups:
            group["lr"] = lr
        t_step = time.perf_counter()
        batch = global_batch(train, cfg, step)[rows].to(device)
        loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        evaluating = step % cfg.eval_every == 0 or step == cfg.steps
        before = [p.detach().clone() for p in matrices] if evaluating else None  # one step in eval_every: the median ignores it
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step_ms = (time.perf_counter() - t_step) * 1000.0
        mean_loss = float(_dp_sum(loss.detach().double().reshape(1), dims.dp_group) / dims.dp)
        if not math.isfinite(mean_loss):  # every rank sees the same mean: all stop here, and the record says so
            diverged = step
            break
        curve.step.append(step)
        curve.train_loss.append(round(mean_loss, 5))
        curve.lr.append(float(f"{lr:.6g}"))
        curve.step_ms.append(round(step_ms, 3))
        if evaluating:
            _evaluate(curve, step, model, held_out, dims, device)
            curve.update_rms.append(
                round(update_rms(before, [p.detach() for p in matrices], lr, cfg.weight_decay, dims.tp_group), 5)
            )
        if progress and dims.rank == 0 and (step % log_every == 0 or step == cfg.steps):
            val = f"  val {curve.val_loss[-1]:.4f} test {curve.test_loss[-1]:.4f}" if evaluating else ""
            print(
                f"  {cfg.name} step {step}/{cfg.steps}: train {curve.train_loss[-1]:.4f}{val}  "
                f"{time.perf_counter() - t0 + elapsed:.0f} s",
                flush=True,
            )
        if step % cfg.checkpoint_every == 0 and step < cfg.steps:
            _save_checkpoint(ckpt_path, identity, step, model, opt, curve, elapsed + time.perf_counter() - t0)
    wall = elapsed + time.perf_counter() - t0
    if dims.rank == 0:
        record = _run_record(cfg, data, mcfg, backend, device.type, record_base, probe.to_dict())
        record |= {"resumed_from_step": start, "diverged_at_step": diverged, "wall_s": wall, "curve": curve.state()}
        _write_record(run_path, cfg, record, curve)


def _resume(ckpt_path: Path, identity: dict, model: GPT, opt: ZeroOneOptimizer) -> tuple[int, Curve, float]:
    """(the step every rank resumes after, the curve so far, the seconds trained so far): from this rank's checkpoint
    when every rank has one of the same step (:func:`_agreed_resume_step`), else (0, an empty curve, 0.0)."""
    ckpt = _load_checkpoint(ckpt_path, identity)
    start = _agreed_resume_step(ckpt)
    if start == 0:
        return 0, Curve(), 0.0
    model.load_state_dict(ckpt["model"])  # copies into the optimizer's flat buffer (the parameters are views of it)
    opt.load_state_dict(ckpt["optimizer"])
    return start, Curve(ckpt["curve"]), float(ckpt["elapsed_s"])


def _run_record(
    cfg: ConvergeConfig,
    data: TokenData,
    mcfg: GPTConfig,
    backend: str,
    device: str,
    record_base: dict,
    speed_probe: dict,
) -> dict:
    """What a run's record says of its set-up: config, model, corpus, machine (its outcome is added after)."""
    return {
        **record_base,
        "environment": {**record_base.get("environment", {}), "speed_probe": speed_probe},
        "config": cfg.to_dict(),
        "model": {**mcfg.__dict__, **parameter_shares(mcfg)},
        "corpus": data.facts,
        "backend": backend,
        "device": device,
        "world_size": cfg.world_size,
        "tokens_per_step": cfg.tokens_per_step,
        "flops_per_step": step_flops(cfg, mcfg),
    }


def _write_record(run_path: Path, cfg: ConvergeConfig, record: dict, curve: Curve) -> None:
    """Rank 0's ``convergence.json`` (``record``) and its log: one line of set-up, one per evaluation."""
    write_json(run_path / CONVERGENCE_FILE, record, compact=True)
    lines = [
        f"{cfg.name}: {cfg.optimizer} lr={cfg.lr:g} seed={cfg.seed} dp={cfg.dp} tp={cfg.tp} backend={record['backend']} "
        f"resumed_from_step={record['resumed_from_step']} wall={record['wall_s']:.1f} s"
    ]
    lines += [f"step {s}: val {v:.5f} test {t:.5f}" for s, v, t in zip(curve.eval_step, curve.val_loss, curve.test_loss)]
    (run_path / CONVERGENCE_LOG).write_text("\n".join(lines) + "\n", encoding="utf-8")
