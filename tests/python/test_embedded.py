"""The embedded engine from Python, with no daemon and no GPU: one spec of every op family
compiled through NVRTC in a fresh process (KILN_MODE=embedded, a cache folder of its own), then
served from that folder's disk cache to the next process; kiln.prefetch's refusals."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

import kiln
import kiln.testing

# One spec per family, with the arch its kernels need (gemm and prefill's Hopper tile: sm_90a).
SPECS = [
    ("rmsnorm", "sm_90", {"dtype": "bf16", "hidden": 4096}),
    ("silu_and_mul", "sm_90", {"dtype": "bf16"}),
    ("apply_rope", "sm_90", {"dtype": "bf16", "rotary_dim": 128}),
    ("append_paged_kv", "sm_90", {"dtype": "bf16", "head_dim": 128}),
    ("batch_decode", "sm_90", {"dtype": "bf16", "head_dim": 128, "group": 4, "page_size": 16}),
    ("batch_prefill_ragged", "sm_90a", {"dtype": "bf16", "head_dim": 128, "group": 4, "causal": 1}),
    ("top_k_top_p_sampling", "sm_90", {}),
    ("gemm", "sm_90a", {"dtype": "bf16"}),
]

CHILD = """
import json, sys, kiln
specs = json.loads(sys.argv[1])
print(kiln.describe_mode())
for op, arch, params in specs:
    print(json.dumps(kiln.prefetch(op, arch, **params)))
"""


def _run_embedded(folder):
    env = dict(os.environ, KILN_MODE="embedded", KILN_CACHE_DIR=os.path.join(folder, "cache"),
               KILN_KERNELS_DIR=kiln.testing.kernels_dir(), KILN_SOCKET=os.path.join(folder, "no-kilnd.sock"))
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(SPECS)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    return lines[0], [json.loads(line) for line in lines[1:]]


def test_every_family_compiles_in_process_then_comes_from_the_disk_cache():
    folder = tempfile.mkdtemp(prefix="kiln-py-embedded-")
    mode, first = _run_embedded(folder)
    assert mode.startswith("embedded: compiling in this process, cache " + os.path.join(folder, "cache")), mode
    assert [info["origin"] for info in first] == ["compiled"] * len(SPECS), first
    for (op, arch, _), info in zip(SPECS, first):
        assert info["arch"] == arch and info["bytes"] > 0 and len(info["sha256"]) == 64 and len(info["key"]) == 64
    # A second process: the same keys and cubins, from the folder the first one filled.
    _, second = _run_embedded(folder)
    assert [info["origin"] for info in second] == ["disk"] * len(SPECS), second
    assert [(i["key"], i["sha256"]) for i in second] == [(i["key"], i["sha256"]) for i in first]


def test_prefetch_refuses_bad_words_and_passes_the_engines_refusals_on(kilnd):
    with pytest.raises(kiln.InvalidArgument) as info:
        kiln.prefetch("rmsnorm", "sm_90", dtype="bf16", hidden="40 96")
    assert "hidden='40 96' is empty or holds white space" in str(info.value)
    with pytest.raises(kiln.InvalidArgument) as info:
        kiln.prefetch("rmsnorm", "", dtype="bf16", hidden=4096)
    assert "arch is NULL or empty" in str(info.value)
    with pytest.raises(kiln.InvalidArgument) as info:
        kiln.prefetch("rmsnorm", "sm_90", dtype="int7", hidden=4096)
    assert "int7" in str(info.value)
    through_daemon = kiln.prefetch("rmsnorm", "sm_90", dtype="bf16", hidden=4096)
    assert through_daemon["uri"] == "rmsnorm_bf16_h4096" and through_daemon["origin"] in ("compiled", "memory")
