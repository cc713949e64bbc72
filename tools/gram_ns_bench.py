"""Time Dao AI Lab's Gram Newton-Schulz (PyPI ``gram-newton-schulz``) beside ours at the 369M and 7B matrix shapes.

One GPU, bf16 input; each shape times, in turn and back to back:

* ours: ``orthogonalize`` (5 steps, bf16) in each variant (the quintic Distributed Muon runs, and our Polar Express
  and Gram forms), eager, then compiled with ``torch.compile(mode="reduce-overhead")`` as theirs is;
* ``GramNewtonSchulz`` with its CuTe DSL kernels (Polar Express coefficients, 5 steps, reset at step 2;
  it iterates on the Gram matrix in fp16), first without ``torch.compile`` (no compile time), then, while the
  time budget lasts, with its default ``torch.compile(mode="reduce-overhead")`` (CUDA graphs).

Ours are the kernels ``ns_<method>`` (``ns_quintic``, ``ns_polar_express``, ``ns_gram``), theirs
``gram_newton_schulz``, compiled ones suffixed ``_compiled``; shapes read ``369m [3072,1024]``.
Rows go to ``--out`` (JSON, the ``calibration`` table's columns: kind ``kernel``) after every shape, so a run
stopped by its budget keeps what it measured. The rate column is our NS FLOP count over each one's time: the
time at the same shape, stated as a rate (Gram Newton-Schulz does fewer FLOPs for the same orthogonalization).

    python tools/gram_ns_bench.py --out gram_newton_schulz.json [--budget-s 90] [--reps 10]

Needs a CUDA GPU (without one it writes the reason); without the package (and quack-kernels and
nvidia-cutlass-dsl) it times ours alone and notes why.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import torch

from muon_repro.costmodel.compute_bench import TARGET_MODELS, matrix_shapes
from muon_repro.costmodel.measurement import seconds_per_call
from muon_repro.formulas import newton_schulz_flops
from muon_repro.optim.newton_schulz import orthogonalize
from muon_repro.phases import NS_METHODS
from muon_repro.tables.files import write_atomic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=90.0, help="stop starting new measurements after this long")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    started = time.perf_counter()
    result: dict = {"rows": [], "notes": []}

    def save() -> None:
        write_atomic(args.out, json.dumps(result, indent=1))

    if not torch.cuda.is_available():
        result["notes"].append("no CUDA GPU: nothing measured")
        save()
        return 0
    result["device"] = torch.cuda.get_device_name()
    theirs: dict = {}
    try:
        import gram_newton_schulz
        from gram_newton_schulz import GramNewtonSchulz

        result["package"] = f"gram-newton-schulz {gram_newton_schulz.__version__}"
        theirs = {False: GramNewtonSchulz(compile_kwargs=None), True: GramNewtonSchulz()}
    except Exception as exc:  # an import error of any of its compiled dependencies: ours are still timed
        result["notes"].append(f"gram_newton_schulz not importable: {type(exc).__name__}: {exc}")
    for compiled in (False, True):
        for model_name in ("369m", "7b"):
            for shape in matrix_shapes(TARGET_MODELS[model_name]):
                if time.perf_counter() - started > args.budget_s:
                    result["notes"].append(
                        f"budget of {args.budget_s:.0f} s spent before {model_name} {shape}, compiled={compiled}"
                    )
                    save()
                    return 0
                g = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
                label = f"{model_name} [{shape[0]},{shape[1]}]"
                for kernel, fn, work in _contenders(g, compiled, theirs.get(compiled)):
                    try:
                        t0 = time.perf_counter()
                        fn()  # the first call compiles its kernels
                        torch.cuda.synchronize()
                        first_s = time.perf_counter() - t0
                        t = seconds_per_call(fn, args.reps, "cuda")
                    except Exception as exc:
                        result["notes"].append(f"{kernel} {label}: {type(exc).__name__}: {str(exc)[:300]}")
                        continue
                    result["rows"].append(
                        {
                            "kind": "kernel",
                            "kernel": kernel,
                            "dtype": "bf16",
                            "shape": label,
                            "seconds": t,
                            "tflops": work / t / 1e12,
                            "first_call_s": first_s,
                        }
                    )
                    print(f"{kernel:<30} {label:<20} {t * 1e3:8.3f} ms  (first call {first_s:.1f} s)", flush=True)
                save()
    save()
    return 0


def _contenders(g: torch.Tensor, compiled: bool, theirs) -> list[tuple[str, object, int]]:
    """(kernel name, call, our quintic's FLOPs: every rate is stated at the quintic's work) of each contender, eager
    or compiled alike: ours in each variant (``torch.compile`` in the mode theirs uses, CUDA graphs), and theirs."""
    shape = tuple(g.shape)
    work = newton_schulz_flops(shape, 5)
    suffix = "_compiled" if compiled else ""
    contenders = []
    for method in NS_METHODS:
        fn = functools.partial(orthogonalize, steps=5, dtype=torch.bfloat16, method=method)
        if compiled:
            fn = torch.compile(fn, mode="reduce-overhead")
        # ns_<method>: not the calibration's own newton_schulz rows at the same shapes, which join the same table
        contenders.append((f"ns_{method}{suffix}", functools.partial(fn, g), work))
    if theirs is not None:
        contenders.append(("gram_newton_schulz" + suffix, functools.partial(theirs, g), work))
    return contenders


if __name__ == "__main__":
    raise SystemExit(main())
