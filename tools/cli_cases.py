"""Hostile inputs for the whole command line (``python -m tools.cli_fuzz``): what a careless or hostile user can
point ``analyze``, ``figures``, ``report``, ``card``, ``bundle``, ``verify``, ``predict`` and ``download`` at.

Each :class:`Case` is built from a seed: a kind (output folders, hardware descriptions, rank sets, names,
links, tables, run shapes) and a variant of it. A case is a workspace (files to write, links to make, a
metrics folder to copy from the harness's good one), the commands to run in it one after another, the
outcomes allowed, files that must come out unchanged, and a name that must never appear as a file (a
path escape's target). :func:`tiny_run` is the valid run the hostile ones start from.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from tools.contrib_cases import HOSTILE_NAMES, good_run

PROFILE = "cpu-2c-gloo"
RUN = f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"
ALL_OUTCOMES = ("passed", "refused", "error")
NOT_PASSED = ("refused", "error")
PRECIOUS = b"someone's work\n"


@dataclass
class Case:
    seed: int
    kind: str
    variant: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # link path -> target ("{outside}": the case's outside folder)
    metrics: bool = False  # copy the harness's good tables to metrics/ first
    commands: list[list[str]] = field(default_factory=list)
    allowed: tuple[str, ...] = ALL_OUTCOMES
    precious: tuple[str, ...] = ()  # files (of ``files``) that must hold what they held
    escape: str | None = None  # a file name no command may create, anywhere under the fuzz folder
    gone: tuple[str, ...] = ()  # files that must not exist afterwards (an interrupted run's staging)

    def describe(self) -> str:
        return f"seed {self.seed}: {self.kind} ({self.variant})"


def tiny_run(folder: str = RUN, **config: object) -> dict[str, bytes]:
    """A valid run of 2 ranks with tiny traces, ``config`` overriding fields of its config.json."""
    files = good_run(folder)
    if config:
        cfg = json.loads(files[f"{folder}/config.json"])
        files[f"{folder}/config.json"] = json.dumps({**cfg, **config}).encode()
    return files


def _analyze(out: str = "metrics", *extra: str) -> list[str]:
    return ["analyze", "traces", "--out", out, "--workers", "1", *extra]


# ---------------------------------------------------------------------- output folders


def _output_folders(case: Case, rng: random.Random) -> None:
    case.files.update(tiny_run())
    variant = rng.choice(["foreign", "checkout", "checkout forced", "bundle on checkout", "another writer", "own", "stale"])
    case.variant = variant
    if variant in ("foreign", "another writer"):
        case.files["results/survey.csv"] = PRECIOUS
        if variant == "another writer":
            case.files["results/.muon-repro-output"] = b"written by muon-repro bundle, which replaces this folder whole\n"
        case.commands = [_analyze("results")]
        case.allowed, case.precious = NOT_PASSED, ("results/survey.csv",)
    elif variant.startswith("checkout") or variant == "bundle on checkout":
        case.files.update({"repo/.git/HEAD": b"ref: refs/heads/main\n", "repo/notes.md": PRECIOUS})
        if variant == "bundle on checkout":
            case.commands = [["bundle", "--out", "repo", "--traces", "traces"]]
        else:
            case.commands = [_analyze("repo", *(["--force"] if variant.endswith("forced") else []))]
        case.allowed, case.precious = NOT_PASSED, ("repo/notes.md", "repo/.git/HEAD")
    elif variant == "own":
        case.commands = [_analyze("metrics"), _analyze("metrics")]  # its own folder, replaced
        case.allowed = ("passed",)
    else:  # a staging folder an interrupted run left (its pid long gone) is removed by the next writer
        stale = ".metrics.muon-repro-stage-4194303-deadbeef"
        case.files[f"{stale}/runs.parquet"] = b"half"
        case.commands, case.allowed, case.gone = [_analyze("metrics")], ("passed",), (stale,)


# ---------------------------------------------------------------------- hardware descriptions

_ENV_FIELDS = ("backend", "profile", "interconnect_topology", "accelerator_count", "host_cpu_cores", "nodes", "accelerator")


def _hostile_values(escape: str) -> list[object]:
    return [
        7,
        [1, 2],
        {"a": 1},
        "two",
        -1,
        2**63,
        2**70,
        1e300,
        None,
        True,
        f"x/../../../{escape}",
        f"../{escape}",
        "a" * 300,
        "\x1b[2J\x1b[H",
        "CPU-2C-GLOO",
        "",
    ]


def _hardware(case: Case, rng: random.Random) -> None:
    case.escape = f"ESCAPED-{case.seed}"
    files = tiny_run()
    env = json.loads(files[f"{RUN}/environment.json"])
    name = rng.choice(_ENV_FIELDS)
    value = rng.choice(_hostile_values(case.escape))
    if rng.random() < 0.3:
        env.pop("profile", None)  # derived from the other fields
    env[name] = value
    text = json.dumps(env)
    if value == 1e300 and rng.random() < 0.5:
        text = text.replace("1e+300", "1e400")  # past float's range: json reads inf
    files[f"{RUN}/environment.json"] = text.encode()
    case.files.update(files)
    case.variant = f"{name}={value!r}"[:60]
    case.commands = [_analyze("metrics"), ["figures", "--metrics", "metrics", "--out", "figures"]]


# ---------------------------------------------------------------------- rank sets


def _trace(rank: int, world_size: int, step: int = 1) -> bytes:
    import gzip

    event = {"ph": "X", "name": f"ProfilerStep#{step}", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0, "dur": 10}
    doc = {"distributedInfo": {"rank": rank, "world_size": world_size, "backend": "gloo"}, "traceEvents": [event]}
    return gzip.compress(json.dumps(doc).encode(), mtime=0)


def _rank_sets(case: Case, rng: random.Random) -> None:
    variant = rng.choice(
        ["copy beside", "plain beside gzip", "missing rank", "extra rank", "other steps", "world 2.9", "world text", "world huge"]
    )
    case.variant = variant
    files = tiny_run()
    if variant == "copy beside":
        files[f"{RUN}/rank0 (copy).json.gz"] = files[f"{RUN}/rank0.json.gz"]
    elif variant == "plain beside gzip":
        import gzip

        files[f"{RUN}/rank0.json"] = gzip.decompress(files[f"{RUN}/rank0.json.gz"])
    elif variant == "missing rank":
        del files[f"{RUN}/rank1.json.gz"]
    elif variant == "extra rank":
        files[f"{RUN}/rank2.json.gz"] = _trace(2, 2)
    elif variant == "other steps":
        files[f"{RUN}/rank1.json.gz"] = _trace(1, 2, step=rng.choice([2, 7, 100]))
    else:
        world: object = {"world 2.9": 2.9, "world text": "2", "world huge": rng.choice([2**63, 2**64 + 2, -2, 0])}[variant]
        cfg = json.loads(files[f"{RUN}/config.json"])
        files[f"{RUN}/config.json"] = json.dumps({**cfg, "world_size": world}).encode()
    case.files.update(files)
    case.commands = [_analyze("metrics")]
    case.allowed = NOT_PASSED  # every variant is a run that cannot be pooled as it stands: said, never merged silently


# ---------------------------------------------------------------------- names


def _names(case: Case, rng: random.Random) -> None:
    name = rng.choice([n for n in HOSTILE_NAMES if n and "/" not in n and "\x00" not in n and n not in (".", "..")])
    where = rng.choice(["run folder", "config name", "trace file", "profile"])
    case.variant = f"{where}: {name!r}"[:60]
    if where == "run folder":
        case.files.update(tiny_run(f"traces/{PROFILE}/comparison/{name[:200]}/trial0"))
    elif where == "config name":
        case.files.update(tiny_run(name=name, key=f"comparison/{name}"))
    elif where == "profile":
        files = tiny_run()
        env = json.loads(files[f"{RUN}/environment.json"])
        files[f"{RUN}/environment.json"] = json.dumps({**env, "profile": name}).encode()
        case.files.update(files)
    else:
        files = tiny_run()
        files[f"{RUN}/{name[:200]}.json"] = b'{"traceEvents": []}'
        case.files.update(files)
    case.commands = [_analyze("metrics")]


# ---------------------------------------------------------------------- links


def _links(case: Case, rng: random.Random) -> None:
    variant = rng.choice(["loop", "folder outside", "file outside", "dangling"])
    case.variant = variant
    case.files.update(tiny_run())
    case.files["outside/secret.json.gz"] = _trace(0, 1)
    case.files["outside/notes.txt"] = PRECIOUS
    link = {
        "loop": ("traces/cpu-2c-gloo/loop", ".."),
        "folder outside": ("traces/cpu-2c-gloo/elsewhere", "{outside}"),
        "file outside": (f"{RUN}/rank9.json.gz", "{outside}/secret.json.gz"),
        "dangling": ("traces/cpu-2c-gloo/gone", "{outside}/nothing"),
    }[variant]
    case.links[link[0]] = link[1]
    command = rng.choice(["analyze", "verify", "bundle"])
    case.variant += f", {command}"
    case.commands = {
        "analyze": [_analyze("metrics")],
        "verify": [["verify", "."]],
        "bundle": [["bundle", "--out", "dist", "--traces", "traces"]],
    }[command]
    case.allowed = NOT_PASSED if variant != "dangling" or command != "analyze" else ALL_OUTCOMES
    case.precious = ("outside/notes.txt",)


# ---------------------------------------------------------------------- tables


def _tables(case: Case, rng: random.Random) -> None:
    case.metrics = True
    case.escape = f"ESCAPED-{case.seed}"
    table = rng.choice(["runs", "steps", "claims", "ranks", "losses", "environment"])
    variant = rng.choice(["garbage", "truncated", "empty file", "profile escape", "many rows"])
    case.variant = f"{table}: {variant}"
    case.files["metrics.patch.json"] = json.dumps({"table": table, "variant": variant, "escape": case.escape}).encode()
    command = rng.choice(
        [
            ["figures", "--metrics", "metrics", "--out", "figures"],
            ["report", "--metrics", "metrics", "--figures", "figures", "--out", "report"],
            ["card", "--metrics", "metrics", "--traces", "traces", "--out", "card.md"],
        ]
    )
    case.commands = [command]
    case.allowed = NOT_PASSED


# ---------------------------------------------------------------------- run shapes


def _shapes(case: Case, rng: random.Random) -> None:
    flag = rng.choice(["--hidden", "--layers", "--heads", "--vocab", "--ffn", "--dp", "--tp", "--seq-len", "--tokens-per-step"])
    value = rng.choice(["0", "-1", str(2**40), str(2**63), "1e3", "x", str(10**6)])
    case.variant = f"{flag} {value}"
    shape = {"--optimizer": "muon", "--dp": "1", "--tp": "1", "--hidden": "64", "--layers": "2", "--heads": "2"}
    shape |= {"--tokens-per-step": "1024", "--seq-len": "128", flag: value}
    argv = ["predict", "--machine", "h100-8x-nvlink"]
    for k, v in shape.items():
        argv += [k, v]
    case.commands = [argv]  # a value within the limits (a vocabulary of 10^6) is priced: any clean ending


KINDS: dict[str, tuple[float, Callable[[Case, random.Random], None]]] = {  # kind -> (weight, builder)
    "output folders": (2, _output_folders),
    "hardware descriptions": (3, _hardware),
    "rank sets": (2, _rank_sets),
    "names": (2, _names),
    "links": (1.5, _links),
    "tables": (2, _tables),
    "run shapes": (1, _shapes),
}


def make_case(seed: int, kind: str | None = None) -> Case:
    """The case of ``seed`` (of ``kind``, or a kind drawn by weight)."""
    rng = random.Random(seed)
    if kind is None:
        names = sorted(KINDS)
        kind = rng.choices(names, weights=[KINDS[k][0] for k in names])[0]
    case = Case(seed, kind)
    KINDS[kind][1](case, rng)
    return case
