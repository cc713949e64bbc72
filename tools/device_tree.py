"""Make the checkout fit a device call, and put it back: the dataset's artifacts aside while a GPU session runs.

The device tool sends the checkout's files (tracked ones present on disk, untracked ones git does not ignore, and
the paths named in ``carry``), at most 64 MiB in all. The dataset's own artifacts (``traces/``, ``metrics/``,
``figures/``, ``report/``: about 270 MiB) are not needed there: the session's script (tools/gpu_session.sh) runs the
package and tools/ and writes its results to OUT. ``hold`` moves them into a folder beside the checkout
(``<checkout>.held/``), ``restore`` moves them back, ``size`` says what a call would send.

    python -m tools.device_tree hold --carry .muon_repro_commit.json .whl
    python -m tools.device_tree restore
    python -m tools.device_tree size --carry .muon_repro_commit.json .whl

``hold`` refuses artifacts with changes not committed (restoring brings back exactly the commit, and nothing
uncommitted sits outside the checkout while it is away) and a held folder left by an earlier hold; ``restore``
refuses to put a folder back over one that was made in the meantime. Exit status 0, or 1 with the reason on stderr
(``hold`` also when the checkout would still be too large to send, after moving: ``restore`` undoes it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HELD = ("traces", "metrics", "figures", "report")  # the artifacts the package regenerates; nothing a session runs
DEVICE_TREE_LIMIT = 64 * 1024 * 1024  # bytes a device call sends at most (the device tool's README, Limits)
MiB = 1024 * 1024


def held_dir(repo: Path) -> Path:
    """Where ``hold`` puts the artifacts: a folder beside the checkout (the same file system, so moves are renames)."""
    return repo.parent / f"{repo.name}.held"


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, timeout=60)
    except subprocess.CalledProcessError as exc:
        raise ValueError(f"{repo}: git {' '.join(args)} failed: {exc.stderr.decode(errors='replace').strip()}") from None
    return done.stdout.decode(errors="surrogateescape")


def _tree_bytes(path: Path) -> int:
    """Bytes under ``path`` (a file or a folder), links counted as links."""
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    return sum((Path(root) / name).lstat().st_size for root, _, files in os.walk(path) for name in files)


def sent_bytes(repo: Path, carry: list[str]) -> int:
    """What a device call would send: the tracked files present, the untracked ones git does not ignore, and the
    carried paths (a missing one: ValueError naming it)."""
    listed = _git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    total = sum((repo / rel).lstat().st_size for rel in set(filter(None, listed)) if os.path.lexists(repo / rel))
    for rel in carry:
        if not os.path.lexists(repo / rel):
            raise ValueError(f"--carry {rel}: no such path in {repo}; give paths relative to the checkout")
        total += _tree_bytes(repo / rel)
    return total


def hold(repo: Path, carry: list[str]) -> list[str]:
    """Move the artifacts beside the checkout; returns what was done, a line each."""
    away = held_dir(repo)
    if away.exists() and any(away.iterdir()):
        raise ValueError(f"{away}: an earlier hold's artifacts are still there: run `python -m tools.device_tree restore`")
    present = [name for name in HELD if (repo / name).is_dir()]
    changed = _git(repo, "status", "--porcelain", "--untracked-files=all", "--", *present) if present else ""
    if changed.strip():
        first = changed.splitlines()[0]
        raise ValueError(
            f"{repo}: the artifacts have changes not committed ({first!r} and {len(changed.splitlines()) - 1} more): "
            "commit or discard them first, so that restore brings back the commit"
        )
    away.mkdir(exist_ok=True)
    for name in present:
        (repo / name).rename(away / name)
    size = sent_bytes(repo, carry)
    done = [f"moved {', '.join(present) or 'nothing'} to {away}", f"a device call sends {size / MiB:.1f} MiB"]
    if size > DEVICE_TREE_LIMIT:
        raise ValueError(
            f"{done[0]}, but a device call would still send {size / MiB:.1f} MiB, over its {DEVICE_TREE_LIMIT / MiB:g} "
            "MiB: carry less (or ignore the largest untracked files); `restore` puts the artifacts back"
        )
    return done


def restore(repo: Path) -> list[str]:
    """Move the held artifacts back into the checkout; returns what was done."""
    away = held_dir(repo)
    names = sorted(p.name for p in away.iterdir()) if away.is_dir() else []
    if not names:
        return [f"nothing held in {away}"]
    clash = [name for name in names if os.path.lexists(repo / name)]
    if clash:
        raise ValueError(
            f"{repo}: {', '.join(clash)} exist(s) again in the checkout, made while the artifacts were held: move "
            f"them away (the committed ones are in {away}), then restore"
        )
    for name in names:
        (away / name).rename(repo / name)
    away.rmdir()
    return [f"moved {', '.join(names)} back from {away}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.device_tree", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("hold", "restore", "size"))
    parser.add_argument("--carry", nargs="*", default=[], help="the paths the device call will carry (counted in the size)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    try:
        if args.action == "hold":
            lines = hold(repo, args.carry)
        elif args.action == "restore":
            lines = restore(repo)
        else:
            size = sent_bytes(repo, args.carry)
            verdict = "fits" if size <= DEVICE_TREE_LIMIT else "does not fit: `hold` first, or carry less"
            lines = [f"a device call sends {size / MiB:.1f} MiB of at most {DEVICE_TREE_LIMIT / MiB:g}: {verdict}"]
    except (ValueError, OSError) as exc:
        print(f"device_tree: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
