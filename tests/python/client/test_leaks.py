"""Leaks: a session's held bytes go back to zero once its tensors are dropped.

What a session holds is read from the server: client.tensors() (its handles)
and client.held() (what autograd keeps without a handle: tensors saved for a
backward, leaves' grads); client.held_bytes() totals both. Each test starts
from a fresh session holding nothing and checks that dropping the program's
tensors (del, garbage collection of cycles, leaving a function) returns it
to nothing, also after a backward and after training with SGD momentum.
"""
import gc

import numpy as np

import tensord
from tensord import nn


def assert_holds_nothing(client):
    gc.collect()
    assert client.tensors() == []
    assert client.held() == []
    assert client.held_bytes() == 0


def test_a_fresh_session_holds_nothing(client):
    assert_holds_nothing(client)


def test_dropped_tensors_are_released(client):
    a = client.ones(256, 256)
    b = client.from_numpy(np.arange(300_000, dtype=np.float32))  # an Upload
    c = (a * 2 + 1).sum()
    assert {r.handle for r in client.tensors()} == {a.handle, b.handle, c.handle}
    assert client.held_bytes() == a.nbytes + b.nbytes + c.nbytes
    del a, b, c
    assert_holds_nothing(client)


def test_tensors_in_reference_cycles_are_released_by_gc(client):
    class Node:
        pass

    gc.disable()
    try:
        first, second = Node(), Node()
        first.other, second.other = second, first
        first.tensor = client.randn(64, 64)
        second.tensor = first.tensor @ first.tensor
        del first, second
        assert len(client.tensors()) == 2  # unreachable, not yet collected
    finally:
        gc.enable()
    assert_holds_nothing(client)


def test_tensors_of_a_finished_function_are_released(client):
    def compute():
        x = client.arange(1000)
        return (x * x).sum().item()

    assert compute() == sum(i * i for i in range(1000))
    assert_holds_nothing(client)


def test_autograd_holds_saved_tensors_until_the_graph_is_dropped(client):
    x = client.randn(32, 32, requires_grad=True)
    loss = (x * 3).exp().sum()  # exp saves its output, an intermediate
    held = client.held()
    assert held and all(r.handle == 0 for r in held)
    assert any(r.tag.startswith("saved by") for r in held), held
    assert client.held_bytes() == sum(r.nbytes for r in client.tensors()) + sum(
        r.nbytes for r in held)
    loss.backward()
    assert [r.tag for r in client.held()] == [f"grad of tensor {x.handle}"]
    del loss
    x.grad = None
    assert client.held() == []
    del x
    assert_holds_nothing(client)


def test_training_leaves_nothing_behind(client):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, client=client), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(4 * 3 * 3, 10, client=client))
    optimizer = tensord.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    params = model.parameters()
    param_bytes = sum(p.nbytes for p in params)
    for _ in range(5):
        inputs = client.from_numpy(rng.standard_normal((8, 3, 8, 8)).astype(np.float32))
        labels = client.from_numpy(rng.integers(0, 10, 8))
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()
        loss.item()
    del inputs, labels, loss
    # Parameters, their momentum buffers and (held without a handle) their grads.
    assert client.held_bytes() == 3 * param_bytes
    assert sorted(r.tag for r in client.held()) == sorted(
        f"grad of tensor {p.handle}" for p in params)
    optimizer.zero_grad()
    assert client.held() == []
    assert client.held_bytes() == 2 * param_bytes
    del model, optimizer, params
    assert_holds_nothing(client)


def _linear_training_step(client):
    model = nn.Linear(16, 4, client=client)
    optimizer = tensord.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


def test_a_replayed_step_keeps_no_intermediates(client):
    x = client.randn(8, 16)
    y = client.randn(8, 4)
    replay = client.capture(_linear_training_step(client), x, y)
    replay(x, y)
    settled = client.held_bytes()
    for _ in range(5):
        replay(x, y).item()
    assert client.held_bytes() == settled
    del replay, x, y  # the step's model and optimizer live as long as the replay
    assert_holds_nothing(client)
