"""The Hub's 404s during ``review`` and ``contribute``, as one sentence each: which of the repository,
the branch or the pull request does not exist (``huggingface_hub`` says only "404 Client Error").

``huggingface_hub`` raises ``RepositoryNotFoundError`` for a repository that does not exist (or
that the token cannot see), ``RevisionNotFoundError`` for a missing branch, and another
``HfHubHTTPError`` with status 404 for a missing discussion; the fake Hub of the tests answers
the same way. The wording follows ``muon-repro download``'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from muon_repro.hub.publish import token_in_use, token_source


class NotOnHub(ValueError):
    """The repository, branch or pull request named on the command line does not exist on the Hub."""


def missing_repository(api: Any, repo_id: str) -> str:
    endpoint = str(api.endpoint).rstrip("/")
    try:
        token = token_in_use(api)
    except ValueError:  # a malformed token: it is said when a request needs it
        token = None
    who = (
        f"the token (from {token_source(api)}) cannot read it"
        if token
        else "no token was found to read it with (set HF_TOKEN or run `hf auth login`)"
    )
    return f"dataset repository {repo_id} does not exist on {endpoint}, or it is private and {who}; check --repo-id"


@contextlib.contextmanager
def said_plainly(api: Any, repo_id: str, revision: str) -> Iterator[None]:
    """A missing repository or ``revision`` (a branch) inside this block as a :class:`NotOnHub`."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        yield
    except RepositoryNotFoundError:
        raise NotOnHub(missing_repository(api, repo_id)) from None
    except RevisionNotFoundError:
        raise NotOnHub(f"{repo_id} has no branch {revision}: check --revision (main, or another branch)") from None


def pull_request_details(api: Any, repo_id: str, num: int) -> Any:
    """Discussion ``num``'s details; a :class:`NotOnHub` when it or the repository does not exist."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        return api.get_discussion_details(repo_id, num, repo_type="dataset")
    except RepositoryNotFoundError:
        raise NotOnHub(missing_repository(api, repo_id)) from None
    except HfHubHTTPError as exc:
        if getattr(exc.response, "status_code", None) != 404:
            raise
        endpoint = str(api.endpoint).rstrip("/")
        raise NotOnHub(
            f"{repo_id} has no pull request #{num} on {endpoint}: check --pr against its list "
            f"({endpoint}/datasets/{repo_id}/discussions)"
        ) from None
