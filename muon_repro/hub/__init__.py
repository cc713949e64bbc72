"""Transport only, to and from the Hugging Face Hub: ``publish`` (the dataset folder up as one commit
and one version tag) and ``download`` (one version back, then verified). What the folder holds is
:mod:`muon_repro.dataset`'s business.

    remote      list and download a revision's files (several at a time, exact paths)
    plan        what a publish changes against the remote head: added, changed, removed
    publish     ``muon-repro publish``: verify, plan, one commit, one tag vX.Y.Z
    download    ``muon-repro download``: one version, then verify
    errors      one line for a failed request: the endpoint, the error, what was left undone
    cli         the two subcommands

The fake Hub the tests publish to is a test double outside the package
(``tests/support/``, ``python -m tests.support.fake_hub``); nothing here imports it.
Importing this package imports nothing heavy; ``huggingface_hub`` is imported by the
functions that need it.
"""
