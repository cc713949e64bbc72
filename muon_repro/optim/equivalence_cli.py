"""``muon-repro equivalence``: distributed optimizers vs the single-device reference."""

from __future__ import annotations

import argparse
import json

from muon_repro.optim.layout import LAYOUTS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "equivalence",
        help="train the tiny model distributed and single-device and compare, step by step",
        description=(
            "Launch dp*tp workers (gloo on CPU; --backend nccl on GPUs), train N steps with the "
            "distributed optimizer and with the single-device reference from the same seed, and "
            "print parameter differences (optimizer-isolated and end-to-end), ledger vs analytic "
            "bytes per phase, NS calls and optimizer-state bytes per rank."
        ),
    )
    p.add_argument("--dp", type=int, default=2, help="data-parallel size (default 2)")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel size (default 2)")
    p.add_argument("--optimizer", choices=("muon", "adamw"), default="muon")
    p.add_argument("--layout", choices=LAYOUTS, default="contiguous")
    p.add_argument("--bucket-elems", type=int, default=None, help="bucket size for --layout bucketed (default: a quarter of the model)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--ns-dtype", choices=("fp32", "bf16"), default="fp32", help="Newton-Schulz compute dtype")
    p.add_argument("--gather-dtype", choices=("fp32", "bf16"), default=None, help="dtype of the NS gathers (default: the NS dtype)")
    p.add_argument("--preset", default="tiny", help="model preset (tiny, small, medium, large)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from muon_repro.optim.equivalence import EquivalenceConfig, run_equivalence

    cfg = EquivalenceConfig(
        dp=args.dp, tp=args.tp, optimizer=args.optimizer, layout=args.layout, steps=args.steps,
        ns_dtype=args.ns_dtype, gather_dtype=args.gather_dtype, bucket_elems=args.bucket_elems, preset=args.preset,
    )
    report = run_equivalence(cfg, backend=args.backend)
    if args.json:
        print(json.dumps(report))
    else:
        print(format_report(report))
    return 0 if report["ledger_matches_analytic"] else 1


def _fmt_ratio(value: float | None) -> str:
    return "n/a (dp=1)" if value is None else f"{value:.3f}"


def format_report(report: dict) -> str:
    c = report["config"]
    lines = [
        f"{c['optimizer']} dp={c['dp']} tp={c['tp']} layout={c['layout']} ns={c['ns_dtype']} gather={c['gather_dtype']} "
        f"preset={c['preset']} ({report['model_params']:,} params), {c['steps']} steps",
        "",
        f"{'step':>4}  {'loss':>9}  {'isolated abs':>12}  {'isolated rel':>12}  {'e2e abs':>10}  {'e2e rel':>10}",
    ]
    for s in report["steps"]:
        iso, e2e = s["isolated"], s["end_to_end"]
        lines.append(f"{s['step']:>4}  {s['loss']:>9.5f}  {iso['max_abs']:>12.3e}  {iso['max_rel']:>12.3e}  {e2e['max_abs']:>10.3e}  {e2e['max_rel']:>10.3e}")
    lines += ["", f"{'rank':>4} {'dp':>2} {'tp':>2}  {'phase':<18} {'ledger B':>10} {'analytic B':>10}  {'NS calls':>8}  {'state B (muon/adamw)':>20}"]
    for r in report["ranks"]:
        first = True
        for phase, ledger in r["ledger_bytes"].items():
            extra = f"  {r['ns_calls']:>8}  {r['state_bytes']['muon']:>9}/{r['state_bytes']['adamw']:<10}" if first else ""
            lines.append(f"{r['rank']:>4} {r['dp_rank']:>2} {r['tp_rank']:>2}  {phase:<18} {ledger:>10} {r['analytic_bytes'][phase]:>10}{extra}")
            first = False
    b = report["bytes"]
    lines += [
        "",
        f"ledger == analytic on every rank and phase: {report['ledger_matches_analytic']}",
        f"Muon/AdamW bytes per step (same model, layout, dtypes): DP group {_fmt_ratio(b['ratio_dp'])}, DP+TP {_fmt_ratio(b['ratio_total'])}",
    ]
    return "\n".join(lines)
