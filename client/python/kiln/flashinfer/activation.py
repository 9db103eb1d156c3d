"""flashinfer.activation's gated activations on Kiln's (kiln.silu_and_mul, ...): input
[..., 2d] = [x | y], out [..., d] allocated when None. enable_pdl is accepted and has no
effect (it only changes how FlashInfer launches, never a result)."""
from .. import activation as _activation


def silu_and_mul(input, out=None, enable_pdl=None):
    """out = silu(x) * y; returns out."""
    return _activation.silu_and_mul(input, out=out)


def gelu_tanh_and_mul(input, out=None, enable_pdl=None):
    """out = gelu_tanh(x) * y (tanh approximation); returns out."""
    return _activation.gelu_tanh_and_mul(input, out=out)


def gelu_and_mul(input, out=None, enable_pdl=None):
    """out = gelu(x) * y (exact, erf); returns out."""
    return _activation.gelu_and_mul(input, out=out)
