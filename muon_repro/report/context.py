"""Tables and run directories -> the report's template context (plain strings, lists and dicts).

Every number is formatted here, through helpers that refuse a missing value with a
:class:`~muon_repro.report.data.MissingMetric` naming it; the templates only place strings. The
few values that may legitimately be absent (no GPU: no CUDA, NCCL or accelerator; a claim no run
can speak to) are written out as such ("none", "not measured"), never left empty.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

import muon_repro
from muon_repro.report import figures as fig
from muon_repro.report import style
from muon_repro.report.data import (
    MissingMetric,
    ReportData,
    is_missing,
    metric,
    representative_runs,
    require_columns,
    sort_runs,
)

# (id, heading): the report's sections, in order; the tests look for every heading in the PDF.
SECTIONS = (
    ("summary", "Summary"),
    ("setup", "Setup"),
    ("method", "Method"),
    ("results", "Results"),
    ("claims", "Claims"),
    ("regimes", "Where the gains disappear or invert"),
    ("limitations", "Limitations"),
    ("reproduce", "How to reproduce"),
    ("cite", "How to cite"),
)

# Claims whose numbers are times: they depend on the hardware, so a CPU/gloo measurement that
# disagrees with a GPU claim is "different conditions", not "not reproduced".
TIME_CLAIMS = {"comm_time_dp2_tp2", "optimizer_share", "hybrid_beats_pure", "async_slowdown", "latency_overhead"}
SEED_DISPLAY = {
    "comm_time_dp2_tp2": "0.57×",
    "optimizer_share": "~1.1%",
    "state_memory": "0.5× (50% less)",
    "hybrid_beats_pure": "below 1×",
    "async_slowdown": "~2×",
    "comm_bytes_ratio": "(1, 1.25]×",
    "latency_overhead": "1–3%",
}
SHORT = {
    "comm_time_dp2_tp2": "communication time Muon/AdamW",
    "comm_bytes_ratio": "bytes Muon/AdamW",
    "optimizer_share": "optimizer share of the step",
    "latency_overhead": "Muon step over AdamW step",
    "hybrid_beats_pure": "DP2·TP2 over the faster pure grid",
    "state_memory": "optimizer state Muon/AdamW",
    "async_slowdown": "async over sync",
}
SUMMARY_LINES = (
    ("Communication", ("comm_bytes_ratio", "comm_time_dp2_tp2")),
    ("Time", ("optimizer_share", "latency_overhead", "hybrid_beats_pure")),
    ("Memory", ("state_memory",)),
)
VERDICTS = ("reproduced", "not reproduced", "different conditions", "not measured")
REQUIRED_ENV = ("hostname", "os", "python", "torch", "backend", "host_cpu", "host_cpu_cores", "host_memory_bytes", "git_sha")


# ---------------------------------------------------------------- formatting (None never passes)


def _num(value: Any, what: str) -> float:
    if is_missing(value):
        raise MissingMetric(f"metric {what} is missing")
    return float(value)


def ms(value: Any, what: str = "time") -> str:
    v = _num(value, what)
    return f"{v:.0f} ms" if abs(v) >= 100 else (f"{v:.1f} ms" if abs(v) >= 10 else f"{v:.2f} ms")


def pct(value: Any, what: str = "fraction", signed: bool = False) -> str:
    v = 100 * _num(value, what)
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def ratio(value: Any, what: str = "ratio", digits: int = 2) -> str:
    return f"{_num(value, what):.{digits}f}×"


def mb(value: Any, what: str = "bytes") -> str:
    return f"{_num(value, what) / style.MB:.2f} MB"


def mib(value: Any, what: str = "bytes") -> str:
    return f"{_num(value, what) / style.MIB:.1f} MiB"


def gib(value: Any, what: str = "bytes") -> str:
    return f"{_num(value, what) / 2**30:.1f} GiB"


# ---------------------------------------------------------------- claims


def _runs_in(text: str, runs: pd.DataFrame) -> pd.DataFrame:
    return runs[[str(r) in text for r in runs["run"]]]


def report_verdict(row: pd.Series, runs: pd.DataFrame) -> str:
    """The analysis's verdict (supported / partly / not / not measured) in the report's terms."""
    verdict = str(metric(row, "verdict", "claims", "claim_id"))
    if verdict == "not measured" or is_missing(row.get("measured_value")):
        return "not measured"
    if verdict == "supported":
        return "reproduced"
    if row["claim_id"] in TIME_CLAIMS:
        used = _runs_in(str(row.get("conditions") or ""), runs)
        matched = len(used) > 0 and all(str(d) == "cuda" for d in used["device"]) and all(str(b) == "nccl" for b in used["backend"])
        if not matched:
            return "different conditions"
    return "not reproduced"


def claim_value(value: Any, unit: str, claim_id: str) -> str:
    if is_missing(value):
        return "not measured"
    unit = unit or ""
    if unit.startswith("fraction"):
        return pct(value, f"claims.measured_value ({claim_id})", signed="- 1" in unit)
    if unit.startswith("ratio"):
        return ratio(value, f"claims.measured_value ({claim_id})", 3 if claim_id == "comm_bytes_ratio" else 2)
    return f"{float(value):.3g}"


def claims_rows(data: ReportData) -> list[dict[str, str]]:
    claims = data.tables["claims"]
    require_columns(claims, "claims", ("claim_id", "claim", "source", "seed_value", "measured_value", "unit", "conditions", "verdict", "rule"))
    if claims.empty:
        raise MissingMetric("metrics table 'claims' has no rows")
    rows = []
    for _, c in claims.iterrows():
        cid = str(metric(c, "claim_id", "claims", "claim_id"))
        unit = str(metric(c, "unit", "claims", "claim_id"))
        seed = SEED_DISPLAY.get(cid) or (claim_value(c["seed_value"], unit, cid) if not is_missing(c["seed_value"]) else "not stated")
        rows.append(
            {
                "id": cid,
                "claim": str(metric(c, "claim", "claims", "claim_id")),
                "source": str(metric(c, "source", "claims", "claim_id")).split(":")[0],
                "source_full": str(c["source"]),
                "seed": seed,
                "ours": claim_value(c["measured_value"], unit, cid),
                "unit": unit,
                "conditions": str(metric(c, "conditions", "claims", "claim_id")),
                "verdict": report_verdict(c, data.runs),
                "analysis_verdict": str(c["verdict"]),
                "rule": str(metric(c, "rule", "claims", "claim_id")),
            }
        )
    return rows


def summary_lines(claims: list[dict[str, str]]) -> list[str]:
    by_id = {c["id"]: c for c in claims}
    lines = []
    for name, ids in SUMMARY_LINES:
        parts = [f"{SHORT.get(i, i)} {by_id[i]['ours']} (claim {by_id[i]['seed']}: {by_id[i]['verdict']})" for i in ids if i in by_id]
        if parts:
            lines.append(f"{name}: " + "; ".join(parts) + ".")
    if not lines:
        raise MissingMetric("the claims table has none of the claims the summary reports (" + ", ".join(i for _, ids in SUMMARY_LINES for i in ids) + ")")
    return lines


# ---------------------------------------------------------------- setup


def _env_value(env: dict, key: str, run: str) -> Any:
    if env.get(key) in (None, ""):
        raise MissingMetric(f"environment field {key!r} is missing for run {run} (environment.json)")
    return env[key]


def environments(data: ReportData) -> list[dict[str, Any]]:
    """One entry per distinct machine and software stack, with the runs recorded on it."""
    groups: dict[tuple, dict[str, Any]] = {}
    for run in data.runs["run"]:
        env = data.run_dir(run).environment
        for key in REQUIRED_ENV:
            _env_value(env, key, run)
        key = tuple(str(env.get(k)) for k in ("hostname", "torch", "backend", "accelerator", "cuda", "nccl", "git_sha"))
        if key not in groups:
            groups[key] = {"env": env, "runs": []}
        groups[key]["runs"].append(str(run))
    out = []
    for g in groups.values():
        env = g["env"]
        accel = env.get("accelerator")
        rows = [
            ("host", f"{env['hostname']} ({env['os']})"),
            ("CPU", f"{env['host_cpu']}, {env['host_cpu_cores']} cores, {gib(env['host_memory_bytes'], 'environment.host_memory_bytes')} memory"),
            ("accelerator", f"{env.get('accelerator_count') or 1} × {accel}"
             + (f", {gib(env['accelerator_memory_bytes'])} each" if env.get("accelerator_memory_bytes") else "") if accel else "none (CPU only)"),
            ("interconnect", str(env["interconnect_topology"]).strip() if env.get("interconnect_topology") else (
                "none between accelerators (one CPU host; ranks are processes talking through gloo)" if not accel else "not recorded")),
            ("Python", str(env["python"])),
            ("PyTorch", str(env["torch"])),
            ("CUDA", str(env["cuda"]) if env.get("cuda") else "not used"),
            ("NCCL", str(env["nccl"]) if env.get("nccl") else "not used"),
            ("backend", f"{env['backend']}, {env.get('world_size', '?')} ranks" + (f" on {env['nodes']} node(s)" if env.get("nodes") else "")),
            ("torch threads per rank", str(env["torch_num_threads"]) if env.get("torch_num_threads") else "not recorded"),
            ("muon_repro", f"{muon_repro.__version__}, git {str(env['git_sha'])[:12]}" + (" (uncommitted changes)" if env.get("git_dirty") else "")),
        ]  # fmt: skip
        out.append({"rows": rows, "runs": g["runs"], "count": len(g["runs"])})
    return out


def workload(data: ReportData) -> list[tuple[str, str]]:
    """Model and training settings, each with the distinct values the runs used."""
    def distinct(key: str) -> str:
        values = []
        for run in data.runs["run"]:
            cfg = data.run_dir(run).config
            if cfg.get(key) in (None, ""):
                raise MissingMetric(f"config field {key!r} is missing for run {run} (config.json)")
            if str(cfg[key]) not in values:
                values.append(str(cfg[key]))
        return ", ".join(values)

    params = []
    for run in data.runs["run"]:
        r0 = data.run_dir(run).ranks[0]
        p = data.run_dir(run).rank_metric(r0, "model_params")
        if f"{int(p):,}" not in params:
            params.append(f"{int(p):,}")
    return [
        ("model preset", distinct("preset") + f" ({', '.join(params)} parameters, GPT with tensor-parallel attention and MLP)"),
        ("scale", distinct("scale")),
        ("batch per DP rank × sequence length", f"{distinct('batch_per_dp')} × {distinct('seq_len')} tokens"),
        ("steps per run", f"{distinct('steps')} (profiler: wait {distinct('wait')}, warm-up {distinct('warmup')}, recorded {distinct('active')})"),
        ("dtypes", f"gradient reduce-scatter {distinct('reduce_dtype')}, Newton-Schulz gathers {distinct('gather_dtype')}, parameters fp32"),
        ("learning rate, weight decay", f"{distinct('lr')}, {distinct('weight_decay')}"),
    ]


# ---------------------------------------------------------------- results tables


def runs_rows(data: ReportData) -> list[list[str]]:
    """Per run, units in the header (ms, MB, MiB) so the cells stay short."""
    runs = data.runs
    require_columns(runs, "runs", ("step_ms", "step_ms_p10", "step_ms_p90", "forward_ms", "backward_ms", "optimizer_ms",
                                   "optimizer_share", "comm_ms", "exposed_comm_ms", "comm_bytes", "state_bytes"))  # fmt: skip
    rows = []
    for _, r in sort_runs(runs).iterrows():
        t = {col: ms(metric(r, col), f"runs.{col}").removesuffix(" ms") for col in
             ("step_ms", "step_ms_p10", "step_ms_p90", "forward_ms", "backward_ms", "optimizer_ms", "comm_ms", "exposed_comm_ms")}  # fmt: skip
        rows.append([
            fig.run_label(r), str(r["run"]), f"{t['step_ms']} ({t['step_ms_p10']}–{t['step_ms_p90']})",
            t["forward_ms"], t["backward_ms"], t["optimizer_ms"], pct(metric(r, "optimizer_share")),
            t["comm_ms"], t["exposed_comm_ms"], mb(metric(r, "comm_bytes")).removesuffix(" MB"), mib(metric(r, "state_bytes")).removesuffix(" MiB"),
        ])  # fmt: skip
    return rows


def comparison_rows(data: ReportData) -> list[list[str]]:
    comp = data.tables["comparisons"]
    require_columns(comp, "comparisons", ("muon_run", "adamw_run", "dp", "tp", "layout", "comm_ms_ratio", "comm_bytes_ratio", "optimizer_ms_ratio", "step_ms_ratio", "state_bytes_ratio"))
    cols = ("comm_ms_ratio", "comm_bytes_ratio", "optimizer_ms_ratio", "step_ms_ratio", "state_bytes_ratio")
    rows = []
    for _, c in comp.iterrows():
        grid = f"{style.grid_label(int(c['dp']), int(c['tp']))} {str(c['layout']).replace('_', '-')}"
        ratios = [ratio(metric(c, col, "comparisons", "muon_run"), f"comparisons.{col}") for col in cols]
        rows.append([grid, str(c["muon_run"]), str(c["adamw_run"]), *ratios])
    return rows


def bytes_rows(data: ReportData, analytic: pd.DataFrame) -> tuple[list[list[str]], dict[str, float]]:
    """Per run: optimizer bytes per rank per step from the three sources; Muon/AdamW ratio at the same grid."""
    coll = data.tables["collectives"]
    rows, totals = [], {}
    for _, r in sort_runs(data.runs).iterrows():
        t = fig.per_phase_bytes(str(r["run"]), coll, analytic)
        for source in ("ledger", "trace"):
            if t[source].isna().any():
                raise MissingMetric(f"metric collectives.{'ledger_bytes' if source == 'ledger' else 'bytes'} is missing for run {r['run']}")
        totals[str(r["run"])] = float(t["analytic"].sum())
        rows.append((r, t))
    out = []
    for r, t in rows:
        twin = data.runs[(data.runs["optimizer"] == "adamw") & (data.runs["dp"] == r["dp"]) & (data.runs["tp"] == r["tp"])]
        twin_total = totals.get(str(twin.iloc[0]["run"])) if len(twin) else None
        rel = ratio(totals[str(r["run"])] / twin_total, "analytic bytes ratio", 3) if twin_total else "no AdamW twin" if len(twin) == 0 else "AdamW sends nothing"
        out.append([fig.run_label(r), str(r["run"]), *(mb(t[k].sum()).removesuffix(" MB") for k in ("analytic", "ledger", "trace")),
                    f"{100 * fig.source_gap(t):.2g}%", rel])  # fmt: skip
    return out, totals


# ---------------------------------------------------------------- regimes (computed, never canned numbers)


def regimes(data: ReportData, state: pd.DataFrame, bytes_totals: dict[str, float]) -> list[str]:
    runs, comp = data.runs, data.tables["comparisons"]
    out = []
    worse, better = [], []
    for _, c in comp.iterrows():
        r_ = float(metric(c, "comm_ms_ratio", "comparisons", "muon_run"))
        name = f"{style.grid_label(int(c['dp']), int(c['tp']))} {str(c['layout']).replace('_', '-')} ({r_:.2f}×, {c['muon_run']})"
        (worse if r_ >= 1 else better).append(name)
    if worse:
        out.append("Communication time: Muon spends as much as or more than AdamW at " + "; ".join(worse)
                   + ". The seed's advantage (0.57× at DP2·TP2 on 4 GPUs) inverts there.")  # fmt: skip
    if better:
        out.append("Communication time: Muon spends less than AdamW at " + "; ".join(better) + ".")
    # Layouts: what each costs in bytes against the contiguous layout at the same grid.
    muon = runs[runs["optimizer"] == "muon"]
    for (dp, tp), g in muon.groupby(["dp", "tp"]):
        by_layout = {str(layout): bytes_totals[str(sort_runs(sub).iloc[0]["run"])] for layout, sub in g.groupby("layout", sort=False)}
        if "contiguous" in by_layout and len(by_layout) > 1:
            base = by_layout["contiguous"]
            parts = [f"{k.replace('_', '-')} {v / base:.2f}×" for k, v in by_layout.items() if k != "contiguous"]
            out.append(f"ZeRO-1 layout at {style.grid_label(int(dp), int(tp))}: optimizer bytes against the contiguous layout: "
                       + ", ".join(parts) + " (bucketed gathers every matrix on every DP rank; whole-matrix needs no DP gather).")  # fmt: skip
    pure_tp = comp[(comp["dp"] == 1) & (comp["tp"] > 1)]
    for _, c in pure_tp.iterrows():
        out.append(f"{style.grid_label(1, int(c['tp']))}: with no data parallelism AdamW has no optimizer communication at all, so every byte of "
                   f"Muon's TP gather is extra ({ratio(c['comm_bytes_ratio'], 'comparisons.comm_bytes_ratio')} AdamW's bytes, the model's own TP traffic included).")  # fmt: skip
    # State: the 50% saving applies to the matrices only.
    st = state.set_index("run")
    for _, r in representative_runs(runs).iterrows():
        if r["optimizer"] != "muon" or r["run"] not in st.index:
            continue
        m_b, a_b = float(st.loc[r["run"], "muon"]), float(st.loc[r["run"], "adamw"])
        if m_b + a_b <= 0:
            continue
        matrix_share = (m_b / 4) / (m_b / 4 + a_b / 8)  # fp32: 1 value per Muon element, 2 per AdamW element
        out.append(f"Optimizer state: {100 * matrix_share:.0f}% of the parameters are hidden matrices (Muon, one moment); embeddings, head and norms "
                   f"keep AdamW's two, so the best ratio here is {(matrix_share + 2 * (1 - matrix_share)) / 2:.2f}×, not 0.5×; "
                   "the larger the model, the closer to 0.5×.")  # fmt: skip
        uneven = [(float(st.loc[u, "largest"]) / (float(st.loc[u, "muon"] + st.loc[u, "adamw"])), u) for u in muon["run"] if u in st.index]
        worst, u = max(uneven)
        if worst > 1.2:
            u_row = runs[runs["run"] == u].iloc[0]
            out.append(f"{fig.run_label(u_row)} ({u}): ZeRO-1 chunks split the state unevenly; the largest rank holds {mib(st.loc[u, 'largest'])} "
                       f"against a mean of {mib(st.loc[u, 'muon'] + st.loc[u, 'adamw'])} (a rank whose chunk is the embedding or head pays AdamW's "
                       "two moments for it), so the memory that limits a run saves less than the mean suggests.")  # fmt: skip
        transient = float(st.loc[r["run"], "transient"])
        twin = runs[(runs["optimizer"] == "adamw") & (runs["dp"] == r["dp"]) & (runs["tp"] == r["tp"])]
        if len(twin) and str(twin.iloc[0]["run"]) in st.index:
            saved = float(st.loc[twin.iloc[0]["run"], "adamw"] + st.loc[twin.iloc[0]["run"], "muon"]) - (m_b + a_b)
            if transient > saved > 0:
                out.append(f"{fig.run_label(r)}: Muon's transient Newton-Schulz gather buffers peak at {mib(transient)} per rank, more than the "
                           f"{mib(saved)} of state it saves; at this model size the peak, not the steady state, decides memory.")  # fmt: skip
        break
    shares = muon["optimizer_share"].dropna()
    if len(shares) and float(shares.min()) > 0.05:
        out.append(f"Compute-bound optimizer: on this hardware the Muon optimizer step is {pct(shares.min())}–{pct(shares.max())} of the step "
                   "(Newton-Schulz on CPU cores shared by all ranks): the optimizer's computation, not its communication, decides "
                   "Muon's step time here.")  # fmt: skip
    if not out:
        out.append("No regime in these runs where Muon's measured gains disappear or invert.")
    return out


def limitations(data: ReportData) -> list[str]:
    runs = data.runs
    backends = sorted({f"{b} on {d}" for b, d in zip(runs["backend"], runs["device"])})
    out = []
    if any(str(d) != "cuda" for d in runs["device"]):
        out.append("gloo on CPU is not NCCL over PCIe or NVLink: collectives are memory copies between processes on the same host, "
                   "all ranks share the host's cores (so compute and communication contend), and Newton-Schulz runs in fp32 on the CPU. "
                   "Times answer 'how does the data flow behave', not 'how fast is it on GPUs'.")  # fmt: skip
    out.append(f"Backends and devices measured: {', '.join(backends)}. Claims about GPUs are marked 'different conditions' where they disagree.")
    steps = sorted({int(s) for s in runs["steps"].dropna()})
    out.append(f"Each run profiles {', '.join(map(str, steps))} step(s) after warm-up; medians over so few steps are noisy.")
    dup = runs.groupby(["optimizer", "dp", "tp", "layout"])["step_ms"].agg(["count", "min", "max"])
    dup = dup[dup["count"] > 1]
    for (opt, dp, tp, layout), d in dup.iterrows():
        out.append(f"Run-to-run spread: {style.OPTIMIZER_LABELS.get(opt, opt)} {style.grid_label(int(dp), int(tp))} {layout} was recorded "
                   f"{int(d['count'])} times, with median step times from {ms(d['min'])} to {ms(d['max'])}.")  # fmt: skip
    out.append("Loss is shown over a handful of steps as a check that both optimizers learn; it is not a convergence comparison.")
    out.append("Bytes count what each rank sends under the ring model (DESIGN.md section 4); the trace's bytes come from call sizes, not from a NIC counter.")
    return out


# ---------------------------------------------------------------- reproduce, cite


def reproduce(data: ReportData, invocations: Iterable[str]) -> list[str]:
    recorded = []
    for run in data.runs["run"]:
        cmd = data.run_dir(run).config.get("command")
        text = shlex.join(cmd) if isinstance(cmd, list) else (str(cmd) if cmd else "")
        if text and text not in recorded:
            recorded.append(text)
    if not recorded:
        raise MissingMetric("no run's config.json records the command that made it ('command')")
    return [*recorded, *invocations]


def bibtex(data: ReportData) -> tuple[str, str]:
    sha = str(data.run_dir(str(data.runs["run"].iloc[0])).environment.get("git_sha") or "unknown")
    artifact = (
        "@software{muon_repro,\n"
        "  title = {muon\\_repro: a reproducibility artifact for Distributed Muon},\n"
        "  author = {{muon\\_repro developers}},\n"
        f"  version = {{{muon_repro.__version__}}},\n"
        f"  note = {{git {sha[:12]}; traces, tables, figures and this report}},\n"
        "  year = {2025}\n"
        "}"
    )
    paper = (
        "@article{liu2025muon,\n"
        "  title = {Muon is Scalable for LLM Training},\n"
        "  author = {Jingyuan Liu and Jianlin Su and Xingcheng Yao and Zhejun Jiang and Guokun Lai and Yulun Du and others},\n"
        "  journal = {arXiv preprint arXiv:2502.16982},\n"
        "  year = {2025}\n"
        "}"
    )
    return artifact, paper


# ---------------------------------------------------------------- the context


FIGURE_CAPTIONS = {
    "comm_time_by_kind": "Communication time per step by collective kind, Muon beside AdamW at each process grid.",
    "step_breakdown": "Where a step's time goes, per configuration: by phase, and by what the machine does.",
    "optimizer_overhead": "The optimizer's share of the step, per configuration, against the seed's ~1.1%.",
    "state_memory": "Optimizer-state memory per rank (steady state) and Muon's transient gather buffers.",
    "bytes_by_layout": "Optimizer bytes per rank per step by ZeRO-1 layout: analytic model, run-time ledger and trace.",
    "grid_comparison": "Step time per DP × TP process grid: which grid wins, and by how much.",
    "timeline": "One step of every rank from the traces: the DP gather, TP gather, Newton-Schulz, TP shard, DP shard flow.",
    "loss": "Training loss per step, Muon vs AdamW.",
}


def build_context(data: ReportData, figure_paths: dict[str, Path], out_dir: Path, *, metrics_dir: Path, invocations: Iterable[str]) -> dict[str, Any]:
    """The whole template context; raises MissingMetric (a ValueError) naming the first missing metric."""
    from muon_repro.report.build import analytic_frame, state_frame

    missing_figs = [name for name in fig.FIGURES if name not in figure_paths or not Path(figure_paths[name]).is_file()]
    if missing_figs:
        raise FileNotFoundError(f"figure(s) {', '.join(missing_figs)} not found: run `muon-repro figures` first")
    analytic = analytic_frame(data)
    state = state_frame(data)
    claims = claims_rows(data)
    bytes_table, totals = bytes_rows(data, analytic)
    runs = data.runs

    def rel(p: str | Path) -> str:
        return Path(os.path.relpath(Path(p).resolve(), Path(out_dir).resolve())).as_posix()

    tables = {name: rel(Path(metrics_dir) / f"{name}.csv") for name in data.tables if (Path(metrics_dir) / f"{name}.csv").is_file()}
    return {
        "title": "Distributed Muon vs AdamW: communication, time and memory, reproduced",
        "sections": dict(SECTIONS),
        "section_order": [s for s, _ in SECTIONS],
        "summary": summary_lines(claims),
        "n_runs": str(len(runs)),
        "backends": ", ".join(sorted({f"{b} on {d}" for b, d in zip(runs["backend"], runs["device"])})),
        "environments": environments(data),
        "workload": workload(data),
        "runs_header": ["configuration", "run", "step ms (p10–p90)", "forward ms", "backward ms", "optimizer ms", "optimizer share",
                        "comm ms", "exposed comm ms", "MB sent / rank / step", "state MiB (largest rank)"],
        "runs_rows": runs_rows(data),
        "comparison_header": ["grid, layout", "Muon run", "AdamW run", "comm time", "bytes", "optimizer time", "step time", "state"],
        "comparison_rows": comparison_rows(data),
        "bytes_header": ["configuration", "run", "analytic MB", "ledger MB", "trace MB", "largest gap", "vs AdamW (analytic)"],
        "bytes_rows": bytes_table,
        "figures": [{"name": n, "src": rel(figure_paths[n]), "svg": rel(Path(figure_paths[n]).with_suffix(".svg")), "caption": FIGURE_CAPTIONS[n]}
                    for n in fig.FIGURES],
        "claims": claims,
        "claims_header": ["claim", "source", "seed value", "our value", "conditions", "verdict"],
        "sources": sorted({c["source_full"] for c in claims}),
        "regimes": regimes(data, state, totals),
        "limitations": limitations(data),
        "commands": reproduce(data, invocations),
        "tables": tables,
        "bibtex": bibtex(data),
        "version": muon_repro.__version__,
    }
