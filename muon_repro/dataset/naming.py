"""Repository ids, versions, tags, revisions and the token: checked here, before any request is made."""

from __future__ import annotations

import re

HUB_URL = "https://huggingface.co"  # the public address printed in the card, whatever HF_ENDPOINT says
DEFAULT_REPO_ID = "muon-repro/distributed-muon-traces"

# The Hub's rules for a name: letters, digits, "-", "_", "."; no "--" or ".."; not starting or
# ending with "-" or "."; at most 96 characters.
_NAME = re.compile(r"(?!.*(--|\.\.))[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
_VERSION = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}")


def check_repo_id(repo_id: str) -> str:
    """``ORG/NAME`` as the Hub accepts it; a ValueError saying what is wrong otherwise."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts) or parts[1].endswith(".git"):
        raise ValueError(
            f"invalid dataset repository id {repo_id!r}: expected ORG/NAME, each part 1-96 characters "
            "from letters, digits, '-', '_', '.' (no '--' or '..', not starting or ending with '-' or '.'), "
            "e.g. my-org/muon-traces"
        )
    return repo_id


def check_version(version: str) -> str:
    """``X.Y.Z`` (digits, no leading zeros); a leading ``v`` is refused so that tags are never ``vv1.0.0``."""
    if not _VERSION.fullmatch(version):
        raise ValueError(
            f"invalid version {version!r}: expected X.Y.Z with non-negative integers and no leading zeros "
            "(e.g. 1.0.0); the tag v<version> is added for you"
        )
    return version


def tag_for(version: str) -> str:
    return "v" + check_version(version)


def version_key(tag: str) -> tuple[int, int, int] | None:
    """(X, Y, Z) for a tag ``vX.Y.Z``, None for any other tag."""
    match = _VERSION.fullmatch(tag[1:]) if tag.startswith("v") else None
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def check_revision(revision: str) -> str:
    """A tag ``vX.Y.Z``, a branch name or a 40-hex commit id."""
    if not (_COMMIT.fullmatch(revision) or (_BRANCH.fullmatch(revision) and ".." not in revision)):
        raise ValueError(f"invalid revision {revision!r}: expected a tag such as v1.0.0, a branch name or a 40-hex commit id")
    return revision


def dataset_url(repo_id: str, revision: str | None = None, *, endpoint: str = HUB_URL) -> str:
    """The dataset's page on ``endpoint`` (the public Hub unless told: the card names that one)."""
    base = f"{endpoint.rstrip('/')}/datasets/{repo_id}"
    return f"{base}/tree/{revision}" if revision else base


def check_token(token: str, source: str) -> str:
    """A token that fits in an HTTP header (printable ASCII); a ValueError saying where, never what, otherwise.

    ``source`` says where the token came from (HF_TOKEN, the cached login...). No part of the
    token is ever put in a message.
    """
    for position, char in enumerate(token, 1):
        if ord(char) > 127:
            problem = "a non-ASCII character"
        elif ord(char) < 32 or ord(char) == 127:
            problem = "a control character"
        else:
            continue
        raise ValueError(
            f"the Hugging Face token (from {source}) contains {problem} at position {position} of {len(token)}; "
            "paste it again (a token is plain ASCII, hf_ followed by letters and digits)"
        )
    return token
