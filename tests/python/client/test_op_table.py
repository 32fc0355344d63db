"""Every row of the op table (proto/tensord/v1/ops.json), run against PyTorch.

Each row names how the Python client spells the op (`python`: an expression
over its example inputs, `t` the torch-like module and `F` its functional)
and example inputs. The expression runs in torch 1.13 (on the CPU, one
thread) and through the test daemon with the tensord package, on the same
float64 numbers: the results agree in value, dtype and shape, and for a row
with differentiable inputs the gradients of sum(result * w) agree with
torch's, and the result's grad_fn is torch's. (reshape's row is spelled
x.view: torch 1.13 names a reshape's node ReshapeAliasBackward0, later
releases and tensord ViewBackward0.) A row without a Python
spelling, or one whose spelling fails, fails here: a new op cannot land
without its Python method and its conformance case.

The rows come from tensord._op_table, the module the package's build makes
from the table (build_stubs.py), which is checked against the table itself.
"""
import json
import pathlib
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as torch_F

import tensord
import tensord.nn.functional as tensord_F
import tensord.optim  # noqa: F401 (t.optim in the rows' spellings)
from tensord import _op_table

TABLE = pathlib.Path(__file__).resolve().parents[3] / "proto" / "tensord" / "v1" / "ops.json"
ROWS = [row for row in _op_table.OPS if row["wire"] is not None]  # client ops
# Rows whose grad_fn differs from torch 1.13's on purpose, with the reason.
DELIBERATE_GRAD_FN = {
    "dropout": "torch 1.13 hands back the input itself for p=0 (no node); tensord "
               "records a copy as NativeDropoutBackward0, as torch 2's native_dropout",
}


def test_the_package_carries_the_table():
    table = json.loads(TABLE.read_text())
    assert [r["id"] for r in _op_table.OPS] == [r["id"] for r in table["ops"]]
    for built, row in zip(_op_table.OPS, table["ops"]):
        for key in ("python", "example", "grad_fn", "arity", "wire"):
            assert built[key] == row.get(key), (row["id"], key)


def test_every_client_row_has_a_python_spelling_and_an_example():
    missing = [r["id"] for r in ROWS if not r["python"] or r["example"] is None]
    assert not missing, f"rows without a Python spelling or example: {missing}"


def _inputs(row, make):
    """The row's example inputs, made by make(array, grad)."""
    rng = np.random.default_rng(zlib.crc32(row["id"].encode()))
    made = {}
    differentiable = row["grad_inputs"] != "none"
    for name, spec in row["example"].items():
        if isinstance(spec, list):
            spec = {"shape": spec}
        shape = tuple(spec["shape"])
        if "ints" in spec:
            made[name] = make(rng.integers(0, spec["ints"], shape), False)
        elif spec.get("bool"):
            made[name] = make(rng.random(shape) < 0.5, False)
        else:
            values = rng.uniform(spec.get("low", -2.0), spec.get("high", 2.0), shape)
            made[name] = make(values, spec.get("grad", differentiable))
    return made


def _run(row, t, F, make):
    inputs = _inputs(row, make)
    result = eval(row["python"], {"t": t, "F": F}, dict(inputs))  # noqa: S307 (the table's own text)
    return inputs, result


def _numpy(value):
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return value.detach().cpu().numpy()


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_row_matches_torch(client, row, device):
    """On the CPU device, and on the daemon's first GPU where it has one (the
    GPU issue's machines): the same rows, against torch on the CPU."""
    if device != "cpu" and not client.cuda.is_available():
        pytest.skip("the daemon has no GPU")

    def torch_make(values, grad):
        return torch.tensor(values, requires_grad=grad)

    def tensord_make(values, grad):
        return client.tensor(values, device=device, requires_grad=grad)

    want_inputs, want = _run(row, torch, torch_F, torch_make)
    got_inputs, got = _run(row, tensord, tensord_F, tensord_make)
    if want is None or isinstance(want, bool):
        assert got == want, row["id"]
        return
    assert str(got.dtype) == str(want.dtype), row["id"]
    assert tuple(got.shape) == tuple(want.shape), row["id"]
    np.testing.assert_allclose(_numpy(got), _numpy(want), rtol=1e-10, atol=1e-12,
                               err_msg=row["id"])
    if row["grad_inputs"] == "none" or not want.requires_grad:
        return
    if row["id"] in DELIBERATE_GRAD_FN:
        assert got.grad_fn is None or want.grad_fn is None or \
            got.grad_fn.name() != want.grad_fn.name(), f"{row['id']} matches torch now"
    elif want.grad_fn is None:  # torch gave back the input itself
        assert got.grad_fn is None, row["id"]
    else:
        assert got.grad_fn is not None, row["id"]
        assert got.grad_fn.name() == want.grad_fn.name(), row["id"]
    weight = np.random.default_rng(1).uniform(-1, 1, tuple(want.shape))
    (want * torch.tensor(weight)).sum().backward()
    (got * client.tensor(weight, device=device)).sum().backward()
    for name, x in want_inputs.items():
        if x.grad is None:
            continue
        np.testing.assert_allclose(_numpy(got_inputs[name].grad), x.grad.numpy(),
                                   rtol=1e-9, atol=1e-12, err_msg=f"{row['id']}: grad of {name}")


@pytest.mark.parametrize("name,args", [("LeakyReLU", (0.2,)), ("ELU", ()), ("ELU", (0.5,)),
                                       ("Hardtanh", (-0.5, 1.25)), ("Hardtanh", ())])
def test_modules_of_the_ops_with_arguments_are_torchs(client, name, args):
    values = np.random.default_rng(3).uniform(-2, 2, (3, 4))
    want_module = getattr(torch.nn, name)(*args)
    got_module = getattr(tensord.nn, name)(*args)
    assert repr(got_module) == repr(want_module)
    np.testing.assert_allclose(got_module(client.tensor(values)).numpy(),
                               want_module(torch.tensor(values)).numpy(), rtol=1e-12)
    # Keywords, as torch names them, and what takes none.
    if args:
        names = [n for n, _ in next(r["params"] for r in _op_table.OPS
                                    if r["id"] == got_module._op)]
        assert repr(getattr(tensord.nn, name)(**dict(zip(names, args)))) == repr(want_module)
    with pytest.raises(TypeError):
        getattr(tensord.nn, name)(bogus=1)
