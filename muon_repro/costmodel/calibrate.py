"""``muon-repro calibrate``: microbenchmarks of this machine, into a :class:`MachineProfile`.

What it measures (each a kernel at the shapes the model presets use, not a run):

* matmul rate per dtype: a training step's matmuls at the presets' layer shapes (activations
  ``[tokens, in]`` x weights ``[in, out]`` forward, both products backward), every weight a tensor of its own;
* Newton-Schulz rate (``zeropower_via_newtonschulz5`` on the presets' matrices), and its time
  against the summed time of its own matmuls timed one by one (the implementation's overhead);
* attention (SDPA forward+backward), cross-entropy and GELU (forward+backward) at the model's shapes;
* element-wise bandwidth (``p.add_(u, alpha=a)`` on a few MB) and the host time per operator call,
  plain and under the bench's profiler;
* the share of a rank's compute rate left when W ranks compute at once (W workers of a world), and
  how far out of step ranks that share cores reach a collective after equal work (arrival jitter);
* an alpha-beta fit per collective and group size, ``t = alpha + bytes / beta`` (least squares on
  relative error over several sizes; ``bytes`` what one rank sends by the ring model, so beta is a
  bus bandwidth), in a world of W workers started with :func:`muon_repro.parallel.launch.launch`
  and the bench's threads per rank, every group of the size busy at once, as in a run.

Kernels run with the bench's threads per rank of the largest world (``cpu_count // W``, at least 1)
unless ``threads`` says otherwise. Statistics: a kernel's time is the low quartile of its
repetitions (another process's bursts only ever slow one down), a collective's the median (a step
sums dozens, so it sees their typical time, scheduling hiccups included). A busy machine still
shows in every figure, the compute share and the jitter most: the profile records the load
average around the measurement, and ``muon-repro calibrate`` warns when it is high.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import torch
import torch.distributed as dist
import torch.nn.functional as F

from muon_repro.costmodel.machine import COLLECTIVE_OPS, CollectiveFit, MachineProfile
from muon_repro.model_config import PRESETS
from muon_repro.optim.newton_schulz import NS_COEFFICIENTS, newton_schulz_flops, zeropower_via_newtonschulz5
from muon_repro.parallel.comm import ring_bytes_per_rank
from muon_repro.rundir import NEWTON_SCHULZ

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# torch >= 2.13 renamed the single-tensor collectives (the old names warn), as muon_repro.parallel.comm notes.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
KIB = 1024
JITTER_COMPUTE_S = (0.004, 0.02, 0.08)  # compute between two collectives of the jitter measurement, one rank alone (a layer's worth and more)


@dataclass(frozen=True)
class Plan:
    """How much to measure: ``quick`` takes a few seconds, the default about a minute."""

    presets: tuple[str, ...]
    tokens: int  # per rank
    tps: tuple[int, ...]  # TP sizes whose layer widths the matmuls take
    reps: int
    sizes: tuple[int, ...]  # ring bytes per rank of the collective samples
    collective_reps: int
    share_windows: int  # windows of the compute-share measurement, each share_window_s long
    share_window_s: float
    dtypes: tuple[str, ...]
    curve_tokens: tuple[int, ...] = ()  # tokens per rank of the profiled training steps (the size curves); none on a GPU

    @classmethod
    def for_device(cls, device: str, quick: bool) -> Plan:
        if device == "cuda" and quick:
            return cls(("medium",), 4096, (2,), 3, (64 * KIB, 4096 * KIB, 65536 * KIB), 4, 2, 0.2, ("fp32", "bf16"))
        if device == "cuda":
            return cls(("medium", "large"), 4096, (1, 2, 4), 10, tuple(2**k * KIB for k in range(4, 17, 2)), 10, 4, 0.5, ("fp32", "bf16"))
        if quick:
            # the largest sample big enough that its transfer outlasts a loaded machine's scheduling noise (a few ms)
            return cls(("small",), 512, (2,), 3, (4 * KIB, 512 * KIB, 16384 * KIB), 6, 2, 0.2, ("fp32",), (256, 1024))
        # bf16 matmuls on a CPU without bf16 units run at ~1/50 of fp32: not cheap, left out (an ns_dtype=bf16 CPU run is then refused)
        return cls(("small",), 512, (1, 2, 4), 7, tuple(4**k * 4 * KIB for k in range(7)), 8, 6, 0.4, ("fp32",), (256, 1024, 4096, 8192))


@dataclass(frozen=True)
class AlphaBeta:
    alpha_s: float
    beta_bytes_per_s: float
    rel_rmse: float


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float]) -> AlphaBeta:
    """Least squares of ``t = alpha + bytes / beta`` on relative error (each sample weighted by
    ``1/t``, so small and large sizes count alike); ``alpha`` is kept >= 0 (refit through 0)."""
    if len(nbytes) != len(seconds) or len(nbytes) < 2:
        raise ValueError(f"an alpha-beta fit needs at least 2 (bytes, seconds) samples of equal count, got {len(nbytes)} and {len(seconds)}")
    import numpy as np

    x, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if np.any(t <= 0) or np.any(x < 0):
        raise ValueError("alpha-beta samples need positive times and non-negative byte counts")
    design = np.column_stack((1 / t, x / t))
    (alpha, inv_beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha, inv_beta = 0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))
    if inv_beta <= 0:
        raise ValueError(f"collective times do not grow with the bytes ({list(zip(x.tolist(), t.tolist()))}); measure on a quieter machine or over larger sizes")
    predicted = alpha + x * inv_beta
    return AlphaBeta(float(alpha), float(1 / inv_beta), float(np.sqrt(np.mean(((predicted - t) / t) ** 2))))


# ---------------------------------------------------------------- timing


def low_quartile(values: Sequence[float]) -> float:
    """The 25th percentile: the typical value on a quiet machine, and robust to another process's
    bursts on a shared one (which only ever slow a repetition down)."""
    return statistics.quantiles(values, n=4, method="inclusive")[0] if len(values) > 1 else values[0]


def high_quartile(values: Sequence[float]) -> float:
    """The 75th percentile of rates: the window another process's bursts (which only ever slow
    a rate down) disturbed least, without trusting a single best window."""
    return statistics.quantiles(values, n=4, method="inclusive")[2] if len(values) > 1 else values[0]


def seconds_per_call(fn: Callable[[], object], reps: int, device: str = "cpu", target_s: float = 0.005) -> float:
    """Time of one ``fn()``: the low quartile over ``reps`` repetitions, each looping enough calls to last ``target_s``."""
    fn()
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    once = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, math.ceil(target_s / once))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(device)
        times.append((time.perf_counter() - t0) / inner)
    return low_quartile(times)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------- shapes


def ns_shapes(plan: Plan) -> list[tuple[int, int]]:
    """The full matrices Muon orthogonalizes in the plan's presets (qkv, proj, fc1, fc2)."""
    shapes = []
    for name in plan.presets:
        m = PRESETS[name]
        shapes += [(3 * m.hidden, m.hidden), (m.hidden, m.hidden), (m.ffn_hidden, m.hidden), (m.hidden, m.ffn_hidden)]
    return list(dict.fromkeys(shapes))


# ---------------------------------------------------------------- kernels


def bench_matmul(plan: Plan, dtype: str, device: str) -> tuple[float, list[dict]]:
    """TFLOP/s of a training step's matmuls (total FLOPs over total time), one row per preset and TP size."""
    rows, flops, seconds = [], 0.0, 0.0
    for name in plan.presets:
        for tp in plan.tps:
            shapes = layer_shapes(name, tp)
            t, work = _training_matmuls(shapes, plan.tokens, dtype, device, plan.reps)
            label = f"{name} tp={tp}: {len(shapes)} weights [in,out], {plan.tokens} tokens"
            rows.append(_kernel("matmul", dtype, label, t, tflops=work / t / 1e12))
            flops, seconds = flops + work, seconds + t
    return flops / seconds / 1e12, rows


def layer_shapes(preset: str, tp: int) -> list[tuple[int, int]]:
    """``(in, out)`` of every TP-local weight a matmul uses, layer by layer (qkv, proj, fc1, fc2), then the LM head."""
    m = PRESETS[preset]
    h, f = m.hidden, m.ffn_hidden
    return [(h, 3 * h // tp), (h // tp, h), (h, f // tp), (f // tp, h)] * m.n_layers + [(h, m.vocab_size // tp)]


def _training_matmuls(shapes: list[tuple[int, int]], tokens: int, dtype: str, device: str, reps: int) -> tuple[float, float]:
    """Seconds and FLOPs of one step's matmuls over weights of these shapes, each weight its own
    tensor (a step's working set, not one operand kept hot in cache): forward ``x W``, then
    backward ``g W^T`` and ``x^T g`` in reverse order."""
    kind = DTYPES[dtype]
    weights = [torch.randn(i, o, device=device, dtype=kind) for i, o in shapes]
    inputs = {i: torch.randn(tokens, i, device=device, dtype=kind) for i, _ in shapes}
    grads = {o: torch.randn(tokens, o, device=device, dtype=kind) for _, o in shapes}

    def step() -> None:
        for w in weights:
            inputs[w.shape[0]] @ w
        for w in reversed(weights):
            grads[w.shape[1]] @ w.mT
            inputs[w.shape[0]].mT @ grads[w.shape[1]]

    return seconds_per_call(step, reps, device, target_s=0.0), 3 * sum(2.0 * tokens * i * o for i, o in shapes)


def bench_newton_schulz(plan: Plan, dtype: str, device: str, shapes: list[tuple[int, int]]) -> tuple[float, float, list[dict]]:
    """TFLOP/s of Newton-Schulz over ``shapes``, its time over the summed time of its own matmuls, rows."""
    rows, flops, ns_total, mm_total, weighted = [], 0.0, 0.0, 0.0, 0.0
    for shape in shapes:
        t_ns, t_mm, ratio = _ns_against_its_matmuls(shape, dtype, device, plan.reps)
        work = newton_schulz_flops(shape, 5)
        label = f"[{shape[0]},{shape[1]}]"
        rows.append(_kernel(NEWTON_SCHULZ, dtype, label, t_ns, tflops=work / t_ns / 1e12, ratio=ratio))
        rows.append(_kernel("newton_schulz_matmuls", dtype, label, t_mm, tflops=work / t_mm / 1e12))
        flops, ns_total, mm_total, weighted = flops + work, ns_total + t_ns, mm_total + t_mm, weighted + ratio * t_mm
    return flops / ns_total / 1e12, weighted / mm_total, rows


def _ns_against_its_matmuls(shape: tuple[int, int], dtype: str, device: str, reps: int) -> tuple[float, float, float]:
    """Newton-Schulz on ``shape`` and its 5 steps' matmuls (``X X^T``, ``b A + c A A``, ``a X + B X``,
    each a call of its own), timed back to back in every repetition so that a shared machine's
    drift hits both alike: the low quartile of each, and the median of their per-repetition ratio."""
    a, b, c = NS_COEFFICIENTS
    m, n = min(shape), max(shape)
    g = torch.randn(*shape, device=device)
    x = torch.randn(m, n, device=device, dtype=DTYPES[dtype])
    x = x / x.norm()
    gram = x @ x.mT
    poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)

    def matmuls() -> None:
        for _ in range(5):
            x @ x.mT
            torch.addmm(gram, gram, gram, beta=b, alpha=c)
            torch.addmm(x, poly, x, beta=a)

    ns_times, mm_times = [], []
    for rep in range(reps + 1):  # the first is a warm-up
        t_ns = _timed(lambda: zeropower_via_newtonschulz5(g, 5, DTYPES[dtype]), device)
        t_mm = _timed(matmuls, device)
        if rep:
            ns_times.append(t_ns)
            mm_times.append(t_mm)
    return low_quartile(ns_times), low_quartile(mm_times), statistics.median(ns / mm for ns, mm in zip(ns_times, mm_times))


def _timed(fn: Callable[[], object], device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def bench_attention(plan: Plan, device: str) -> tuple[float, list[dict]]:
    """SDPA (causal) forward+backward at the first preset's shape (2-way TP heads), in FLOPs as
    :meth:`GPTConfig.flops_per_token` counts them: 12 x local width x sequence per token."""
    m = PRESETS[plan.presets[0]]
    heads, seq = max(1, m.n_heads // 2), m.max_seq_len
    batch = max(1, plan.tokens // seq)
    q, k, v = (torch.randn(batch, heads, seq, m.head_dim, device=device, requires_grad=True) for _ in range(3))

    def step() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        q.grad = k.grad = v.grad = None

    t = seconds_per_call(step, plan.reps, device)
    tflops = 12.0 * heads * m.head_dim * seq * batch * seq / t / 1e12
    return tflops, [_kernel("attention", "fp32", f"[{batch},{heads},{seq},{m.head_dim}]", t, tflops=tflops)]


def bench_cross_entropy(plan: Plan, device: str) -> tuple[float, list[dict]]:
    """Cross-entropy forward+backward on ``[tokens, vocab]`` fp32 logits: logits bytes per second."""
    vocab = PRESETS[plan.presets[0]].vocab_size
    logits = torch.randn(plan.tokens, vocab, device=device, requires_grad=True)
    targets = torch.randint(vocab, (plan.tokens,), device=device)

    def step() -> None:
        F.cross_entropy(logits, targets).backward()
        logits.grad = None

    t = seconds_per_call(step, plan.reps, device)
    gbps = 4.0 * logits.numel() / t / 1e9
    return gbps, [_kernel("cross_entropy", "fp32", f"[{plan.tokens},{vocab}]", t, gbps=gbps)]


def bench_gelu(plan: Plan, device: str) -> tuple[float, list[dict]]:
    """GELU forward+backward on ``[tokens, ffn/2]`` fp32: input bytes per second."""
    width = PRESETS[plan.presets[0]].ffn_hidden // 2
    x = torch.randn(plan.tokens, width, device=device, requires_grad=True)
    grad = torch.ones(plan.tokens, width, device=device)

    def step() -> None:
        F.gelu(x).backward(grad)
        x.grad = None

    t = seconds_per_call(step, plan.reps, device)
    gbps = 4.0 * x.numel() / t / 1e9
    return gbps, [_kernel("gelu", "fp32", f"[{plan.tokens},{width}]", t, gbps=gbps)]


def bench_elementwise(plan: Plan, device: str, elements: int = 1 << 20) -> tuple[float, list[dict]]:
    """``p.add_(u, alpha=a)`` on ``elements`` fp32 (4 MB): 12 bytes moved per element."""
    p, u = torch.randn(elements, device=device), torch.randn(elements, device=device)
    t = seconds_per_call(lambda: p.add_(u, alpha=1e-3), plan.reps, device)
    gbps = 12.0 * elements / t / 1e9
    return gbps, [_kernel("elementwise", "fp32", f"[{elements}]", t, gbps=gbps)]


def bench_op_overhead(plan: Plan, device: str, profiled: bool) -> tuple[float, list[dict]]:
    """Host time per operator call of a training step: the model's forward and backward at widths
    of 8 (no arithmetic to speak of: Python, dispatch, autograd and, on a GPU, the launches), over
    its operator count; plain, or under the bench's profiler (``record_shapes=True,
    profile_memory=True``, as :func:`muon_repro.bench.runner.run_rank` records)."""
    from torch.profiler import ProfilerActivity, profile

    from muon_repro.costmodel.workload import model_op_counts, narrow_training_step

    step = narrow_training_step(device=device)
    calls = sum(model_op_counts(2, "fused", 1))

    def forward_backward() -> None:
        step.forward().backward()

    if profiled:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities, record_shapes=True, profile_memory=True):
            t = seconds_per_call(forward_backward, plan.reps, device, target_s=0.0) / calls
    else:
        t = seconds_per_call(forward_backward, plan.reps, device) / calls
    kernel = "profiled_op_overhead" if profiled else "op_overhead"
    return t * 1e6, [_kernel(kernel, "fp32", f"narrow model, {calls} operators", t, us=t * 1e6)]


# Which of a training step's aten operators each size curve times (by their self time under the
# profiler); every other aten operator counts as the model's element-wise work.
CURVE_OPERATORS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm"),
    "attention": ("scaled_dot_product", "flash_attention", "efficient_attention"),
    "cross_entropy": ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward", "aten::nll_loss_backward"),
    "gelu": ("aten::gelu", "aten::gelu_backward"),
}
CURVE_LAYERS = 2  # the sweep's blocks


def bench_model_step(plan: Plan, device: str, op_us: float) -> tuple[dict[str, dict[int, float]], list[dict]]:
    """Size curves from the model's own training step (the first preset's widths, 2 blocks, one
    rank) at each of ``plan.curve_tokens``: per kernel kind, its work over the self time of its
    operators under the profiler, the step's own shapes and memory traffic (a kernel looped on
    operands kept in cache runs several times faster than inside a step). The element-wise rate
    is the workload's estimate of the step's element-wise bytes over the remaining operators'
    time, less their dispatch (``op_us`` per call, priced apart)."""
    curves: dict[str, dict[int, float]] = {}
    rows = []
    for tokens in plan.curve_tokens:
        seconds, counts = _model_step_self_times(plan, device, tokens)
        work = model_step_work(plan, tokens)
        seconds["elementwise"] = max(0.25 * seconds["elementwise"], seconds["elementwise"] - counts * op_us * 1e-6)
        sizes = curve_operands(plan, tokens)
        for kind, amount in work.items():
            rate = amount / seconds[kind] / (1e12 if kind in ("matmul", "attention") else 1e9)
            curves.setdefault(kind, {})[sizes[kind]] = rate
            unit = "tflops" if kind in ("matmul", "attention") else "gbps"
            rows.append(_kernel(f"model_step_{kind}", "fp32", f"{CURVE_LAYERS}-block {plan.presets[0]} step, {tokens} tokens", seconds[kind], **{unit: rate}))
    return curves, rows


def curve_model(plan: Plan):
    from dataclasses import replace

    return replace(PRESETS[plan.presets[0]], n_layers=CURVE_LAYERS)


def curve_operands(plan: Plan, tokens: int) -> dict[str, int]:
    """The operand each kind's curve is keyed by, in elements (see machine.SIZE_CURVE_KINDS)."""
    m = curve_model(plan)
    activation = tokens * m.hidden
    return {"matmul": activation, "attention": activation, "elementwise": activation,
            "cross_entropy": tokens * m.vocab_size, "gelu": tokens * m.ffn_hidden}  # fmt: skip


def model_step_work(plan: Plan, tokens: int) -> dict[str, float]:
    """What one rank's training step of :func:`curve_model` does at ``tokens``, as the workload counts it:
    FLOPs (matmul, attention), bytes (cross-entropy logits, GELU inputs, element-wise traffic)."""
    from muon_repro.costmodel.workload import FP32, forward_vector_elems_per_token

    m = curve_model(plan)
    attention = 12 * m.n_layers * m.hidden * m.max_seq_len * tokens
    return {
        "matmul": m.flops_per_token(m.max_seq_len) * tokens - attention,
        "attention": attention,
        "cross_entropy": FP32 * tokens * m.vocab_size,
        "gelu": FP32 * tokens * m.ffn_hidden * m.n_layers,
        "elementwise": 3 * FP32 * tokens * forward_vector_elems_per_token(m, 1),  # forward + the backward's twice
    }


def _model_step_self_times(plan: Plan, device: str, tokens: int) -> tuple[dict[str, float], int]:
    """Seconds per kernel kind of one training step (the lowest over the plan's repetitions, at
    least 2), and how many operator calls the element-wise remainder holds."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from muon_repro.model import GPT
    from muon_repro.parallel.comm import Group

    m = curve_model(plan)
    model = GPT(m, Group.single("tp"), device=device)
    batch = torch.randint(m.vocab_size, (max(1, tokens // m.max_seq_len), m.max_seq_len), device=device)
    model(batch, batch).backward()  # warm-up: the allocator's first touch of every buffer
    best: dict[str, float] = {}
    for _ in range(max(2, plan.reps // 3)):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(batch, batch).backward()
        times, rest_calls = _classify(prof.key_averages())
        best = {k: min(v, best.get(k, math.inf)) for k, v in times.items()}
    return best, rest_calls


def _classify(events) -> tuple[dict[str, float], int]:
    """Self seconds of the aten operators per curve kind, the rest as element-wise, and the rest's call count."""
    times = dict.fromkeys((*CURVE_OPERATORS, "elementwise"), 0.0)
    rest_calls = 0
    for e in events:
        if not e.key.startswith("aten::"):
            continue
        kind = next((k for k, names in CURVE_OPERATORS.items() if any(n == e.key or (n in e.key and not n.startswith("aten::")) for n in names)), None)
        times[kind or "elementwise"] += e.self_cpu_time_total * 1e-6
        rest_calls += 0 if kind else e.count
    return {k: max(v, 1e-9) for k, v in times.items()}, rest_calls


def standalone_matmul_rate(plan: Plan, device: str) -> float:
    """FLOP/s of one process looping the compute-share matmul (the reference for the share): the
    high quartile over the plan's windows."""
    return _windows_rate(lambda seconds: _matmul_loop_rate(plan, device, seconds), plan)


def compute_share(rates_by_rank: list[list[float]], reference: float) -> float:
    """The fraction of ``reference`` each rank gets when all compute at once: the ranks' summed
    rate per window (the high quartile over windows, each long enough for many time slices) over
    the reference, shared by the ranks, at most 1."""
    totals = [sum(window) for window in zip(*rates_by_rank)]
    return min(1.0, high_quartile(totals) / reference / len(rates_by_rank))


def _share_shape(plan: Plan) -> tuple[int, int, int]:
    m = PRESETS[plan.presets[0]]
    return plan.tokens, m.hidden, m.ffn_hidden // 2


def _share_operands(plan: Plan, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, fan_in, fan_out = _share_shape(plan)
    return torch.randn(tokens, fan_in, device=device), torch.randn(fan_in, fan_out, device=device)


def _loop_rate(step: Callable[[], object], work_per_call: float, device: str, seconds: float, check_every: int = 1) -> float:
    """Work per second of ``step`` looped for at least ``seconds`` (the clock read, after a device
    sync, every ``check_every`` calls)."""
    calls, t0 = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        if calls % check_every == 0:
            _sync(device)
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                return work_per_call * calls / elapsed


def _windows_rate(loop: Callable[[float], float], plan: Plan) -> float:
    """One process's rate of ``loop`` (a loop rate for a given length): the high quartile over the plan's windows."""
    return high_quartile([loop(plan.share_window_s) for _ in range(plan.share_windows)])


def _matmul_loop_rate(plan: Plan, device: str, seconds: float) -> float:
    tokens, fan_in, fan_out = _share_shape(plan)
    a, w = _share_operands(plan, device)
    return _loop_rate(lambda: a @ w, 2.0 * tokens * fan_in * fan_out, device, seconds, check_every=4)


STREAM_ELEMENTS = 1 << 22  # fp32 elements per operand of the bandwidth loop: 3 x 16 MiB, out of the caches


def _stream_loop_rate(device: str, seconds: float) -> float:
    """Bytes per second of ``c = a + b`` on operands larger than the caches, looped for ``seconds``."""
    a, b, c = (torch.ones(STREAM_ELEMENTS, device=device) for _ in range(3))
    return _loop_rate(lambda: torch.add(a, b, out=c), 12.0 * STREAM_ELEMENTS, device, seconds)


def standalone_stream_rate(plan: Plan, device: str) -> float:
    """One process's rate of the bandwidth loop: the reference for the bandwidth share."""
    return _windows_rate(lambda seconds: _stream_loop_rate(device, seconds), plan)


def _kernel(kernel: str, dtype: str, shape: str, seconds: float, **values: float) -> dict:
    return {"kind": "kernel", "kernel": kernel, "dtype": dtype, "shape": shape, "seconds": seconds, **values}


# ---------------------------------------------------------------- the world: compute share and collectives


@dataclass(frozen=True)
class WorldJob:
    """What each worker of one world measures."""

    plan: Plan
    device: str
    jitter_calls: tuple[int, ...] = (1,)  # matmuls of the compute-share shape between two collectives, per JITTER_COMPUTE_S


def world_worker(job: WorldJob) -> dict | None:
    """On every rank of a world: the compute share, the arrival jitter, then every collective on
    every group size; rank 0 returns what all ranks measured."""
    world, rank = dist.get_world_size(), dist.get_rank()
    share_rates, stream_rates = [], []
    for _ in range(job.plan.share_windows):  # every rank computes at once, window by window
        dist.barrier()
        share_rates.append(_matmul_loop_rate(job.plan, job.device, job.plan.share_window_s))
    for _ in range(job.plan.share_windows):  # then every rank streams memory at once
        dist.barrier()
        stream_rates.append(_stream_loop_rate(job.device, job.plan.share_window_s))
    samples, arrivals = [], {}
    for size in [g for g in range(2, world + 1) if world % g == 0]:
        members = [list(range(start, start + size)) for start in range(0, world, size)]
        groups = [dist.new_group(m) for m in members]  # collective over the world: every rank makes every group
        mine = groups[rank // size]
        arrivals[size] = [_arrivals(mine, job, calls) for calls in job.jitter_calls]
        for op in COLLECTIVE_OPS:
            for target in job.plan.sizes:
                samples.append(_time_collective(op, size, target, mine, job))
    gathered = [None] * world
    dist.all_gather_object(gathered, {"share_rates": share_rates, "stream_rates": stream_rates, "arrivals": arrivals, "samples": samples})
    if rank != 0:
        return None
    return {
        "world_size": world,
        "share_rates": [g["share_rates"] for g in gathered],
        "stream_rates": [g["stream_rates"] for g in gathered],
        "arrivals": [g["arrivals"] for g in gathered],
        "samples": [g["samples"] for g in gathered],
    }


def _arrivals(group, job: WorldJob, calls: int) -> list[float]:
    """When this rank reaches each of a run of small all-reduces, each after the same compute (as a
    model's layers alternate matmuls and TP all-reduces): ranks sharing cores arrive out of step."""
    a, w = _share_operands(job.plan, job.device)
    small = torch.ones(1024, device=job.device)
    dist.barrier()
    times = []
    for _ in range(job.plan.share_windows + 1):
        for _ in range(calls):
            a @ w
        _sync(job.device)
        times.append(time.perf_counter())  # perf_counter is CLOCK_MONOTONIC: one clock for every process of a machine
        dist.all_reduce(small, group=group)
    return times[1:]


def arrival_jitter(arrivals_by_rank: list[dict[int, list[list[float]]]]) -> dict[int, list[float]]:
    """Per group size and compute length: the mean time a rank waits for the last of its group to arrive (seconds)."""
    out = {}
    for size, lengths in arrivals_by_rank[0].items():
        out[size] = []
        for k in range(len(lengths)):
            waits = []
            for start in range(0, len(arrivals_by_rank), size):
                group = [arrivals_by_rank[r][size][k] for r in range(start, start + size)]
                for times in zip(*group):
                    waits += [max(times) - t for t in times]
            out[size].append(statistics.fmean(waits))
    return out


def _time_collective(op: str, group_size: int, target_bytes: int, group, job: WorldJob) -> dict:
    """One (op, size) on this rank's group: per repetition, the seconds from a world barrier's exit to the call's return."""
    hops = 2 * (group_size - 1) if op == "all_reduce" else group_size - 1
    chunk = max(1, target_bytes // (hops * 4))
    full = torch.ones(group_size * chunk, device=job.device)
    shard = torch.ones(chunk, device=job.device)
    # Each call allocates what it writes, as the model's and the optimizer's calls do (the TP
    # all-reduce reduces a clone of its input): fresh pages cost what reused buffers hide.
    call = {
        "all_gather": lambda: _all_gather_single(torch.empty_like(full), shard, group=group),
        "reduce_scatter": lambda: _reduce_scatter_single(torch.empty_like(shard), full, group=group),
        "all_reduce": lambda: dist.all_reduce(full.clone(), group=group),
    }[op]
    times = []
    for rep in range(job.plan.collective_reps + 1):  # the first is a warm-up
        dist.barrier()
        _sync(job.device)
        t0 = time.perf_counter()
        call()
        _sync(job.device)
        if rep:
            times.append(time.perf_counter() - t0)
    return {"op": op, "group_size": group_size, "bytes": ring_bytes_per_rank(op, group_size * chunk, 4, group_size), "times": times}


def collective_rows(result: dict) -> list[dict]:
    """One sample row per (op, group size, bytes): mean over ranks, median over repetitions (a step
    sums many collectives, so it sees their typical time, scheduling hiccups included)."""
    world = result["world_size"]
    by_key: dict[tuple[str, int, int], list[list[float]]] = {}
    for rank_samples in result["samples"]:
        for s in rank_samples:
            by_key.setdefault((s["op"], s["group_size"], s["bytes"]), []).append(s["times"])
    rows = []
    for (op, group_size, nbytes), per_rank in by_key.items():
        per_rep = [statistics.fmean(times) for times in zip(*per_rank)]
        rows.append({"kind": "collective_sample", "op": op, "group_size": group_size, "world_size": world, "bytes": nbytes, "seconds": statistics.median(per_rep)})
    return rows


def collective_fits(samples: list[dict]) -> tuple[list[CollectiveFit], list[dict]]:
    """An alpha-beta fit per (op, group size, world size) of the samples, and its table rows."""
    keys = sorted({(s["op"], s["group_size"], s["world_size"]) for s in samples})
    fits, rows = [], []
    for op, group_size, world in keys:
        mine = sorted((s["bytes"], s["seconds"]) for s in samples if (s["op"], s["group_size"], s["world_size"]) == (op, group_size, world))
        fit = fit_alpha_beta([b for b, _ in mine], [t for _, t in mine])
        fits.append(CollectiveFit(op=op, alpha_us=fit.alpha_s * 1e6, beta_gbps=fit.beta_bytes_per_s / 1e9, group_size=group_size, world_size=world,
                                  samples=tuple((float(b), float(t)) for b, t in mine)))  # fmt: skip
        rows.append({"kind": "collective", "op": op, "group_size": group_size, "world_size": world, "alpha_us": fit.alpha_s * 1e6,
                     "beta_gbps": fit.beta_bytes_per_s / 1e9, "fit_rel_rmse": fit.rel_rmse})  # fmt: skip
    return fits, rows


# ---------------------------------------------------------------- the whole calibration


def calibrate(
    name: str,
    *,
    backend: str = "gloo",
    ranks: Sequence[int] = (2, 4),
    threads: int | None = None,
    quick: bool = False,
    log: Callable[[str], None] = print,
) -> tuple[MachineProfile, list[dict]]:
    """Measure this machine; return its profile and the ``calibration`` table's rows."""
    from muon_repro.parallel.launch import launch

    ranks = _check_ranks(ranks)
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--backend nccl measures GPUs, and none is visible; use --backend gloo")
    plan = Plan.for_device(device, quick)
    kernel_threads = threads or max(1, (os.cpu_count() or 1) // max(ranks))
    load_before, started = _load_average(), time.perf_counter()
    figures, rows = _kernels(plan, device, kernel_threads, log)
    reference = _with_threads(kernel_threads, lambda: standalone_matmul_rate(plan, device))
    stream_reference = _with_threads(kernel_threads, lambda: standalone_stream_rate(plan, device))
    tokens, fan_in, fan_out = _share_shape(plan)
    jitter_calls = tuple(max(1, round(c * reference / (2.0 * tokens * fan_in * fan_out))) for c in JITTER_COMPUTE_S)
    jitter_compute_us = [round(calls * 2.0 * tokens * fan_in * fan_out / reference * 1e6) for calls in jitter_calls]  # what was run, after rounding
    shares, bandwidth, jitter, jitter_curve, samples = {}, {}, {}, {}, []
    for world in ranks:
        log(f"  world of {world} ranks ({backend}): compute share, arrival jitter and collectives ...")
        world_threads = threads or max(1, (os.cpu_count() or 1) // world)
        job = WorldJob(plan, device, jitter_calls)
        result = launch(world_worker, world, job, backend=backend, threads=world_threads if device == "cpu" else None)[0]
        shares[world] = compute_share(result["share_rates"], reference)
        bandwidth[world] = compute_share(result["stream_rates"], stream_reference)
        by_length = arrival_jitter(result["arrivals"])  # the largest world's, below
        jitter = {size: waits[0] * 1e6 for size, waits in by_length.items()}
        jitter_curve = {size: {c: w * 1e6 for c, w in zip(jitter_compute_us, waits)} for size, waits in by_length.items()}
        rows.append({"kind": "share", "kernel": "compute_share", "dtype": "fp32", "shape": _shape_label(_share_shape(plan)),
                     "world_size": world, "threads": world_threads, "ratio": shares[world]})  # fmt: skip
        rows.append({"kind": "share", "kernel": "bandwidth_share", "dtype": "fp32", "shape": f"[{STREAM_ELEMENTS}] x 3",
                     "world_size": world, "threads": world_threads, "ratio": bandwidth[world]})  # fmt: skip
        rows += [{"kind": "jitter", "kernel": "arrival_jitter", "shape": f"after {c} us of compute", "world_size": world, "group_size": size, "us": us}
                 for size, curve in jitter_curve.items() for c, us in curve.items()]  # fmt: skip
        samples += collective_rows(result)
    fits, fit_rows = collective_fits(samples)
    rows += samples + fit_rows
    calibration = {
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host_cpu": _cpu_model(), "host_cpu_cores": os.cpu_count(), "torch": torch.__version__, "threads": kernel_threads,
        "ranks": list(ranks), "quick": quick, "seconds": round(time.perf_counter() - started, 1),
        "load_average_before": load_before, "load_average_after": _load_average(),
        "ns_time_over_its_matmuls": figures.pop("ns_ratio"),
    }  # fmt: skip
    profile = MachineProfile(
        name=name, device=device, backend=backend,
        description=f"measured by muon-repro calibrate on {_cpu_model() or platform.machine()} ({os.cpu_count()} cores)",
        collectives=tuple(fits), compute_share={1: 1.0, **shares}, bandwidth_share={1: 1.0, **bandwidth}, arrival_jitter_us=jitter,
        arrival_jitter_curve_us=jitter_curve, calibration=calibration, **figures,
    )  # fmt: skip
    for row in rows:
        row.update(machine=name, device=device, backend=backend)
        row.setdefault("threads", kernel_threads if row["kind"] == "kernel" else None)
    return profile, rows


def _check_ranks(ranks: Sequence[int]) -> tuple[int, ...]:
    out = tuple(sorted(set(ranks)))
    if not out or any(not isinstance(w, int) or w < 2 for w in out):
        raise ValueError(f"--ranks must list world sizes of at least 2 ranks (e.g. 2,4), got {list(ranks)}")
    return out


def _kernels(plan: Plan, device: str, threads: int, log: Callable[[str], None]) -> tuple[dict, list[dict]]:
    """Every kernel figure of the profile, and their rows."""
    return _with_threads(threads, lambda: _measure_kernels(plan, device, log))


def _measure_kernels(plan: Plan, device: str, log: Callable[[str], None]) -> tuple[dict, list[dict]]:
    rows: list[dict] = []
    matmul, ns, ns_ratio = {}, {}, {}
    for dtype in plan.dtypes:
        log(f"  matmul and Newton-Schulz, {dtype} ...")
        matmul[dtype], r1 = bench_matmul(plan, dtype, device)
        ns[dtype], ns_ratio[dtype], r2 = bench_newton_schulz(plan, dtype, device, ns_shapes(plan))
        rows += r1 + r2
    log("  attention, cross-entropy, GELU, element-wise, operator overhead ...")
    attention, r3 = bench_attention(plan, device)
    cross_entropy, r4 = bench_cross_entropy(plan, device)
    gelu, r5 = bench_gelu(plan, device)
    elementwise, r6 = bench_elementwise(plan, device)
    op_us, r7 = bench_op_overhead(plan, device, profiled=False)
    profiled_us, r8 = bench_op_overhead(plan, device, profiled=True)
    rows += r3 + r4 + r5 + r6 + r7 + r8
    curves: dict[str, dict[int, float]] = {}
    if plan.curve_tokens and device == "cpu":  # a GPU's profiler self times are launches, not kernels
        log(f"  the model's training step at {', '.join(map(str, plan.curve_tokens))} tokens (size curves) ...")
        curves, r9 = bench_model_step(plan, device, op_us)
        rows += r9
    figures = dict(
        size_curves=curves,
        matmul_tflops=matmul, newton_schulz_tflops=ns, attention_tflops={"fp32": attention}, cross_entropy_gbps=cross_entropy,
        gelu_gbps=gelu, elementwise_gbps=elementwise, op_overhead_us=op_us, profiled_op_overhead_us=profiled_us, ns_ratio=ns_ratio,
    )  # fmt: skip
    return figures, rows


def _with_threads(threads: int, fn: Callable[[], object]):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def _shape_label(shape: tuple[int, int, int]) -> str:
    tokens, fan_in, fan_out = shape
    return f"[{tokens},{fan_in}]x[{fan_in},{fan_out}]"


def _load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str | None:
    try:
        lines = open("/proc/cpuinfo", encoding="utf-8").read().splitlines()
    except OSError:
        return platform.processor() or None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)


# ---------------------------------------------------------------- summary


def format_summary(profile: MachineProfile) -> str:
    """What ``muon-repro calibrate`` prints: the figures, Newton-Schulz against its matmuls, the fits."""
    c = profile.calibration
    lines = [
        f"machine {profile.name}: {profile.description}; {c.get('threads')} thread(s) per rank; {c.get('seconds')} s; "
        f"load average {c.get('load_average_before')} -> {c.get('load_average_after')}",
        "  matmul        " + ", ".join(f"{d} {v:.4g} TFLOP/s" for d, v in profile.matmul_tflops.items()),
        "  Newton-Schulz " + ", ".join(f"{d} {v:.4g} TFLOP/s" for d, v in profile.newton_schulz_tflops.items())
        + "; its time over its own matmuls' " + ", ".join(f"{d} {r:.3f}x" for d, r in c.get("ns_time_over_its_matmuls", {}).items())
        + " (target <= 1.15x)",
        f"  attention {profile.attention_tflops.get('fp32', float('nan')):.4g} TFLOP/s; cross-entropy {profile.cross_entropy_gbps:.4g} GB/s; "
        f"GELU {profile.gelu_gbps:.4g} GB/s; element-wise {profile.elementwise_gbps:.4g} GB/s",
        f"  operator call {profile.op_overhead_us:.3g} us ({profile.profiled_op_overhead_us:.3g} us under the profiler)",
        *(f"  in the model's step, by operand elements: {kind} " + ", ".join(f"{t}: {r:.3g}" for t, r in sorted(curve.items()))
          + (" TFLOP/s" if kind in ("matmul", "attention") else " GB/s") for kind, curve in profile.size_curves.items()),
        "  compute share " + ", ".join(f"{w} ranks: {s:.2f}" for w, s in sorted(profile.compute_share.items()))
        + "; bandwidth share " + ", ".join(f"{w} ranks: {s:.2f}" for w, s in sorted(profile.bandwidth_share.items()))
        + "; arrival jitter per collective " + "; ".join(f"groups of {g}: " + ", ".join(f"{w:.0f} us after {c / 1e3:.0f} ms" for c, w in sorted(curve.items()))
                                                         for g, curve in sorted(profile.arrival_jitter_curve_us.items())),
        "  collectives (t = alpha + ring bytes per rank / beta):",
        f"    {'op':<15} {'group':>5} {'world':>5} {'alpha us':>10} {'beta GB/s':>10}",
    ]
    lines += [f"    {f.op:<15} {f.group_size:>5} {f.world_size:>5} {f.alpha_us:>10.1f} {f.beta_gbps:>10.3f}" for f in profile.collectives]
    return "\n".join(lines)
