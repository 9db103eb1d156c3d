#!/usr/bin/env python3
"""The machine code of a cubin, summarized by loop: for each kernel, its instruction count, and
for each innermost loop (a backward branch and the instructions it jumps back over) its size and
its opcode mix. What a kernel change did to a main loop (the wgmmas of a k step, the softmax's
MUFU and FMNMX, a fence or a barrier that crept in) can be read here without a GPU.

The SASS comes from nvdisasm (or cuobjdump -sass, which runs nvdisasm). The CUDA toolkit of the
CPU machines has neither (TOOLCHAIN.md); NVIDIA's `nvidia-cuda-nvdisasm` wheel on PyPI carries
nvdisasm:

    python3 -m pip install --target /tmp/nvdisasm nvidia-cuda-nvdisasm
    kiln get gemm dtype=bf16 tile_n=256 --arch sm_90a --out /tmp/gemm.cubin
    python3 kernels/tools/sass_loops.py /tmp/gemm.cubin --nvdisasm /tmp/nvdisasm/nvidia/cu13/bin/nvdisasm

Without --nvdisasm the script tries `nvdisasm` on PATH, then the wheel's binary wherever Python
can import `nvidia` from. --sass FILE reads SASS text already dumped (nvdisasm's or
cuobjdump -sass's) instead.
"""
import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys

# "        /*1350*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR20], R24, UP0 ;"
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)(\.[^\s]*)?\s*([^;]*);")
# A kernel's start: cuobjdump's "Function : name", nvdisasm's ".text.name:".
_FUNCTION = re.compile(r"^\s*(?:Function\s*:\s*(\S+)|\.text\.(\S+):\s*$)")
# nvdisasm names branch targets by label ("BRA `(.L_x_3)"); cuobjdump by address ("BRA 0x1060").
_LABEL = re.compile(r"^\s*(\.L\w+):\s*$")
_BRANCH_TARGET = re.compile(r"(0x[0-9a-f]+|`\((\.L\w+)\))\s*$")


def parse(sass_text):
    """{kernel: [(address, opcode, full mnemonic, operands), ...]} in address order; branch
    operands that name a label are rewritten to the label's address."""
    kernels = collections.OrderedDict()
    labels = {}
    pending = []  # labels waiting for the next instruction's address
    current = None
    for line in sass_text.splitlines():
        function = _FUNCTION.match(line)
        if function:
            current = kernels.setdefault(function.group(1) or function.group(2), [])
            continue
        label = _LABEL.match(line)
        if label:
            pending.append(label.group(1))
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            address = int(instruction.group(1), 16)
            for name in pending:
                labels[name] = address
            pending = []
            opcode = instruction.group(3)
            mnemonic = opcode + (instruction.group(4) or "")
            current.append((address, opcode, mnemonic, instruction.group(5).strip()))
    for instructions in kernels.values():
        for n, (address, opcode, mnemonic, operands) in enumerate(instructions):
            target = _BRANCH_TARGET.search(operands)
            if opcode == "BRA" and target and target.group(2) in labels:
                operands = operands[:target.start()] + f"0x{labels[target.group(2)]:x}"
                instructions[n] = (address, opcode, mnemonic, operands)
    return kernels


# What a spin-wait loop is made of: an mbarrier try-wait (SYNCS), a YIELD or NOP, the branch.
_WAIT_OPCODES = {"SYNCS", "YIELD", "NOP", "BRA"}


def loops(instructions):
    """Innermost loops: (first address, branch address) of each backward branch whose range holds
    no other backward branch's range, in address order. A spin-wait loop (only a try-wait, YIELD
    or NOP and its branch) that ptxas placed inside a loop does not make that loop an outer one:
    a main loop that waits for its pipeline stage in line is still the loop to read. A branch to
    itself (the `BRA` that pads a kernel after its EXIT) is not a loop."""
    ranges = []
    for address, opcode, _, operands in instructions:
        if opcode != "BRA":
            continue
        target = _BRANCH_TARGET.search(operands)
        if target and target.group(1).startswith("0x") and int(target.group(1), 16) < address:
            ranges.append((int(target.group(1), 16), address))

    def is_wait(r):
        return all(i[1] in _WAIT_OPCODES for i in instructions if r[0] <= i[0] <= r[1])

    def holds_another(r):
        return any(o != r and r[0] <= o[0] and o[1] <= r[1] and not is_wait(o) for o in ranges)

    inner = [r for r in ranges if not holds_another(r)]
    return sorted(set(inner))


def summarize(kernels, top):
    out = []
    for name, instructions in kernels.items():
        kernel = {"kernel": name, "instructions": len(instructions), "loops": []}
        for first, last in loops(instructions):
            body = [i for i in instructions if first <= i[0] <= last]
            mix = collections.Counter(i[1] for i in body)
            kernel["loops"].append({
                "first": f"0x{first:x}",
                "last": f"0x{last:x}",
                "instructions": len(body),
                "mix": dict(mix.most_common(top)),
                # The tensor-core, barrier and fence instructions with their full form.
                "marks": [i[2] for i in body if re.match(r"(H|Q|I)GMMA|WARPGROUP|MEMBAR|FENCE|BAR$|SYNCS", i[1])],
            })
        out.append(kernel)
    return out


def locate_nvdisasm():
    """nvdisasm on PATH, else the `nvidia-cuda-nvdisasm` wheel's wherever Python imports from;
    None if neither is there."""
    on_path = shutil.which("nvdisasm")
    if on_path:
        return on_path
    for entry in sys.path:
        for found in sorted(glob.glob(os.path.join(entry or ".", "nvidia", "cu*", "bin", "nvdisasm"))):
            return found
    return None


def find_nvdisasm(given):
    found = given or locate_nvdisasm()
    if found is None:
        sys.exit("sass_loops.py: no nvdisasm: pass --nvdisasm, or `python3 -m pip install nvidia-cuda-nvdisasm` "
                 "(see this script's docstring)")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cubin", nargs="?", help="a cubin (kiln get OP ... --out FILE)")
    parser.add_argument("--sass", help="read this SASS text (nvdisasm's or cuobjdump -sass's) instead of a cubin")
    parser.add_argument("--nvdisasm", help="the nvdisasm to run (default: PATH, then the pip wheel's)")
    parser.add_argument("--top", type=int, default=12, help="opcodes shown per loop (default 12)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    if (args.cubin is None) == (args.sass is None):
        parser.error("give a cubin or --sass FILE (one of them)")
    if args.top < 1:
        parser.error(f"--top must be at least 1, found {args.top}")
    if args.sass is not None:
        with open(args.sass) as f:
            text = f.read()
    else:
        if not os.path.isfile(args.cubin):
            parser.error(f"no such cubin: {args.cubin}")
        run = subprocess.run([find_nvdisasm(args.nvdisasm), "-c", args.cubin], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"sass_loops.py: nvdisasm -c {args.cubin} failed ({run.returncode}): {run.stderr.strip()}")
        text = run.stdout
    kernels = parse(text)
    if not kernels:
        sys.exit("sass_loops.py: no kernel found in the SASS (is it a cubin with machine code?)")
    summary = summarize(kernels, args.top)
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    for kernel in summary:
        print(f"{kernel['kernel']}: {kernel['instructions']} instructions, {len(kernel['loops'])} innermost loop(s)")
        for loop in kernel["loops"]:
            mix = ", ".join(f"{op} {n}" for op, n in loop["mix"].items())
            print(f"  loop {loop['first']}..{loop['last']}: {loop['instructions']} instructions: {mix}")
            if loop["marks"]:
                print(f"    in order: {' | '.join(loop['marks'])}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head: the rest is not wanted
        sys.exit(0)
