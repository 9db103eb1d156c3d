"""Shared fixtures of the kiln package's tests (tests/python).

CPU tests run anywhere (no GPU, no torch); GPU tests are marked with kiln.testing.requires and
skip, with the reason, where torch or a suitable GPU is missing. A test needing kilnd gets the
session's daemon: KILN_SOCKET's when set, else a real kilnd started from the build tree the
package was built against, with the checkout's kernels/."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # fake_dlpack, torch_reference

import kiln  # noqa: E402
import kiln.testing  # noqa: E402


@pytest.fixture(scope="session")
def _session_daemon():
    socket = os.environ.get("KILN_SOCKET")
    if socket:
        yield socket
        return
    daemon = kiln.testing.Daemon()
    try:
        yield daemon.socket
    finally:
        daemon.stop()


@pytest.fixture
def kilnd(_session_daemon):
    """The socket of the session's kilnd, set as the client's daemon for this test (a test
    before may have pointed the client elsewhere)."""
    kiln.set_socket(_session_daemon)
    return _session_daemon
