"""Test helpers: the one GPU capability check (requires) and a real kilnd for a test session.

    import kiln.testing
    @kiln.testing.requires(arch="sm_90a")       # skipped, with the reason, elsewhere
    def test_gemm(kilnd): ...

GPU tests compare with torch, so a GPU requirement is also a torch requirement. pytest is
imported here only (not by `import kiln`).
"""
import functools
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import kiln

from . import _build_info


@functools.lru_cache(maxsize=None)
def gpu_capability():
    """((major, minor), None) of CUDA device 0, or (None, why not) without torch, a driver or a GPU."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed (the GPU tests compare with torch)"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU (torch.cuda.is_available() is False)"
    return torch.cuda.get_device_capability(0), None


def _parse_arch(arch):
    """"sm_90a" -> (9, 0, True); "sm_80" -> (8, 0, False)."""
    digits = arch.removeprefix("sm_")
    specific = digits.endswith("a")
    digits = digits.rstrip("a")
    return int(digits[:-1]), int(digits[-1]), specific


def missing(arch=None, gpus=1):
    """Why a test needing `gpus` CUDA GPUs (of `arch`) cannot run here, or None when it can. An
    arch ending in "a" (sm_90a: Hopper's wgmma/TMA kernels) needs exactly that compute
    capability; others need at least it."""
    cap, why = gpu_capability()
    if cap is None:
        return why
    if arch is not None:
        major, minor, specific = _parse_arch(arch)
        ok = cap == (major, minor) if specific else cap >= (major, minor)
        if not ok:
            return f"needs {arch}; device 0 is sm_{cap[0]}{cap[1]}"
    if gpus > 1:
        import torch
        if torch.cuda.device_count() < gpus:
            return f"needs {gpus} GPUs; this machine has {torch.cuda.device_count()}"
    return None


def requires(arch=None, gpus=1):
    """A pytest mark: skip (with the reason) unless torch and `gpus` CUDA GPUs (of `arch`) are here."""
    why = missing(arch, gpus)
    return pytest.mark.skipif(why is not None, reason=why or "")


def has_driver():
    """True when libcuda.so.1 can be loaded (a GPU machine), without initializing CUDA."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def kilnd_path():
    """kilnd of the build tree the package was built against (KILN_TEST_KILND overrides)."""
    path = os.environ.get("KILN_TEST_KILND")
    if not path and _build_info.BUILD_DIR:
        path = os.path.join(_build_info.BUILD_DIR, "server", "kilnd")
    if not path:
        path = shutil.which("kilnd")
    return path


def kernels_dir():
    """The checkout's kernels/ (KILN_TEST_KERNELS_DIR overrides): the editable loop compiles the
    sources being edited."""
    return os.environ.get("KILN_TEST_KERNELS_DIR") or os.path.join(_build_info.CHECKOUT, "kernels")


class Daemon:
    """A real kilnd in a temporary folder (socket, cache, generated sources), stopped by stop().
    Once it answers, the client is pointed at it (kiln.connect); `socket` is its path."""

    # The developer's settings must not reach the daemon under test.
    _UNSET = ("KILN_SOCKET", "KILN_CACHE_DIR", "KILN_GEN_DIR", "KILN_KERNELS_DIR", "KILN_DISABLE_JIT", "KILN_NO_CACHE",
              "KILN_ARCH_LIST", "KILN_LISTEN", "KILN_INSECURE", "KILN_TLS_CERT", "KILN_TLS_KEY", "KILN_TLS_CLIENT_CA")

    def __init__(self, kilnd=None, kernels=None, extra_args=(), ready_timeout=30.0):
        self.kilnd = kilnd or kilnd_path()
        if not self.kilnd or not os.path.exists(self.kilnd):
            raise FileNotFoundError(f"kilnd not found ({self.kilnd!r}): build it (ninja -C build server/kilnd) or set "
                                    "KILN_TEST_KILND")
        self.root = tempfile.mkdtemp(prefix="kiln-py-")
        self.socket = os.path.join(self.root, "run", "kilnd.sock")
        self.log_path = os.path.join(self.root, "kilnd.log")
        env = {k: v for k, v in os.environ.items() if k not in self._UNSET}
        argv = [self.kilnd, "--socket", self.socket, "--cache-dir", os.path.join(self.root, "cache"), "--gen-dir",
                os.path.join(self.root, "gen"), "--kernels-dir", kernels or kernels_dir(), *extra_args]
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                        stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + ready_timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"kilnd exited with {self.process.returncode}; its log:\n{self.log()}")
            if os.path.exists(self.socket):
                try:
                    kiln.connect(self.socket, 1000)
                    break
                except kiln.Unavailable:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kilnd did not answer within {ready_timeout} s; its log:\n{self.log()}")
            time.sleep(0.05)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
