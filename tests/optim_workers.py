"""Worker functions for tests/test_distributed_optim.py (importable by spawned workers)."""

from __future__ import annotations

from pathlib import Path

import torch

from muon_repro.model import GPT, GPTConfig
from muon_repro.optim import muon_param_groups
from muon_repro.optim.distributed import DistributedMuon
from muon_repro.parallel import ParallelDims

CONFIG = GPTConfig.preset("tiny")


def _batch(step: int, dp_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(CONFIG.vocab_size, (4, 17), generator=torch.Generator().manual_seed(step))
    local = tokens[2 * dp_rank : 2 * dp_rank + 2]
    return local[:, :-1], local[:, 1:]


def _build(dims: ParallelDims) -> tuple[GPT, DistributedMuon]:
    model = GPT(CONFIG, dims.tp_group)
    opt = DistributedMuon(muon_param_groups(model), dims, lr=0.02, layout="contiguous", ns_dtype=torch.float32)
    return model, opt


def _train(model: GPT, opt: DistributedMuon, dims: ParallelDims, steps: range) -> list[dict[str, torch.Tensor]]:
    history = []
    for step in steps:
        tokens, targets = _batch(step, dims.dp_rank)
        model(tokens, targets).backward()
        opt.step()
        opt.zero_grad()
        history.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return history


def uninterrupted_then_save(ckpt_dir: str) -> list[dict[str, torch.Tensor]]:
    """Steps 1-6 in one go; then a second run that trains steps 1-3 and checkpoints."""
    dims = ParallelDims(dp=2, tp=2)
    model, opt = _build(dims)
    history = _train(model, opt, dims, range(6))
    model, opt = _build(dims)
    _train(model, opt, dims, range(3))
    path = Path(ckpt_dir) / f"rank{dims.rank}.pt"
    torch.save({"model": {n: t.clone() for n, t in model.state_dict().items()}, "optimizer": opt.state_dict()}, path)
    return history[3:]


def resume(ckpt_dir: str) -> list[dict[str, torch.Tensor]]:
    """Fresh workers: restore the step-3 checkpoint, train steps 4-6."""
    dims = ParallelDims(dp=2, tp=2)
    model, opt = _build(dims)
    ckpt = torch.load(Path(ckpt_dir) / f"rank{dims.rank}.pt", weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    return _train(model, opt, dims, range(3, 6))


def load_mismatched(ckpt_dir: str) -> str:
    """A split-QKV model cannot take the fused model's optimizer checkpoint."""
    dims = ParallelDims(dp=2, tp=2)
    model = GPT(GPTConfig.preset("tiny", qkv="split"), dims.tp_group)
    opt = DistributedMuon(muon_param_groups(model), dims, layout="contiguous")
    try:
        opt.load_state_dict(torch.load(Path(ckpt_dir) / f"rank{dims.rank}.pt", weights_only=True)["optimizer"])
    except ValueError as exc:
        return str(exc)
    return "no error"


def state_after_one_step(grids: list[tuple[int, int]]) -> list[dict]:
    """For each (dp, tp) grid of this world: one tiny-model step with DistributedMuon and with
    DistributedAdamW (contiguous); what this rank then holds, by its state's names and by storage."""
    from muon_repro.optim.distributed import DistributedAdamW
    from muon_repro.optim.held_memory import held_memory

    results = []
    for dp, tp in grids:
        dims = ParallelDims(dp=dp, tp=tp)
        held = {"dp": dp, "tp": tp, "dp_rank": dims.dp_rank, "tp_rank": dims.tp_rank}
        for name, optimizer in (("muon", DistributedMuon), ("adamw", DistributedAdamW)):
            model = GPT(CONFIG, dims.tp_group)
            opt = optimizer(muon_param_groups(model), dims, lr=0.02, layout="contiguous")
            tokens = torch.randint(CONFIG.vocab_size, (2, 17), generator=torch.Generator().manual_seed(dims.dp_rank))
            model(tokens[:, :-1], tokens[:, 1:]).backward()
            opt.step()
            held[name] = {
                "state_bytes": opt.state_bytes(),
                "by_param": opt.state_bytes_by_param(),
                "held_state_bytes": held_memory(opt).state_bytes,
            }
        results.append(held)
    return results


def _trained_three_steps(dims: ParallelDims, **muon_options) -> tuple[GPT, DistributedMuon]:
    """A fresh tiny model (seed 0) and fp32-NS DistributedMuon with ``muon_options``, after 3 steps; the ledger holds
    exactly those steps' collectives."""
    torch.manual_seed(0)
    model = GPT(CONFIG, dims.tp_group)
    opt = DistributedMuon(muon_param_groups(model), dims, lr=0.02, ns_dtype=torch.float32, **muon_options)
    dims.ledger.records.clear()
    _train(model, opt, dims, range(3))
    return model, opt


def train_every_overlap(layout: str, bucket_elems: int | None) -> dict[str, object]:
    """The same 3 steps once per overlap variant (fresh model each time, same seed); returns the
    parameters after each variant, the NS units and the gathers each variant issued."""
    from muon_repro.phases import OVERLAPS

    dims = ParallelDims(dp=2, tp=2)
    params, gathers = {}, {}
    for overlap in OVERLAPS:
        model, opt = _trained_three_steps(dims, layout=layout, bucket_elems=bucket_elems, overlap=overlap)
        params[overlap] = {n: p.detach().clone() for n, p in model.named_parameters()}
        gathers[overlap] = [(r.phase, r.elements) for r in dims.ledger.records if r.phase in ("dp_gather", "tp_gather")]
    return {"params": params, "gathers": gathers, "units": len(opt.plan.ns_units)}


def train_every_unit_cap(layout: str, bucket_elems: int | None, caps: list[int | None]) -> dict[str, object]:
    """The same 3 steps once per cap on Newton-Schulz units (and overlap none or pipelined), fresh model each time;
    returns per run the parameters, the gathers' ledger bytes by phase, the units and the transient peak."""
    dims = ParallelDims(dp=2, tp=2)
    out = {}
    for cap in caps:
        for overlap in ("none", "pipelined"):
            model, opt = _trained_three_steps(dims, layout=layout, bucket_elems=bucket_elems, overlap=overlap, ns_unit_elems=cap)
            out[(cap, overlap)] = {
                "params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "bytes_per_step": {phase: b // 3 for phase, b in dims.ledger.bytes_by_phase().items()},
                "tp_gathers_per_step": sum(r.phase == "tp_gather" for r in dims.ledger.records) // 3,
                "units": len(opt.plan.ns_units),
                "transient_bytes": opt.stats.transient_bytes,
                "specs": opt.plan.specs,
                "dp_rank": dims.dp_rank,
            }
    return out


def built_with_rank_lr(as_tensor: bool = False) -> str:
    """Each rank of a DP2 x TP2 grid builds DistributedMuon with its own lr (rank 3's differs): every rank refuses.
    ``as_tensor``: the lr a 0-dim tensor, rank 3's 0.02004 (a tensor's repr rounds both to 0.0200)."""
    dims = ParallelDims(dp=2, tp=2)
    model = GPT(CONFIG, dims.tp_group)
    lr = (torch.tensor(0.02004) if as_tensor else 0.2) if dims.rank == 3 else (torch.tensor(0.02) if as_tensor else 0.02)
    try:
        DistributedMuon(muon_param_groups(model), dims, lr=lr)
    except ValueError as exc:
        return str(exc)
    return "no error"
