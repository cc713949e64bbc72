"""``muon-repro migrate-layout``: move a dataset recorded before hardware profiles into the profile layout.

Old layout: ``traces/<group>/<name>/trial<k>/``, ``traces/convergence/<run>/``, ``traces/costmodel/``.
New layout: the same folders one level down, under the hardware profile that recorded them,
``traces/<profile>/<group>/<name>/trial<k>/`` (:mod:`muon_repro.hardware`). A run folder's profile is
read from its trials' environment.json (all must agree), a convergence run's from its record, a
costmodel folder's from its machine.json (:mod:`muon_repro.rundir`). Nothing in a file changes, so the
analysis gives the same tables before, during (some groups moved) and after the migration.

The cost model's ``predictions.csv`` names each run's folder in its ``path`` column (for people; the
analysis reads runs by id): after a move those rows name the old folder, and the command says so,
with the command that writes the records again (:func:`stale_record_rows`).

Every move is planned and checked before the first one: a target that exists, a file where a target's
folder belongs, a folder that cannot be written, or a run whose trials name different profiles, stops the
migration with nothing moved (one message lists every conflict). Each folder then moves with one
``os.rename`` (same filesystem, so a folder is either in its old place or its new one).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from muon_repro.hardware import validate_profile_id
from muon_repro.rundir import (
    CONFIG_FILE,
    CONVERGENCE_FILE,
    COSTMODEL_DIR,
    ENVIRONMENT_FILE,
    MACHINE_FILE,
    PREDICTIONS_FILE,
    RunDir,
    convergence_profile,
    costmodel_profile,
    load_json,
    read_json,
    trial_of,
)
from muon_repro.tables.files import open_regular

SHOWN_CONFLICTS = 20  # conflicts one refusal lists (the rest are counted): a screenful, enough to see the pattern


@dataclass(frozen=True)
class Move:
    """One folder of the old layout and where it goes."""

    source: Path
    target: Path
    profile: str

    def __post_init__(self) -> None:
        validate_profile_id(self.profile, source=f"profile of {self.source}")
        if self.source == self.target:
            raise ValueError(f"{self.source}: a move needs a new place")


def _visible_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _run_profile(folder: Path) -> str | None:
    """The profile of an old-layout run folder (trials, a lone recording, a convergence run), ``None`` if it is none."""
    if (folder / CONVERGENCE_FILE).is_file():
        return convergence_profile(read_json(folder / CONVERGENCE_FILE) or {})
    recordings = [t for t in _visible_dirs(folder) if trial_of(t) is not None and (t / CONFIG_FILE).is_file()]
    if (folder / CONFIG_FILE).is_file():
        recordings.append(folder)
    for recording in recordings:  # an unreadable environment.json would read as profile "unknown" and move there
        if (recording / ENVIRONMENT_FILE).exists():
            load_json(recording / ENVIRONMENT_FILE)  # SideFileError (a ValueError) naming the file and why
    profiles = {RunDir(t).profile: t for t in recordings}
    if len(profiles) > 1:
        raise ValueError(f"{folder}: its trials name different profiles ({', '.join(sorted(profiles))}); move them by hand")
    return next(iter(profiles), None)


def plan_migration(traces: Path, groups: Sequence[str] | None = None) -> list[Move]:
    """Every old-layout folder under ``traces`` (of ``groups`` only, when given) and its new place; a
    ``ValueError`` listing every move that would fail (:func:`_check`), so that nothing is moved then."""
    traces = Path(traces)
    if not traces.is_dir():
        raise ValueError(f"--traces {traces} is not a folder")
    tops = {p.name: p for p in _visible_dirs(traces)}
    unknown = sorted(set(groups or ()) - set(tops))
    if unknown:
        raise ValueError(f"--groups {', '.join(unknown)}: no such folder under {traces} (there: {', '.join(tops) or 'none'})")
    moves: list[Move] = []
    unplanned: list[str] = []  # folders whose place cannot be told: conflicts too
    for name, top in tops.items():
        if groups and name not in groups:
            continue
        try:
            if name == COSTMODEL_DIR and (top / MACHINE_FILE).is_file():
                profile = costmodel_profile(top)
                moves.append(Move(top, traces / profile / COSTMODEL_DIR, profile))
                continue
        except ValueError as exc:
            unplanned.append(str(exc))
            continue
        for folder in _visible_dirs(top):
            try:
                profile = _run_profile(folder)
                if profile is not None:
                    moves.append(Move(folder, traces / profile / name / folder.name, profile))
            except ValueError as exc:  # its trials disagree, or its profile is no valid id: the message names it
                unplanned.append(str(exc))
    _check(moves, traces, unplanned)
    return moves


def _check(moves: list[Move], traces: Path, unplanned: Sequence[str] = ()) -> None:
    """Refuse the plan when any move would fail (or a folder's place cannot be told: ``unplanned``), listing
    every conflict in one message, so that nothing moves."""
    old = {m.source.relative_to(traces).parts[0] for m in moves}
    conflicts = [*unplanned, *(problem for move in moves for problem in _move_conflicts(move, traces, old))]
    seen: dict[Path, Path] = {}
    for move in moves:
        if move.target in seen:
            conflicts.append(f"cannot move {move.source}: {seen[move.target]} goes to {move.target} too")
        seen.setdefault(move.target, move.source)
    if conflicts:
        shown = conflicts[:SHOWN_CONFLICTS]
        more = f"; and {len(conflicts) - len(shown)} more" if len(conflicts) > len(shown) else ""
        raise ValueError("; ".join(shown) + more + "; nothing was moved")


def _move_conflicts(move: Move, traces: Path, old_groups: set[str]) -> list[str]:
    """Why ``move`` would fail: its profile names an old group, its target exists, a file stands where one of the
    target's folders belongs, or a folder it must write in is not writable."""
    if move.profile in old_groups:
        return [
            f"cannot move {move.source}: its profile {move.profile!r} is also the name of an old-layout folder "
            f"{traces / move.profile}"
        ]
    if os.path.lexists(move.target):
        return [f"cannot move {move.source}: {move.target} exists already"]
    folder = move.target.parent
    while not os.path.lexists(folder):  # the folders to create, up to the first that exists
        folder = folder.parent
    if not folder.is_dir():
        return [f"cannot move {move.source}: {folder} is a file where a folder of {move.target} belongs"]
    unwritable = [d for d in (folder, move.source.parent) if not os.access(d, os.W_OK | os.X_OK)]
    if unwritable:
        return [f"cannot move {move.source}: {unwritable[0]} is not writable"]
    if os.stat(folder).st_dev != os.stat(move.source).st_dev:
        return [f"cannot move {move.source}: {folder} is on another filesystem (a move is one rename)"]
    return []


def migrate(moves: list[Move]) -> None:
    """Carry out a checked plan: one ``os.rename`` per folder, then remove the old group folders left empty.

    The plan was checked whole (:func:`plan_migration`); a move that fails all the same (the tree changed
    in between) stops the migration with a ``ValueError`` saying which moves were done: each is complete,
    and planning again picks up the rest."""
    for done, move in enumerate(moves):
        try:
            move.target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(move.source, move.target)
        except OSError as exc:
            _remove_emptied(moves[:done])
            raise ValueError(
                f"cannot move {move.source} to {move.target} ({exc.strerror or exc}); {done} of {len(moves)} folder(s) "
                "were moved, each whole: fix this and run migrate-layout again to move the rest"
            ) from None
    _remove_emptied(moves)


def _remove_emptied(moves: list[Move]) -> None:
    """Remove the old group folders that ``moves`` left empty."""
    for old in sorted({m.source.parent for m in moves}):
        if old.is_dir() and not any(old.iterdir()):
            old.rmdir()


def stale_record_rows(traces: Path, moves: list[Move], unreadable: dict[Path, str] | None = None) -> dict[Path, int]:
    """The cost model's predictions records under ``traces`` (either layout) whose ``path`` column names a
    folder that ``moves`` take away, with how many of their rows do. A record that cannot be read (not UTF-8,
    a field over the csv module's limit, not a file) goes into ``unreadable`` with why; without it, a ValueError
    names the record. The check only informs: it runs after the moves, which a damaged record must not undo."""
    traces = Path(traces)
    moved = [m.source.relative_to(traces).parts for m in moves]
    stale: dict[Path, int] = {}
    for record in sorted(
        {*traces.glob(f"{COSTMODEL_DIR}/{PREDICTIONS_FILE}"), *traces.glob(f"*/{COSTMODEL_DIR}/{PREDICTIONS_FILE}")}
    ):
        try:
            with open_regular(record, "r", newline="", encoding="utf-8") as f:
                rows = sum(_names_moved(row.get("path") or "", traces.name, moved) for row in csv.DictReader(f))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            why = f"{exc.strerror or exc}" if isinstance(exc, OSError) else f"not a readable CSV record ({exc})"
            if unreadable is None:
                raise ValueError(f"{record}: {why}") from None
            unreadable[record] = why
            continue
        if rows:
            stale[record] = rows
    return stale


def _names_moved(path: str, traces_name: str, moved: list[tuple[str, ...]]) -> bool:
    """Whether ``path`` (as a record wrote it: ``.../<traces>/<group>/<name>[/trial<k>]``) lies in a moved folder."""
    parts = Path(path).parts
    starts = [i + 1 for i, part in enumerate(parts) if part == traces_name]
    return any(parts[i : i + len(old)] == old for i in starts for old in moved)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "migrate-layout",
        help="move runs recorded before hardware profiles into traces/<profile>/...",
        description=(
            "Move every old-layout folder under --traces (<group>/<name>/, convergence/<run>/, costmodel/) into "
            "<profile>/..., the profile read from its environment.json, convergence record or machine.json. Checks "
            "every move first and moves nothing when any would fail (a target that exists, a file where a folder belongs, "
            "a folder that cannot be written), listing every conflict. A tree with some groups moved analyzes to the "
            "same tables as one with all moved, so the migration can be done group by group (--groups)."
        ),
    )
    p.add_argument("--traces", type=Path, default=Path("traces"), help="the dataset's traces folder (default: %(default)s)")
    p.add_argument(
        "--groups", nargs="+", metavar="G", help="only these top-level folders (e.g. comparison convergence costmodel)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the moves, move nothing")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    moves = plan_migration(args.traces, args.groups)
    for move in moves:
        print(f"{'would move' if args.dry_run else 'move'} {move.source} -> {move.target}")
    if not args.dry_run:
        migrate(moves)
    unreadable: dict[Path, str] = {}
    # after the moves: a moved costmodel folder's records in their new place
    stale = stale_record_rows(args.traces, moves, unreadable)
    print(f"{len(moves)} folder(s) {'to move' if args.dry_run else 'moved'}" + ("" if moves else ": nothing in the old layout"))
    for record, why in unreadable.items():
        print(
            f"muon-repro migrate-layout: warning: could not check {record} for rows naming a moved folder: {why}; "
            f"`muon-repro regimes --records-only --out {args.traces} --profile {record.parent.parent.name}` writes the "
            "cost model's records again",
            file=sys.stderr,
        )
    for record, rows in stale.items():
        print(
            f"note: {rows} row(s) of {record} name their run's old folder in the 'path' column (their numbers hold); "
            f"`muon-repro regimes --records-only --out {args.traces} --profile {record.parent.parent.name}` writes the "
            "cost model's records again, naming the new ones"
        )
    return 0
