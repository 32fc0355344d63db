"""tensord.distributed (issue 36 stage 1): torch.distributed's collectives
over the daemon's host devices, against a real daemon (`--host-devices 2`),
checked with numpy; the errors as PyTorch users get them; and the data
parallel arithmetic they exist for: grads averaged over two devices' halves
of a batch equal the whole batch's."""
import grpc
import numpy as np
import pytest

import tensord
import tensord.distributed as dist


@pytest.fixture
def group(client):
    try:
        g = dist.new_group(["cpu:0", "cpu:1"], client=client)
    except tensord.TensordError as e:
        if "without" in str(e):
            pytest.skip(f"the daemon has no Gloo: {e}")
        raise
    yield g
    dist.destroy_process_group(g)


def test_every_collective(client, group):
    assert group.size() == 2 and group.devices == ["cpu:0", "cpu:1"]
    assert "gloo" in group.engine
    a = client.tensor([1.0, 2.0], device="cpu:0")
    b = client.tensor([3.0, 4.0], device="cpu:1")
    assert dist.all_reduce([a, b], group=group) is None
    assert a.tolist() == [4.0, 6.0] and b.tolist() == [4.0, 6.0]
    x = client.tensor([1.0, 8.0], dtype=tensord.float64, device="cpu:1")
    y = client.tensor([3.0, 2.0], dtype=tensord.float64, device="cpu:0")
    dist.all_reduce([x, y], op=dist.ReduceOp.AVG, group=group)
    assert y.tolist() == [2.0, 5.0]
    m0 = client.tensor([1, 9], device="cpu:0")
    m1 = client.tensor([5, 2], device="cpu:1")
    dist.all_reduce([m0, m1], op=dist.ReduceOp.MIN, group=group)
    assert m1.tolist() == [1, 2]
    r0 = client.tensor([7, 7], device="cpu:0")
    r1 = client.tensor([1, 2], device="cpu:1")
    dist.broadcast([r0, r1], src=1, group=group)
    assert r0.tolist() == [1, 2]
    out = dist.all_gather_into_tensor([b, a], group=group)
    assert [t.device for t in out] == ["cpu:1", "cpu:0"]
    assert out[0].shape == (4,) and out[1].tolist() == [4.0, 6.0, 4.0, 6.0]
    s = dist.reduce_scatter_tensor([client.arange(4.0, device="cpu:0"),
                                    client.arange(4.0, device="cpu:1")], group=group)
    assert s[0].tolist() == [0.0, 2.0] and s[1].tolist() == [4.0, 6.0]
    dist.barrier(group=group)
    h = client.tensor(np.ones(3, dtype=np.float16), device="cpu:0")
    k = client.tensor(np.full(3, 2.5, dtype=np.float16), device="cpu:1")
    dist.all_reduce([h, k], group=group)
    assert k.tolist() == [3.5, 3.5, 3.5]


def test_the_collective_sees_the_pipelined_ops_before_it(client, group):
    a = client.ones(3, device="cpu:0") * 5
    b = client.ones(3, device="cpu:1") + 1
    dist.all_reduce([a, b], group=group)
    assert (a + 0).tolist() == [7.0, 7.0, 7.0]


def test_a_pipelined_collective_is_one_stream_command_with_no_drain(
        client, group, monkeypatch):
    a = client.ones(2, device="cpu:0") * 3
    b = client.ones(2, device="cpu:1") * 5
    calls, sent = [], []
    real_call = client._session.call
    monkeypatch.setattr(client._session, "call",
                        lambda name, *x, **k: calls.append(name) or real_call(name, *x, **k))
    stream = client._dispatcher._stream
    if stream is not None:
        real_send = stream.send
        monkeypatch.setattr(stream, "send",
                            lambda kind, *x, **k: sent.append(kind) or real_send(kind, *x, **k))
    dist.all_reduce([a, b], group=group)
    monkeypatch.undo()
    if stream is None:
        assert calls == ["Collective"] and not sent
    else:  # in order after the two muls on the stream: no unary call, no sync
        assert calls == [] and sent == ["collective"]
    assert a.tolist() == [8.0, 8.0] and b.tolist() == [8.0, 8.0]
    # a refusal on the stream raises at the call and leaves the stream usable
    with pytest.raises(tensord.TensordError, match="found two on cpu:0"):
        dist.all_reduce([a, client.ones(2, device="cpu:0")], group=group)
    assert (a + 1).tolist() == [9.0, 9.0]


def test_errors_name_the_devices_and_shapes(client, group, daemon):
    a = client.tensor([1.0, 2.0], device="cpu:0")
    a2 = client.tensor([1.0, 2.0], device="cpu:0")
    with pytest.raises(tensord.TensordError) as e:
        dist.all_reduce([a, a2], group=group)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert str(e.value) == ("all_reduce: expected one tensor on each of cpu:0, cpu:1, "
                            "but found two on cpu:0 and none on cpu:1")
    with pytest.raises(tensord.TensordError) as e:
        dist.all_gather_into_tensor([a, client.tensor([1.0], device="cpu:1")], group=group)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "the tensor on cpu:1 is float32 [1] but the one on cpu:0 is float32 [2]" in str(e.value)
    i0, i1 = client.tensor([1], device="cpu:0"), client.tensor([2], device="cpu:1")
    with pytest.raises(tensord.TensordError, match="AVG is defined for floating dtypes only"):
        dist.all_reduce([i0, i1], op=dist.ReduceOp.AVG, group=group)
    with pytest.raises(tensord.TensordError, match="root is rank 2"):
        dist.broadcast([i0, i1], src=2, group=group)
    with pytest.raises(tensord.TensordError, match="needs a group"):
        dist.all_reduce([i0, i1])
    other = tensord.connect(daemon.address)
    try:
        with pytest.raises(tensord.TensordError, match="belongs to another Client") as e:
            dist.all_reduce([i0, other.tensor([1], device="cpu:1")], group=group)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        other.close()
    with pytest.raises(tensord.TensordError, match="named twice") as e:
        dist.new_group(["cpu:0", "cpu"], client=client)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    # Nothing ran, and the group still works.
    assert i1.tolist() == [2]
    dist.all_reduce([i0, i1], group=group)
    assert i0.tolist() == [3]


def test_averaged_grads_of_two_halves_are_the_whole_batchs(client, group):
    """Data parallel in four lines: a replica per device, each on its half."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 3))
    x = rng.standard_normal((8, 4))
    target = rng.standard_normal((8, 3))
    grads = []
    for dev, rows in (("cpu:0", slice(0, 4)), ("cpu:1", slice(4, 8))):
        w = client.tensor(w0, dtype=tensord.float64, device=dev, requires_grad=True)
        loss = ((client.tensor(x[rows], dtype=tensord.float64, device=dev) @ w
                 - client.tensor(target[rows], dtype=tensord.float64, device=dev)) ** 2).mean()
        loss.backward()
        grads.append(w.grad)
    dist.all_reduce(grads, op=dist.ReduceOp.AVG, group=group)
    whole = client.tensor(w0, dtype=tensord.float64, requires_grad=True)
    ((client.tensor(x, dtype=tensord.float64) @ whole
      - client.tensor(target, dtype=tensord.float64)) ** 2).mean().backward()
    for g in grads:
        np.testing.assert_allclose(g.numpy(), whole.grad.numpy(), rtol=0, atol=1e-12)
