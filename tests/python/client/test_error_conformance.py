"""PyTorch's exact exceptions: every error the planner raises, tried in torch and through tensord, same class and same words.

Each case is an expression written once against a torch-like namespace
(`t`: torch or tensord; `F`: torch.nn.functional or tensord.nn.functional)
and run both ways: in Debian's torch 1.13 (test-only, on the CPU, one
thread) and through the test daemon with the tensord package. A case passes
when both raise and the exceptions agree in class (IndexError, ValueError,
TypeError or RuntimeError, tensord's chosen from what the server sent, not
from the message) and in str() exactly — or when both succeed. The cases are
generated over every rule the planner enforces: broadcasting, in-place
casting, dims out of range, matmul's every path, reshape/permute/narrow/
select/cat/stack, reductions (dtypes, empty inputs), unary and softmax
dtypes, where, clamp, linear, conv2d and pooling arguments, losses' inputs
and targets, dropout and autograd's errors.

DELIBERATE lists the cases where tensord differs on purpose, with the reason
(docs/python.md "PyTorch's errors" has the same table); such a case must
still differ, so the list cannot go stale.
"""
import itertools

import pytest
import torch
import torch.nn.functional as torch_F

import tensord
import tensord.nn.functional as tensord_F


def _cases():
    """(id, fn(t, F)) for every generated case."""
    cases = []

    def add(name, fn):
        cases.append((name, fn))

    # Broadcasting, every binary op.
    binary = {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b, "pow": lambda a, b: a ** b,
        "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
        "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    }
    functions = {"maximum": "maximum", "minimum": "minimum"}
    bad_pairs = [((2, 3), (4,)), ((2, 3), (3, 2)), ((5,), (4,)), ((2, 1, 3), (4, 2)),
                 ((3, 1, 2), (4, 5, 2))]
    for (name, op), (sa, sb) in itertools.product(binary.items(), bad_pairs):
        add(f"{name}{sa}{sb}", lambda t, F, op=op, sa=sa, sb=sb: op(t.ones(*sa), t.ones(*sb)))
    for (name, fn), (sa, sb) in itertools.product(functions.items(), bad_pairs[:3]):
        add(f"{name}{sa}{sb}",
            lambda t, F, fn=fn, sa=sa, sb=sb: getattr(t, fn)(t.ones(*sa), t.ones(*sb)))

    # In-place: the broadcast shape must be the target's, the result castable.
    for name in ("add_", "sub_", "mul_", "div_"):
        add(f"{name} grows", lambda t, F, n=name: getattr(t.ones(3), n)(t.ones(2, 3)))
        add(f"{name} float into long",
            lambda t, F, n=name: getattr(t.ones(3, dtype=t.int64), n)(t.ones(3)))
        add(f"{name} float number into long",
            lambda t, F, n=name: getattr(t.ones(3, dtype=t.int64), n)(1.5))
    add("div_ long by long", lambda t, F: t.ones(3, dtype=t.int64).div_(t.ones(3, dtype=t.int64)))

    # Dimensions out of range: IndexError, for every op that takes a dim.
    dim_ops = {
        "sum": lambda x, d: x.sum(d), "mean": lambda x, d: x.mean(d),
        "softmax": lambda x, d: x.softmax(d), "log_softmax": lambda x, d: x.log_softmax(d),
        "argmax": lambda x, d: x.argmax(d), "norm": lambda x, d: x.norm(dim=d),
        "transpose0": lambda x, d: x.transpose(0, d), "transpose1": lambda x, d: x.transpose(d, 0),
        "narrow": lambda x, d: x.narrow(d, 0, 1), "select": lambda x, d: x.select(d, 0),
        "unsqueeze": lambda x, d: x.unsqueeze(d + (1 if d >= 0 else -1)),
        "flatten": lambda x, d: x.flatten(d),
        "permute": lambda x, d: x.permute(*([d] + list(range(1, x.dim())))),
    }
    for (name, op), shape in itertools.product(dim_ops.items(), [(4,), (2, 3), (2, 3, 4)]):
        for d in (len(shape), -len(shape) - 1, 7):
            add(f"{name}{shape} dim {d}",
                lambda t, F, op=op, shape=shape, d=d: op(t.ones(*shape), d))
    add("cat dim", lambda t, F: t.cat([t.ones(2, 3), t.ones(2, 3)], 2))
    add("cat dim -3", lambda t, F: t.cat([t.ones(2, 3), t.ones(2, 3)], -3))
    add("sum dims repeated", lambda t, F: t.ones(2, 3).sum((0, 0)))
    add("sum dims repeated -2", lambda t, F: t.ones(2, 3).sum((0, -2)))
    add("sum 0-d dim 1", lambda t, F: t.ones(()).sum(1))
    add("transpose 0-d", lambda t, F: t.ones(()).transpose(0, 1))

    # matmul: every path of torch's dispatch, shapes and dtypes.
    shapes = [((3,), (4,)), ((2, 3), (4,)), ((4,), (2, 3)), ((2, 3), (4, 5)),
              ((2, 2, 3), (4, 5)), ((2, 2, 3), (4,)), ((2, 3), (2, 4, 5)),
              ((3,), (2, 4, 5)), ((3,), (2, 2, 4, 5)), ((2, 2, 3), (2, 4, 5)),
              ((2, 2, 3), (3, 3, 5)), ((2, 2, 2, 3), (2, 2, 4, 5)), ((2, 2, 3), (3, 4, 5)),
              ((), (3,)), ((3,), ()), ((), ())]
    for sa, sb in shapes:
        add(f"matmul{sa}{sb}", lambda t, F, sa=sa, sb=sb: t.matmul(t.ones(sa), t.ones(sb)))
        add(f"@{sa}{sb}", lambda t, F, sa=sa, sb=sb: t.ones(sa) @ t.ones(sb))
    good = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 2)), ((2, 3), (3, 2)),
            ((2, 2, 3), (3, 5)), ((2, 2, 3), (3,)), ((2, 3), (2, 3, 5)), ((3,), (2, 3, 4)),
            ((2, 2, 3), (2, 3, 5))]
    for (sa, sb), (da, db) in itertools.product(
            good, [("float32", "float64"), ("float64", "float32"), ("int64", "int32"),
                   ("float32", "int64")]):
        add(f"matmul{sa}{sb} {da} {db}",
            lambda t, F, sa=sa, sb=sb, da=da, db=db:
            t.ones(*sa, dtype=getattr(t, da)) @ t.ones(*sb, dtype=getattr(t, db)))
    for sa, sb in good:
        add(f"matmul{sa}{sb} bool", lambda t, F, sa=sa, sb=sb:
            t.ones(*sa, dtype=t.bool) @ t.ones(*sb, dtype=t.bool))

    # linear = matmul(x, w.t()) (+ bias).
    for sx, sw in [((2, 3), (4, 5)), ((2, 2, 3), (4, 5)), ((3,), (4, 5)), ((), (4, 5)),
                   ((2, 3), (4, 3, 1))]:
        add(f"linear{sx}{sw}", lambda t, F, sx=sx, sw=sw: F.linear(t.ones(sx), t.ones(sw)))
    add("linear bias 2-D", lambda t, F: F.linear(t.ones(2, 3), t.ones(4, 3), t.ones(5)))
    add("linear bias 3-D", lambda t, F: F.linear(t.ones(2, 2, 3), t.ones(4, 3), t.ones(5)))
    add("linear dtypes", lambda t, F: F.linear(t.ones(2, 3), t.ones(4, 3, dtype=t.float64)))

    # Shapes: reshape, permute, narrow, select, cat, stack, t().
    for shape in [(4, 2), (5,), (-1, 4), (-1, -1), (2, -2), (7, -1), (0, -1)]:
        add(f"reshape{shape}", lambda t, F, shape=shape: t.ones(2, 3).reshape(*shape))
    add("view_as", lambda t, F: t.ones(2, 3).view_as(t.ones(4)))
    add("permute short", lambda t, F: t.ones(2, 3).permute(0))
    add("permute long", lambda t, F: t.ones(2, 3).permute(0, 1, 2))
    add("permute repeated", lambda t, F: t.ones(2, 3).permute(0, 0))
    add("permute repeated -1", lambda t, F: t.ones(2, 3, 4).permute(2, 1, -1))
    for start, length in [(2, 5), (0, 4), (0, -1), (5, 0), (-5, 1), (3, 1), (-1, 2), (3, 0)]:
        add(f"narrow {start} {length}",
            lambda t, F, s=start, n=length: t.ones(2, 3).narrow(1, s, n))
    add("narrow 0-d", lambda t, F: t.ones(()).narrow(0, 0, 1))
    for index in (2, -3, 5):
        add(f"select {index}", lambda t, F, i=index: t.ones(2, 3).select(0, i))
    add("select 0-d", lambda t, F: t.ones(()).select(0, 0))
    add("index", lambda t, F: t.ones(2, 3)[5])
    add("cat sizes", lambda t, F: t.cat([t.ones(2, 3), t.ones(2, 4)]))
    add("cat sizes dim 1", lambda t, F: t.cat([t.ones(2, 3), t.ones(3, 3)], 1))
    add("cat sizes third", lambda t, F: t.cat([t.ones(2, 3), t.ones(2, 3), t.ones(2, 4)]))
    add("cat ranks", lambda t, F: t.cat([t.ones(2, 3), t.ones(3)]))
    add("cat ranks 3", lambda t, F: t.cat([t.ones(2, 3), t.ones(2, 3, 1)]))
    add("cat 0-d", lambda t, F: t.cat([t.ones(()), t.ones(2)]))
    add("cat 0-d second", lambda t, F: t.cat([t.ones(2), t.ones(())]))
    add("cat none", lambda t, F: t.cat([]))
    add("stack sizes", lambda t, F: t.stack([t.ones(2), t.ones(3)]))
    add("stack sizes third", lambda t, F: t.stack([t.ones(2, 3), t.ones(2, 3), t.ones(3, 2)]))
    add("stack none", lambda t, F: t.stack([]))
    add("t 3-D", lambda t, F: t.ones(2, 3, 4).t())

    # Reductions: dtypes and empty inputs.
    for dtype in ("int64", "int32", "bool"):
        add(f"mean {dtype}", lambda t, F, d=dtype: t.ones(2, 3, dtype=getattr(t, d)).mean())
        add(f"mean dim {dtype}",
            lambda t, F, d=dtype: t.ones(2, 3, dtype=getattr(t, d)).mean(0))
        add(f"norm {dtype}", lambda t, F, d=dtype: t.ones(2, 3, dtype=getattr(t, d)).norm())
    for name in ("max", "min", "argmax", "argmin"):
        for shape in [(0,), (2, 0), (0, 3)]:
            add(f"{name}{shape}", lambda t, F, n=name, s=shape: getattr(t.ones(*s), n)())
        add(f"{name}(2, 0) dim 1", lambda t, F, n=name: getattr(t.ones(2, 0), n)(1))
        add(f"{name}(0, 3) dim 0", lambda t, F, n=name: getattr(t.ones(0, 3), n)(0))

    # Unary and softmax dtypes.
    add("neg bool", lambda t, F: -t.ones(2, dtype=t.bool))
    add("abs bool", lambda t, F: t.ones(2, dtype=t.bool).abs())
    add("relu bool", lambda t, F: t.ones(2, dtype=t.bool).relu())
    add("sub bool", lambda t, F: t.ones(2, dtype=t.bool) - t.ones(2, dtype=t.bool))
    add("sub bool number", lambda t, F: t.ones(2, dtype=t.bool) - True)
    add("pow bool", lambda t, F: t.ones(2, dtype=t.bool) ** t.ones(2, dtype=t.bool))
    for dtype in ("int64", "int32", "bool"):
        add(f"silu {dtype}", lambda t, F, d=dtype: F.silu(t.ones(2, dtype=getattr(t, d))))
        add(f"gelu {dtype}", lambda t, F, d=dtype: F.gelu(t.ones(2, dtype=getattr(t, d))))
        for name in ("leaky_relu", "elu", "hardtanh"):
            add(f"{name} {dtype}",
                lambda t, F, d=dtype, n=name: getattr(F, n)(t.ones(2, dtype=getattr(t, d))))
        for dim in (0, 1, -1):
            add(f"softmax {dtype} dim {dim}",
                lambda t, F, d=dtype, dim=dim: t.ones(2, 3, dtype=getattr(t, d)).softmax(dim))
            add(f"log_softmax {dtype} dim {dim}",
                lambda t, F, d=dtype, dim=dim: t.ones(2, 3, dtype=getattr(t, d)).log_softmax(dim))
    for exponent in (-1, -2):
        add(f"long ** {exponent}", lambda t, F, e=exponent: t.ones(2, dtype=t.int64) ** e)
        add(f"int ** {exponent}", lambda t, F, e=exponent: t.ones(2, dtype=t.int32) ** e)

    # where, clamp.
    for dtype in ("float32", "int64", "int32"):
        add(f"where condition {dtype}",
            lambda t, F, d=dtype: t.where(t.ones(2, dtype=getattr(t, d)), t.ones(2), t.ones(2)))
    add("where shapes", lambda t, F: t.where(t.ones(2, dtype=t.bool), t.ones(3), t.ones(2)))
    add("where condition shape", lambda t, F: t.where(t.ones(3, dtype=t.bool), t.ones(2), t.ones(2)))
    add("clamp nothing", lambda t, F: t.ones(2).clamp())

    # conv2d and pooling arguments.
    conv = {
        "channels": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 2, 3, 3)),
        "small input": lambda t, F: F.conv2d(t.ones(1, 3, 2, 2), t.ones(4, 3, 3, 3)),
        "rank 2": lambda t, F: F.conv2d(t.ones(3, 8), t.ones(4, 3, 3, 3)),
        "rank 5": lambda t, F: F.conv2d(t.ones(1, 1, 3, 8, 8), t.ones(4, 3, 3, 3)),
        "weight rank 3": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 3, 3)),
        "groups": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 1, 3, 3), groups=2),
        "groups weight": lambda t, F: F.conv2d(t.ones(1, 4, 8, 8), t.ones(3, 2, 3, 3), groups=2),
        "stride 0": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 3, 3, 3), stride=0),
        "padding -1": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 3, 3, 3), padding=-1),
        "dilation 0": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 3, 3, 3), dilation=0),
        "stride 3 values": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 3, 3, 3),
                                                 stride=(1, 1, 1)),
        "bias size": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 3, 3, 3), t.ones(5)),
        "weight dtype": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8),
                                              t.ones(4, 3, 3, 3, dtype=t.float64)),
        "bias dtype": lambda t, F: F.conv2d(t.ones(1, 3, 8, 8), t.ones(4, 3, 3, 3),
                                            t.ones(4, dtype=t.float64)),
    }
    for name, fn in conv.items():
        add(f"conv2d {name}", fn)
    for pool in ("max_pool2d", "avg_pool2d"):
        pool_cases = {
            "kernel too big": lambda t, F, p=pool: getattr(F, p)(t.ones(1, 1, 2, 2), 3),
            "padding over half": lambda t, F, p=pool: getattr(F, p)(t.ones(1, 1, 8, 8), 2,
                                                                   padding=2),
            "stride 0": lambda t, F, p=pool: getattr(F, p)(t.ones(1, 1, 8, 8), 2, stride=0),
            "kernel 0": lambda t, F, p=pool: getattr(F, p)(t.ones(1, 1, 8, 8), 0),
            "rank 2": lambda t, F, p=pool: getattr(F, p)(t.ones(8, 8), 2),
            "kernel 3 values": lambda t, F, p=pool: getattr(F, p)(t.ones(1, 1, 8, 8), (2, 2, 2)),
            "padding -1": lambda t, F, p=pool: getattr(F, p)(t.ones(1, 1, 8, 8), 2, padding=-1),
        }
        for name, fn in pool_cases.items():
            add(f"{pool} {name}", fn)
    add("max_pool2d dilation 0", lambda t, F: F.max_pool2d(t.ones(1, 1, 8, 8), 2, dilation=0))
    add("max_pool2d long", lambda t, F: F.max_pool2d(t.ones(1, 1, 4, 4, dtype=t.int64), 2))
    add("adaptive_avg_pool2d rank 2", lambda t, F: F.adaptive_avg_pool2d(t.ones(8, 8), 2))
    add("adaptive_avg_pool2d size 0",
        lambda t, F: F.adaptive_avg_pool2d(t.ones(1, 1, 8, 8), 0))

    # Losses.
    L = lambda t, values, dtype=None: t.tensor(values, dtype=dtype)  # noqa: E731
    losses = {
        "nll target high": lambda t, F: F.nll_loss(t.ones(2, 3), L(t, [0, 5])),
        "nll target negative": lambda t, F: F.nll_loss(t.ones(2, 3), L(t, [-1, 1])),
        "nll unbatched high": lambda t, F: F.nll_loss(t.ones(3), L(t, 3)),
        "nll batch": lambda t, F: F.nll_loss(t.ones(3, 3), L(t, [0, 1])),
        "nll 2-D target": lambda t, F: F.nll_loss(t.ones(2, 3), t.zeros(2, 2, dtype=t.int64)),
        "nll short 2-D target": lambda t, F: F.nll_loss(t.ones(2, 3), L(t, [[0, 1]])),
        "nll 0-d target": lambda t, F: F.nll_loss(t.ones(2, 3), L(t, 1)),
        "nll 0-d input": lambda t, F: F.nll_loss(t.ones(()), L(t, 1)),
        "nll unbatched 1-D target": lambda t, F: F.nll_loss(t.ones(3), L(t, [1])),
        "nll float target": lambda t, F: F.nll_loss(t.ones(2, 3), L(t, [0.0, 1.0])),
        "nll int32 target": lambda t, F: F.nll_loss(t.ones(2, 3), L(t, [0, 1], t.int32)),
        "nll long input": lambda t, F: F.nll_loss(t.ones(2, 3, dtype=t.int64), L(t, [0, 1])),
        "ce target high": lambda t, F: F.cross_entropy(t.ones(2, 3), L(t, [0, 3])),
        "ce batch": lambda t, F: F.cross_entropy(t.ones(3, 3), L(t, [0, 1])),
        "ce float target": lambda t, F: F.cross_entropy(t.ones(2, 3), L(t, [0.0, 1.0])),
        "ce int32 target": lambda t, F: F.cross_entropy(t.ones(2, 3), L(t, [0, 1], t.int32)),
        "ce long input": lambda t, F: F.cross_entropy(t.ones(2, 3, dtype=t.int64), L(t, [0, 1])),
        "ce 2-D target": lambda t, F: F.cross_entropy(t.ones(2, 3), L(t, [[0, 1]])),
        "mse shapes": lambda t, F: F.mse_loss(t.ones(2, 3), t.ones(4)),
        "mse long": lambda t, F: F.mse_loss(t.ones(2, dtype=t.int64), t.ones(2, dtype=t.int64)),
        "mse bool": lambda t, F: F.mse_loss(t.ones(2, dtype=t.bool), t.ones(2, dtype=t.bool)),
    }
    for name, fn in losses.items():
        add(name, fn)
    for p in (1.5, -0.25, 2.0, 1.0000001):
        add(f"dropout p={p}", lambda t, F, p=p: F.dropout(t.ones(4), p=p))
    add("dropout long", lambda t, F: F.dropout(t.ones(4, dtype=t.int64), p=0.5))

    # Autograd.
    add("backward of a non-scalar",
        lambda t, F: t.ones(2, requires_grad=True).exp().backward())
    add("backward without grad_fn", lambda t, F: t.ones(2).sum().backward())
    add("backward gradient shape", lambda t, F: t.ones(2, requires_grad=True).sum().backward(
        t.ones(3)))
    add("requires_grad_ long", lambda t, F: t.ones(2, dtype=t.int64).requires_grad_())
    add("requires_grad long", lambda t, F: t.ones(2, dtype=t.int64, requires_grad=True))
    add("in-place on a leaf", lambda t, F: t.ones(2, requires_grad=True).add_(1))
    # The optimizers' hyperparameters, checked in torch's constructors.
    optimizers = {
        "sgd lr": ("SGD", dict(lr=-0.1)), "sgd momentum": ("SGD", dict(lr=0.1, momentum=-0.5)),
        "sgd weight_decay": ("SGD", dict(lr=0.1, weight_decay=-1)),
        "sgd nesterov": ("SGD", dict(lr=0.1, nesterov=True)),
        "sgd nesterov dampening": ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1,
                                               nesterov=True)),
        "adam lr": ("Adam", dict(lr=-1e-3)), "adam nan lr": ("Adam", dict(lr=float("nan"))),
        "adam eps": ("Adam", dict(eps=-1e-8)), "adam beta 0": ("Adam", dict(betas=(1.0, 0.999))),
        "adam beta 1": ("Adam", dict(betas=(0.9, -0.5))),
        "adamw weight_decay": ("AdamW", dict(weight_decay=-0.01)),
        "adamw fine": ("AdamW", dict(lr=0.5, betas=(0.5, 0.5))),
    }
    for name, (kind, kwargs) in optimizers.items():
        add(name, lambda t, F, kind=kind, kwargs=kwargs: getattr(t.optim, kind)(
            [t.ones(2, requires_grad=True)], **kwargs))
    add("item of many", lambda t, F: t.ones(2, 3).item())
    add("item of none", lambda t, F: t.ones(0).item())
    return cases


# Where tensord differs from torch 1.13 on purpose (docs/python.md).
HALF = "tensord computes float16 on the CPU (in float32), which torch 1.13's CPU kernels lack"
DELIBERATE = {
    "sub bool number": "a Python bool is sent as an integer (the wire's Scalar has no bool), "
                       "so bool - True computes in int64 where torch refuses bool subtraction",
}

CASES = _cases()


def _outcome(fn, t, F, sync=None):
    """("ok", "") or (torch's class name for the error, its str())."""
    try:
        fn(t, F)
        if sync is not None:
            sync()
        return ("ok", "")
    except Exception as e:  # noqa: BLE001 (every error is compared)
        for cls in (IndexError, ValueError, TypeError, NotImplementedError, RuntimeError):
            if isinstance(e, cls):
                return (cls.__name__, str(e))
        return (type(e).__name__, str(e))


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_there_are_enough_cases():
    assert len(CASES) >= 300, len(CASES)
    assert len({name for name, _ in CASES}) == len(CASES), "case names repeat"
    assert set(DELIBERATE) <= {name for name, _ in CASES}


@pytest.mark.parametrize("name,fn", CASES, ids=[name for name, _ in CASES])
def test_tensord_raises_what_torch_raises(client, name, fn):
    with _quiet():
        want = _outcome(fn, torch, torch_F)
    got = _outcome(fn, tensord, tensord_F, sync=client.synchronize)
    if name in DELIBERATE:
        assert got != want, f"{name} now matches torch: drop it from DELIBERATE"
        return
    assert got == want, f"{name}:\n  torch:   {want}\n  tensord: {got}"


class _quiet:
    """Silences torch's UserWarnings (mse_loss's broadcasting warning)."""

    def __enter__(self):
        import warnings
        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)
