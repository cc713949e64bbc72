"""``muon-repro run``: the whole job, one stage after the other, resumable at any point; its plan,
its stages in order, and its command line.

    bench     record every configuration (complete runs are skipped),   -> traces/
              file the original study's published traces beside them
    analyze   traces -> tables                                          -> metrics/
    figures   tables -> figures                                         -> figures/
    report    tables + figures -> report.md, report.pdf                 -> report/
    card      the dataset card, how to cite it, its Croissant metadata  -> dataset_card.md, CITATION.cff, croissant.json
    bundle    what gets published, then verified                        -> dist/dataset/, MANIFEST.sha256

Each stage is a function of :mod:`muon_repro.stages` (the stages as plain functions, for Python);
this module plans the job (:class:`RunPlan`), runs them in order (:func:`run_job`) and registers the
``run`` command. Every stage writes atomically, so an interrupted run leaves the previous artifacts
intact, and running again redoes only what is missing (the benchmark stage) or cheap (the rest).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from muon_repro import stages
from muon_repro.bench.configs import DEFAULT_TRACED_TRIALS, DEFAULT_TRIALS, MAX_TRIALS, SCALES, check_trials_limit
from muon_repro.dataset.citation import CFF_NAME
from muon_repro.dataset.croissant import CROISSANT_NAME
from muon_repro.dataset.meta import AUTHOR_HELP, DATE_HELP
from muon_repro.hardware import add_profile_argument
from muon_repro.report.escape import shell_word
from muon_repro.study.sources import STUDY_PROFILE
from muon_repro.tables.files import check_out_folder, write_atomic
from muon_repro.terminal import after_a_bar
from muon_repro.values import is_count

STAGES = ("bench", "analyze", "figures", "report", "card", "bundle")
REPO_ROOT = Path(__file__).resolve().parents[1]


# the citation flags run shares with report (the first four) and bundle (all)
CITE_FIELDS = ("repo_id", "version", "date", "pretty_name", "license", "code_url")
# The options only the bench stage reads (argparse dest -> flag): --from a later stage records nothing, so they are
# refused there rather than ignored. Their parser defaults are None, which tells a given option from an absent one.
RECORDING_OPTIONS = {
    "scale": "--scale",
    "configs": "--configs",
    "backend": "--backend",
    "trials": "--trials",
    "traced_trials": "--traced-trials",
    "force": "--force",
    "profile": "--profile",
}
DEFAULT_CONFIGS = ("reference",)


@dataclass
class RunPlan:
    out: Path
    scale: str = "cpu"
    configs: tuple[str, ...] = DEFAULT_CONFIGS
    trials: int = DEFAULT_TRIALS
    traced_trials: int = DEFAULT_TRACED_TRIALS  # of the trials (rounds), those profiled with traces; the others timed only
    backend: str | None = None
    force: bool = False
    progress: bool = True
    profile: str | None = None  # hardware profile to record under (None: $MUON_REPRO_PROFILE, else derived)
    command: tuple[str, ...] = ("muon-repro", "run")  # recorded in each run's config.json
    authors: tuple[str, ...] = ()  # --author: whom the card and the report cite (default: resolve_authors)
    # --repo-id, --version, --date, --pretty-name, --license, --code-url: the dataset the card, CITATION.cff and the
    # report cite (none given: the project's repository, this package's version, the day of the newest run, ...)
    cite: dict[str, str] = field(default_factory=dict)
    verbose: bool = False  # --verbose: the summary gives every claim's measured cause
    first_stage: str = STAGES[0]  # --from: "analyze" rebuilds everything from the traces present, recording nothing
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.first_stage not in STAGES:
            raise ValueError(f"unknown stage {self.first_stage!r}; choose one of {', '.join(STAGES)}")
        if any(not author.strip() for author in self.authors):  # said now, not after recording for minutes
            raise ValueError(f"--author needs a name, got {[a for a in self.authors if not a.strip()][0]!r}")
        if unknown := set(self.cite) - set(CITE_FIELDS):
            raise ValueError(f"unknown citation field(s) {', '.join(sorted(unknown))}; choose from {', '.join(CITE_FIELDS)}")
        if self.cite:  # a bad repository id, version or date is said before recording, not after
            from muon_repro.dataset.meta import BundleMeta

            BundleMeta(**{**self.cite, **({"authors": self.authors} if self.authors else {})})

    def check_input(self) -> None:
        """Before any folder is made: from the bench stage, refuse a configuration name or a number of rounds the
        bench would refuse; with ``--from`` a later stage, an --out without what that stage reads."""
        if self.first_stage == STAGES[0]:
            from muon_repro.bench.configs import expand_config_names, resolve

            for key in expand_config_names(list(self.configs)):
                resolve(key, self.scale)  # an unknown name: ValueError naming it, with the names close to it
            if not is_count(self.trials):
                raise ValueError(f"--trials must be a positive integer, got {self.trials}")
            if self.traced_trials is not None and not (is_count(self.traced_trials) and self.traced_trials <= self.trials):
                raise ValueError(
                    f"--traced-trials must be a positive integer up to --trials {self.trials}, got {self.traced_trials}"
                )
            check_trials_limit(self.trials, self.traced_trials)
            self._check_out_is_ours()
            return
        source, what = (self.traces, "runs recorded") if self.first_stage == "analyze" else (self.metrics, "tables")
        if not source.is_dir():
            raise ValueError(
                f"--from {self.first_stage} rebuilds from the {what} under {source}, and there is no such folder: "
                f"make them first (muon-repro run --out {self.out}), or give the --out that holds them"
            )

    def _check_out_is_ours(self) -> None:
        """Refuse to record into a folder that holds something (hidden entries aside) yet no ``traces/``: no run
        wrote it, and the run's files (report/, metrics/, CITATION.cff...) would replace any of the same names."""
        if not self.out.is_dir() or self.traces.is_dir():
            return
        held = sorted(p.name for p in self.out.iterdir() if not p.name.startswith("."))
        if held:
            listed = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
            raise ValueError(
                f"--out {self.out} holds {listed} and no traces/ folder, so no muon-repro run wrote it; the run writes "
                f"traces/, metrics/, figures/, report/, dist/, dataset_card.md, MANIFEST.sha256, {CFF_NAME} and "
                f"{CROISSANT_NAME} there, replacing any of those names: give an empty or new folder (--out my-run)"
            )

    @property
    def traces(self) -> Path:
        return self.out / "traces"

    @property
    def metrics(self) -> Path:
        return self.out / "metrics"

    @property
    def figures(self) -> Path:
        return self.out / "figures"

    @property
    def report(self) -> Path:
        return self.out / "report"

    @property
    def bundle(self) -> Path:
        return self.out / "dist" / "dataset"

    @property
    def analysis_scripts(self) -> Path:
        return self._shipped("analysis_scripts")

    @property
    def docs(self) -> Path:
        return self._shipped("docs")

    def _shipped(self, folder: str) -> Path:
        """A folder the repository ships: the artifact root's own copy, else the repository's."""
        local = self.out / folder
        return local if local.is_dir() else REPO_ROOT / folder


def stage_bench(plan: RunPlan) -> None:
    from muon_repro.bench.sweep import format_results

    print(file_the_study(plan.traces))
    results = stages.bench(
        plan.configs,
        plan.traces,
        scale=plan.scale,
        trials=plan.trials,
        traced_trials=plan.traced_trials,
        backend=plan.backend,
        force=plan.force,
        progress=plan.progress,
        command=plan.command,
        profile=plan.profile,
    )
    print(format_results(results))
    if plan.scale == "cpu" and "reference" in plan.configs:  # the reference set includes the study's own protocol
        from muon_repro.bench.study_record import record_protocols

        written = record_protocols(
            plan.traces,
            trials=plan.trials,
            backend=plan.backend,
            profile_id=plan.profile,
            command=["muon-repro", "bench", "--protocol", "study-both", "--trials", str(plan.trials)],
            progress=plan.progress,
        )
        print(f"the study's protocols: {len(written)} runs recorded (complete ones skipped)")


def file_the_study(traces: Path, shipped: Path = REPO_ROOT / "traces") -> str:
    """File the original study's published traces under ``traces`` beside the runs recorded there, from the copy under
    ``shipped`` (this checkout's), each checked against its published sha256, so that the claims table judges the
    study's claims on the runs they were made on; say what was done. A copy already there is left as it is (the
    analysis names a damaged file); with none under ``shipped`` (an install without the dataset), the command that
    brings them is said instead."""
    from muon_repro.study.sources import STUDY_FILES, import_study, study_folder

    target, source = study_folder(traces), study_folder(shipped)
    if target.is_dir():
        return f"the original study's traces: in {target} already"
    if not source.is_dir():
        return (
            f"the original study's traces: none in {target}, nor a copy in {source} to file there; without them the "
            f"claims are judged on these runs alone: `muon-repro study import --hub --out {shell_word(str(traces))}` "
            "downloads them"
        )
    try:
        import_study(source, traces)
    except ValueError as exc:  # a changed or damaged copy: this machine's runs are recorded all the same
        return f"the original study's traces: not filed ({exc}); the claims are judged on these runs alone"
    filed = f"its {len(STUDY_FILES)} published traces filed in {target} from {source}"
    return f"the original study's traces: {filed} (sha256 as published)"


def stage_analyze(plan: RunPlan) -> None:
    tables = stages.analyze([plan.traces], plan.metrics)
    print("tables: " + ", ".join(f"{name} ({len(df)} rows)" for name, df in tables.items()))


def stage_figures(plan: RunPlan) -> None:
    for name, path in stages.figures(plan.metrics, plan.figures).items():
        print(f"{name:20s} {path} (+ .svg)")


def stage_report(plan: RunPlan) -> None:
    for fmt, path in stages.report(plan.metrics, plan.figures, plan.report, meta=_meta(plan)).items():
        print(f"{fmt:4s} {path}")


def _sources(plan: RunPlan):
    from muon_repro.dataset.bundle import Sources

    # the code is the package that ran, wherever the command was started from (not the working folder's)
    return Sources(plan.traces, plan.metrics, plan.figures, plan.report, plan.analysis_scripts, plan.docs, code=REPO_ROOT)


def _meta(plan: RunPlan):
    """What the card, CITATION.cff, croissant.json and the report cite: by default the project's repository, this
    version, the day of the newest run (or ``SOURCE_DATE_EPOCH``'s) and the authors (``--author``, else the checked-in
    list); ``--repo-id``, ``--version``, ``--date``, ``--pretty-name``, ``--license``, ``--code-url`` for another
    dataset (a download of one rebuilds as itself: its card's recipe gives them; without ``--author``, another
    repository's authors are :func:`~muon_repro.dataset.meta.resolve_authors`', git's user name among them)."""
    from muon_repro.dataset.citation import report_meta

    return report_meta(plan.metrics, authors=plan.authors, **plan.cite)


def stage_card(plan: RunPlan) -> None:
    card = stages.card(_sources(plan), _meta(plan), plan.out / "dataset_card.md")
    print(f"Wrote {card}, {plan.out / CFF_NAME}, {plan.out / CROISSANT_NAME}")


def stage_bundle(plan: RunPlan) -> None:
    entries, warnings = stages.bundle(_sources(plan), _meta(plan), plan.bundle)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"Bundle in {plan.bundle}: {len(entries) + 1} files, {sum(e.size for e in entries)} bytes")
    # The manifest beside the committed artifacts is the bundle's: same files, same digests (the card
    # stage wrote CITATION.cff and croissant.json beside them, byte for byte the bundle's).
    write_atomic(plan.out / "MANIFEST.sha256", (plan.bundle / "MANIFEST.sha256").read_bytes())
    # each check as it completes with --verbose; else the failed ones only (hundreds pass), then the count
    result = stages.verify(plan.bundle, echo=print if plan.verbose else _failed_only)
    if not result.ok:
        raise stages.StageError(f"{plan.bundle}: {len(result.failed)} check(s) failed: " + "; ".join(result.failed))
    print(f"{plan.bundle}: all {len(result.passed)} checks passed.")


def _failed_only(line: str) -> None:
    if not line.startswith("ok "):
        print(line)


STAGE_FUNCTIONS: dict[str, Callable[[RunPlan], None]] = {
    "bench": stage_bench,
    "analyze": stage_analyze,
    "figures": stage_figures,
    "report": stage_report,
    "card": stage_card,
    "bundle": stage_bundle,
}


def run_job(plan: RunPlan) -> dict[str, float]:
    """Run every stage in order; return each stage's wall time in seconds."""
    plan.out.mkdir(parents=True, exist_ok=True)
    for i, stage in enumerate(STAGES, 1):
        if i <= STAGES.index(plan.first_stage):
            continue
        print(f"\n==> [{i}/{len(STAGES)}] {stage}", flush=True)
        t0 = time.perf_counter()
        STAGE_FUNCTIONS[stage](plan)
        plan.stage_seconds[stage] = time.perf_counter() - t0
        print(f"    {stage} done in {plan.stage_seconds[stage]:.1f} s", flush=True)
    return plan.stage_seconds


def claims_summary(metrics: Path, *, verbose: bool = False, out: Path = Path(".")) -> str:
    """The claims table as a terminal reader wants it: per hardware profile (the original study's runs, this
    machine's, any other), claimed, measured with its 95% interval, verdict; ``verbose``: then every claim's measured
    cause (else where to read them: the report under ``out``, or the command that prints them for ``out``)."""

    from muon_repro.report.claims_section import claim_measured, claim_note, claimed_text
    from muon_repro.tables.io import read_table

    claims = read_table(metrics / "claims.parquet", "claims")
    header = ["claim", "claimed", "measured (95% interval)", "verdict"]
    # in the report's words and units (1–3%, +70.5% (+56.6% to +85.7%)), not the table's bare fractions
    rows = [[str(c["claim"]), claimed_text(c), claim_measured(c), str(c["verdict"])] for _, c in claims.iterrows()]
    widths = [min(64, max(len(h), *(len(r[i]) for r in rows))) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join((c if len(c) <= w else c[: w - 3] + "...").ljust(w) for c, w in zip(cells, widths)).rstrip()

    table = [line(header), line(["-" * w for w in widths])]
    profiles = claims["profile"].astype(str).tolist()
    for i, (profile, row) in enumerate(zip(profiles, rows)):
        if i == 0 or profile != profiles[i - 1]:
            said = "the original study's published runs" if profile == STUDY_PROFILE else "runs recorded on this profile"
            table.append(f"[{profile}: {said}]")
        table.append(line(row))
    if not verbose:
        # from the last stage: the tables as they are, nothing recorded (a plain `run` would record what is missing)
        again = "muon-repro run" + ("" if out == Path(".") else f" --out {shell_word(str(out))}") + " --from bundle --verbose"
        return "\n".join([*table, "", f"Why each verdict: {out / 'report' / 'report.md'} (claims), or {again}."])
    causes = [f"- {c['profile']} {c['claim_id']}: {note}" for _, c in claims.iterrows() if (note := claim_note(c))]
    return "\n".join([*table, "", "Why (measured causes):", *causes])


# -- the command line: muon-repro run


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="the whole job: record every configuration, analyze, figures, report, bundle, verify",
        description=(
            "Record the reference configurations (the original study's runs and the layout ablation; complete runs are "
            "skipped) and file the original study's published traces beside them (from this checkout's copy, checked), "
            "analyze the traces into metrics/, draw figures/, render report/, write dataset_card.md and "
            "MANIFEST.sha256, assemble and verify the bundle in dist/dataset/. Ctrl-C at any point and run again "
            "to resume. --scale gpu does the same on 4+ GPUs."
        ),
    )
    recording = p.add_argument_group("recording (the bench stage only: refused with --from a later stage, which records nothing)")
    recording.add_argument(
        "--scale",
        choices=SCALES,
        default=None,
        help="model and batch size (default: cpu, sized for a 2-core laptop; the backend is --backend's)",
    )
    p.add_argument(
        "--out", type=Path, default=Path("."), help="artifact root: traces/, metrics/, figures/, report/... (default: .)"
    )
    recording.add_argument(
        "--configs",
        nargs="+",
        default=None,
        metavar="CONFIG",
        help=f"configs, groups, 'study', 'reference' or 'all' (default: {' '.join(DEFAULT_CONFIGS)})",
    )
    recording.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default=None,
        help="the recording's process-group backend (default: nccl on a machine with GPUs, configurations needing more "
        "GPUs than it has refused by name; gloo on the CPU without; gloo asks for the CPU anyway)",
    )
    recording.add_argument(
        "--trials",
        type=int,
        default=None,
        help=f"rounds: recordings of each configuration, interleaved (default: {DEFAULT_TRIALS}; at most {MAX_TRIALS:,}, "
        "docs/limits.md; the committed reference has 10)",
    )
    recording.add_argument(
        "--traced-trials",
        type=int,
        default=None,
        help=f"of those, the first rounds profiled with traces; the others are timed only (default: {DEFAULT_TRACED_TRIALS}; "
        "the study's protocol traces every round)",
    )
    recording.add_argument(
        "--force",
        action="store_true",
        default=None,
        help="re-record complete runs of the configurations (the study's protocol keeps its complete runs: remove a "
        "run's folder to record it again)",
    )
    p.add_argument(
        "--from",
        dest="first_stage",
        choices=STAGES,
        default=STAGES[0],
        help="start at this stage: 'analyze' rebuilds the tables, figures, report, card and bundle from the traces "
        "already here and records nothing (how a download or a checkout regenerates itself; default: %(default)s)",
    )
    p.add_argument(
        "--author",
        action="append",
        default=None,
        metavar="NAME",
        help=AUTHOR_HELP.replace("an author (person or team)", "an author the card, CITATION.cff and the report cite"),
    )
    cite = p.add_argument_group("the dataset the card, CITATION.cff and the report cite (default: the project's)")
    cite.add_argument("--repo-id", default=None, metavar="ORG/NAME", help="its repository on the Hub")
    cite.add_argument("--version", default=None, help="its version X.Y.Z (default: this package's)")
    cite.add_argument("--date", default=None, help=DATE_HELP)
    cite.add_argument("--pretty-name", default=None, help="its title")
    cite.add_argument("--license", default=None, help="its SPDX license id (default: MIT)")
    cite.add_argument("--code-url", default=None, help="where its muon_repro source lives, if public")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--verbose", action="store_true", help="the summary gives every claim's measured cause; verify lists every check"
    )
    add_profile_argument(recording)
    p.set_defaults(func=_run)


def _refuse_unused_recording_options(args: argparse.Namespace) -> None:
    """With ``--from`` a stage after bench, refuse the recording options given: nothing is recorded, so they would be
    silently ignored (the traces already there are what the later stages read)."""
    if args.first_stage == STAGES[0]:
        return
    given = [flag for dest, flag in RECORDING_OPTIONS.items() if getattr(args, dest) is not None]
    if given:
        them = "it" if len(given) == 1 else "them"
        raise ValueError(
            f"--from {args.first_stage} records nothing (it starts after the bench stage), so {', '.join(given)} would be "
            f"ignored: leave {them} out, or record first with --from bench (the default)"
        )


def _run(args: argparse.Namespace) -> int:
    from muon_repro.bench.sweep import BenchError, BenchInterrupted

    _refuse_unused_recording_options(args)
    check_out_folder(args.out, f"--out {args.out}")  # before any stage: a place that cannot be written is said at once
    plan = RunPlan(
        out=args.out,
        scale=args.scale or "cpu",
        configs=tuple(args.configs or DEFAULT_CONFIGS),
        trials=DEFAULT_TRIALS if args.trials is None else args.trials,
        traced_trials=DEFAULT_TRACED_TRIALS if args.traced_trials is None else args.traced_trials,
        backend=args.backend,
        force=bool(args.force),
        progress=not args.no_progress,
        profile=args.profile,
        command=tuple(getattr(args, "command_line", ()) or ("muon-repro", "run")),
        authors=tuple(args.author or ()),
        cite={name: getattr(args, name) for name in CITE_FIELDS if getattr(args, name) is not None},
        first_stage=args.first_stage,
        verbose=args.verbose,
    )
    plan.check_input()
    try:
        seconds = run_job(plan)
    except BenchInterrupted as exc:  # says which trials were dropped and which kept
        print(after_a_bar(f"muon-repro run: {exc}"), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "muon-repro run: interrupted; every stage writes atomically, so what is there is complete: "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    except (BenchError, stages.StageError) as exc:
        print(f"muon-repro run: error: {exc}", file=sys.stderr)
        return 1
    _print_summary(plan, seconds)
    return 0


def _print_summary(plan: RunPlan, seconds: dict[str, float]) -> None:
    total = sum(seconds.values())
    said = claims_summary(plan.metrics, verbose=plan.verbose, out=plan.out)
    print("\nClaims, per hardware profile:\n" + said)
    print("\nWall time per stage: " + ", ".join(f"{s} {t:.1f} s" for s, t in seconds.items()) + f"; total {total:.1f} s")
    print("\nArtifacts:")
    for label, path in (
        ("traces (open in ui.perfetto.dev)", plan.traces),
        ("tables (Parquet + CSV)", plan.metrics),
        ("figures", plan.figures),
        ("report", plan.report / "report.md"),
        ("report (PDF)", plan.report / "report.pdf"),
        ("dataset card", plan.out / "dataset_card.md"),
        ("bundle (verified)", plan.bundle),
    ):
        print(f"  {label:<34} {path}")
