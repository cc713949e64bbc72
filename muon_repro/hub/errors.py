"""How a failed Hub request is told: one line naming the endpoint and what was left undone,
shared by ``publish``, ``download``, ``contribute`` and ``review``."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from muon_repro.terminal import first_line, redact


def hub_errors() -> tuple[type[BaseException], ...]:
    """Errors from the Hub client that deserve a one-line message rather than a traceback."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    return (HfHubHTTPError, httpx2.TransportError, OfflineModeIsEnabled)


def endpoint() -> str:
    """The Hub the client talks to (``HF_ENDPOINT``, else huggingface.co), as messages show it (:func:`shown_endpoint`)."""
    from huggingface_hub import constants

    return shown_endpoint(constants.ENDPOINT)


def shown_endpoint(url: object) -> str:
    """A Hub address as a message may show it: no trailing slash, and no credentials (``user:token@``), query or
    fragment, where a token could ride in an ``HF_ENDPOINT``: it never reaches a terminal, a log or a citation."""
    parts = urlsplit(str(url).strip())
    host = parts.netloc.rpartition("@")[2]
    return redact(urlunsplit((parts.scheme, host, parts.path, "", "")).rstrip("/"))


def offline_refusal(hub: str, doing: str = "") -> str:
    """Why no request reaches ``hub`` in offline mode, and what to do; ``doing``: what was about to be asked."""
    # huggingface_hub reads HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE: name the one the user set.
    transformers = not os.environ.get("HF_HUB_OFFLINE") and os.environ.get("TRANSFORMERS_OFFLINE")
    variable = "TRANSFORMERS_OFFLINE" if transformers else "HF_HUB_OFFLINE"
    while_doing = f" while {doing}" if doing else ""
    hub = shown_endpoint(hub)
    return f"{variable} is set, so the Hub at {hub} cannot be reached{while_doing}: unset it to let muon-repro talk to the Hub"


def request_failed(exc: BaseException, consequence: str = "") -> str:
    """The one-line message for a Hub request that failed: the endpoint, the error's first line (credentials
    redacted), what it left undone."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled):  # no request was sent: the client is in offline mode
        return f"{offline_refusal(endpoint())}{consequence}"
    return f"the request to {endpoint()} failed: {first_line(exc)}{consequence}"
