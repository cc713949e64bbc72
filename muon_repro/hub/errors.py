"""How a failed Hub request is told: one line naming the endpoint and what was left undone,
shared by ``publish``, ``download``, ``contribute`` and ``review``."""

from __future__ import annotations

from muon_repro.terminal import first_line


def hub_errors() -> tuple[type[BaseException], ...]:
    """Errors from the Hub client that deserve a one-line message rather than a traceback."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    return (HfHubHTTPError, httpx2.TransportError)


def endpoint() -> str:
    """The Hub the client talks to (``HF_ENDPOINT``, else huggingface.co)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def request_failed(exc: BaseException, consequence: str = "") -> str:
    """The one-line message for a Hub request that failed: the endpoint, the error's first line (credentials
    redacted), what it left undone."""
    return f"the request to {endpoint()} failed: {first_line(exc)}{consequence}"
