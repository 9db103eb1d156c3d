"""The package itself: it imports without a GPU and without torch, its errors carry the C ABI's
status codes, and every C function of the installed headers has its Python binding."""
import os
import re
import subprocess
import sys

import pytest

import kiln
import kiln.testing
from kiln import _build_info, _errors, _native


def test_import_needs_no_torch_and_no_gpu():
    code = "import sys, kiln; print(kiln.__version__, 'torch' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [kiln.__version__, "False", "False"]


def test_library_and_headers_agree():
    assert kiln.version() == kiln.__version__
    with open(os.path.join(_build_info.CHECKOUT, "VERSION")) as f:
        assert kiln.__version__ == f.read().strip()


@pytest.mark.parametrize("cls", _errors.BY_CODE[1:], ids=lambda c: c.__name__)
def test_error_classes_match_the_c_status_codes(cls):
    # The class of each kiln_status has its number and kiln_status_name's spelling.
    words = re.findall("[A-Z][a-z]*", cls.__name__)
    assert _native.status_name(cls.code) == "_".join(w.upper() for w in words)
    err = cls("kiln_x: a message", cls.code)
    assert isinstance(err, kiln.KilnError) and err.code == cls.code and str(err) == "kiln_x: a message"


def test_invalid_argument_is_also_a_value_error():
    assert issubclass(kiln.InvalidArgument, ValueError)


def c_functions():
    """Every `KILN_API ... kiln_<name>(` of the public headers (comments stripped)."""
    include = os.path.join(_build_info.CHECKOUT, "client", "include")
    names = set()
    for folder, _, files in os.walk(include):
        for name in files:
            if name.endswith(".h"):
                with open(os.path.join(folder, name)) as f:
                    text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
                names.update(re.findall(r"KILN_API\s+[\w\s\*]*?\b(kiln_\w+)\s*\(", text))
    return names


# C functions whose binding has another name, or that Python reaches through another one.
BOUND_AS = {
    "kiln_last_error": "(every failed call's message)", "kiln_status_name": "status_name",
    "kiln_version": "version", "kiln_set_socket": "connect", "kiln_connect": "connect",
    "kiln_batch_decode_plan_create": "decode_plan", "kiln_batch_decode_plan_workspace_bytes": "decode_plan",
    "kiln_batch_decode_plan_destroy": "decode_plan",
    "kiln_batch_prefill_plan_create_ragged": "prefill_plan_ragged",
    "kiln_batch_prefill_plan_create_paged": "prefill_plan_paged",
    "kiln_batch_prefill_plan_workspace_bytes": "prefill_plan_ragged",
    "kiln_batch_prefill_plan_destroy": "prefill_plan_ragged",
    "kiln_batch_prefill_ragged": "prefill_ragged", "kiln_batch_prefill_paged": "prefill_paged",
    # kiln.comm.Communicator
    "kiln_comm_options_init": "comm_create", "kiln_comm_create_from_env": "comm_create",
    "kiln_comm_rank": "comm_info", "kiln_comm_world_size": "comm_info", "kiln_comm_device": "comm_info",
}


def test_every_c_function_has_a_binding():
    functions = c_functions()
    assert "kiln_rms_norm" in functions and len(functions) > 30
    missing = []
    for name in sorted(functions):
        bound = BOUND_AS.get(name, name.removeprefix("kiln_"))
        if not bound.startswith("(") and not hasattr(_native, bound):
            missing.append(f"{name} (expected kiln._native.{bound})")
    assert not missing, "C functions without a Python binding: " + ", ".join(missing)


def test_every_native_op_has_a_public_function():
    public = set(kiln.__all__)
    internal = {"connect", "version", "status_name", "decode_plan", "prefill_plan_ragged", "prefill_plan_paged",
                "prefill_ragged", "prefill_paged"}
    for name in dir(_native):
        if name.startswith("_") or name in internal or not callable(getattr(_native, name)):
            continue
        if name.startswith("comm_") or name.startswith("all_reduce"):  # kiln.comm.Communicator's methods
            method = {"comm_create": "__init__", "comm_info": "__init__", "comm_destroy": "close",
                      "comm_synchronize": "synchronize", "comm_async_error": "check",
                      "comm_alloc_registered": "registered_empty"}.get(name, name)
            assert callable(getattr(kiln.comm.Communicator, method, None)), f"kiln._native.{name}: no method {method}"
            continue
        assert name in public, f"kiln._native.{name} has no public kiln.{name}"
        assert callable(getattr(kiln, name))


def test_requires_reads_arch_names():
    assert kiln.testing._parse_arch("sm_90a") == (9, 0, True)
    assert kiln.testing._parse_arch("sm_100a") == (10, 0, True)
    assert kiln.testing._parse_arch("sm_80") == (8, 0, False)


def test_requires_gives_a_reason_where_it_skips():
    cap, why = kiln.testing.gpu_capability()
    if cap is None:
        assert kiln.testing.missing() == why and ("torch" in why or "GPU" in why)
        assert kiln.testing.requires(arch="sm_90a").kwargs["reason"] == why
    else:
        assert kiln.testing.missing() is None
        assert "needs sm_10a" in kiln.testing.missing(arch="sm_10a")
