"""The device workspace of a plan: allocated once, when the plan is made, so that the run step
allocates nothing (CUDA-graph capture replays it with the same buffer)."""
import sys

from ._errors import InvalidArgument


def plan_workspace(api, nbytes, workspace, dtype, device):
    """The workspace a plan's runs use: `workspace` when given (any DLPack tensor of at least
    nbytes bytes, 16-byte aligned), None when the plan needs none, else a torch uint8 tensor
    when the caller uses torch (a torch dtype, or torch imported)."""
    if workspace is not None or nbytes == 0:
        return workspace
    torch = sys.modules.get("torch")
    if torch is None:
        raise InvalidArgument(
            f"{api}: workspace: this plan needs {nbytes} bytes of device workspace and torch is not in use to "
            f"allocate it: pass workspace= (a device buffer of at least {nbytes} bytes, 16-byte aligned)", 1)
    where = "cuda" if device is None or device < 0 else f"cuda:{device}"
    return torch.empty(nbytes, dtype=torch.uint8, device=where)
