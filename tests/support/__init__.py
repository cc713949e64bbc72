"""Test doubles for muon_repro's own tests and offline demos: not runtime code.

Nothing under :mod:`muon_repro` imports this package; it exists so the tests (and a user
trying ``muon-repro publish`` / ``download`` without an account) can run against a Hub that
lives on 127.0.0.1::

    fake_hub        a standard-library fake Hugging Face Hub: ``FakeHub`` and
                    ``python -m tests.support.fake_hub [--port N]``
    fake_hub_app    its HTTP routes (a WSGI application)
    fake_hub_store  its storage: repositories as git-like commit graphs, in memory

It is a test double, not a Hub to keep data in: everything is gone when it stops.
"""
