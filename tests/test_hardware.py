"""Hardware profile ids (muon_repro.hardware): derived from environment.json, overridden by flag or variable, validated."""

from __future__ import annotations

import argparse

import pytest

from muon_repro.hardware import (
    PROFILE_ENV_VAR,
    UNKNOWN_PROFILE,
    add_profile_argument,
    ordered_profiles,
    profile_from_environment,
    profile_or_unknown,
    resolve_profile,
    run_key,
    validate_profile_id,
)


def topology(links: list[list[str]]) -> str:
    """An ``nvidia-smi topo -m`` matrix with the given link cells between GPUs."""
    n = len(links)
    rows = ["        " + "    ".join(f"GPU{j}" for j in range(n)) + "    CPU Affinity"]
    rows += [f"GPU{i}    " + "    ".join(" X  " if i == j else links[i][j] for j in range(n)) + "    0-31" for i in range(n)]
    return "\n".join(rows) + "\n"


NVLINK_TOPOLOGY = topology([["NV18"] * 4 for _ in range(4)])
PCIE_TOPOLOGY = topology(
    [["PHB", "PHB", "SYS", "SYS"], ["PHB", "PHB", "SYS", "SYS"], ["SYS", "SYS", "PHB", "PHB"], ["SYS", "SYS", "PHB", "PHB"]]
)


def cuda_env(name: str, count: int, topology: str | None, nodes: int = 1) -> dict:
    return {
        "backend": "nccl",
        "accelerator": name,
        "accelerator_count": count,
        "nodes": nodes,
        "interconnect_topology": topology,
        "host_cpu_cores": 64,
    }


@pytest.fixture(autouse=True)
def no_profile_variable(monkeypatch):
    monkeypatch.delenv(PROFILE_ENV_VAR, raising=False)


def test_cpu_profile_from_cores_and_backend():
    assert (
        profile_from_environment({"backend": "gloo", "host_cpu_cores": 2, "accelerator": None, "accelerator_count": 0})
        == "cpu-2c-gloo"
    )
    assert profile_from_environment({"backend": "gloo", "host_cpu_cores": 16}) == "cpu-16c-gloo"


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        (cuda_env("NVIDIA H100 80GB HBM3", 8, NVLINK_TOPOLOGY), "8xH100-nvlink-nccl"),
        (cuda_env("NVIDIA A100-PCIE-40GB", 4, PCIE_TOPOLOGY), "4xA100-pcie-nccl"),
        (cuda_env("NVIDIA H100 80GB HBM3", 8, NVLINK_TOPOLOGY, nodes=2), "2x8xH100-nvlink-nccl"),
        (cuda_env("NVIDIA H100 80GB HBM3", 1, None), "1xH100-nccl"),
        (cuda_env("NVIDIA GeForce RTX 4090", 2, None), "2xRTX4090-nccl"),  # no nvidia-smi matrix: no link named
    ],
)
def test_cuda_profiles(environment, expected):
    assert profile_from_environment(environment) == expected


def test_recorded_profile_wins_over_the_derived_one():
    env = {**cuda_env("NVIDIA H100 80GB HBM3", 8, NVLINK_TOPOLOGY), "profile": "lab-h100-box"}
    assert profile_from_environment(env) == "lab-h100-box"


def test_override_by_flag_then_variable(monkeypatch):
    env = {"backend": "gloo", "host_cpu_cores": 2}
    assert resolve_profile(env) == "cpu-2c-gloo"
    monkeypatch.setenv(PROFILE_ENV_VAR, "from-variable")
    assert resolve_profile(env) == "from-variable"
    assert resolve_profile(env, "from-flag") == "from-flag"  # the flag beats the variable


@pytest.mark.parametrize("bad", ["", "../up", "has space", "a/b", "-leading-dash", "x" * 65])
def test_invalid_ids_are_refused_naming_the_value(bad, monkeypatch):
    with pytest.raises(ValueError, match="is not a profile id") as info:
        validate_profile_id(bad)
    assert repr(bad) in str(info.value)
    with pytest.raises(ValueError, match="--profile"):
        resolve_profile({}, bad) if bad else validate_profile_id(bad, source="--profile")
    if bad:
        monkeypatch.setenv(PROFILE_ENV_VAR, bad)
        with pytest.raises(ValueError, match=PROFILE_ENV_VAR):
            resolve_profile({})


def test_invalid_recorded_profile_names_environment_json():
    with pytest.raises(ValueError, match="environment.json's profile 'a b'"):
        profile_from_environment({"profile": "a b"})


def test_profile_argument_parses_and_refuses(capsys):
    parser = argparse.ArgumentParser()
    add_profile_argument(parser)
    assert parser.parse_args(["--profile", "8xH100-nvlink-nccl"]).profile == "8xH100-nvlink-nccl"
    assert parser.parse_args([]).profile is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--profile", "no/slash"])
    assert "'no/slash' is not a profile id" in capsys.readouterr().err


def test_every_recording_command_takes_profile():
    from muon_repro.cli import build_parser

    parser = build_parser()
    for command in (["bench", "custom"], ["run"], ["converge"], ["calibrate", "--out", "m.json"], ["regimes"]):
        assert parser.parse_args([*command, "--profile", "p1"]).profile == "p1", command


def test_unknown_profile_and_run_keys_and_order():
    assert profile_or_unknown({}) == profile_or_unknown(None) == UNKNOWN_PROFILE
    assert run_key("cpu-2c-gloo", "comparison", "muon_dp2_tp2") == "cpu-2c-gloo/comparison/muon_dp2_tp2"
    assert run_key("unknown", "", "lone") == "unknown/lone"
    assert ordered_profiles({"b": 3, "a": 3, "c": 9}) == ["c", "a", "b"]


def test_this_machine_records_under_its_cpu_profile(monkeypatch):
    import os

    import torch

    from muon_repro.bench.environment import capture_environment, recording_profile

    if torch.cuda.is_available():
        pytest.skip("a CPU-only check")
    assert recording_profile("gloo") == f"cpu-{os.cpu_count()}c-gloo"
    assert recording_profile("gloo", "given") == "given"
    assert capture_environment("gloo", "given")["profile"] == "given"
    monkeypatch.setenv(PROFILE_ENV_VAR, "from-variable")
    assert capture_environment("gloo")["profile"] == "from-variable"


@pytest.mark.parametrize(
    ("cpuinfo", "bf16"),
    [
        ("model name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma\n", False),
        ("model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n", True),
        ("flags\t\t: fpu avx2 avx512f amx_tile amx_bf16 amx_int8\n", True),
        ("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n", True),  # Arm
        ("processor\t: 0\nFeatures\t: fp asimd\n", False),
        ("", None),  # no /proc/cpuinfo: not said
    ],
)
def test_bf16_instructions_are_read_from_the_cpus_flags(cpuinfo, bf16):
    from muon_repro.bench.environment import cpu_has_bf16

    assert cpu_has_bf16(cpuinfo) is bf16


def test_the_environment_says_which_instructions_the_cpu_has():
    import torch

    from muon_repro.bench.environment import capture_environment

    env = capture_environment("gloo", "given")
    assert env["host_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["host_cpu_bf16"] in (True, False, None)


@pytest.mark.slow  # starts git
def test_recording_artifacts_never_make_the_source_dirty(tmp_path):
    """A sweep rewrites traces/ as it records: only the package and what installs it decide git_dirty."""
    import subprocess

    from muon_repro.provenance import tree_commit as _git

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "muon_repro").mkdir()
    (tmp_path / "traces").mkdir()
    (tmp_path / "muon_repro" / "x.py").write_text("A = 1\n")
    (tmp_path / "traces" / "run.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    assert _git(tmp_path)["git_dirty"] is False
    (tmp_path / "traces" / "run.json").write_text('{"re": "recorded"}\n')
    assert _git(tmp_path)["git_dirty"] is False
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    (tmp_path / "muon_repro" / "__pycache__").mkdir()
    (tmp_path / "muon_repro" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert _git(tmp_path)["git_dirty"] is False  # ignored, and no part of the package's digest either
    (tmp_path / "muon_repro" / "new.py").write_text("B = 1\n")
    assert _git(tmp_path)["git_dirty"] is True  # untracked, yet imported with the package and in its digest
    (tmp_path / "muon_repro" / "new.py").unlink()
    (tmp_path / "muon_repro" / "x.py").write_text("A = 2\n")
    assert _git(tmp_path) == {"git_sha": _git(tmp_path)["git_sha"], "git_dirty": True} and len(_git(tmp_path)["git_sha"]) == 40


@pytest.mark.slow  # starts git
def test_a_tree_copied_without_git_names_its_commit_by_its_stamp(tmp_path):
    """A device machine gets the working tree's files, not .git: the stamp written in the clean checkout names the
    commit, as clean only while the copy is byte for byte what it was written for."""
    import shutil
    import subprocess

    from muon_repro.provenance import COMMIT_STAMP, tree_commit, write_stamp

    repo, copy = tmp_path / "repo", tmp_path / "copy"
    (repo / "muon_repro").mkdir(parents=True)
    (repo / "muon_repro" / "x.py").write_text("A = 1\n")
    (repo / "pyproject.toml").write_text("[project]\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    commit = tree_commit(repo)["git_sha"]
    write_stamp(repo)
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    assert tree_commit(copy) == {"git_sha": commit, "git_dirty": False}
    (copy / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # the pins count, as git's status counts them
    assert tree_commit(copy) == {"git_sha": commit, "git_dirty": True}
    (copy / COMMIT_STAMP).unlink()
    assert tree_commit(copy) == {"git_sha": None, "git_dirty": None}
    (repo / "muon_repro" / "x.py").write_text("A = 2\n")
    with pytest.raises(ValueError, match="differ from commit"):
        write_stamp(repo)  # a changed checkout is refused: the stamp would name a commit the runs did not use
    with pytest.raises(ValueError, match="no git commit"):
        write_stamp(copy)


def test_show_gives_the_digest_of_the_package_it_was_asked_about(tmp_path, capsys):
    from muon_repro.provenance import main, source_digest

    (tmp_path / "muon_repro").mkdir()
    (tmp_path / "muon_repro" / "x.py").write_text("A = 1\n")
    assert main(["show", "--repo", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.endswith(f"package sha256 {source_digest(tmp_path / 'muon_repro')}\n") and source_digest() not in out
