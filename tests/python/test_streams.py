"""Which stream an op launches on (kiln._framework.stream_of), without a GPU."""
import pytest

from fake_dlpack import cuda
from kiln._framework import stream_of


class TorchLikeStream:
    cuda_stream = 0x1234


class CupyLikeStream:
    ptr = 0x5678


def test_explicit_streams():
    x = cuda((4,))
    assert stream_of(0xabc, x) == 0xabc
    assert stream_of(TorchLikeStream(), x) == 0x1234
    assert stream_of(CupyLikeStream(), x) == 0x5678


def test_a_tensor_of_no_known_framework_uses_the_default_stream():
    assert stream_of(None, cuda((4,))) is None


def test_a_stream_of_another_kind_is_refused():
    with pytest.raises(TypeError, match="stream: expected None, an int"):
        stream_of("0", cuda((4,)))
