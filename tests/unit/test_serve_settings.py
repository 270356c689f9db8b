"""config.toml [serve]: the Tinker server's limits, read with defaults and refused in one
sentence with file:line; and the limits as the wire reader applies them (by declared shape,
before anything of that size is made)."""

from __future__ import annotations

import numpy as np
import pytest

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.serve_settings import ServeSettings


def test_the_defaults_without_a_file_or_a_serve_table(isolated_home):
    assert ServeSettings.load() == ServeSettings()
    (isolated_home / "config.toml").write_text('[logs]\nbackups = 2\n')
    defaults = ServeSettings.load()
    assert defaults.max_body_bytes == 16 << 20 and defaults.max_num_samples == 128
    assert defaults.max_datums == 1024
    assert defaults.max_tokens == 16384 and defaults.max_sequence_tokens == 32768
    assert defaults.max_tensor_elements == 16 << 20 and defaults.idle_seconds == 3600


def test_each_limit_is_read_from_the_serve_table(isolated_home):
    (isolated_home / "config.toml").write_text(
        '[serve]\nmax_body_bytes = "2MiB"\nmax_datums = 16\nmax_num_samples = 8\n'
        'max_tokens = 64\n'
        'max_sequence_tokens = 512\nmax_tensor_elements = 1000\nidle_seconds = 90\n')
    assert ServeSettings.load() == ServeSettings(
        max_body_bytes=2 << 20, max_datums=16, max_num_samples=8, max_tokens=64, max_sequence_tokens=512,
        max_tensor_elements=1000, idle_seconds=90.0)


@pytest.mark.parametrize("line, names", [
    ("max_num_samples = 0", "max_num_samples must be a whole number of at least 1"),
    ("max_datums = 0", "max_datums must be a whole number of at least 1"),
    ("max_tokens = -5", "max_tokens must be a whole number of at least 1"),
    ("max_sequence_tokens = 1.5", "max_sequence_tokens must be a whole number"),
    ("max_tensor_elements = true", "max_tensor_elements must be a whole number"),
    ('max_body_bytes = "lots"', "max_body_bytes must be a size of at least 4096 bytes"),
    ("max_body_bytes = 10", "max_body_bytes must be a size of at least 4096 bytes"),
    ('idle_seconds = "an hour"', "idle_seconds must be a number of at least 1"),
    ("max_num_sample = 3", "[serve] has no setting 'max_num_sample'"),
])
def test_a_wrong_value_is_one_sentence_with_its_file_and_line(isolated_home, line, names):
    path = isolated_home / "config.toml"
    path.write_text(f'[memory]\nlimit = "8GB"\n\n[serve]\n# what one request may ask\n{line}\n')
    with pytest.raises(UserError) as refused:
        ServeSettings.load()
    sentence = refused.value.message
    assert sentence.startswith(f"{path}:6: ") and names in sentence
    assert sentence.endswith("; fix the file.") and "\n" not in sentence


def test_a_serve_that_is_no_table_is_refused(isolated_home):
    path = isolated_home / "config.toml"
    path.write_text('serve = 3\n')
    with pytest.raises(UserError, match=r":1: serve must be a table"):
        ServeSettings.load()


# -- the limits on the wire ---------------------------------------------------------------------

pb = pytest.importorskip("tinker.proto.tinker_public_pb2")


def request(tokens: bytes = b"\x01\x00\x00\x00" * 4, **tensors) -> bytes:
    message = pb.ForwardBackwardRequest(model_id="m", loss_fn="cross_entropy")
    datum = message.data.add()
    datum.model_input.add().encoded_text.tokens = tokens
    for name, tensor in tensors.items():
        datum.loss_fn_inputs[name].CopyFrom(tensor)
    return message.SerializeToString()


def test_a_token_buffer_that_is_no_whole_number_of_tokens_is_a_sentence():
    from zyquo_tui.server.wire import WireError, read_forward_backward

    with pytest.raises(WireError, match="token chunk of 3 bytes; tokens are int32"):
        read_forward_backward(request(tokens=b"\x01\x02\x03"))


def test_a_datum_over_the_sequence_limit_is_refused_with_the_limit():
    from zyquo_tui.server.wire import WireError, read_forward_backward

    body = request(tokens=b"\x01\x00\x00\x00" * 100)
    assert len(read_forward_backward(body, max_sequence_tokens=100).data[0].tokens) == 100
    with pytest.raises(WireError, match=r"100 tokens.*\(99, config.toml \[serve\] "
                                        r"max_sequence_tokens\)"):
        read_forward_backward(body, max_sequence_tokens=99)


def test_a_request_of_more_datums_than_the_limit_is_refused_before_they_are_read():
    from zyquo_tui.server.wire import WireError, read_forward_backward

    message = pb.ForwardBackwardRequest(model_id="m", loss_fn="cross_entropy")
    for _ in range(5):
        message.data.add().model_input.add().encoded_text.tokens = b"\x01\x00\x00\x00"
    body = message.SerializeToString()
    assert len(read_forward_backward(body, max_datums=5).data) == 5
    with pytest.raises(WireError, match=r"5 datums.*\(4, config.toml \[serve\] max_datums\)"):
        read_forward_backward(body, max_datums=4)


def test_a_sparse_tensor_is_refused_by_its_declared_shape_before_it_is_made(monkeypatch):
    import numpy as np

    from zyquo_tui.server import wire

    made = []
    real_zeros = np.zeros
    monkeypatch.setattr(wire.np, "zeros", lambda shape, *a, **k: made.append(shape) or
                        real_zeros(shape, *a, **k))
    huge = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[1 << 20, 1 << 20])
    huge.sparse_csr.crow_indices = b""
    with pytest.raises(wire.WireError, match=r"declares 1099511627776 elements.*"
                                             r"max_tensor_elements"):
        wire.read_forward_backward(request(weights=huge))
    assert made == []  # refused before any array of that size was asked for


def test_a_sparse_tensor_whose_parts_disagree_is_a_sentence():
    from zyquo_tui.server.wire import WireError, read_forward_backward

    bad = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[2, 4])
    bad.sparse_csr.crow_indices = np.array([0, 1, 9], np.int64).tobytes()
    bad.sparse_csr.col_indices = np.array([7], np.int64).tobytes()
    bad.sparse_csr.values = np.array([1.0], np.float32).tobytes()
    with pytest.raises(WireError, match="row offsets, columns and values do not agree"):
        read_forward_backward(request(weights=bad))
    good = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[2, 4])
    good.sparse_csr.crow_indices = np.array([0, 1, 2], np.int64).tobytes()
    good.sparse_csr.col_indices = np.array([3, 0], np.int64).tobytes()
    good.sparse_csr.values = np.array([5.0, 6.0], np.float32).tobytes()
    dense = read_forward_backward(request(weights=good)).data[0].inputs["weights"]
    assert dense.tolist() == [[0, 0, 0, 5.0], [6.0, 0, 0, 0]]

