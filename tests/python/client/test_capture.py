"""client.capture: a training step recorded once, registered as a program and replayed as
one RunProgram, equals eager steps."""
import gc

import numpy as np
import pytest

import tensord
from tensord import nn
from tensord.v1 import tensord_pb2 as pb


def _data(client, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 3)).astype(np.float32)
    y = (x @ np.array([[2.0], [-1.0], [0.5]], np.float32) + 0.25).astype(np.float32)
    return client.from_numpy(x), client.from_numpy(y)


def _model_and_optimizer(client, optimizer):
    model = nn.Sequential(nn.Linear(3, 1, client=client))
    model.load_state_dict({"0.weight": np.full((1, 3), 0.1, np.float32),
                           "0.bias": np.zeros(1, np.float32)})
    opt = (tensord.optim.Adam(model.parameters(), lr=0.05) if optimizer == "adam"
           else tensord.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    return model, opt


def _train_step(model, opt, loss_fn):
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def _record_calls(client, monkeypatch):
    """The unary calls made from now on, by method name, and the stream's
    run_program commands as "run_program"; and the name a replay has: a
    command on the stream when the client pipelines, else the RPC."""
    calls = []
    session = client._session
    real_call = session.call
    monkeypatch.setattr(session, "call",
                        lambda name, *a, **k: calls.append(name) or real_call(name, *a, **k))
    stream = client._dispatcher._stream
    if stream is None:
        return calls, "RunProgram"
    real_send = stream.send

    def send(kind, *a, **k):
        if kind == "run_program":
            calls.append(kind)
        return real_send(kind, *a, **k)
    monkeypatch.setattr(stream, "send", send)
    return calls, "run_program"


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_replays_equal_eager_steps(client, optimizer):
    batches = [_data(client, seed) for seed in range(6)]
    eager_model, eager_opt = _model_and_optimizer(client, optimizer)
    eager_step = _train_step(eager_model, eager_opt, nn.MSELoss())
    eager = [eager_step(x, y).item() for x, y in batches]

    model, opt = _model_and_optimizer(client, optimizer)
    step = client.capture(_train_step(model, opt, nn.MSELoss()), *batches[0])  # step 1
    replayed = [eager[0]] + [step(x, y).item() for x, y in batches[1:]]
    np.testing.assert_allclose(replayed, eager, rtol=1e-6)
    assert replayed[-1] < replayed[0]
    np.testing.assert_allclose(model[0].weight.detach().numpy(),
                               eager_model[0].weight.detach().numpy(), rtol=1e-6)


def test_a_replay_is_one_run_program_and_keeps_only_the_outputs(client, monkeypatch):
    model, opt = _model_and_optimizer(client, "sgd")
    x, y = _data(client, 0)
    step = client.capture(_train_step(model, opt, nn.MSELoss()), x, y)
    step(x, y)  # the momentum buffers exist now; the held set is settled
    held = client.held_bytes()
    calls, replay = _record_calls(client, monkeypatch)
    loss = step(x, y)
    monkeypatch.undo()
    # zero_grad, Linear's addmm, mse_loss, backward, the optimizer step: one
    # RPC, or one command on the stream (no drain before it).
    assert calls == [replay] and step.ops == 5 and step.programs == 1
    assert loss.shape == () and loss.item() > 0
    del loss
    assert client.held_bytes() == held


def test_inputs_are_replaced_and_outputs_keep_fns_structure(client):
    w = client.tensor([[1.0, 2.0], [3.0, 4.0]])
    step = client.capture(lambda a, b: (a @ w + b, (a * 2).sum()), client.ones(2, 2),
                          client.zeros(2))
    out, total = step(client.tensor([[1.0, 0.0], [0.0, 1.0]]), client.tensor([10.0, 20.0]))
    assert out.tolist() == [[11.0, 22.0], [13.0, 24.0]] and total.item() == 4.0
    with pytest.raises(TypeError, match="captured with 2 inputs"):
        step(w)
    with pytest.raises(tensord.TensordError, match="op #0"):
        step(client.ones(3, 3), client.zeros(2))


def test_tensors_made_inside_are_made_once_and_kept(client):
    step = client.capture(lambda a: a + client.tensor([1.0, 2.0]), client.zeros(2))
    gc.collect()  # the tensor the lambda made has no name left but the step's
    assert step(client.tensor([5.0, 5.0])).tolist() == [6.0, 7.0]


def test_fetches_and_moves_inside_a_capture_are_refused(client):
    with pytest.raises(RuntimeError, match="a fetch .* inside a captured step"):
        client.capture(lambda a: (a + 1).item(), client.zeros(()))
    with pytest.raises(RuntimeError, match="a move .* inside a captured step"):
        client.capture(lambda a: (a + 1).to("cpu:1"), client.zeros(()))
    with pytest.raises(ValueError, match="outputs must be results of its ops"):
        client.capture(lambda a: a, client.zeros(()))
    assert (client.zeros(()) + 1).item() == 1.0  # the client works after a refusal


def test_operands_are_found_on_a_protobuf_without_field_labels():
    """protobuf 7 dropped FieldDescriptor.label (found running the client on
    the GPU machine's Python 3.12 with protobuf 7.36): the operand walk asks
    is_repeated where it exists."""
    from tensord import _capture
    from tensord.v1 import tensord_pb2 as pb

    class Field:  # protobuf 7's descriptor: is_repeated, no label
        message_type = pb.Operand.DESCRIPTOR

        def __init__(self, repeated):
            self.is_repeated = repeated

    class Message:
        def ListFields(self):
            return [(Field(True), [pb.Operand(handle=1), pb.Operand(handle=2)]),
                    (Field(False), pb.Operand(handle=3))]

    assert [o.handle for o in _capture._operands(Message())] == [1, 2, 3]


def test_one_program_per_input_signature_reused_and_numpy_inputs_inline(client, monkeypatch):
    model, opt = _model_and_optimizer(client, "sgd")
    eager_model, eager_opt = _model_and_optimizer(client, "sgd")
    eager_step = _train_step(eager_model, eager_opt, nn.MSELoss())
    rng = np.random.default_rng(7)
    batches = [(rng.standard_normal((n, 3)).astype(np.float32),
                rng.standard_normal((n, 1)).astype(np.float32)) for n in (16, 16, 5, 16, 5)]
    x0, y0 = batches[0]
    step = client.capture(_train_step(model, opt, nn.MSELoss()),
                          client.from_numpy(x0), client.from_numpy(y0))
    eager = [eager_step(client.from_numpy(x), client.from_numpy(y)).item() for x, y in batches]
    calls, replay = _record_calls(client, monkeypatch)
    # numpy arrays go inline: one RPC (or command) a step, the batch included.
    replayed = [eager[0]] + [step(x, y).item() for x, y in batches[1:]]
    monkeypatch.undo()
    # Batches of 16, 5, 16, 5: a program for each size, registered once.
    assert calls == ["RegisterProgram", replay, "RegisterProgram", replay, replay, replay]
    assert step.programs == 2  # [16, 3] and the smaller last batch's [5, 3]
    np.testing.assert_allclose(replayed, eager, rtol=1e-5)
    np.testing.assert_allclose(model[0].weight.detach().numpy(),
                               eager_model[0].weight.detach().numpy(), rtol=1e-5)


def test_a_dropped_program_is_registered_again(client):
    step = client.capture(lambda a: a * 2, client.zeros(2))
    assert step(client.tensor([1.0, 2.0])).tolist() == [2.0, 4.0]
    listed = client._session.call("ListPrograms", pb.ListProgramsRequest())
    for p in listed.programs:  # as the server drops one past its bound
        client._session.call("ReleaseProgram", pb.ReleaseProgramRequest(
            program=p.program), mutating=True)
    assert step(client.tensor([3.0, 4.0])).tolist() == [6.0, 8.0]


def test_a_signature_the_ops_refuse_fails_at_registration_naming_the_op(client):
    w = client.tensor([[1.0, 2.0], [3.0, 4.0]])
    step = client.capture(lambda a: a @ w, client.ones(2, 2))
    with pytest.raises(tensord.TensordError, match=r"op #0 \(matmul; operands: input #0"):
        step(np.ones((3, 3), np.float32))
    assert step(np.eye(2, dtype=np.float32)).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_numpy_inputs_of_a_bfloat16_or_0d_step_and_over_the_inline_limit(client, monkeypatch):
    """Inline inputs are converted to the captured input's dtype (bfloat16:
    its bit patterns, once), 0-d ones too; one over Limits.max_inline_bytes
    is uploaded first, converted once as well."""
    step = client.capture(lambda a: a * 2, client.zeros(3, dtype=tensord.bfloat16))
    assert step(np.array([1.5, -2.0, 3.0], np.float32)).float().tolist() == [3.0, -4.0, 6.0]
    scalar = client.capture(lambda a: a + 1, client.zeros(()))
    assert scalar(np.float32(2.5)).item() == 3.5
    monkeypatch.setattr(client._session.limits, "max_inline_bytes", 4)
    assert step(np.array([0.5, 1.0, -1.0], np.float32)).float().tolist() == [1.0, 2.0, -2.0]


def test_dropout_draws_new_masks_each_replay_as_the_eager_steps_do(client):
    """After manual_seed, a replay's dropout takes the seeds the eager step
    would (RunProgramRequest.seed_offset): replays differ from each other
    and equal the eager steps, mask for mask."""
    x = client.ones(256)
    client.manual_seed(11)
    eager = [nn.functional.dropout(x, 0.5).tolist() for _ in range(4)]
    assert eager[0] != eager[1]
    client.manual_seed(11)
    step = client.capture(lambda a: nn.functional.dropout(a, 0.5), x)  # eager[0]
    assert [step(x).tolist() for _ in range(3)] == eager[1:]


def test_momentum_and_weight_decay_are_each_replays(client):
    """A scheduler's change of SGD's momentum or weight decay needs no new
    program: the replay equals the eager step with the new values."""
    results = []
    for captured in (False, True):
        model, opt = _model_and_optimizer(client, "sgd")
        train = _train_step(model, opt, nn.MSELoss())
        batches = [_data(client, seed) for seed in range(3)]
        step = client.capture(train, *batches[0]) if captured else train
        if not captured:
            train(*batches[0])
        for i, (x, y) in enumerate(batches[1:]):
            opt.defaults["momentum"] = 0.5 + 0.2 * i
            opt.defaults["weight_decay"] = 0.01 * (i + 1)
            step(x, y)
        results.append(model[0].weight.detach().numpy())
    assert step.programs == 1
    np.testing.assert_array_equal(results[1], results[0])
