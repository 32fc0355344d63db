"""Planned at the line: the pipelined client raises an elementwise op's error on the op's own line, sends nothing for it, and knows its result's metadata without waiting.

The rules themselves are checked against the server's planner in
test_planner_differential.py; these tests check where the errors surface
and what reaches the wire. Both pipeline modes: on the unary path every
op raises at its line anyway.
"""
import math
import sys
import traceback

import grpc
import pytest

import tensord
from tensord import _planner, _stream
from tensord.v1 import tensord_pb2 as pb


def _commands_sent(c):
    stream = c._session.stream if c.pipelined else None
    return stream._next_seq if stream is not None else None


def test_the_issues_snippet_raises_on_its_line_and_sends_nothing(client):
    x = client.tensor([1.0, 2.0, 3.0])
    y = client.tensor([4.0, 5.0, 6.0])
    a = x.to("cpu:1")
    before = _commands_sent(client)
    with pytest.raises(RuntimeError) as err:
        z = a * y  # noqa: F841 — the line that raises
    assert str(err.value) == ("Expected all tensors to be on the same device, but found at "
                              "least two devices, cpu:1 and cpu:0!")
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    # Raised by this very line, not at a later sync point.
    user_frame = [f for f in traceback.extract_tb(err.tb) if f.filename == __file__][-1]
    assert user_frame.line == "z = a * y  # noqa: F841 — the line that raises"
    assert err.value.command is None
    if client.pipelined:
        assert _commands_sent(client) == before  # no command for the refused op
    # The session goes on: nothing failed on the server.
    assert (a.cpu() * y).tolist() == [4.0, 10.0, 18.0]


@pytest.mark.parametrize("line, error, message", [
    ("x + c.zeros(4)", RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"),
    ("-(x > 1)", RuntimeError,
     "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
     "invert a mask, use the `~` or `logical_not()` operator instead."),
    ("(x > 1) - (x > 2)", RuntimeError,
     "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
     "`logical_xor()` operator instead."),
    ("c.tensor([1, 2]) ** -1", RuntimeError,
     "Integers to negative integer powers are not allowed."),
    ("tensord.nn.functional.silu(c.tensor([1, 2]))", RuntimeError,
     "\"silu_cpu\" not implemented for 'Long'"),
    ("(x > 1).relu()", RuntimeError, "Boolean inputs not supported for relu"),
    ("x.sum(1)", IndexError, "Dimension out of range (expected to be in range of [-1, 0], "
     "but got 1)"),
    ("c.tensor([1, 2]).mean()", RuntimeError,
     "mean(): could not infer output dtype. Input dtype must be either a floating point or "
     "complex dtype. Got: Long"),
    ("c.zeros(0, 2).max(0)", IndexError, "max(): Expected reduction dim 0 to have non-zero size."),
    ("c.ones(2, 3) @ c.ones(4, 2)", RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)"),
    ("tensord.nn.functional.linear(c.ones(2, 3), c.ones(4, 3), c.ones(3))", RuntimeError,
     "The expanded size of the tensor (4) must match the existing size (3) at "
     "non-singleton dimension 1.  Target sizes: [2, 4].  Tensor sizes: [3]"),
    ("x.view(2, -1)", RuntimeError, "shape '[2, -1]' is invalid for input of size 3"),
    ("x.select(0, 3)", IndexError,
     "select(): index 3 out of range for tensor of size [3] at dimension 0"),
    ("c.ones(2, 3).permute(1, 1)", RuntimeError, "permute(): duplicate dims are not allowed."),
    ("c.tensor([1, 2]).softmax(0)", RuntimeError,
     "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'"),
    ("tensord.nn.functional.conv2d(c.ones(1, 3, 8, 8), c.ones(6, 2, 5, 5))", RuntimeError,
     "Given groups=1, weight of size [6, 2, 5, 5], expected input[1, 3, 8, 8] to have 2 "
     "channels, but got 3 channels instead"),
    ("tensord.nn.functional.max_pool2d(c.ones(1, 1, 2, 2), 3)", RuntimeError,
     "Given input size: (1x2x2). Calculated output size: (1x0x0). Output size is too small"),
    ("tensord.nn.functional.cross_entropy(c.ones(4, 3), c.zeros(3, dtype=tensord.int64))",
     ValueError, "Expected input batch_size (4) to match target batch_size (3)."),
    ("tensord.where(x, x, 0)", RuntimeError,
     "where expected condition to be a boolean tensor, but got a tensor with dtype Float"),
    ("x.clamp(c.zeros(2, 2), 1)", RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton "
     "dimension 1"),
    ("tensord.cat([x, c.zeros(2, 2)])", RuntimeError,
     "Tensors must have same number of dimensions: got 1 and 2"),
    ("tensord.nn.functional.dropout(x, 1.5)", ValueError,
     "dropout probability has to be between 0 and 1, but got 1.5"),
    ("c.tensor([1, 2]).requires_grad_()", RuntimeError,
     "only Tensors of floating point dtype can require gradients"),
    ("x.add_(c.zeros(2, 3))", RuntimeError,
     "output with shape [3] doesn't match the broadcast shape [2, 3]"),
    ("c.tensor([1, 2]).div_(2)", RuntimeError,
     "result type Float can't be cast to the desired output type Long"),
    ("c.tensor([1, 2]).add_(c.tensor([3, 4]), alpha=0.5)", RuntimeError,
     "axpy_: for integral input tensors, alpha must not be a floating point number "
     "(got 0.5)"),
    ("F.batch_norm(c.ones(2, 3), c.zeros(4), c.ones(4), training=True)", RuntimeError,
     "running_mean should contain 3 elements not 4"),
    ("F.batch_norm(c.ones(2, 3), None, None)", RuntimeError,
     "running_mean must be defined in evaluation mode"),
    ("F.batch_norm(c.ones(1, 3), None, None, training=True)", ValueError,
     "Expected more than 1 value per channel when training, got input size "
     "torch.Size([1, 3])"),
    ("F.layer_norm(c.ones(2, 4), [3])", RuntimeError,
     "Given normalized_shape=[3], expected input with shape [*, 3], but got input of "
     "size[2, 4]"),
    ("F.layer_norm(c.ones(2, 3), [3], c.ones(3, dtype=tensord.float64))", RuntimeError,
     "expected scalar type Float but found Double"),
    ("c.ones(2, requires_grad=True).exp().backward()", RuntimeError,
     "grad can be implicitly created only for scalar outputs"),
    ("c.ones(2, requires_grad=True).exp().backward(c.ones(3))", RuntimeError,
     "Mismatch in shape: grad_output[0] has a shape of torch.Size([3]) and output[0] has a "
     "shape of torch.Size([2])."),
    # torch's optimizers check their hyperparameters in the constructor.
    ("tensord.optim.SGD([c.ones(2, requires_grad=True)], lr=-0.1)", ValueError,
     "Invalid learning rate: -0.1"),
    ("tensord.optim.SGD([c.ones(2, requires_grad=True)], lr=0.1, nesterov=True)",
     ValueError, "Nesterov momentum requires a momentum and zero dampening"),
    ("tensord.optim.Adam([c.ones(2, requires_grad=True)], betas=(0.9, 1.0))",
     ValueError, "Invalid beta parameter at index 1: 1.0"),
    ("tensord.optim.AdamW([c.ones(2, requires_grad=True)], eps=-1e-08)",
     ValueError, "Invalid epsilon value: -1e-08"),
])
def test_torchs_errors_at_the_line(client, line, error, message):
    c = client
    x = c.tensor([1.0, 2.0, 3.0])
    before = _commands_sent(c)
    with pytest.raises(error) as err:
        eval(line, {"c": c, "x": x, "tensord": tensord, "F": tensord.nn.functional})
    assert str(err.value) == message
    if c.pipelined:
        # Only the line's own creates and planned ops were sent, not the refused op.
        assert err.value.command is None
        made = sum(line.count(s) for s in ("c.", ">", "requires_grad=True", ".exp()"))
        assert _commands_sent(c) - before <= made


def test_a_planned_result_knows_its_metadata_without_waiting(client, monkeypatch):
    if not client.pipelined:
        pytest.skip("the unary path answers every op before it returns")
    x = client.tensor([[1, 2, 3]], dtype=tensord.int32)
    y = client.ones(2, 1, device="cpu:0")
    z = ((x * y) / 2).exp().to("cpu:1") + 1
    x.add_(1)
    assert z._info.planned == _planner.Meta(pb.FLOAT32, (2, 3), "cpu:1")

    def no_wait(*args, **kwargs):
        raise AssertionError("a planned tensor's metadata waited for the server")
    monkeypatch.setattr(client._session.stream, "wait", no_wait)
    assert (z.shape, z.dtype, str(z.device)) == ((2, 3), tensord.float32, "cpu:1")
    assert (x.shape, x.dtype) == ((1, 3), tensord.int32)
    monkeypatch.undo()
    row = [1 + math.exp(0.5), 1 + math.exp(1.0), 1 + math.exp(1.5)]
    assert z.tolist() == [pytest.approx(row, rel=1e-6)] * 2
    assert x.tolist() == [[2, 3, 4]]


def test_an_op_on_an_unplanned_result_goes_to_the_server(client, monkeypatch):
    """An arange's length is the server's to compute: until its answer is
    in, an op on it is planned by the server, its error raised at the next
    sync point."""
    if not client.pipelined:
        pytest.skip("the unary path raises every error at its line")
    monkeypatch.setattr(_stream, "KEEPER_DELAY_S", 60.0)  # nothing reads the answer meanwhile
    m = client.arange(0, 3, 1.0)
    bad = m + client.ones(4)  # the server's planner refuses it
    assert bad._info.planned is None
    with pytest.raises(RuntimeError, match="must match the size of tensor b") as err:
        client.synchronize()
    assert err.value.command is not None  # reported as the stream's command


def test_a_norm_and_the_training_ops_plan_at_the_line(client, monkeypatch):
    """A norm's result, and the tensors a backward, zero_grad and an
    optimizer step name, know their metadata without waiting, so a step of
    a network with a norm plans every op."""
    if not client.pipelined:
        pytest.skip("the unary path answers every op before it returns")
    c = client
    nn = tensord.nn
    model = nn.Sequential(nn.Linear(3, 4, client=c), nn.BatchNorm1d(4, client=c), nn.ReLU(),
                          nn.LayerNorm(4, client=c), nn.Linear(4, 2, client=c))
    opt = tensord.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = c.ones(5, 3), c.zeros(5, 2)

    def no_wait(*args, **kwargs):
        raise AssertionError("a planned tensor's metadata waited for the server")
    for _ in range(2):
        monkeypatch.setattr(c._session.stream, "wait", no_wait)
        out = model(x)
        loss = tensord.nn.functional.mse_loss(out, y)
        assert out._info.planned == _planner.Meta(pb.FLOAT32, (5, 2), "cpu:0")
        assert (loss.shape, loss.dtype) == ((), tensord.float32)
        opt.zero_grad()
        loss.backward()
        opt.step()
        monkeypatch.undo()
        assert loss.item() >= 0


def test_an_optimizers_state_is_checked_against_its_parameter(client):
    p = client.ones(2, 3, requires_grad=True)
    (p * p).sum().backward()
    opt = tensord.optim.Adam([p])
    opt._state = [client.zeros(2, 3), client.zeros(3, 2)]  # exp_avg_sq of the wrong shape
    with pytest.raises(RuntimeError) as err:
        opt.step()
    assert str(err.value) == ("Adam.step: exp_avg_sq of parameter 0 is [3, 2] float32 on "
                              "cpu:0; the parameter is [2, 3] float32 on cpu:0")


def test_a_negative_integer_base_is_no_error(client):
    """(-2) ** x for an integer x is torch's [4, -8], not the negative-power
    error of x ** -2 (the server's planner once refused both)."""
    assert ((-2) ** client.tensor([2, 3])).tolist() == [4, -8]
    with pytest.raises(RuntimeError, match="^Integers to negative integer powers"):
        client.tensor([2, 3]) ** -2


def test_an_arange_is_sized_by_the_server(client):
    """arange's length is the server's to compute: not planned, so a view of
    it is planned by the server too (and is right)."""
    x = client.arange(0, 1, 0.25).reshape(2, 2)
    assert x.shape == (2, 2) and x.tolist() == [[0.0, 0.25], [0.5, 0.75]]


def test_what_creates_and_moves_plan_is_what_the_server_answers(client):
    """The metadata the client plans from for a create or a move (no planner
    rule: the request's own dtype, shape and device) equals the answer."""
    if not client.pipelined:
        pytest.skip("the unary path answers every create before it returns")
    np = pytest.importorskip("numpy")
    c = client
    made = [c.tensor([1, 2, 3]), c.tensor([[1.5]], dtype=tensord.float64), c.tensor(True),
            c.tensor(2.5, device="cpu:1"), c.zeros(2, 0, 3), c.ones(4, dtype=tensord.bfloat16),
            c.full((2, 2), 7), c.rand(3, seed=1), c.randn(1, 2, seed=2), c.zeros(()),
            c.arange(5), c.arange(1, 2, 0.5, dtype=tensord.float16),
            c.from_numpy(np.zeros((2, 3), np.int32)), c.zeros_like(c.ones(2, 2)),
            c.ones(3).to("cpu:1"), c.tensor([1, 2]).to("cpu:1").to("cpu:0", copy=True)]
    checked = 0
    for t in made:
        planned = t._info.planned
        answer = t._info.resolved()
        if planned is not None:
            assert planned == _planner.Meta(answer.dtype, tuple(answer.shape), answer.device), t
            checked += 1
    assert checked >= len(made) - 2  # all but the aranges without a shape


def test_a_device_without_a_kernel_names_itself():
    """The capability rule (no CPU device lacks a kernel, so the differential
    test cannot reach it): the server's words for a kernel one device lacks."""
    info = pb.DeviceInfo(name="cuda:1", capabilities=[
        pb.Capability(family=pb.BINARY_FAMILY, dtypes=1 << pb.FLOAT32),
        pb.Capability(family=pb.UNARY_FAMILY, dtypes=1 << pb.FLOAT32),
        pb.Capability(family=pb.CAST, dtypes=(1 << pb.FLOAT32) | (1 << pb.INT64))])
    caps = _planner.Capabilities(info)
    half = _planner.Meta(pb.FLOAT16, (2,), "cuda:1")
    with pytest.raises(RuntimeError) as err:
        _planner.plan_binary(pb.ADD, half, half, None, caps)
    assert str(err.value) == "\"binary\" not implemented for 'Half' on cuda:1"
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    longs = _planner.Meta(pb.INT64, (2,), "cuda:1")
    with pytest.raises(RuntimeError, match=r"^\"cast\" not implemented for 'Double' on cuda:1$"):
        _planner.plan_binary(pb.ADD, longs, None, 0.5, caps)
    assert _planner.plan_unary(pb.EXP, longs, caps) == _planner.Meta(pb.FLOAT32, (2,), "cuda:1")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
