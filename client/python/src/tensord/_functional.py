"""The functional forms of tensord's ops: torch.cat/where/stack and torch.nn.functional's.

Contract: each function takes tensord Tensors (of one client; numbers where
PyTorch takes them), sends one op (or, for stack, a few) through the
tensors' client and returns the result Tensor; argument names and defaults
are PyTorch's. What the server lacks raises NotImplementedError naming the
missing option (ceil_mode, return_indices, ...). tensord re-exports the
torch-level ones; tensord.nn.functional the torch.nn.functional ones.
Stateless.
"""
import ast
import inspect
import re

from tensord import _op_table, _wire
from tensord._tensor import Tensor, operand, where  # noqa: F401 (where: re-exported)
from tensord._tensor import _ZERO_GRAD_ARGS
from tensord.v1 import tensord_pb2 as pb


def _first_tensor(*values):
    for v in values:
        if isinstance(v, Tensor):
            return v
    raise TypeError("expected at least one tensord Tensor")


def _pair(value):
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


# --- torch.* ------------------------------------------------------------------

def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    first = _first_tensor(*tensors)
    xs = [first._same_client(t) for t in tensors]
    dim = int(dim)
    planned = first._client._dispatcher.plan_cat([t._info for t in tensors], dim)
    return first._run(planned, cat=_CAT_ARGS(xs=xs, dim=dim))


concat = cat


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors[1:], 1):
        if t.shape != tensors[0].shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} "
                f"at entry 0 and {list(t.shape)} at entry {i}")
    return cat([t.unsqueeze(dim) for t in tensors], dim)


def maximum(input, other):
    return input.maximum(other)


def minimum(input, other):
    return input.minimum(other)


def zero_grad(tensors):
    """Sets each tensor's grad to None, in one op (the tensors may be on any devices)."""
    tensors = list(tensors)
    if tensors:
        tensors[0]._client._dispatcher.plan_zero_grad([t._info for t in tensors])
        handles = [t._info.handle for t in tensors]
        tensors[0]._run(target=handles[0], zero_grad=_ZERO_GRAD_ARGS(
            tensors=[_wire.operand(h) for h in handles]))


def matmul(input, other):
    return input.matmul(other)


def clamp(input, min=None, max=None):
    return input.clamp(min, max)


# --- torch.nn.functional ------------------------------------------------------

def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate}")
    return input._unary(pb.GELU if approximate == "none" else pb.GELU_TANH)


def softmax(input, dim):
    return input.softmax(dim)


def log_softmax(input, dim):
    return input.log_softmax(dim)


# Every op's args are written as wire bytes (_wire.encoder).
_CAT_ARGS = _wire.encoder(pb.CatArgs)
_DROPOUT_ARGS = _wire.encoder(pb.DropoutArgs)
_LINEAR_ARGS = _wire.encoder(pb.LinearArgs)
_CONV2D_ARGS = _wire.encoder(pb.Conv2dArgs)
_POOL2D_ARGS = _wire.encoder(pb.Pool2dArgs)
_LOSS_ARGS = _wire.encoder(pb.LossArgs)


def _operands(owner, /, **tensors):
    """The wire operands of `tensors` (None left out), each checked to be
    owner's client's."""
    fields = {}
    for name, t in tensors.items():
        if t is not None:
            owner._check_client(t)
            fields[name] = _wire.operand(t._info.handle)
    return fields


def linear(input, weight, bias=None):
    fields = _operands(input, x=input, weight=weight, bias=bias)
    planned = input._client._dispatcher.plan_linear(
        input._info, weight._info, bias._info if bias is not None else None)
    return input._run(planned, linear=_LINEAR_ARGS(**fields))


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    if isinstance(padding, str):
        raise NotImplementedError("tensord's conv2d takes numeric padding only")
    fields = _operands(input, x=input, weight=weight, bias=bias)
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    planned = input._client._dispatcher.plan_conv2d(
        input._info, weight._info, bias._info if bias is not None else None,
        stride, padding, dilation, int(groups))
    return input._run(planned, conv2d=_CONV2D_ARGS(
        stride=stride, padding=padding, dilation=dilation, groups=int(groups), **fields))


def _pool(input, op, kernel_size=None, stride=None, padding=None, dilation=None,
          output_size=None, exclude_pad=False):
    """Runs a pool2d op, planned at the line (each window list _pair's; None: [])."""
    kernel_size, stride, padding, dilation, output_size = (
        v if v is not None else [] for v in (kernel_size, stride, padding, dilation, output_size))
    planned = input._client._dispatcher.plan_pool2d(
        op, input._info, kernel_size, stride, padding, dilation, output_size)
    return input._run(planned, pool2d=_POOL2D_ARGS(
        op=op, x=_wire.operand(input._info.handle), kernel_size=kernel_size, stride=stride,
        padding=padding, dilation=dilation, exclude_pad=exclude_pad,
        output_size=output_size))


def _no_ceil(ceil_mode, return_indices=False):
    if ceil_mode:
        raise NotImplementedError("tensord's pooling has no ceil_mode yet")
    if return_indices:
        raise NotImplementedError("tensord's max_pool2d does not return indices")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    _no_ceil(ceil_mode, return_indices)
    return _pool(input, pb.MAX_POOL, kernel_size=_pair(kernel_size), stride=_pair(stride),
                 padding=_pair(padding), dilation=_pair(dilation))


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    _no_ceil(ceil_mode)
    if divisor_override is not None:
        raise NotImplementedError("tensord's avg_pool2d has no divisor_override")
    return _pool(input, pb.AVG_POOL, kernel_size=_pair(kernel_size), stride=_pair(stride),
                 padding=_pair(padding), exclude_pad=not count_include_pad)


def adaptive_avg_pool2d(input, output_size):
    return _pool(input, pb.ADAPTIVE_AVG_POOL, output_size=_pair(output_size))


def dropout(input, p=0.5, training=True, inplace=False, seed=None):
    if inplace:
        raise NotImplementedError("tensord's dropout is not in place")
    p, training = float(p), bool(training)
    fields = {"x": operand(input), "p": p, "training": training}
    if training:  # after manual_seed(s), the client's next seed
        seed = input._client._seed(seed)
    if seed is not None:
        fields["seed"] = int(seed)
    planned = input._client._dispatcher.plan_dropout(input._info, p, training)
    return input._run(planned, dropout=_DROPOUT_ARGS(**fields))


_REDUCTIONS = {"mean": pb.REDUCTION_MEAN, "sum": pb.REDUCTION_SUM, "none": pb.REDUCTION_NONE}


def _loss(op, input, target, reduction, ignore_index=None):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    fields = _operands(input, input=input, target=target)
    if ignore_index is not None:
        fields["ignore_index"] = int(ignore_index)
    planned = input._client._dispatcher.plan_loss(op, input._info, target._info,
                                                  _REDUCTIONS[reduction])
    return input._run(planned, loss=_LOSS_ARGS(op=op, reduction=_REDUCTIONS[reduction],
                                               **fields))


def cross_entropy(input, target, reduction="mean", ignore_index=-100):
    return _loss(pb.CROSS_ENTROPY, input, target, reduction, ignore_index)


def nll_loss(input, target, reduction="mean", ignore_index=-100):
    return _loss(pb.NLL_LOSS, input, target, reduction, ignore_index)


def mse_loss(input, target, reduction="mean"):
    return _loss(pb.MSE_LOSS, input, target, reduction)


def _unary_function(row):
    """torch.nn.functional.<row>(input, <params>..., inplace=False) for an op
    table row of a unary op marked `method` (its numeric arguments: `params`)."""
    params = row["params"] or []
    names = [name for name, _ in params]
    defaults = dict(params)
    op = getattr(pb, row["wire"].split()[1])

    def function(input, *args, inplace=False, **kwargs):
        if inplace:
            raise NotImplementedError(f"tensord's {row['id']} is not in place")
        if len(args) > len(names):
            raise TypeError(f"{row['id']}() takes from 1 to {len(names) + 2} positional "
                            f"arguments but {len(args) + 1} were given")
        values = dict(defaults, **dict(zip(names, args)))
        for name, value in kwargs.items():
            if name not in values:
                raise TypeError(f"{row['id']}() got an unexpected keyword argument '{name}'")
            values[name] = value
        return input._unary(op, [float(values[name]) for name in names])

    function.__name__ = function.__qualname__ = row["id"]
    function.__signature__ = inspect.Signature(
        [inspect.Parameter("input", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                             default=defaults[name]) for name in names]
        + [inspect.Parameter("inplace", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                             default=False)])
    function.__doc__ = (f"torch.nn.functional.{row['id']}{function.__signature__}, on the "
                        "server (from the op table's row).")
    return function


# The unary ops: one function per op table row marked `method`, with the
# row's `params` as its arguments (every unary row but gelu's).
UNARY_FROM_TABLE = [row["id"] for row in _op_table.OPS if row.get("method")]
for _row in _op_table.OPS:
    if _row.get("method"):
        globals()[_row["id"]] = _unary_function(_row)
del _row


def _parse_func(row):
    """A row's `func` ("name(Tensor input, Tensor? weight=None, ...,
    float eps=1e-05)") as [(type, name, default)], inspect.Parameter.empty
    where there is no default."""
    arguments = re.fullmatch(r"\w+\((.*)\)", row["func"]).group(1)
    parsed = []
    for part in arguments.split(", "):
        declaration, has_default, default = part.partition("=")
        type_, name = declaration.split(" ")
        parsed.append((type_, name, ast.literal_eval(default) if has_default
                       else inspect.Parameter.empty))
    return parsed


def _ints(value):
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


# A norm's tensors, as Dispatcher.plan_norm takes them (torch's argument names).
_NORM_TENSORS = ("input", "weight", "bias", "running_mean", "running_var")


def _table_function(row):
    """torch.nn.functional.<row>(...) for an op table row with a `func`: its
    arguments (torch's names and defaults) fill the wire message's fields of
    the same names."""
    arguments = _parse_func(row)
    field, value = row["wire"].split(" ")
    encode = _wire.encoder(getattr(
        pb, pb.Op.DESCRIPTOR.fields_by_name[field].message_type.name))
    op = getattr(pb, value)
    norm = row["kind"] == "Norm"  # planned at the line (Dispatcher.plan_norm)
    signature = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
         for _, name, default in arguments])

    def function(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        input = values[arguments[0][1]]
        fields = {"op": op}
        for type_, name, _ in arguments:
            v = values[name]
            if type_ == "Tensor":
                fields[name] = operand(v) if v is input else input._same_client(v)
            elif type_ == "Tensor?":
                if v is not None:
                    fields[name] = input._same_client(v)
            elif type_ == "int[]":
                fields[name] = _ints(v)
            else:
                fields[name] = {"bool": bool, "int": int, "float": float}[type_](v)
        planned = None
        if norm:
            tensors = [values.get(name) for name in _NORM_TENSORS]
            planned = input._client._dispatcher.plan_norm(
                op, *(t._info if t is not None else None for t in tensors),
                tuple(fields.get("normalized_shape", ())), bool(fields.get("training", False)))
        return input._run(planned, **{field: encode(**fields)})

    function.__name__ = function.__qualname__ = row["id"]
    function.__signature__ = signature
    function.__doc__ = f"{row['id']}{signature}: {row['doc']} (from the op table's row)"
    return function


# The op table's rows with a `func` (the normalisations).
for _row in _op_table.OPS:
    if _row.get("func"):
        globals()[_row["id"]] = _table_function(_row)
del _row
