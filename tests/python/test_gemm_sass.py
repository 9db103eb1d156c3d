"""The gemm kernels' K loop and epilogue in machine code: cubins the session's kilnd compiles with NVRTC,
fetched with the `kiln get` CLI of the build tree, summarized by kernels/tools/sass_loops.py.
The loop that issues the wgmmas keeps its descriptors and ring arithmetic in uniform registers
(no R2UR in it: a value ptxas cannot prove warp-uniform moves them to vector registers, as the
reverted persistent prefill kernel showed) and stays within its instruction budget (the figures
of docs/kernels-gemm.md, about 5 % above what CUDA 13.0's NVRTC makes). Needs nvdisasm
(NVIDIA's wheel, which .ci/run installs) and the CLI: skipped, with the reason, without."""
import importlib.util
import os
import re
import subprocess

import pytest

from kiln import _build_info

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("sass_loops", os.path.join(ROOT, "kernels", "tools", "sass_loops.py"))
sass_loops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_loops)

# (spec as `kiln get` takes it, most instructions the K loop may have, R2UR it may have).
# Measured 2026-12-06 (nvdisasm 13.5): 71, 261, 141, 246, 150, 66; before the uniform K loop 98,
# 343, 202, 318, 200, 96 with 8-32 R2UR each. The fp8 tiles of two 128-column halves have 2:
# the halves' B scales, read a K block ahead (one value for the whole tile), moved to uniform
# registers for their products; no descriptor or ring value.
CASES = [
    (["gemm", "dtype=bf16", "tile_n=256"], 75, 0),
    (["fp8_gemm", "tile_n=256"], 274, 2),
    (["fp8_gemm", "tile_n=128"], 148, 0),
    (["grouped_fp8_gemm", "tile_n=256"], 258, 2),
    (["grouped_fp8_gemm_masked", "tile_m=64", "tile_n=128"], 158, 0),
    (["grouped_gemm", "dtype=bf16", "tile_n=256"], 70, 0),
]


def k_loop(cubin, nvdisasm):
    """The smallest loop of the cubin's kernel that holds wgmmas (HGMMA, QGMMA): the K loop."""
    run = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True)
    kernels = sass_loops.summarize(sass_loops.parse(run.stdout), top=1000)
    assert len(kernels) == 1
    loops = [loop for loop in kernels[0]["loops"] if any(m.startswith(("HGMMA", "QGMMA")) for m in loop["marks"])]
    assert loops, f"no loop with wgmmas in {kernels[0]['kernel']}"
    return min(loops, key=lambda loop: loop["instructions"])


def fetch_cubin(kilnd, tmp_path, spec):
    """(the sm_90a cubin of `spec` from the session's kilnd, nvdisasm); skips, with the reason,
    without nvdisasm or the build tree's CLI."""
    nvdisasm = os.environ.get("KILN_NVDISASM") or sass_loops.locate_nvdisasm()
    if nvdisasm is None:
        pytest.skip("no nvdisasm: python3 -m pip install nvidia-cuda-nvdisasm (as .ci/run does)")
    cli = os.path.join(_build_info.BUILD_DIR, "client", "kiln") if _build_info.BUILD_DIR else ""
    if not os.access(cli, os.X_OK):
        pytest.skip(f"no kiln CLI in the build tree ({cli!r}): the package was not built from one")
    cubin = tmp_path / "k.cubin"
    fetched = subprocess.run([cli, "get", *spec, "--arch", "sm_90a", "--out", str(cubin)], capture_output=True,
                             text=True, env={**os.environ, "KILN_SOCKET": kilnd}, timeout=300)
    assert fetched.returncode == 0, fetched.stderr
    return cubin, nvdisasm


@pytest.mark.parametrize("spec,budget,r2ur", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_the_k_loop_stays_uniform_and_within_budget(kilnd, tmp_path, spec, budget, r2ur):
    cubin, nvdisasm = fetch_cubin(kilnd, tmp_path, spec)
    loop = k_loop(cubin, nvdisasm)
    assert loop["mix"].get("R2UR", 0) <= r2ur, loop["mix"]
    assert loop["instructions"] <= budget, (loop["instructions"], loop["mix"])


# The register epilogue's common case (gemm_sm90.cuh, Epilogue: the grouped fp8 kernels, no bias or
# C, rows and columns inside): a consumer's values go out through two row pointers at fixed
# offsets, one per row of the thread: two base registers that each store at 0, 0x10, .. (a column
# group of 8 16-bit values each 16 bytes on: 32 groups at tile_n 256, 16 at 128). The general
# loop computes every address. (spec, column groups of the tile)
EPILOGUE_CASES = [(["grouped_fp8_gemm", "tile_n=256"], 32),
                  (["grouped_fp8_gemm_masked", "tile_m=64", "tile_n=128"], 16)]


def stores_by_base(cubin, nvdisasm):
    """{base register: [STG offsets]} over the cubin's kernel."""
    run = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True)
    by_base = {}
    for line in run.stdout.splitlines():
        match = re.search(r"\bSTG\.E\S*\s+desc\[UR\d+\]\[(R\d+)\.64(?:\+(0x[0-9a-f]+))?\]", line)
        if match:
            by_base.setdefault(match.group(1), []).append(int(match.group(2) or "0", 16))
    return by_base


@pytest.mark.parametrize("spec,groups", EPILOGUE_CASES, ids=[" ".join(c[0]) for c in EPILOGUE_CASES])
def test_the_common_epilogue_stores_at_fixed_offsets(kilnd, tmp_path, spec, groups):
    cubin, nvdisasm = fetch_cubin(kilnd, tmp_path, spec)
    by_base = stores_by_base(cubin, nvdisasm)
    fixed = [base for base, offsets in by_base.items() if {16 * j for j in range(groups)} <= set(offsets)]
    assert len(fixed) >= 2, {base: sorted(offsets) for base, offsets in by_base.items()}
