"""Distributed optimizers vs the single-device reference, step by step (``muon-repro equivalence``).

Two comparisons after every step:

* **optimizer-isolated**: a single-device reference optimizer is fed the very gradients the
  distributed run reduced (its DP-averaged shards, re-assembled), so any difference is the
  optimizer's own. Tensors are compared in the optimizer's view (TP shards concatenated along
  their partition dim). With fp32 Newton-Schulz and fp32 gathers the arithmetic is identical
  and the difference is 0.
* **end-to-end**: a tp=1 model trains on the whole global batch with the reference optimizer;
  reduction orders (DP averaging, TP all-reduces, sharded matmuls) differ, so parameters drift
  apart at float32 rounding level, which Newton-Schulz does not amplify beyond ~1e-5 relative
  over a few steps (see :data:`END_TO_END_RTOL`).

Also reported: ledger bytes vs :mod:`muon_repro.optim.comm_model` per phase and rank, the
Muon/AdamW bytes ratio for the same model and layout, NS calls and optimizer-state bytes per rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from muon_repro.model import GPT, GPTConfig, shard_tensor
from muon_repro.optim.adamw import AdamW
from muon_repro.optim.comm_model import (
    DP_PHASES,
    OPTIMIZER_PHASES,
    bytes_ratio,
    optimizer_bytes,
    param_specs,
)
from muon_repro.optim.distributed import (
    DistributedAdamW,
    DistributedMuon,
    ZeroOneOptimizer,
)
from muon_repro.optim.layout import LAYOUTS
from muon_repro.optim.muon import Muon
from muon_repro.optim.param_groups import muon_param_groups
from muon_repro.parallel.comm import Group
from muon_repro.parallel.mesh import ParallelDims

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
ISOLATED_RTOL_FP32 = 1e-6
# bf16 NS with a bf16 gather is bit-identical to the reference's bf16 NS; a bf16 gather under fp32
# NS rounds the NS input to bf16 (2^-9 relative), and the update moves by up to ~1% of lr*scale.
ISOLATED_RTOL_BF16 = 2e-2
END_TO_END_RTOL = 1e-4


@dataclass(frozen=True)
class EquivalenceConfig:
    dp: int = 1
    tp: int = 1
    optimizer: str = "muon"
    layout: str = "contiguous"
    steps: int = 5
    ns_dtype: str = "fp32"
    gather_dtype: str | None = None  # default: the NS dtype (lossless)
    bucket_elems: int | None = None
    preset: str = "tiny"
    batch_per_dp: int = 2
    seq_len: int = 16
    lr: float = 0.02
    weight_decay: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "steps", "batch_per_dp", "seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.optimizer not in ("muon", "adamw"):
            raise ValueError(f"optimizer must be 'muon' or 'adamw', got {self.optimizer!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; choose one of {', '.join(LAYOUTS)}")
        for name in ("ns_dtype", "gather_dtype"):
            value = getattr(self, name)
            if value is not None and value not in DTYPES:
                raise ValueError(f"{name} must be one of {sorted(DTYPES)}, got {value!r}")
        if self.bucket_elems is not None and self.layout != "bucketed":
            raise ValueError("bucket_elems applies to layout 'bucketed' only")
        GPTConfig.preset(self.preset)

    @property
    def effective_bucket_elems(self) -> int | None:
        """For bucketed: the given size, else a quarter of the model, so there are several buckets."""
        if self.layout != "bucketed":
            return None
        return self.bucket_elems or max(1024, GPTConfig.preset(self.preset).num_params() // 4)

    @property
    def effective_gather_dtype(self) -> str:
        return self.gather_dtype or self.ns_dtype

    def build_optimizer(self, params, dims: ParallelDims) -> ZeroOneOptimizer:
        common = dict(lr=self.lr, weight_decay=self.weight_decay, layout=self.layout, bucket_elems=self.effective_bucket_elems)
        if self.optimizer == "adamw":
            return DistributedAdamW(params, dims, **common)
        return DistributedMuon(params, dims, ns_dtype=DTYPES[self.ns_dtype], gather_dtype=DTYPES[self.effective_gather_dtype], **common)

    def build_reference(self, params) -> torch.optim.Optimizer:
        if self.optimizer == "adamw":
            return AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        return Muon(params, lr=self.lr, weight_decay=self.weight_decay, ns_dtype=DTYPES[self.ns_dtype])


def global_batch(cfg: EquivalenceConfig, vocab: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(cfg.seed * 100_003 + step)
    tokens = torch.randint(vocab, (cfg.dp * cfg.batch_per_dp, cfg.seq_len + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def _max_diff(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> dict[str, float]:
    abs_diff = max((got[n] - want[n]).abs().max().item() for n in want)
    scale = max(want[n].abs().max().item() for n in want)
    return {"max_abs": abs_diff, "max_rel": abs_diff / scale}


def _optimizer_view(shards: list[torch.Tensor], tp_dim: int | None) -> torch.Tensor:
    return shards[0] if tp_dim is None else torch.cat(shards, dim=tp_dim)


def _averaged_grads(opt: ZeroOneOptimizer, shards_by_dp: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """One TP rank's DP-averaged gradients, re-assembled from every DP rank's gradient shard."""
    flat = torch.zeros(opt.plan.total)
    base = 0
    for bucket in opt.plan.buckets:
        for dp_rank, shard in enumerate(shards_by_dp):
            flat[bucket.shard_start(dp_rank) :][: bucket.shard_size] = shard[base : base + bucket.shard_size]
        base += bucket.shard_size
    return {s.spec.name: flat[s.flat_start : s.flat_start + s.spec.numel].view(s.spec.local_shape) for s in opt.plan.slots}


def _gather_to_root(obj: dict, dims: ParallelDims) -> list[dict] | None:
    """Every rank's ``obj`` on rank 0 (in rank order), None elsewhere. Harness traffic: not in the ledger."""
    if dims.world_size == 1:
        return [obj]
    out = [None] * dims.world_size if dims.rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def equivalence_worker(cfg: EquivalenceConfig) -> dict | None:
    """Runs on every rank; rank 0 returns the report."""
    dims = ParallelDims(cfg.dp, cfg.tp)
    model_cfg = GPTConfig.preset(cfg.preset, max_seq_len=max(cfg.seq_len, GPTConfig.preset(cfg.preset).max_seq_len))
    model = GPT(model_cfg, dims.tp_group)
    tp_dims = {name: getattr(p, "tp_partition_dim", None) for name, p in model.named_parameters()}
    groups = muon_param_groups(model)
    opt = cfg.build_optimizer(groups, dims)
    root = dims.rank == 0

    if root:  # references live on rank 0 only
        e2e_model = GPT(model_cfg, Group.single("tp"))
        e2e_opt = cfg.build_reference(muon_param_groups(e2e_model))
        full = dict(e2e_model.named_parameters())
        iso_params = {
            n: torch.nn.Parameter(_optimizer_view([shard_tensor(n, p.detach(), tp_dims[n], r, cfg.tp) for r in range(cfg.tp)], tp_dims[n]))
            for n, p in full.items()
        }
        iso_opt = cfg.build_reference([{**g, "params": [iso_params[n] for n in g["names"]]} for g in groups])

    steps = []
    for step in range(cfg.steps):
        dims.ledger.step = step
        tokens, targets = global_batch(cfg, model_cfg.vocab_size, step)
        local = slice(dims.dp_rank * cfg.batch_per_dp, (dims.dp_rank + 1) * cfg.batch_per_dp)
        loss = model(tokens[local], targets[local])
        loss.backward()
        opt.step()
        opt.zero_grad()
        payload = {
            "dp_rank": dims.dp_rank,
            "tp_rank": dims.tp_rank,
            "loss": loss.item(),
            "grad_shard": opt.grad_shard.float().clone(),
            "params": {n: p.detach().clone() for n, p in model.named_parameters()},
        }
        gathered = _gather_to_root(payload, dims)
        if root:
            by_coord = {(g["dp_rank"], g["tp_rank"]): g for g in gathered}
            grads_by_tp = [_averaged_grads(opt, [by_coord[(d, t)]["grad_shard"] for d in range(cfg.dp)]) for t in range(cfg.tp)]
            params_by_tp = [by_coord[(0, t)]["params"] for t in range(cfg.tp)]
            # optimizer-isolated
            for n, p in iso_params.items():
                p.grad = _optimizer_view([g[n] for g in grads_by_tp], tp_dims[n]).clone()
            iso_opt.step()
            dist_view = {n: _optimizer_view([ps[n] for ps in params_by_tp], tp_dims[n]) for n in iso_params}
            isolated = _max_diff(dist_view, {n: p.detach() for n, p in iso_params.items()})
            # end to end
            e2e_loss = e2e_model(tokens, targets)
            e2e_loss.backward()
            e2e_opt.step()
            e2e_opt.zero_grad()
            canonical = {n: model.assemble_full_tensor(n, [ps[n] for ps in params_by_tp]) for n in full}
            end_to_end = _max_diff(canonical, {n: p.detach() for n, p in full.items()})
            mean_loss = sum(g["loss"] for g in gathered if g["tp_rank"] == 0) / cfg.dp
            steps.append({"step": step, "loss": mean_loss, "reference_loss": e2e_loss.item(), "isolated": isolated, "end_to_end": end_to_end})

    specs = param_specs(model.named_parameters(), cfg.tp)
    muon_names = {n for g in groups if g["use_muon"] for n in g["names"]}
    analytic_kw = dict(dp=cfg.dp, tp=cfg.tp, dp_rank=dims.dp_rank, layout=cfg.layout, bucket_elems=cfg.effective_bucket_elems,
                       gather_dtype=DTYPES[cfg.effective_gather_dtype])
    last = cfg.steps - 1
    ledger = dims.ledger.bytes_by_phase(step=last)
    rank_report = {
        "rank": dims.rank,
        "dp_rank": dims.dp_rank,
        "tp_rank": dims.tp_rank,
        "ledger_bytes": {p: ledger.get(p, 0) for p in OPTIMIZER_PHASES},
        "analytic_bytes": optimizer_bytes(specs, optimizer=cfg.optimizer, **analytic_kw),
        "analytic_bytes_muon": optimizer_bytes(specs, optimizer="muon", **analytic_kw),
        "analytic_bytes_adamw": optimizer_bytes(specs, optimizer="adamw", **analytic_kw),
        "ns_calls": opt.stats.ns_calls,
        "ns_flops": opt.stats.ns_flops,
        "state_bytes": opt.state_bytes(),
        # the same set of matrices whichever optimizer runs: the ones Muon would orthogonalize
        "muon_managed_state_bytes": sum(b for n, b in opt.state_bytes_by_param().items() if n in muon_names),
        "transient_bytes": opt.stats.transient_bytes,
    }
    ranks = _gather_to_root(rank_report, dims)
    if not root:
        return None
    muon_slots = opt.plan.muon_slots()
    muon_total = {p: sum(r["analytic_bytes_muon"][p] for r in ranks) for p in OPTIMIZER_PHASES}
    adamw_total = {p: sum(r["analytic_bytes_adamw"][p] for r in ranks) for p in OPTIMIZER_PHASES}
    return {
        "config": {**asdict(cfg), "bucket_elems": cfg.effective_bucket_elems, "gather_dtype": cfg.effective_gather_dtype},
        "model_params": model.num_params(full=True),
        "steps": steps,
        "ranks": ranks,
        "plan": {
            "muon_matrices": len(muon_slots),
            "dp_gathered_matrices": sum(len(u.slots) for u in opt.plan.ns_units if u.dp_gathered),
            "straddling_matrices": sum(1 for s in muon_slots if len(s.pieces) > 1),
            "extra_holders": sum(len(s.pieces) - 1 for s in muon_slots),
            "buckets": len(opt.plan.buckets),
        },
        "ledger_matches_analytic": all(r["ledger_bytes"] == r["analytic_bytes"] for r in ranks),
        "bytes": {
            "muon": muon_total,
            "adamw": adamw_total,
            "ratio_dp": bytes_ratio(muon_total, adamw_total, DP_PHASES),
            "ratio_total": bytes_ratio(muon_total, adamw_total),
        },
    }


def equivalence_worker_many(cfgs: list[EquivalenceConfig]) -> list[dict | None]:
    """Several configurations of one world size in one launch (the launch is the slow part)."""
    return [equivalence_worker(cfg) for cfg in cfgs]


def run_equivalence_suite(cfgs: list[EquivalenceConfig], backend: str = "gloo") -> list[dict]:
    """Reports for ``cfgs``, in order, with one launch per world size."""
    from muon_repro.parallel.launch import launch

    by_world: dict[int, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        by_world.setdefault(cfg.dp * cfg.tp, []).append(i)
    reports: list[dict] = [None] * len(cfgs)  # type: ignore[list-item]
    for world, indices in by_world.items():
        results = launch(equivalence_worker_many, world, [cfgs[i] for i in indices], backend=backend)[0]
        for i, report in zip(indices, results):
            reports[i] = report
    return reports


def run_equivalence(cfg: EquivalenceConfig, backend: str = "gloo") -> dict:
    """Launch ``dp*tp`` workers (or run in-process for one) and return rank 0's report."""
    if cfg.dp * cfg.tp == 1 and backend == "gloo":
        return equivalence_worker(cfg)
    from muon_repro.parallel.launch import launch

    return launch(equivalence_worker, cfg.dp * cfg.tp, cfg, backend=backend)[0]
