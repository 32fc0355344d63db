"""Training basics over the server's autograd, compared with torch's on the same numbers."""
import numpy as np
import pytest

import tensord
from tensord import nn
from tensord.nn import functional as F

torch = pytest.importorskip("torch")


def test_backward_matches_torch(client):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    x = client.from_numpy(a).requires_grad_()
    w = client.tensor(b, requires_grad=True)
    loss = ((x @ w).sigmoid() * 3 - 1).pow(2).mean()
    assert loss.grad_fn.name() == "MeanBackward0"
    loss.backward()
    tx = torch.tensor(a, requires_grad=True)
    tw = torch.tensor(b, requires_grad=True)
    tloss = ((tx @ tw).sigmoid() * 3 - 1).pow(2).mean()
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-10)


def test_grad_none_detach_and_no_grad(client):
    w = client.ones(3, requires_grad=True)
    assert w.grad is None and w.grad_fn is None and w.is_leaf
    d = (w * 2).detach()
    assert not d.requires_grad and d.grad_fn is None
    with tensord.no_grad():
        y = w * 2
    assert not y.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()
        client.synchronize()  # pipelined: the error comes at the next sync point


def test_training_step_matches_torch(client):
    rng = np.random.default_rng(7)
    data = rng.standard_normal((8, 4))
    target = rng.integers(0, 3, 8)
    model = nn.Sequential(nn.Linear(4, 5, dtype=tensord.float64), nn.ReLU(),
                          nn.Linear(5, 3, dtype=tensord.float64))
    tmodel = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(),
                                 torch.nn.Linear(5, 3)).double()
    with torch.no_grad():  # same starting weights
        for (name, p), tp in zip(model.named_parameters(), tmodel.parameters()):
            tp.copy_(p.detach().torch())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in tmodel.named_parameters()]
    opt = tensord.optim.Adam(model.parameters(), lr=0.01)
    topt = torch.optim.Adam(tmodel.parameters(), lr=0.01)
    x, y = client.from_numpy(data), client.from_numpy(target)
    tx, ty = torch.from_numpy(data), torch.from_numpy(target)
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(tx), ty)
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-10)
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-9)


def test_conv_net_trains_with_sgd(client):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    x = client.randn(16, 1, 8, 8, seed=1)
    y = client.tensor([i % 2 for i in range(16)])
    opt = tensord.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert repr(model).startswith("Sequential(\n  (0): Conv2d(1, 4, kernel_size=(3, 3)")
