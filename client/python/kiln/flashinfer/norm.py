"""flashinfer.norm's names on Kiln's RMSNorm (kiln.rms_norm, kiln.fused_add_rms_norm).

enable_pdl (programmatic dependent launch) only lets FlashInfer's kernel start early behind
the previous one; it never changes a result, so any value is accepted and Kiln launches
normally. Kiln has no (1 + weight) Gemma form: gemma_rmsnorm and gemma_fused_add_rmsnorm are
here so that the switch fails with a clear message instead of an AttributeError."""
from .. import norm as _norm


def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    """out = input / sqrt(mean(input^2) + eps) * weight over the last dim (2-D or 3-D input);
    out is allocated like input when None. Returns out."""
    return _norm.rms_norm(input, weight, eps, out=out)


def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    """In place: residual += input, then input = rmsnorm(residual, weight, eps). Returns None."""
    _norm.fused_add_rms_norm(input, residual, weight, eps)


def _no_gemma(api):
    # Adding 1 to a bf16/fp16 weight before calling rmsnorm would round differently from
    # FlashInfer's (1 + weight) in fp32, so there is no exact way to offer it.
    raise NotImplementedError(
        f"kiln.flashinfer.{api}: the Gemma form (weight applied as 1 + weight) is not supported by Kiln; "
        f"Kiln's RMSNorm multiplies by weight (rmsnorm / fused_add_rmsnorm)")


def gemma_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    """Not supported by Kiln: raises NotImplementedError."""
    _no_gemma("gemma_rmsnorm")


def gemma_fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    """Not supported by Kiln: raises NotImplementedError."""
    _no_gemma("gemma_fused_add_rmsnorm")
