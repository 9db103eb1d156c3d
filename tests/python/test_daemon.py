"""The connection to kilnd: a real daemon from the build tree answers; a missing one is
Unavailable, with the library's message naming the socket."""
import os
import subprocess
import sys
import tempfile

import pytest

import kiln


def test_connect_to_a_running_kilnd(kilnd):
    kiln.connect(kilnd, 5000)


def test_a_missing_daemon_is_unavailable():
    missing = os.path.join(tempfile.mkdtemp(prefix="kiln-py-"), "no-kilnd.sock")
    try:
        with pytest.raises(kiln.Unavailable) as info:
            kiln.connect(missing, 500)
        assert info.value.code == 4 and info.value.status_name == "UNAVAILABLE"
        assert f"kilnd is not reachable at unix:{missing}" in str(info.value)
        assert "Is kilnd running?" in str(info.value)
    finally:
        kiln.set_socket(None)


def test_set_mode_refuses_an_unknown_word_and_keeps_the_mode():
    kiln.set_mode("daemon")
    try:
        with pytest.raises(kiln.InvalidArgument) as info:
            kiln.set_mode("sometimes")
        assert 'kiln_set_mode mode="sometimes" is not one of auto, daemon, embedded' in str(info.value)
        with pytest.raises(TypeError):
            kiln.set_mode(3)
        assert kiln.describe_mode().startswith("daemon at unix:")
    finally:
        kiln.set_mode(None)


def test_with_no_daemon_auto_mode_is_the_embedded_engine_on_its_cache_folder():
    # A fresh process: the embedded engine reads its settings once, when it starts.
    folder = tempfile.mkdtemp(prefix="kiln-py-mode-")
    env = dict(os.environ, KILN_SOCKET=os.path.join(folder, "no-kilnd.sock"), KILN_CACHE_DIR=os.path.join(folder, "cache"))
    env.pop("KILN_MODE", None)
    script = "import kiln; print(kiln.describe_mode()); kiln.set_mode('daemon'); print(kiln.describe_mode())"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    embedded, daemon = out.stdout.splitlines()
    assert embedded.startswith("embedded: compiling in this process"), embedded
    assert os.path.join(folder, "cache") in embedded and "no daemon at" in embedded
    assert daemon.startswith(f"daemon at unix:{folder}/no-kilnd.sock"), daemon
