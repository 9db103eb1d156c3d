"""kiln.comm: the collectives' Python binding (kiln/comm.h). CPU tests check that bad arguments
get the C++ messages; GPU tests run a world of one rank on any GPU, and two ranks (two processes,
comm_rank.py) where the machine has two GPUs; each skips visibly otherwise."""
import os
import subprocess
import sys

import pytest

import kiln
import kiln.testing

requires_gpu = kiln.testing.requires()
requires_two_gpus = kiln.testing.requires(gpus=2)
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("args,kwargs,error,message", [
    ((0, 9, "@kiln-py"), {}, kiln.InvalidArgument, "world_size must be 1..8, found 9"),
    ((2, 2, "@kiln-py"), {}, kiln.InvalidArgument, "rank must be 0..1, found 2"),
    ((-1, 2, "@kiln-py"), {}, kiln.InvalidArgument, "rank must be 0..1, found -1"),
    ((0, 2, ""), {}, kiln.InvalidArgument, "rendezvous address is empty"),
    ((0, 2, "@kiln-py"), {"buffer_bytes": 1000}, kiln.InvalidArgument, "buffer_bytes must be 1 MiB .. 16 GiB"),
    ((0, 2, "@kiln-py"), {"buffer_bytes": -1}, kiln.InvalidArgument, "buffer_bytes must be 0"),
    ((0, 2, 7), {}, TypeError, "address must be a str"),
    (("0", 2, "@kiln-py"), {}, TypeError, "rank must be an int"),
    ((0, 2, "@kiln-py"), {"device": 0.5}, TypeError, "device must be an int"),
])
def test_bad_arguments_are_refused_with_the_reason(args, kwargs, error, message):
    with pytest.raises(error) as e:
        kiln.comm.Communicator(*args, **kwargs)
    assert message in str(e.value)
    if issubclass(error, kiln.KilnError):
        assert e.value.code == 1  # KILN_ERROR_INVALID_ARGUMENT


def test_from_env_names_the_missing_launcher_variable(monkeypatch):
    for name in ("KILN_RANK", "KILN_WORLD_SIZE", "KILN_COMM_ADDRESS", "KILN_LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(kiln.InvalidArgument, match="KILN_WORLD_SIZE is not set"):
        kiln.comm.Communicator.from_env()
    monkeypatch.setenv("KILN_WORLD_SIZE", "two")
    with pytest.raises(kiln.InvalidArgument, match="KILN_WORLD_SIZE"):
        kiln.comm.Communicator.from_env()


@pytest.mark.skipif(kiln.testing.has_driver(), reason="this machine has a CUDA driver (the GPU tests below run)")
def test_without_a_driver_creation_says_so():
    with pytest.raises(kiln.NoDriver, match="no CUDA driver"):
        kiln.comm.Communicator(0, 1, f"@kiln-py-{os.getpid()}")


@requires_gpu
def test_a_world_of_one_rank_copies_and_refuses_what_it_cannot_do(kilnd):
    import torch
    with kiln.comm.Communicator(0, 1, f"@kiln-py-{os.getpid()}", device=0) as comm:
        assert (comm.rank, comm.world_size, comm.device) == (0, 1, 0)
        assert "world_size=1" in repr(comm)
        g = torch.Generator(device="cuda")
        g.manual_seed(3)
        x = torch.rand(1000, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
        out = comm.all_reduce(x)
        assert out.data_ptr() != x.data_ptr() and torch.equal(out, x)
        assert comm.all_reduce(x, out=x) is x  # in place: nothing to do
        with pytest.raises(kiln.InvalidArgument, match="algorithm 'ring'"):
            comm.all_reduce(x, algorithm="ring")
        with pytest.raises(kiln.InvalidArgument, match="out"):
            comm.all_reduce(x, out=torch.empty(999, device="cuda", dtype=torch.bfloat16))
        with pytest.raises(kiln.InvalidArgument):
            comm.all_reduce(x.cpu())
        with pytest.raises(kiln.Unimplemented, match="world of one rank"):
            comm.registered_empty(1024, "bf16")
        with pytest.raises(kiln.Unimplemented, match="fused_add_rms_norm"):
            comm.all_reduce_add_rms_norm(x.view(1, -1), x.view(1, -1).clone(), x)
        comm.synchronize()
        comm.check()
    with pytest.raises(kiln.FailedPrecondition, match="closed"):
        comm.all_reduce(x)
    comm.close()  # twice: nothing left to free


def _run_ranks(what, kilnd, world=2, timeout=240):
    address = f"@kiln-py-{os.getpid()}-{what}"
    env_base = {**os.environ, "KILN_SOCKET": kilnd, "KILN_WORLD_SIZE": str(world), "KILN_COMM_ADDRESS": address,
                "PYTHONPATH": os.pathsep.join([HERE] + sys.path)}
    ranks = [subprocess.Popen([sys.executable, os.path.join(HERE, "comm_rank.py"), what],
                              env={**env_base, "KILN_RANK": str(r), "KILN_LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outputs = []
    for p in ranks:
        try:
            outputs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in ranks:
                q.kill()
            raise AssertionError(f"the ranks of {what} did not finish in {timeout} s")
    return [p.returncode for p in ranks], outputs


@requires_two_gpus
def test_two_ranks_sum_and_norm_like_torch(kilnd):
    codes, outputs = _run_ranks("check", kilnd)
    assert codes == [0, 0], "\n".join(outputs)
    for r, text in enumerate(outputs):
        assert f"rank {r} ok" in text, text


@requires_two_gpus
def test_a_lost_rank_makes_the_other_fail_instead_of_hanging(kilnd):
    codes, outputs = _run_ranks("lost", kilnd, timeout=120)
    assert codes[0] == 0, outputs[0]
    assert "saw the lost peer" in outputs[0], outputs[0]
