"""The phase vocabulary: the names of the ``record_function`` scopes the model and the optimizers open.

The trace analysis finds the phases by these names, and the byte ledger and the analytic model are
keyed by them; this is the one module that spells them (the run folder's own names are in
:mod:`muon_repro.rundir`). Beside them, how a run arranges its optimizer step: the ZeRO-1
:data:`LAYOUTS` and the gather schedules (:data:`OVERLAPS`) that config.json names.
It imports nothing: no torch, no pandas, no numpy.
"""

from __future__ import annotations

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
COARSE_PHASES = (FORWARD, BACKWARD, OPTIMIZER)

DP_REDUCE_SCATTER = "dp_reduce_scatter"  # ZeRO-1: gradients, every optimizer
MOMENTUM = "momentum"
DP_GATHER = "dp_gather"  # Muon: shards of a matrix -> the matrix's orthogonalizing rank(s)
TP_GATHER = "tp_gather"  # Muon: TP blocks -> the full matrix
NEWTON_SCHULZ = "newton_schulz"
TP_SHARD = "tp_shard"  # inverse of TP_GATHER
DP_SHARD = "dp_shard"  # inverse of DP_GATHER
UPDATE = "update"
DP_ALL_GATHER = "dp_all_gather"  # ZeRO-1: parameters, every optimizer
TP_ALL_REDUCE = "tp_all_reduce"  # the model's own tensor-parallel traffic
TP_ALL_GATHER = "tp_all_gather"

# Pipeline parallelism (muon_repro.parallel.pipeline_runner): the point-to-point transfers between neighbouring
# stages, and the flush that waits for this stage's sends before the optimizer step.
PP_RECV_ACTIVATION = "pp_recv_activation"
PP_SEND_ACTIVATION = "pp_send_activation"
PP_RECV_GRAD = "pp_recv_grad"
PP_SEND_GRAD = "pp_send_grad"
PP_FLUSH = "pp_flush"
BUBBLE = "bubble"  # derived by the analysis, no scope: a stage's time blocked in its receives and its flush

OPTIMIZER_PHASES = (DP_REDUCE_SCATTER, MOMENTUM, DP_GATHER, TP_GATHER, NEWTON_SCHULZ, TP_SHARD, DP_SHARD, UPDATE, DP_ALL_GATHER)
"""Inside the optimizer step, in data-flow order."""
OPTIMIZER_COMM_PHASES = (DP_REDUCE_SCATTER, DP_GATHER, TP_GATHER, DP_ALL_GATHER)
"""The optimizer's collectives, in data-flow order (the analytic model prices these)."""
MUON_ONLY_PHASES = (DP_GATHER, TP_GATHER)
DP_COMM_PHASES = (DP_REDUCE_SCATTER, DP_GATHER, DP_ALL_GATHER)
MODEL_COMM_PHASES = (TP_ALL_REDUCE, TP_ALL_GATHER)
PIPELINE_PHASES = (PP_RECV_ACTIVATION, PP_SEND_ACTIVATION, PP_RECV_GRAD, PP_SEND_GRAD, PP_FLUSH)
"""The pipeline's scopes, outside forward and backward."""
PIPELINE_WAIT_PHASES = (PP_RECV_ACTIVATION, PP_RECV_GRAD, PP_FLUSH)
"""Where a stage blocks on its neighbours: their sum is the stage's :data:`BUBBLE` (with the transfers' own time)."""
PP_SEND_PHASES = (PP_SEND_ACTIVATION, PP_SEND_GRAD)
PHASES = COARSE_PHASES + OPTIMIZER_PHASES + MODEL_COMM_PHASES + PIPELINE_PHASES

PHASE_LABELS = {
    FORWARD: "forward",
    BACKWARD: "backward",
    OPTIMIZER: "optimizer",
    DP_REDUCE_SCATTER: "DP reduce-scatter (grads)",
    MOMENTUM: "momentum",
    DP_GATHER: "DP gather",
    TP_GATHER: "TP gather",
    NEWTON_SCHULZ: "Newton-Schulz",
    TP_SHARD: "TP shard",
    DP_SHARD: "DP shard",
    UPDATE: "update",
    DP_ALL_GATHER: "DP all-gather (params)",
    TP_ALL_REDUCE: "TP all-reduce (model)",
    TP_ALL_GATHER: "TP all-gather (model)",
    PP_RECV_ACTIVATION: "PP receive (activations)",
    PP_SEND_ACTIVATION: "PP send (activations)",
    PP_RECV_GRAD: "PP receive (gradients)",
    PP_SEND_GRAD: "PP send (gradients)",
    PP_FLUSH: "PP flush",
    BUBBLE: "pipeline bubble",
}
"""How a phase is named for people (figures, report)."""

LAYOUTS = ("contiguous", "bucketed", "whole_matrix")
"""ZeRO-1 layouts of the flat parameter buffer (config.json's ``layout``; docs/method.md)."""

NS_METHODS = ("quintic", "polar_express", "gram")
"""Newton-Schulz variants (config.json's ``ns_method``; muon_repro.optim.newton_schulz, docs/method.md#newton-schulz):
the quintic Muon runs by default, Polar Express's per-step polynomials, and those iterated on the Gram matrix."""

OVERLAPS = ("none", "naive_async", "pipelined")
"""How Distributed Muon schedules its DP and TP gathers (config.json's ``overlap``):
``none`` blocks on each; ``naive_async`` issues each with ``async_op=True`` and waits right
where its result is first used, as a direct port would; ``pipelined`` keeps the next units'
gathers in flight while Newton-Schulz runs (docs/method.md#overlap-of-the-gathers)."""
