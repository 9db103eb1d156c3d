"""How kiln.flashinfer refuses what Kiln cannot do: a NotImplementedError naming the FlashInfer
function, the argument, the value given and what Kiln takes instead. Every such check runs
before any tensor is touched, so a refused call has done nothing, and an accepted call never
computes something other than what FlashInfer would."""


def describe(value):
    """The value for a message: tensors by type and shape (their repr can be huge), else repr."""
    if isinstance(value, (tuple, list)):
        inner = ", ".join(describe(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, (int, float, str)):
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    return repr(value)


def refuse(api, name, value, supported):
    """Raises NotImplementedError: `api` is the FlashInfer name (rmsnorm,
    BatchDecodeWithPagedKVCacheWrapper.plan, ...), `supported` says what Kiln takes."""
    raise NotImplementedError(f"kiln.flashinfer.{api}: {name}={describe(value)} is not supported by Kiln; "
                              f"{supported}")


def only_none(api, name, value, supported):
    """Refuses any value but None (an optional tensor or setting Kiln has no use for)."""
    if value is not None:
        refuse(api, name, value, supported)


def only(api, name, value, allowed, supported):
    """Refuses a plain (non-tensor) value that is not one of `allowed`."""
    if hasattr(value, "__dlpack__") or value not in allowed:
        refuse(api, name, value, supported)
