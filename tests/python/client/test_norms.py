"""batch_norm and layer_norm, and the modules over them, against torch 1.13.

The op table's rows (test_op_table.py) check one call of each, its result,
grad_fn and gradients. Here: what a module keeps across calls (BatchNorm's
running statistics and num_batches_tracked, updated in training and used
in eval), state_dict names and order, load_state_dict of a torch model's
state, and the errors torch raises, with its types and messages.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as torch_F

import tensord
import tensord.nn as tnn
import tensord.nn.functional as F

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _values(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape)


def _close(got, want, **kw):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10,
                               atol=1e-12, **kw)


@pytest.mark.parametrize("module,shape", [("BatchNorm2d", (4, 3, 2, 5)),
                                          ("BatchNorm1d", (6, 3)),
                                          ("BatchNorm1d", (4, 3, 5))])
def test_batch_norm_modules_train_then_eval_as_torch(client, module, shape):
    want = getattr(torch.nn, module)(3, momentum=0.3, dtype=torch.float64)
    got = getattr(tnn, module)(3, momentum=0.3, dtype=tensord.float64, client=client)
    assert repr(got) == repr(want)
    for step in range(3):
        x = _values(*shape, seed=step)
        _close(got(client.tensor(x)), want(torch.tensor(x)))
    _close(got.running_mean, want.running_mean)
    _close(got.running_var, want.running_var)
    assert got.num_batches_tracked.item() == want.num_batches_tracked.item() == 3
    got.eval()
    want.eval()
    x = _values(*shape, seed=9)
    _close(got(client.tensor(x)), want(torch.tensor(x)))
    assert got.num_batches_tracked.item() == 3  # eval counts nothing
    _close(got.running_mean, want.running_mean)


def test_batch_norm_trains_a_layer_like_torch(client):
    """weight and bias get torch's gradients through a module in training."""
    want = torch.nn.BatchNorm2d(2, dtype=torch.float64)
    got = tnn.BatchNorm2d(2, dtype=tensord.float64, client=client)
    x = _values(3, 2, 4, 4)
    w = _values(3, 2, 4, 4, seed=1)
    tx, gx = torch.tensor(x, requires_grad=True), client.tensor(x, requires_grad=True)
    (want(tx) * torch.tensor(w)).sum().backward()
    (got(gx) * client.tensor(w)).sum().backward()
    _close(gx.grad, tx.grad)
    _close(got.weight.grad, want.weight.grad)
    _close(got.bias.grad, want.bias.grad)


def test_batch_norm_without_affine_or_tracking(client):
    want = torch.nn.BatchNorm2d(3, affine=False, track_running_stats=False,
                                dtype=torch.float64)
    got = tnn.BatchNorm2d(3, affine=False, track_running_stats=False,
                          dtype=tensord.float64, client=client)
    assert repr(got) == repr(want)
    assert list(got.state_dict()) == list(want.state_dict()) == []
    got.eval()
    want.eval()  # no running statistics: the batch's, even in eval
    x = _values(2, 3, 3, 3)
    _close(got(client.tensor(x)), want(torch.tensor(x)))


def test_state_dict_names_order_and_loading_torchs(client):
    want = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3),
                               torch.nn.LayerNorm([3, 2, 2]))
    got = tnn.Sequential(tnn.Conv2d(2, 3, 3, client=client), tnn.BatchNorm2d(3, client=client),
                         tnn.LayerNorm([3, 2, 2], client=client))
    assert list(got.state_dict()) == list(want.state_dict())
    assert [n for n, _ in got.named_parameters()] == [n for n, _ in want.named_parameters()]
    want.train()
    want(torch.randn(5, 2, 4, 4))  # running statistics that are not the defaults
    got.load_state_dict(want.state_dict())
    assert got[1].num_batches_tracked.item() == 1
    assert str(got[1].num_batches_tracked.dtype) == "torch.int64"
    got.eval()
    want.eval()
    x = torch.randn(2, 2, 4, 4)
    np.testing.assert_allclose(got(client.tensor(x.numpy())).detach().numpy(),
                               want(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_layer_norm_module_as_torch(client):
    for args in [((4,), {}), ((3, 4), {"elementwise_affine": False}), (4, {"eps": 1e-3})]:
        shape, kw = args
        want = torch.nn.LayerNorm(shape, dtype=torch.float64, **kw)
        got = tnn.LayerNorm(shape, dtype=tensord.float64, client=client, **kw)
        assert repr(got) == repr(want)
        x = _values(2, 3, 4)
        _close(got(client.tensor(x)), want(torch.tensor(x)))


def test_float32_agrees_with_torch(client):
    x = _values(8, 4, 3, 3).astype(np.float32)
    got = F.batch_norm(client.tensor(x), None, None, training=True)
    want = torch_F.batch_norm(torch.tensor(x), None, None, training=True)
    assert str(got.dtype) == "torch.float32"
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    got = F.layer_norm(client.tensor(x), (3, 3))
    np.testing.assert_allclose(got.numpy(), torch_F.layer_norm(torch.tensor(x), (3, 3)).numpy(),
                               rtol=1e-4, atol=1e-5)


ERRORS = [
    ("F.batch_norm(x, None, None)", {"x": (2, 3, 4, 4)}),
    ("F.batch_norm(x, m, m, training=True)", {"x": (2, 3, 4, 4), "m": (4,)}),
    ("F.batch_norm(x, None, None, w, training=True)", {"x": (2, 3, 4, 4), "w": (4,)}),
    ("F.batch_norm(x, None, None, None, w, training=True)", {"x": (2, 3), "w": (2,)}),
    ("F.batch_norm(x, None, None, training=True)", {"x": (1, 3, 1, 1)}),
    ("F.batch_norm(x, None, None, training=True)", {"x": (3,)}),
    ("F.batch_norm(x.long(), None, None, training=True)", {"x": (2, 3)}),
    ("F.layer_norm(x, [3])", {"x": (2, 3, 4)}),
    ("F.layer_norm(x, [])", {"x": (2, 3, 4)}),
    ("F.layer_norm(x, [2, 3, 4, 4])", {"x": (2, 3, 4)}),
    ("F.layer_norm(x, [4], w)", {"x": (2, 3, 4), "w": (3,)}),
    ("F.layer_norm(x, [4], None, w)", {"x": (2, 3, 4), "w": (3,)}),
    ("F.layer_norm(x.long(), [4])", {"x": (2, 3, 4)}),
    ("F.layer_norm(x, [4], w.double())", {"x": (2, 3, 4), "w": (4,)}),
    ("F.batch_norm(x, None, None, w.double(), training=True)", {"x": (2, 3), "w": (3,)}),
    ("nn.BatchNorm2d(3)(x)", {"x": (2, 3, 4)}),
    ("nn.BatchNorm1d(3)(x)", {"x": (2, 3, 4, 4)}),
]


@pytest.mark.parametrize("expr,shapes", ERRORS, ids=[e for e, _ in ERRORS])
def test_errors_are_torchs(client, expr, shapes):
    def run(module, functional, make):
        inputs = {k: make(_values(*s).astype(np.float32)) for k, s in shapes.items()}
        try:
            # Fetched: the pipelined client raises at the sync point (issue 35).
            eval(expr, {"F": functional, "nn": module}, inputs).detach().numpy()  # noqa: S307
        except Exception as e:  # noqa: BLE001 (compared below)
            return e
        return None

    want = run(torch.nn, torch_F, torch.tensor)
    got = run(tnn, F, client.tensor)
    assert want is not None and got is not None, (want, got)
    assert isinstance(got, type(want)), (got, want)  # tensord's errors subclass torch's types
    assert str(got) == str(want)
