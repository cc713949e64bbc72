"""The analytic bytes of a recorded run (DESIGN.md section 4), from its ``config.json``.

The analysis tables carry measured bytes (trace) and the run-time ledger's; the analytic model
needs the model's parameter shapes, so this builds the run's model on the ``meta`` device (no
memory, no communication) and prices the optimizer's collectives with
:func:`muon_repro.optim.comm_model.optimizer_bytes`.
"""

from __future__ import annotations

from functools import lru_cache

from muon_repro.report.style import OPTIMIZER_COMM_PHASES


@lru_cache(maxsize=16)
def _specs(preset: str, qkv: str, tp: int, seed: int) -> list:
    from muon_repro.model import GPT, GPTConfig
    from muon_repro.optim.comm_model import param_specs
    from muon_repro.parallel.comm import CommLedger, Group

    group = Group(name="tp", ranks=tuple(range(tp)), rank=0, process_group=None, ledger=CommLedger())
    model = GPT(GPTConfig.preset(preset, qkv=qkv, seed=seed), group, device="meta")
    return param_specs(model.named_parameters(), tp)


def analytic_bytes(config: dict, run: str = "?") -> dict[str, float]:
    """Bytes per step per rank in each optimizer phase, the mean over DP ranks (TP ranks send alike)."""
    import torch

    from muon_repro.optim.comm_model import optimizer_bytes

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    missing = [k for k in ("preset", "dp", "tp", "optimizer") if config.get(k) in (None, "")]
    if missing:
        raise ValueError(f"run {run}: config.json lacks {', '.join(missing)} (needed for the analytic byte model)")
    dp, tp = int(config["dp"]), int(config["tp"])
    specs = _specs(str(config["preset"]), str(config.get("qkv") or "fused"), tp, int(config.get("seed") or 0))
    totals = dict.fromkeys(OPTIMIZER_COMM_PHASES, 0.0)
    for dp_rank in range(dp):
        per_phase = optimizer_bytes(
            specs,
            dp=dp,
            tp=tp,
            dp_rank=dp_rank,
            optimizer=str(config["optimizer"]),
            layout=str(config.get("layout") or "contiguous"),
            bucket_elems=config.get("bucket_elems"),
            reduce_dtype=dtypes[config.get("reduce_dtype") or "fp32"],
            gather_dtype=dtypes[config.get("gather_dtype") or "bf16"],
        )
        for phase in OPTIMIZER_COMM_PHASES:
            totals[phase] += per_phase.get(phase, 0) / dp
    return totals
