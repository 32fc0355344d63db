"""Errors: the server's codes and messages, PyTorch's exception types."""
import grpc
import pytest

import tensord


def test_same_device_is_pytorchs_runtime_error(client):
    x = client.tensor([1, 2, 3], device="cpu:0")
    y = client.tensor([5, 8, 1], device="cpu:1")
    with pytest.raises(RuntimeError) as err:
        x * y
        client.synchronize()  # pipelined: errors come at the next sync point
    assert str(err.value) == ("Expected all tensors to be on the same device, but found "
                              "at least two devices, cpu:0 and cpu:1!")
    assert isinstance(err.value, tensord.TensordError)
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_shape_mismatch_is_runtime_error_with_code(client):
    with pytest.raises(RuntimeError) as err:
        client.zeros(2, 3) + client.zeros(4)
        client.synchronize()
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert str(err.value) == ("The size of tensor a (3) must match the size of tensor b (4) "
                              "at non-singleton dimension 1")


def test_torchs_exception_classes_come_from_the_server(client):
    """IndexError, ValueError where torch raises them, chosen from the kind
    the server sends (a trailer on a unary call, error_kind on the stream):
    still TensordErrors with their code, and RuntimeError stays RuntimeError."""
    x = client.ones(2, 3)
    with pytest.raises(IndexError) as err:
        x.sum(5)
        client.synchronize()
    assert isinstance(err.value, tensord.TensordIndexError)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert str(err.value) == "Dimension out of range (expected to be in range of [-2, 1], but got 5)"
    with pytest.raises(ValueError) as err:
        tensord.nn.functional.dropout(x, p=1.5)
        client.synchronize()
    assert isinstance(err.value, tensord.TensordValueError)
    assert str(err.value) == "dropout probability has to be between 0 and 1, but got 1.5"
    with pytest.raises(tensord.TensordError) as err:
        x @ x
        client.synchronize()
    assert not isinstance(err.value, (IndexError, ValueError, TypeError))
    assert (x + 1).sum().item() == 12  # the session goes on


def test_an_operand_of_another_client_is_the_cpp_clients_error(daemon, client):
    other = tensord.connect(daemon.address)
    try:
        x, y = client.ones(3), other.ones(3)
        with pytest.raises(tensord.TensordError) as err:
            x + y
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert str(err.value) == (f"tensor {y.handle} belongs to another Client's session: an op "
                                  "takes the tensors of one Client (one session on one server)")
        with pytest.raises(tensord.TensordError):
            tensord.where(x > 0, x, y)
        assert (x + x).sum().item() == 6
    finally:
        other.close()


def test_unknown_device(client):
    with pytest.raises(tensord.TensordError) as err:
        client.zeros(2, device="cuda:63")  # no such GPU, on any machine
        client.synchronize()
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    assert "cpu:0" in err.value.details  # names the devices there are
    with pytest.raises(tensord.TensordError) as err:
        client.zeros(2, device="tpu")
        client.synchronize()
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_numpy_of_a_cuda_tensor_is_pytorchs_type_error(client):
    from tensord._tensor import Tensor
    from tensord.v1 import tensord_pb2 as pb
    # A stand-in for a tensor on cuda:0 (this server has no GPU): numpy()
    # refuses before any call.
    fake = object.__new__(Tensor)
    fake._client = client
    fake._info = pb.TensorInfo(handle=0, device="cuda:0", dtype=pb.INT64, shape=[3])
    with pytest.raises(TypeError) as err:
        fake.numpy()
    object.__setattr__(fake, "_info", None)  # nothing to release
    assert str(err.value) == ("can't convert cuda:0 device type tensor to numpy. "
                              "Use Tensor.cpu() to copy the tensor to host memory first.")


def test_numpy_of_a_tensor_requiring_grad(client):
    w = client.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="Use tensor.detach\\(\\).numpy\\(\\) instead"):
        w.numpy()
    assert w.detach().numpy().tolist() == [1.0, 1.0]


def test_dtype_not_supported(client):
    with pytest.raises(tensord.TensordError) as err:
        -client.tensor([True])
        client.synchronize()
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_closed_session_is_not_found(daemon):
    c = tensord.connect(daemon.address)
    x = c.tensor([1])
    c._session.close()
    with pytest.raises(tensord.TensordError) as err:
        x + 1
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_unreachable_server():
    c = None
    with pytest.raises(tensord.TensordError) as err:
        c = tensord.connect("127.0.0.1:1")
    assert c is None and err.value.code == grpc.StatusCode.UNAVAILABLE


def test_a_corrupt_fetched_chunk_is_data_loss(client, monkeypatch):
    """Each streamed chunk's CRC-32 is checked: one that does not match is
    DATA_LOSS naming its offset."""
    x = client.zeros(2 << 20)  # 8 MiB: fetched as a stream of chunks
    session = client._dispatcher.session
    real = session.fetch

    def corrupt(handle, offset=0):
        for i, (chunk, data) in enumerate(real(handle, offset)):
            if i == 3:
                chunk.crc32 ^= 1
            yield chunk, data
    monkeypatch.setattr(session, "fetch", corrupt)
    with pytest.raises(tensord.TensordError) as err:
        x.numpy()
    assert err.value.code == grpc.StatusCode.DATA_LOSS
    assert "a corrupt chunk at offset 3145728" in err.value.details
    monkeypatch.setattr(session, "fetch", real)
    assert x.numpy().sum() == 0  # the tensor itself is fine
