"""``muon-repro study import [--from DIR | --hub] [--out traces]``: the original study's traces into the dataset.

Offline, ``--from DIR`` reads a copy of the study's repository (the Hub's or GitHub's layout:
``traces/comparison/trace_*.json``, plain or gzipped). Online, ``--hub`` downloads the traces from
``bird-of-paradise/muon-distributed-reproducibility`` first (``--revision`` pins a commit). Every file's
sha256 is checked against the published one before anything is written; importing twice changes nothing.
"""

from __future__ import annotations

import argparse
import tempfile

from muon_repro.claims import LEVELS
from muon_repro.study.sources import HUB_REPO, STUDY_FILES, import_study


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "study",
        help="the original study's own traces: bring them into the dataset",
        description="The original study's published traces (Jen Wei, 'Reproducing and Validating Distributed Muon').",
    )
    sub = p.add_subparsers(dest="study_command", metavar="SUBCOMMAND", required=True)
    imp = sub.add_parser(
        "import",
        help="check the study's 18 traces against their published sha256 and file them under traces/<profile>/comparison/",
        description=(
            f"Bring the original study's {len(STUDY_FILES)} published traces into the dataset, gzipped reproducibly, "
            "with their source, sha256 and MIT notice beside them. A file whose sha256 is not the published one is "
            "refused, and nothing is written. Importing twice changes nothing."
        ),
    )
    where = imp.add_mutually_exclusive_group(required=True)
    where.add_argument("--from", dest="source", metavar="DIR", help="a copy of the study's repository (Hub or GitHub layout)")
    where.add_argument("--hub", action="store_true", help=f"download from {HUB_REPO} (needs the network)")
    imp.add_argument("--revision", default=None, help="with --hub: the commit or tag to download (default: main)")
    imp.add_argument("--out", default="traces", metavar="DIR", help="the dataset's traces folder; default: %(default)s")
    imp.set_defaults(func=run_import)
    fit = sub.add_parser(
        "fit",
        help="fit the study machine's cost-model profile to its traces' kernel times; record how far the thresholds move",
        description=(
            "Price the original study's runs with the cost model's profile of its machine, fit the profile's efficiencies "
            "and latencies to the kernel times its traces measured, and record how far that moves the regime thresholds "
            f"(tokens per step at which Muon's overhead falls to {' and '.join(lv.percent for lv in LEVELS)}) in "
            "<traces>/<profile>/costmodel_fit/study_costmodel_thresholds.csv, which `muon-repro analyze` reads. Needs "
            "torch (the shard plans); a few seconds per model."
        ),
    )
    fit.add_argument("--traces", default="traces", metavar="DIR", help="the dataset's traces folder; default: %(default)s")
    fit.set_defaults(func=run_fit)


def run_import(args: argparse.Namespace) -> int:
    if args.revision is not None and not args.hub:
        raise ValueError("--revision pins the commit --hub downloads; a folder given with --from has none (drop --revision)")
    from muon_repro.tables.files import check_out_folder

    check_out_folder(args.out, f"--out {args.out}")  # before reading or downloading anything
    if args.hub:
        import httpx2
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

        from muon_repro.study.sources import HUB_REPO, download_study
        from muon_repro.terminal import first_line

        with tempfile.TemporaryDirectory(prefix="muon-repro-study-") as cache:
            try:
                downloaded = download_study(cache, revision=args.revision)
            except OfflineModeIsEnabled:
                raise ValueError(
                    f"downloading {HUB_REPO}: the Hub client is in offline mode (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE "
                    "is set), so no request was sent; unset it, or give a copy with --from; nothing was imported"
                ) from None
            except LocalEntryNotFoundError:  # the Hub unreachable, and no copy in the cache to fall back on
                raise ValueError(
                    f"downloading {HUB_REPO}: the Hub could not be reached and no copy of it is cached here; connect, "
                    "or give a copy with --from; nothing was imported"
                ) from None
            except (HfHubHTTPError, httpx2.TransportError) as exc:  # one line: the body may echo the request's headers
                raise ValueError(
                    f"downloading {HUB_REPO} failed: {first_line(exc)}; nothing was imported (or give a copy with --from)"
                ) from None
            result = import_study(downloaded, args.out)
    else:
        result = import_study(args.source, args.out)
    state = "imported into" if result.changed else "already in"
    print(f"{len(STUDY_FILES)} traces of the original study {state} {result.folder} (sha256 as published)")
    return 0


def run_fit(args: argparse.Namespace) -> int:
    from muon_repro.analysis.batch_read import TraceFailure
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.records import STUDY_MACHINE
    from muon_repro.study.costmodel_check import apply_fit, fit_study_factors, study_quantities, study_threshold_shift
    from muon_repro.study.sources import study_folder
    from muon_repro.study.tables import study_tables, thresholds_record_path
    from muon_repro.tables.files import write_atomic

    folder = study_folder(args.traces)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no traces of the original study; bring them in with `muon-repro study import`")
    left_out: list[TraceFailure] = []
    # the old record is replaced, never read: it may be damaged
    tables = study_tables([folder], thresholds_record=False, left_out=left_out)
    if left_out:  # a fit on some of the runs would move the thresholds for want of the others
        raise ValueError(f"{left_out[0].message}; nothing was fitted")
    datasheet = resolve_profile(STUDY_MACHINE)
    fit = fit_study_factors(study_quantities(tables["study_steps"], tables["study_collectives"]), datasheet)
    shift = study_threshold_shift(apply_fit(datasheet, fit), datasheet)
    out = thresholds_record_path(folder)
    write_atomic(out, shift.to_csv(index=False, lineterminator="\n"))
    low, high = shift["ratio"].min(), shift["ratio"].max()
    print(f"wrote {out}: {len(shift)} thresholds, fitted over datasheet x{low:.2f} to x{high:.2f}")
    return 0
