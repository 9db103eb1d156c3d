"""One rank of test_comm.py's multi-GPU tests, started once per GPU with kiln-launch's
environment (KILN_RANK, KILN_WORLD_SIZE, KILN_COMM_ADDRESS, KILN_LOCAL_RANK) and KILN_SOCKET.

    python3 comm_rank.py check     # all_reduce (staged, registered, both algorithms) and
                                   # all_reduce_add_rms_norm against torch; prints "rank R ok"
    python3 comm_rank.py lost      # rank 1 exits at once; rank 0's all_reduce must fail (its
                                   # synchronize raises) instead of hanging

Every rank makes the same inputs from the same seeds, so each can compute the full sum."""
import os
import sys

import torch

import kiln
import torch_reference as ref

EPS = 1e-6


def inputs(rank, n, dtype, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed * 100 + rank)
    return ref.uniform((n,), dtype, g)


def check(comm):
    world = comm.world_size
    for dtype_name in ("fp32", "fp16", "bf16"):
        dtype = ref.torch_dtype(dtype_name)
        for n in (1, 1000, 3 << 20):  # tiny, awkward, and past the one-shot crossover
            for algorithm in ("auto", "one_shot", "two_shot"):
                x = inputs(comm.rank, n, dtype, n)
                want = sum(inputs(r, n, dtype, n).double() for r in range(world))
                out = torch.full_like(x, float("nan"))
                assert comm.all_reduce(x, out=out, algorithm=algorithm) is out
                tol = ref.TOLERANCE[dtype_name] * world
                torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
    # In place, from a registered buffer (the peers read it without a staging copy).
    reg = comm.registered_empty((4096,), "bf16")
    assert reg.dtype == torch.bfloat16 and reg.device.index == comm.device
    reg.copy_(inputs(comm.rank, 4096, torch.bfloat16, 7))
    want = sum(inputs(r, 4096, torch.bfloat16, 7).double() for r in range(world))
    out = comm.all_reduce(reg)  # allocated
    torch.testing.assert_close(out.double(), want, atol=3.2e-2 * world, rtol=3.2e-2)
    try:
        comm.close()
        raise AssertionError("close() with a registered tensor alive was accepted")
    except kiln.FailedPrecondition as e:
        assert "registered tensor" in str(e), e
    del reg
    # The layer end: residual += sum(input); out = rms_norm(residual) * weight.
    for tokens, hidden in ((1, 4096), (7, 5120)):
        g = torch.Generator(device="cuda")
        g.manual_seed(hidden)
        residual = ref.uniform((tokens, hidden), torch.bfloat16, g)
        weight = ref.uniform((hidden,), torch.bfloat16, g)
        parts = [inputs(r, tokens * hidden, torch.bfloat16, hidden).view(tokens, hidden) for r in range(world)]
        want_residual = residual.double() + sum(p.double() for p in parts)
        want = ref.rms_norm(want_residual.to(torch.bfloat16), weight, EPS)
        out = comm.all_reduce_add_rms_norm(parts[comm.rank], residual, weight, EPS)
        torch.testing.assert_close(residual.double(), want_residual, atol=6.4e-2, rtol=3.2e-2)
        torch.testing.assert_close(out.float(), want.float(), atol=6.4e-2, rtol=3.2e-2)
    comm.synchronize()
    comm.check()


def main():
    what = sys.argv[1]
    torch.cuda.set_device(int(os.environ["KILN_LOCAL_RANK"]))
    comm = kiln.comm.Communicator.from_env(kernel_timeout_ms=3000)
    if what == "check":
        check(comm)
    elif what == "lost":
        if comm.rank == 1:
            os._exit(0)
        x = torch.ones(1 << 20, device="cuda")
        try:
            comm.all_reduce(x, out=x)
            comm.synchronize()
            raise AssertionError("the all_reduce with a lost peer succeeded")
        except kiln.KilnError as e:
            print(f"rank {comm.rank} saw the lost peer: {type(e).__name__}: {e}", flush=True)
    print(f"rank {comm.rank} ok", flush=True)


if __name__ == "__main__":
    main()
