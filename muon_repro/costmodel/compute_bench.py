"""The one-process microbenchmarks of a calibration: the profile's kernel figures and their rows.

Matmuls and Newton-Schulz per dtype, attention, cross-entropy, GELU, element-wise bandwidth and
the host time per operator call, each a kernel looped at the model presets' shapes; and the size
curves, from the model's own training step under the profiler: on a CPU the small preset in fp32, each
operator's self CPU time; on a GPU the gpu scale's preset under bf16 autocast at its runs' pass sizes,
each operator's self device time (its kernels').
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from muon_repro.bench.speed_probe import sync_device
from muon_repro.costmodel.measurement import Plan, low_quartile, seconds_per_call
from muon_repro.formulas import newton_schulz_flops
from muon_repro.model_config import LLAMA_7B_SHAPE, PRESETS, GPTConfig
from muon_repro.optim.newton_schulz import NS_COEFFICIENTS, zeropower_via_newtonschulz5
from muon_repro.phases import NEWTON_SCHULZ

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

# Above Kineto's highest level (its USDT notes, 5): nothing of Kineto's on stderr.
KINETO_SILENT = "6"


@contextlib.contextmanager
def profiler_notes_off() -> Iterator[None]:
    """Kineto prints a ``USDT: profiler_start`` and ``profiler_stop`` line to stderr at every profiler
    window, whatever its default level; calibrate opens a dozen windows and keeps their timings only, so
    the notes would bury its progress lines. Kineto reads ``KINETO_LOG_LEVEL`` once, at the process's
    first window: set around that window, restored after; a level the user set is left as it is."""
    if "KINETO_LOG_LEVEL" in os.environ:
        yield
        return
    os.environ["KINETO_LOG_LEVEL"] = KINETO_SILENT
    try:
        yield
    finally:
        os.environ.pop("KINETO_LOG_LEVEL", None)


def measure_kernels(plan: Plan, device: str, log: Callable[[str], None]) -> tuple[dict, list[dict]]:
    """Every kernel figure of the profile (by field name, plus ``ns_ratio``), and their rows."""
    rows: list[dict] = []
    matmul, ns, ns_ratio = {}, {}, {}
    for dtype in plan.dtypes:
        log(f"  matmul and Newton-Schulz, {dtype} ...")
        matmul[dtype], r1 = bench_matmul(plan, dtype, device)
        ns[dtype], ns_ratio[dtype], r2 = bench_newton_schulz(plan, dtype, device, ns_shapes(plan))
        rows += r1 + r2
    target: dict[str, dict[str, float]] = {}
    for name in plan.ns_target_models:
        log(f"  Newton-Schulz against matmul at the {name} model's shapes, bf16 ...")
        target[name], rows_target = bench_ns_target(name, plan, device)
        rows += rows_target
    log("  attention, cross-entropy, GELU, element-wise, operator overhead ...")
    attention, r3 = bench_attention(plan, device)
    cross_entropy, r4 = bench_cross_entropy(plan, device)
    gelu, r5 = bench_gelu(plan, device)
    elementwise, r6 = bench_elementwise(plan, device)
    op_us, r7 = bench_op_overhead(plan, device, profiled=False)
    profiled_us, r8 = bench_op_overhead(plan, device, profiled=True)
    rows += r3 + r4 + r5 + r6 + r7 + r8
    curves: dict[str, dict[int, float]] = {}
    if plan.curve_tokens:
        log(
            f"  the {plan.curve_model_preset} model's training step, {plan.curve_precision}, at "
            f"{', '.join(map(str, plan.curve_tokens))} tokens (size curves) ..."
        )
        curves, r9 = bench_model_step(plan, device, op_us, log)
        rows += r9
    figures = {
        "size_curves": curves,
        "size_curves_precision": plan.curve_precision,
        "matmul_tflops": matmul,
        "newton_schulz_tflops": ns,
        "attention_tflops": attention,
        "cross_entropy_gbps": cross_entropy,
        "gelu_gbps": gelu,
        "elementwise_gbps": elementwise,
        "op_overhead_us": op_us,
        "profiled_op_overhead_us": profiled_us,
        "ns_ratio": ns_ratio,
        "ns_target": target,
    }
    return figures, rows


# ---------------------------------------------------------------- shapes


def ns_shapes(plan: Plan) -> list[tuple[int, int]]:
    """The full matrices Muon orthogonalizes in the plan's presets (qkv, proj, fc1, fc2)."""
    return list(dict.fromkeys(shape for name in plan.presets for shape in matrix_shapes(PRESETS[name])))


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


def layer_shapes(preset: str | GPTConfig, tp: int) -> list[tuple[int, int]]:
    """``(in, out)`` of every TP-local weight a matmul uses, layer by layer (qkv, proj, fc1, fc2), then the LM head."""
    m = PRESETS[preset] if isinstance(preset, str) else preset
    h, f = m.hidden, m.ffn_hidden
    return [(h, 3 * h // tp), (h // tp, h), (h, f // tp), (f // tp, h)] * m.n_layers + [(h, m.vocab_size // tp)]


def matrix_shapes(model: GPTConfig) -> list[tuple[int, int]]:
    """The full matrices Muon orthogonalizes in one block of ``model``: qkv, proj, fc1, fc2."""
    h, f = model.hidden, model.ffn_hidden
    return [(3 * h, h), (h, h), (f, h), (h, f)]


# The models whose Newton-Schulz a GPU calibration sets against its matmul rate: the gpu scale's 369M (the bench's
# large preset) and a LLaMA-7B shape. TARGET_LAYERS of their blocks time the matmul rate: the blocks are alike, and
# a 7B model's 32 would take seconds per repetition for the same figure.
TARGET_MODELS = {"369m": PRESETS["large"], "7b": GPTConfig.preset("large", **LLAMA_7B_SHAPE)}
TARGET_LAYERS = 4
NS_TARGET_FRACTION = 0.7  # Newton-Schulz should reach this much of the same device's bf16 matmul rate


def bench_ns_target(name: str, plan: Plan, device: str) -> tuple[dict[str, float], list[dict]]:
    """bf16 Newton-Schulz at ``name``'s matrix shapes against the bf16 rate of the same model's training matmuls
    (:func:`layer_shapes` at TP 1, ``plan.tokens`` tokens): ``{ns_tflops, matmul_tflops, fraction}`` and the rows
    (``newton_schulz`` per shape, ``matmul`` for the model, labelled with its name)."""
    from dataclasses import replace

    model = TARGET_MODELS[name]
    shapes = layer_shapes(replace(model, n_layers=TARGET_LAYERS), 1)
    t_mm, work_mm = _training_matmuls(shapes, plan.tokens, "bf16", device, plan.reps)
    matmul_tflops = work_mm / t_mm / 1e12
    rows = [
        _kernel(
            "matmul",
            "bf16",
            f"{name} tp=1: {TARGET_LAYERS} blocks and the LM head, {plan.tokens} tokens",
            t_mm,
            tflops=matmul_tflops,
        )
    ]
    flops = seconds = 0.0
    for shape in matrix_shapes(model):
        g = torch.randn(*shape, device=device)
        t_ns = seconds_per_call(lambda: zeropower_via_newtonschulz5(g, 5, torch.bfloat16), plan.reps, device)
        work = newton_schulz_flops(shape, 5)
        rows.append(_kernel(NEWTON_SCHULZ, "bf16", f"{name} [{shape[0]},{shape[1]}]", t_ns, tflops=work / t_ns / 1e12))
        flops, seconds = flops + work, seconds + t_ns
    ns_tflops = flops / seconds / 1e12
    return {"ns_tflops": ns_tflops, "matmul_tflops": matmul_tflops, "fraction": ns_tflops / matmul_tflops}, rows


def _training_matmuls(shapes: list[tuple[int, int]], tokens: int, dtype: str, device: str, reps: int) -> tuple[float, float]:
    """Seconds and FLOPs of one step's matmuls over weights of these shapes, each weight its own
    tensor (a step's working set, not one operand kept hot in cache): forward ``x W``, then
    backward ``g W^T`` and ``x^T g`` in reverse order."""
    kind = TORCH_DTYPES[dtype]
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
    x = torch.randn(m, n, device=device, dtype=TORCH_DTYPES[dtype])
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
        t_ns = _timed(lambda: zeropower_via_newtonschulz5(g, 5, TORCH_DTYPES[dtype]), device)
        t_mm = _timed(matmuls, device)
        if rep:
            ns_times.append(t_ns)
            mm_times.append(t_mm)
    return low_quartile(ns_times), low_quartile(mm_times), statistics.median(ns / mm for ns, mm in zip(ns_times, mm_times))


def _timed(fn: Callable[[], object], device: str) -> float:
    """Seconds of one ``fn()``, the device's queue drained before and after."""
    sync_device(device)
    t0 = time.perf_counter()
    fn()
    sync_device(device)
    return time.perf_counter() - t0


def bench_attention(plan: Plan, device: str) -> tuple[dict[str, float], list[dict]]:
    """SDPA (causal) forward+backward at the first preset's shape (2-way TP heads), per dtype of the plan
    (a GPU's bf16 takes the flash kernel), in FLOPs as :meth:`GPTConfig.flops_per_token` counts them:
    12 x local width x sequence per token."""
    m = PRESETS[plan.presets[0]]
    heads, seq = max(1, m.n_heads // 2), m.max_seq_len
    batch = max(1, plan.tokens // seq)
    rates, rows = {}, []
    for dtype in plan.dtypes:
        kind = TORCH_DTYPES[dtype]
        q, k, v = (torch.randn(batch, heads, seq, m.head_dim, device=device, dtype=kind, requires_grad=True) for _ in range(3))

        def step() -> None:
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
            q.grad = k.grad = v.grad = None

        t = seconds_per_call(step, plan.reps, device)
        rates[dtype] = 12.0 * heads * m.head_dim * seq * batch * seq / t / 1e12
        rows.append(_kernel("attention", dtype, f"[{batch},{heads},{seq},{m.head_dim}]", t, tflops=rates[dtype]))
    return rates, rows


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

    from muon_repro.costmodel.op_counts import model_op_counts, narrow_training_step

    step = narrow_training_step(device=device)
    calls = sum(model_op_counts(2, "fused", 1))

    def forward_backward() -> None:
        step.forward().backward()

    if profiled:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profiler_notes_off(), profile(activities=activities, record_shapes=True, profile_memory=True):
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
    "cross_entropy": (
        "aten::_log_softmax",
        "aten::_log_softmax_backward_data",
        "aten::nll_loss_forward",
        "aten::nll_loss_backward",
    ),
    "gelu": ("aten::gelu", "aten::gelu_backward"),
}
CURVE_LAYERS = 2  # the sweep's blocks


def bench_model_step(
    plan: Plan, device: str, op_us: float, log: Callable[[str], None] = print
) -> tuple[dict[str, dict[int, float]], list[dict]]:
    """Size curves from the model's own training step (:func:`curve_model`: the plan's curve preset's widths,
    2 blocks, one rank, in ``plan.curve_precision``) at each of ``plan.curve_tokens``: per kernel kind,
    its work over the self time of its operators under the profiler, the step's own shapes and memory
    traffic (a kernel looped on operands kept in cache runs several times faster than inside a step). The
    element-wise rate is the workload's estimate of the step's element-wise bytes over the remaining
    operators' time; on a CPU, less their dispatch (``op_us`` per call, priced apart: a CPU's self times
    are host times), while a GPU's are its kernels' device times, which hold no dispatch. A GPU that runs
    out of memory at a size ends its curves at the sizes before it."""
    if device == "cpu" and plan.curve_precision != "fp32":
        raise ValueError(
            f"size curves on a CPU are timed in fp32 (the bench's cpu runs), not {plan.curve_precision}: "
            "bf16 matmuls on a CPU without bf16 units run far slower than the runs they would price"
        )
    curves: dict[str, dict[int, float]] = {}
    rows = []
    label_model = f"{CURVE_LAYERS}-block {plan.curve_model_preset} step"
    for tokens in plan.curve_tokens:
        try:
            seconds, counts = _model_step_self_times(plan, device, tokens)
        except torch.cuda.OutOfMemoryError:  # a device smaller than the runs': keep what fitted
            log(f"  the {label_model} at {tokens} tokens does not fit in the device's memory: its curves stop before it")
            break
        work = model_step_work(plan, tokens)
        if device == "cpu":
            seconds["elementwise"] = max(0.25 * seconds["elementwise"], seconds["elementwise"] - counts * op_us * 1e-6)
        sizes = curve_operands(plan, tokens)
        label = f"{label_model}, {tokens} tokens"
        for kind, amount in work.items():
            rate = amount / seconds[kind] / (1e12 if kind in ("matmul", "attention") else 1e9)
            curves.setdefault(kind, {})[sizes[kind]] = rate
            unit = "tflops" if kind in ("matmul", "attention") else "gbps"
            rows.append(_kernel(f"model_step_{kind}", plan.curve_precision, label, seconds[kind], **{unit: rate}))
    return curves, rows


def curve_model(plan: Plan) -> GPTConfig:
    """The model whose training step the size curves time: the curve preset's widths (``plan.curve_model_preset``:
    the first preset on a CPU, the gpu scale's runs' on a GPU), :data:`CURVE_LAYERS` blocks."""
    from dataclasses import replace

    return replace(PRESETS[plan.curve_model_preset], n_layers=CURVE_LAYERS)


def curve_operands(plan: Plan, tokens: int) -> dict[str, int]:
    """The operand each kind's curve is keyed by, in elements (see machine_profile.SIZE_CURVE_KINDS)."""
    m = curve_model(plan)
    activation = tokens * m.hidden
    return {
        "matmul": activation,
        "attention": activation,
        "elementwise": activation,
        "cross_entropy": tokens * m.vocab_size,
        "gelu": tokens * m.ffn_hidden,
    }


def model_step_work(plan: Plan, tokens: int) -> dict[str, float]:
    """What one rank's training step of :func:`curve_model` does at ``tokens``, as the workload counts it in the
    curves' precision (a curve's rate is that count over the measured time, so that it prices the workload's count
    of a run of the same precision): FLOPs (matmul, attention), bytes (cross-entropy logits, always fp32; GELU
    inputs and element-wise traffic, in the activations' dtype)."""
    from muon_repro.costmodel.workload import ELEMENT_SIZE, FP32, forward_vector_elems_per_token

    m = curve_model(plan)
    activation = ELEMENT_SIZE[plan.curve_precision]
    attention = 12 * m.n_layers * m.hidden * m.max_seq_len * tokens
    return {
        "matmul": m.flops_per_token(m.max_seq_len) * tokens - attention,
        "attention": attention,
        "cross_entropy": FP32 * tokens * m.vocab_size,
        "gelu": activation * tokens * m.ffn_hidden * m.n_layers,
        "elementwise": 3 * activation * tokens * forward_vector_elems_per_token(m, 1),  # forward + the backward's twice
    }


def _model_step_self_times(plan: Plan, device: str, tokens: int) -> tuple[dict[str, float], int]:
    """Seconds per kernel kind of one training step (the lowest over the plan's repetitions, at
    least 2), and how many operator calls the element-wise remainder holds. On a CPU the operators'
    self CPU times; on a GPU their self device times (a GPU's self CPU time is the launch, not the
    kernel), the forward under bf16 autocast when the plan's curves are bf16, as
    :func:`muon_repro.bench.training.train_step` runs it (the backward follows the forward's dtypes)."""
    from torch.profiler import ProfilerActivity, profile

    from muon_repro.model import GPT
    from muon_repro.parallel.comm import Group

    m = curve_model(plan)
    model = GPT(m, Group.single("tp"), device=device)
    batch = torch.randint(m.vocab_size, (max(1, tokens // m.max_seq_len), m.max_seq_len), device=device)
    on_device = device != "cpu"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_device else [ProfilerActivity.CPU]

    def step() -> None:
        with _autocast(plan, device):
            loss = model(batch, batch)
        loss.backward()

    step()  # warm-up: the allocator's first touch of every buffer (and a GPU's kernel selection)
    best: dict[str, float] = {}
    for _ in range(max(2, plan.reps // 3)):
        with profiler_notes_off(), profile(activities=activities) as prof:
            step()
            sync_device(device)  # every kernel of the step ends inside the profiled window
        times, rest_calls = _classify(prof.key_averages(), device_time=on_device)
        best = {k: min(v, best.get(k, math.inf)) for k, v in times.items()}
    return best, rest_calls


def _autocast(plan: Plan, device: str) -> contextlib.AbstractContextManager:
    """bf16 autocast for a bf16 curve plan (the bench's ``precision="bf16"``); nothing for fp32."""
    if plan.curve_precision == "bf16":
        return torch.autocast(device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _classify(events, device_time: bool = False) -> tuple[dict[str, float], int]:
    """Self seconds of the aten operators per curve kind, the rest as element-wise, and the rest's call count.
    ``device_time``: by each operator's self device time (a GPU's kernels), else by its self CPU time."""
    times = dict.fromkeys((*CURVE_OPERATORS, "elementwise"), 0.0)
    rest_calls = 0
    for e in events:
        if not e.key.startswith("aten::"):
            continue
        kind = _curve_kind(e.key)
        times[kind or "elementwise"] += (_self_device_us(e) if device_time else e.self_cpu_time_total) * 1e-6
        rest_calls += 0 if kind else e.count
    return {k: max(v, 1e-9) for k, v in times.items()}, rest_calls


def _self_device_us(event) -> float:
    """An operator's self device time in us: ``self_device_time_total`` (torch 2.4 on), else the older name."""
    us = getattr(event, "self_device_time_total", None)
    return event.self_cuda_time_total if us is None else us


def _curve_kind(operator: str) -> str | None:
    """The size curve an aten operator's time counts toward: by its exact ``aten::`` name, or by a
    fragment of a fused kernel's name (``scaled_dot_product``...); ``None``: element-wise."""
    for kind, names in CURVE_OPERATORS.items():
        if any(n == operator or (n in operator and not n.startswith("aten::")) for n in names):
            return kind
    return None


def _kernel(kernel: str, dtype: str, shape: str, seconds: float, **values: float) -> dict:
    """One ``kernel`` row of the ``calibration`` table."""
    return {"kind": "kernel", "kernel": kernel, "dtype": dtype, "shape": shape, "seconds": seconds, **values}
