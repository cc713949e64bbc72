"""``muon-repro equivalence``: distributed optimizers vs the single-device reference."""

from __future__ import annotations

import argparse
import json
import math
import sys

from muon_repro.model_config import TP_SPLIT_FIELDS, GPTConfig
from muon_repro.phases import LAYOUTS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "equivalence",
        help="train the tiny model distributed and single-device and compare, step by step",
        description=(
            "Launch dp*tp workers (gloo on CPU; --backend nccl on GPUs), train N steps with the "
            "distributed optimizer and with the single-device reference from the same seed, and "
            "print parameter differences per tensor (optimizer-isolated and end-to-end), ledger vs "
            "analytic bytes per phase, NS calls and optimizer-state bytes per rank. Exits 1 when a "
            "tensor's relative difference exceeds its bound at some step (each one is printed) or "
            "the ledger disagrees with the analytic bytes."
        ),
    )
    p.add_argument("--dp", type=int, default=2, help="data-parallel size (default: %(default)s)")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel size (default: %(default)s)")
    p.add_argument(
        "--optimizer",
        choices=("muon", "adamw"),
        default="muon",
        help="the distributed optimizer compared with its single-device reference (default: %(default)s)",
    )
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="contiguous",
        help="how ZeRO-1 lays the optimizer's state out over the DP ranks (default: %(default)s)",
    )
    p.add_argument(
        "--bucket-elems",
        type=int,
        default=None,
        help="bucket size for --layout bucketed (default: a quarter of the model, at least 1,024 elements)",
    )
    p.add_argument("--steps", type=int, default=5, help="training steps compared, one by one (default: %(default)s)")
    p.add_argument(
        "--ns-dtype", choices=("fp32", "bf16"), default="fp32", help="Newton-Schulz compute dtype (default: %(default)s)"
    )
    p.add_argument(
        "--gather-dtype", choices=("fp32", "bf16"), default=None, help="dtype of the NS gathers (default: the NS dtype)"
    )
    p.add_argument("--preset", default="tiny", help="model preset: tiny, small, medium, large (default: %(default)s)")
    p.add_argument(
        "--isolated-bound",
        type=float,
        default=None,
        help="largest relative difference per tensor, optimizer-isolated (default 0: bit for bit)",
    )
    p.add_argument(
        "--end-to-end-bound",
        type=float,
        default=None,
        help="largest relative difference per tensor, end to end (default, tiny preset only: Muon 1e-4 in fp32, "
        "2e-2 with bf16 gathers, 1 with bf16 NS; AdamW 2e-3; other presets: not checked)",
    )
    p.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default="gloo",
        help="process-group backend: gloo on the CPU, nccl on one GPU per worker (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=_run)


def check_tp_divides_model(tp: int, preset: str) -> None:
    """``--tp`` must divide every size the model splits: checked here, before any worker starts."""
    model = GPTConfig.preset(preset)
    uneven = model.sizes_tp_splits_unevenly(tp)
    if not uneven:
        return
    bad = [f"{name}={value}" for name, value in uneven.items()]
    common = math.gcd(*(getattr(model, name) for name in TP_SPLIT_FIELDS))
    choices = [str(d) for d in range(1, common + 1) if common % d == 0]
    listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
    raise ValueError(
        f"--tp {tp} does not divide the {preset} preset's {', '.join(bad)} (tensor parallelism splits each of "
        f"{', '.join(TP_SPLIT_FIELDS)}); use --tp {listed}"
    )


def _run(args: argparse.Namespace) -> int:
    from muon_repro.optim.equivalence import EquivalenceConfig, run_equivalence
    from muon_repro.parallel.launch import describe_failure

    cfg = EquivalenceConfig(
        dp=args.dp,
        tp=args.tp,
        optimizer=args.optimizer,
        layout=args.layout,
        steps=args.steps,
        ns_dtype=args.ns_dtype,
        gather_dtype=args.gather_dtype,
        bucket_elems=args.bucket_elems,
        preset=args.preset,
        isolated_bound=args.isolated_bound,
        end_to_end_bound=args.end_to_end_bound,
    )
    check_tp_divides_model(cfg.tp, cfg.preset)
    try:
        report = run_equivalence(cfg, backend=args.backend)
    except KeyboardInterrupt as exc:  # the launcher's LaunchInterrupted: the workers are gone
        print("muon-repro equivalence: interrupted", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    except Exception as exc:
        if type(exc).__name__ != "ChildFailedError":
            raise
        print(f"muon-repro equivalence: error: {describe_failure(exc)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report))
    else:
        print(format_report(report))
    return 0 if report["passed"] else 1


def _bounds_line(bounds: dict[str, float | None], violations: list[dict]) -> str:
    shown = [
        f"{name.replace('_', ' ')} " + ("not checked (no bound for this preset)" if b is None else f"{b:.1e}")
        for name, b in bounds.items()
    ]
    verdict = f"{len(violations)} exceeded:" if violations else "every tensor within them"
    return f"bounds: {', '.join(shown)}; {verdict}"


def _fmt_ratio(value: float | None) -> str:
    return "n/a (dp=1)" if value is None else f"{value:.3f}"


def format_report(report: dict) -> str:
    c = report["config"]
    lines = [
        f"{c['optimizer']} dp={c['dp']} tp={c['tp']} layout={c['layout']} ns={c['ns_dtype']} gather={c['gather_dtype']} "
        f"preset={c['preset']} ({report['model_params']:,} params), {c['steps']} steps",
        "",
        "relative differences per tensor (max |a-b| / max |b|), the worst tensor of each step:",
        f"{'step':>4}  {'loss':>9}  {'isolated rel':>12}  {'worst isolated':<24}  {'e2e rel':>10}  {'worst end to end':<24}",
    ]
    for s in report["steps"]:
        iso, e2e = s["isolated"], s["end_to_end"]
        lines.append(
            f"{s['step']:>4}  {s['loss']:>9.5f}  {iso['max_rel']:>12.3e}  {iso['worst_tensor'] or '-':<24}  "
            f"{e2e['max_rel']:>10.3e}  {e2e['worst_tensor'] or '-':<24}"
        )
    lines += [
        "",
        f"{'rank':>4} {'dp':>2} {'tp':>2}  {'phase':<18} {'ledger B':>10} {'analytic B':>10}  {'NS calls':>8}  "
        f"{'state B (muon/adamw)':>20}",
    ]
    for r in report["ranks"]:
        first = True
        for phase, ledger in r["ledger_bytes"].items():
            extra = f"  {r['ns_calls']:>8}  {r['state_bytes']['muon']:>9}/{r['state_bytes']['adamw']:<10}" if first else ""
            lines.append(
                f"{r['rank']:>4} {r['dp_rank']:>2} {r['tp_rank']:>2}  {phase:<18} {ledger:>10} "
                f"{r['analytic_bytes'][phase]:>10}{extra}"
            )
            first = False
    b, bounds = report["bytes"], report["bounds"]
    lines += [
        "",
        _bounds_line(bounds, report["violations"]),
        *(
            f"  step {v['step']}: {v['comparison']} {v['tensor']} relative difference {v['rel']:.3e} exceeds bound "
            f"{v['bound']:.1e}"
            for v in report["violations"]
        ),
        f"ledger == analytic on every rank and phase: {report['ledger_matches_analytic']}",
        f"Muon/AdamW bytes per step (same model, layout, dtypes): DP group {_fmt_ratio(b['ratio_dp'])}, DP+TP "
        f"{_fmt_ratio(b['ratio_total'])}",
    ]
    return "\n".join(lines)
