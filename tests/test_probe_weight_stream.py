"""The fused step's weight stream: copies in reading order, line-aligned, and a prefetch plan that
asks for every byte after the first weight exactly once, a fixed distance ahead."""
import pytest
import torch

from gpu_probe.model import ProbeModel
from gpu_probe.weight_stream import ALIGN_BYTES, WeightStream


def make_stream(shapes=((3, 10), (7, 5), (2, 2), (40, 8))):
    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randn(*shape, generator=gen) for shape in shapes]
    return tensors, WeightStream(tensors)


def test_views_hold_copies_in_order_each_on_its_own_line():
    tensors, stream = make_stream()
    for t, view, start in zip(tensors, stream.views, stream.starts):
        assert torch.equal(view, t) and view.data_ptr() != t.data_ptr()
        assert view.data_ptr() - stream.buffer.data_ptr() == start and start % ALIGN_BYTES == 0
    assert stream.starts == sorted(stream.starts) and stream.total_bytes % ALIGN_BYTES == 0


@pytest.mark.parametrize("lookahead", [1, 128, 200, 300, 10_000])
def test_plan_requests_every_later_byte_once_and_never_past_lookahead(lookahead):
    _, stream = make_stream()
    plan = stream.plan(lookahead)
    assert len(plan) == len(stream.views)
    covered = []
    for end, item in zip(stream.line_ends, plan):
        if item is None:
            continue
        assert item.start >= end and item.start % 16 == 0 and item.nbytes % 16 == 0
        assert item.start + item.nbytes <= end + -(-lookahead // ALIGN_BYTES) * ALIGN_BYTES
        covered.append((item.start, item.start + item.nbytes))
    flat = sorted(covered)
    assert all(a[1] <= b[0] for a, b in zip(flat, flat[1:]))  # no byte asked for twice
    if lookahead >= max(e - s for s, e in zip(stream.starts, stream.ends)) + ALIGN_BYTES:
        assert flat[0][0] == stream.line_ends[0] and flat[-1][1] == stream.total_bytes  # and none left out
        assert all(a[1] == b[0] for a, b in zip(flat, flat[1:]))


def test_plan_off_and_bad_input():
    _, stream = make_stream()
    assert stream.plan(0) == [None] * len(stream.views)
    with pytest.raises(ValueError, match="lookahead"):
        stream.plan(-1)
    with pytest.raises(ValueError, match="dtype"):
        WeightStream([torch.zeros(2), torch.zeros(2, dtype=torch.float64)])


def test_model_reads_its_fused_weights_from_one_stream_in_step_order():
    model = ProbeModel("tiny", num_blocks=4)
    stream = model.weight_stream
    order = [w for layer in model.layers
             for w in (layer.w_qkv_folded, layer.w_o_fused, layer.w_gate_up_folded, layer.w_down_fused)]
    order.append(model.lm_head_folded)
    assert [w.data_ptr() for w in order] == [v.data_ptr() for v in stream.views]
    assert torch.equal(model.layers[0].w_o_fused, model.layers[0].wo)
    assert len(model.prefetch_plan(1)) == len(order)
    assert model.prefetch_plan(1) == [None] * len(order)  # no L2 prefetch without a Hopper GPU
