"""kernels/tools/sass_loops.py, the SASS loop summary: its parser on both disassemblers' forms of
one program, its refusals, and (where nvdisasm is installed: PATH, KILN_NVDISASM or the
`nvidia-cuda-nvdisasm` wheel, which .ci/run installs) a real cubin from ptxas with a loop."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "kernels", "tools", "sass_loops.py")

_spec = importlib.util.spec_from_file_location("sass_loops", SCRIPT)
sass_loops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_loops)

# One kernel, as cuobjdump -sass prints it: a prologue, an outer loop holding an inner loop
# (0x40..0x60), the outer branch back to 0x20, and the padding branch to itself after EXIT.
CUOBJDUMP_FORM = """
\tcode for sm_90a
\t\tFunction : demo
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                         /* 0x00000a00ff017b82 */
        /*0010*/                   MOV R2, RZ ;                                   /* 0x000fe20000000f00 */
        /*0020*/                   IADD3 R2, R2, 0x1, RZ ;                        /* 0x0000000102027810 */
        /*0030*/                   MOV R3, RZ ;                                   /* 0x000fe20000000f00 */
        /*0040*/                   FFMA R4, R4, R4, R4 ;                          /* 0x0000000404047223 */
        /*0050*/                   MUFU.EX2 R5, R4 ;                              /* 0x0000000400057308 */
        /*0060*/               @!P1 BRA 0x40 ;                                    /* 0xfffffff000f49947 */
        /*0070*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ; /* 0x0000000004187 */
        /*0080*/               @!P0 BRA 0x20 ;                                    /* 0xffffff9000e48947 */
        /*0090*/                   EXIT ;                                         /* 0x000000000000794d */
        /*00a0*/                   BRA 0xa0;                                      /* 0xfffffffc00fc7947 */
"""
# The same program as nvdisasm -c prints it: branch targets are labels.
NVDISASM_FORM = """
\t.target\tsm_90a
//--------------------- .text.demo           --------------------------
\t.section\t.text.demo,"ax",@progbits
demo:
.text.demo:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   MOV R2, RZ ;
.L_x_0:
        /*0020*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0030*/                   MOV R3, RZ ;
.L_x_1:
        /*0040*/                   FFMA R4, R4, R4, R4 ;
        /*0050*/                   MUFU.EX2 R5, R4 ;
        /*0060*/              @!P1 BRA `(.L_x_1) ;
        /*0070*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0080*/              @!P0 BRA `(.L_x_0) ;
        /*0090*/                   EXIT ;
.L_x_2:
        /*00a0*/                   BRA `(.L_x_2);
"""


def test_both_forms_give_the_inner_loop_only():
    for text in (CUOBJDUMP_FORM, NVDISASM_FORM):
        summary = sass_loops.summarize(sass_loops.parse(text), top=12)
        assert len(summary) == 1
        kernel = summary[0]
        assert kernel["kernel"] == "demo"
        assert kernel["instructions"] == 11
        # The outer loop holds the inner one; the padding branch to itself is no loop.
        assert [(loop["first"], loop["last"]) for loop in kernel["loops"]] == [("0x40", "0x60")]
        assert kernel["loops"][0]["instructions"] == 3
        assert kernel["loops"][0]["mix"] == {"FFMA": 1, "MUFU": 1, "BRA": 1}


def test_marks_keep_the_tensor_core_and_barrier_instructions_in_order():
    text = CUOBJDUMP_FORM.replace("/*0060*/               @!P1 BRA 0x40 ;", "/*0060*/                   NOP ;")
    kernel = sass_loops.summarize(sass_loops.parse(text), top=2)[0]
    assert [(loop["first"], loop["last"]) for loop in kernel["loops"]] == [("0x20", "0x80")]
    loop = kernel["loops"][0]
    assert loop["marks"] == ["HGMMA.64x128x16.F32.BF16"]
    assert len(loop["mix"]) == 2  # --top


def test_an_inline_spin_wait_does_not_hide_the_main_loop():
    # ptxas may place a stage's try-wait loop inside the main loop: both are reported, the main
    # loop with the wait's instructions in it. An inner loop that does work still hides its outer one.
    text = NVDISASM_FORM.replace("""        /*0040*/                   FFMA R4, R4, R4, R4 ;
        /*0050*/                   MUFU.EX2 R5, R4 ;""", """        /*0040*/                   YIELD ;
        /*0050*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4], R6 ;""")
    kernel = sass_loops.summarize(sass_loops.parse(text), top=12)[0]
    assert [(loop["first"], loop["last"]) for loop in kernel["loops"]] == [("0x20", "0x80"), ("0x40", "0x60")]
    main = kernel["loops"][0]
    assert main["instructions"] == 7
    assert main["marks"] == ["SYNCS.PHASECHK.TRANS64.TRYWAIT", "HGMMA.64x128x16.F32.BF16"]
    assert kernel["loops"][1]["mix"] == {"YIELD": 1, "SYNCS": 1, "BRA": 1}


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def test_refuses_what_it_cannot_read(tmp_path):
    for args, message in (((), "give a cubin or --sass FILE"),
                          (("a.cubin", "--sass", "b.sass"), "give a cubin or --sass FILE"),
                          ((str(tmp_path / "missing.cubin"),), "no such cubin"),
                          (("--sass", str(tmp_path / "x"), "--top", "0"), "--top must be at least 1")):
        result = run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr
    empty = tmp_path / "empty.sass"
    empty.write_text("nothing here\n")
    result = run("--sass", str(empty))
    assert result.returncode == 1
    assert "no kernel found" in result.stderr


LOOP_PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry kiln_sass_loop(.param .u64 out, .param .u32 n)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<3>;
  .reg .f32 %f<2>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  cvta.to.global.u64 %rd2, %rd1;
  mov.f32 %f1, 0f3F800000;
  mov.u32 %r2, 0;
LOOP:
  fma.rn.f32 %f1, %f1, %f1, %f1;
  add.u32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, %r1;
  @%p1 bra LOOP;
  st.global.f32 [%rd2], %f1;
  ret;
}
"""


def test_a_real_cubin_from_ptxas(tmp_path):
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not os.path.exists(ptxas):
        pytest.skip("no ptxas (the CUDA toolkit)")
    nvdisasm = os.environ.get("KILN_NVDISASM") or sass_loops.locate_nvdisasm()
    if nvdisasm is None:
        pytest.skip("no nvdisasm: python3 -m pip install nvidia-cuda-nvdisasm (as .ci/run does)")
    (tmp_path / "loop.ptx").write_text(LOOP_PTX)
    subprocess.run([ptxas, "-arch=sm_90", str(tmp_path / "loop.ptx"), "-o", str(tmp_path / "loop.cubin")],
                   check=True)
    result = run(str(tmp_path / "loop.cubin"), "--nvdisasm", nvdisasm, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert [k["kernel"] for k in summary] == ["kiln_sass_loop"]
    loops = summary[0]["loops"]
    # ptxas unrolls the counted loop by 4; the loop body holds the FMAs.
    assert len(loops) >= 1
    assert any(loop["mix"].get("FFMA", 0) >= 1 and loop["mix"].get("BRA") == 1 for loop in loops)
