"""``study import --hub``: a failed download is one line that never repeats a credential the server echoed."""

from __future__ import annotations

import pytest

from muon_repro.terminal import first_line, redact

SECRET = "hf_FAKE_SECRET_123"


@pytest.mark.parametrize(
    "text",
    [f"Authorization: Bearer {SECRET}", f"token={SECRET}", "authorization: bearer abcdefghijklmnop", f"hf_{'x' * 34}"],
)
def test_text_shaped_like_a_credential_is_redacted(text):
    assert "[redacted]" in redact(text)
    assert SECRET not in redact(text) and "abcdefghijklmnop" not in redact(text)


def test_every_quoted_error_line_is_redacted_at_the_source():
    """``first_line`` is what every Hub message quotes (publish, tag, download, contribute, review, study import,
    converge's download): one line, credentials out, the type when the error says nothing."""
    assert first_line(RuntimeError(f"401 for Bearer {SECRET}\nbody: {SECRET}")) == "401 for [redacted]"
    assert first_line(TimeoutError()) == "TimeoutError"


def test_ordinary_error_text_is_kept():
    line = "500 Server Error: Internal Server Error for url: http://127.0.0.1:9/api/datasets/x (Request ID: abc)"
    assert redact(line) == line


def test_a_failed_hub_download_says_one_line_without_the_servers_echo(monkeypatch, tmp_path, capsys):
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    import muon_repro.study.sources as sources
    from muon_repro.cli import main

    def failing(cache, *, revision=None):
        request = httpx2.Request("GET", "http://127.0.0.1:9/api/datasets/x")
        response = httpx2.Response(500, request=request, text=f"echo: Authorization: Bearer {SECRET}")
        raise HfHubHTTPError(f"500 Server Error for url: {request.url} Bearer {SECRET}\nbody: Bearer {SECRET}", response=response)

    monkeypatch.setattr(sources, "download_study", failing)
    out = tmp_path / "study"
    assert main(["study", "import", "--hub", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err and "nothing was imported" in err
    assert "muon-distributed-reproducibility failed: 500 Server Error" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_offline_mode_is_said_as_such(monkeypatch, tmp_path, capsys):
    """With HF_HUB_OFFLINE set, the client's own wording came through; now what to do, as the other Hub commands say."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    import muon_repro.study.sources as sources
    from muon_repro.cli import main

    def offline(cache, *, revision=None):
        raise OfflineModeIsEnabled("Cannot reach https://huggingface.co/api/datasets/x: offline mode is enabled.")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(sources, "download_study", offline)
    out = tmp_path / "study"
    assert main(["study", "import", "--hub", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "offline mode (HF_HUB_OFFLINE" in err and "nothing was imported" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_the_hub_unreachable_with_nothing_cached_is_said_as_such(monkeypatch, tmp_path, capsys):
    """Offline without HF_HUB_OFFLINE, the client raises LocalEntryNotFoundError (a FileNotFoundError): its
    three-line text came through ("An error happened while trying to locate the files on the Hub...")."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    import muon_repro.study.sources as sources
    from muon_repro.cli import main

    def unreachable(cache, *, revision=None):
        raise LocalEntryNotFoundError("An error happened while trying to locate the files on the Hub, and we cannot find...")

    monkeypatch.setattr(sources, "download_study", unreachable)
    out = tmp_path / "study"
    assert main(["study", "import", "--hub", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the Hub could not be reached and no copy of it is cached here; connect, or give a copy with --from" in err
    assert "nothing was imported" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
