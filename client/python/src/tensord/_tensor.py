"""Tensor: a handle on a tensor that lives on a tensord device, used as a torch.Tensor.

Contract:
  * A Tensor names one remote tensor of its client's session and carries the
    metadata the server last sent for it (shape, dtype, device, autograd
    state). Each op is one message through the client's Dispatcher; the
    result stays on the server; nothing is fetched except by numpy(),
    item(), tolist(), torch(), repr()/str() (which fetch for display, on
    any device, as PyTorch prints CUDA tensors), bool() and int()/float(),
    and __dlpack__ (the DLPack protocol, for tensors on a server cpu
    device, as numpy(): it exports a host copy fetched at that moment, so
    torch.from_dlpack(x) and np.from_dlpack(x) get the values, not shared
    memory).
  * One Python object per handle: an op whose result is one of its operands
    (in-place ops, requires_grad_, x.to(x.device)) returns that very object,
    so `x.cuda() is x` when x is already there, as in PyTorch.
  * The remote tensor is released when the object is garbage collected,
    without blocking (Session.drop).
  * Errors: whatever the server says, as TensordError (a RuntimeError with
    the server's message, e.g. PyTorch's same-device error; of torch's class
    where the server names one, _errors.py); numpy() of a non-cpu tensor
    raises PyTorch's TypeError; indexing out of range IndexError; an operand
    from another client the C++ client's INVALID_ARGUMENT error.
  * Methods cover every op of tensord.v1.Op that a torch.Tensor has as a
    method; functional forms (cat, where, conv2d, losses, ...) are in
    tensord.functional / tensord.nn.functional.
Thread-safety: a Tensor may be used from several threads; in-place ops on
one tensor from several threads race as they do in PyTorch.
"""
import collections
import math
import numbers

import grpc
import numpy as np

from tensord import _dtypes, _wire
from tensord._device import device as Device
from tensord._device import name_of
from tensord._errors import TensordError, make_error
from tensord._repr import format_tensor
from tensord.v1 import tensord_pb2 as pb


class Size(tuple):
    """torch.Size: a tuple of dims that prints as torch.Size([2, 3])."""

    def __repr__(self):
        return f"torch.Size({list(self)})"

    def numel(self):
        return math.prod(self)


class GradFn:
    """The name of the op that made a tensor, as its .grad_fn (a torch Node's name)."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name

    def __repr__(self):
        return f"<{self._name} object>"


ValuesIndices = collections.namedtuple("ValuesIndices", ["values", "indices"])


def _is_number(value):
    return isinstance(value, (numbers.Number, np.bool_)) and not isinstance(value, complex)


def _number(value):
    """A Python or numpy number as the int or float the wire carries it as."""
    if isinstance(value, (bool, np.bool_, numbers.Integral)):
        return int(value)
    return float(value)


# Every op's args are written as wire bytes (_wire.encoder): no protobuf
# object per op.
_SCALAR = _wire.encoder(pb.Scalar)
_BINARY_ARGS = _wire.encoder(pb.BinaryArgs)
_UNARY_ARGS = _wire.encoder(pb.UnaryArgs)
_CLAMP_ARGS = _wire.encoder(pb.ClampArgs)
_SOFTMAX_ARGS = _wire.encoder(pb.SoftmaxArgs)
_MATMUL_ARGS = _wire.encoder(pb.MatMulArgs)
_REDUCE_ARGS = _wire.encoder(pb.ReduceArgs)
_VIEW_ARGS = {"reshape": _wire.encoder(pb.ReshapeArgs), "permute": _wire.encoder(pb.PermuteArgs),
              "transpose": _wire.encoder(pb.TransposeArgs),
              "narrow": _wire.encoder(pb.NarrowArgs), "select": _wire.encoder(pb.SelectArgs)}
_CAST_ARGS = _wire.encoder(pb.CastArgs)
_IN_PLACE_ARGS = _wire.encoder(pb.InPlaceArgs)
_REQUIRES_GRAD_ARGS = _wire.encoder(pb.RequiresGradArgs)
_BACKWARD_ARGS = _wire.encoder(pb.BackwardArgs)
_GRAD_ARGS = _wire.encoder(pb.GradArgs)
_ZERO_GRAD_ARGS = _wire.encoder(pb.ZeroGradArgs)
_DETACH_ARGS = _wire.encoder(pb.DetachArgs)
_WHERE_ARGS = _wire.encoder(pb.WhereArgs)


def scalar_bytes(number):
    """The serialized pb.Scalar of an int or float (_number's)."""
    if isinstance(number, int):
        if not -(1 << 63) <= number < (1 << 63):
            pb.Scalar(int_value=number)  # raises protobuf's error: out of int64's range
        return _SCALAR(int_value=number)
    return _SCALAR(float_value=number)


def operand(t):
    """t's wire Operand (bytes)."""
    return _wire.operand(t._info.handle)


def _dims_arg(dims):
    """(2, 3), [2, 3] or 2, 3 as a list of ints."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        return [int(d) for d in dims[0]]
    return [int(d) for d in dims]


def _wrap_dim(dim, ndim):
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-bound}, {bound - 1}], but got {dim})")
    return dim + bound if dim < 0 else dim


class Tensor:
    __slots__ = ("_client", "_info", "__weakref__")
    # numpy defers to Tensor's reflected operators instead of broadcasting
    # over it as an object.
    __array_ufunc__ = None

    def __init__(self, *args, **kwargs):
        raise TypeError("make tensors with a client: client.tensor(...), "
                        "client.zeros(...), client.from_numpy(...)")

    @classmethod
    def _adopt(cls, client, info):
        """The Tensor object of the tensor `info` describes (the live one, if any)."""
        def make():
            t = object.__new__(cls)
            t._client = client
            t._info = info
            return t
        return client._session.adopt(info, make)

    def __del__(self):
        info = getattr(self, "_info", None)
        client = getattr(self, "_client", None)
        if info is not None and client is not None:
            client._session.drop(info.handle)

    # --- metadata ----------------------------------------------------------

    @property
    def handle(self):
        return self._info.handle

    @property
    def shape(self):
        return Size(self._info.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[_wrap_dim(dim, self.dim())]

    def dim(self):
        return len(self._info.shape)

    ndim = property(dim)

    def numel(self):
        return math.prod(self._info.shape)

    nelement = numel

    @property
    def dtype(self):
        return _dtypes.from_wire(self._info.dtype)

    @property
    def device(self):
        return Device(self._info.device)

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    @property
    def nbytes(self):
        return self._info.nbytes

    def element_size(self):
        return self.dtype.itemsize

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def __len__(self):
        if not self._info.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._info.shape[0]

    # --- dispatch ----------------------------------------------------------

    def _run(self, planned=None, target=None, **kind):
        """Runs one op (its pb.Op oneof field = its args: a message, or its
        bytes from a _wire encoder) and adopts the result (`planned`: its
        metadata, where the dispatcher planned it; `target`: an in-place
        op's target handle, when its args are bytes)."""
        (name, args), = kind.items()
        return Tensor._adopt(self._client, self._client._dispatcher.run_args(
            name, args, planned=planned, target=target))

    def _same_client(self, other):
        """other's wire Operand; raises unless other is this tensor's client's."""
        self._check_client(other)
        return operand(other)

    def _check_client(self, other):
        if other._client is not self._client:
            # The C++ client's error, class (code) and words.
            raise make_error(grpc.StatusCode.INVALID_ARGUMENT,
                             f"tensor {other.handle} belongs to another Client's session: an op "
                             "takes the tensors of one Client (one session on one server)")

    # --- elementwise -------------------------------------------------------

    # Binary and unary ops are planned at the line on the pipelined path
    # (Dispatcher.plan_binary/plan_unary: their errors raise here).
    def _binary(self, op, other, reflected=False):
        if isinstance(other, Tensor):
            self._check_client(other)
            if reflected:
                return other._binary(op, self)
            planned = self._client._dispatcher.plan_binary(op, self._info, other._info)
            return self._run(planned, binary=_BINARY_ARGS(
                op=op, lhs=_wire.operand(self._info.handle),
                rhs=_wire.operand(other._info.handle)))
        if _is_number(other):
            number = _number(other)
            planned = self._client._dispatcher.plan_binary(op, self._info, None, number,
                                                           number_first=reflected)
            return self._run(planned, binary=_BINARY_ARGS(
                op=op, lhs=_wire.operand(self._info.handle), scalar=scalar_bytes(number),
                scalar_first=reflected))
        return NotImplemented

    def __add__(self, other):
        return self._binary(pb.ADD, other)

    def __radd__(self, other):
        return self._binary(pb.ADD, other, reflected=True)

    def __sub__(self, other):
        return self._binary(pb.SUB, other)

    def __rsub__(self, other):
        return self._binary(pb.SUB, other, reflected=True)

    def __mul__(self, other):
        return self._binary(pb.MUL, other)

    def __rmul__(self, other):
        return self._binary(pb.MUL, other, reflected=True)

    def __truediv__(self, other):
        return self._binary(pb.DIV, other)

    def __rtruediv__(self, other):
        return self._binary(pb.DIV, other, reflected=True)

    def __pow__(self, other):
        return self._binary(pb.POW, other)

    def __rpow__(self, other):
        return self._binary(pb.POW, other, reflected=True)

    def __eq__(self, other):
        return self._binary(pb.EQ, other)

    def __ne__(self, other):
        return self._binary(pb.NE, other)

    def __lt__(self, other):
        return self._binary(pb.LT, other)

    def __le__(self, other):
        return self._binary(pb.LE, other)

    def __gt__(self, other):
        return self._binary(pb.GT, other)

    def __ge__(self, other):
        return self._binary(pb.GE, other)

    __hash__ = object.__hash__

    def __neg__(self):
        return self.neg()

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __matmul__(self, other):
        if not isinstance(other, Tensor):
            return NotImplemented
        return self.matmul(other)

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def _binary_method(op):
        def method(self, other):
            result = self._binary(op, other)
            if result is NotImplemented:
                raise TypeError(f"expected a Tensor or a number, got {type(other).__name__}")
            return result
        return method

    add = _binary_method(pb.ADD)
    sub = subtract = _binary_method(pb.SUB)
    mul = multiply = _binary_method(pb.MUL)
    div = divide = true_divide = _binary_method(pb.DIV)
    pow = _binary_method(pb.POW)
    maximum = _binary_method(pb.MAXIMUM)
    minimum = _binary_method(pb.MINIMUM)
    eq = _binary_method(pb.EQ)
    ne = _binary_method(pb.NE)
    lt = _binary_method(pb.LT)
    le = _binary_method(pb.LE)
    gt = _binary_method(pb.GT)
    ge = _binary_method(pb.GE)
    del _binary_method

    def _unary(self, op, args=()):
        planned = self._client._dispatcher.plan_unary(op, self._info)
        return self._run(planned, unary=_UNARY_ARGS(op=op, x=_wire.operand(self._info.handle),
                                                    args=args))

    def neg(self):
        return self._unary(pb.NEG)

    negative = neg

    def abs(self):
        return self._unary(pb.ABS)

    def exp(self):
        return self._unary(pb.EXP)

    def log(self):
        return self._unary(pb.LOG)

    def sqrt(self):
        return self._unary(pb.SQRT)

    def relu(self):
        return self._unary(pb.RELU)

    def sigmoid(self):
        return self._unary(pb.SIGMOID)

    def tanh(self):
        return self._unary(pb.TANH)

    def clamp(self, min=None, max=None):
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        fields = {"x": operand(self)}
        infos, numbers = [None, None], [None, None]
        for i, (bound, tensor_field, scalar_field) in enumerate(
                ((min, "min", "min_scalar"), (max, "max", "max_scalar"))):
            if isinstance(bound, Tensor):
                fields[tensor_field] = self._same_client(bound)
                infos[i] = bound._info
            elif bound is not None:
                numbers[i] = _number(bound)
                fields[scalar_field] = scalar_bytes(numbers[i])
        planned = self._client._dispatcher.plan_clamp(self._info, infos[0], numbers[0],
                                                      infos[1], numbers[1])
        return self._run(planned, clamp=_CLAMP_ARGS(**fields))

    clip = clamp

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def where(self, condition, other):
        """x.where(condition, other): torch.where(condition, x, other)."""
        return where(condition, self, other)

    def softmax(self, dim):
        return self._softmax(dim, False)

    def log_softmax(self, dim):
        return self._softmax(dim, True)

    def _softmax(self, dim, log):
        dim = int(dim)
        planned = self._client._dispatcher.plan_softmax(self._info, dim, log)
        return self._run(planned, softmax=_SOFTMAX_ARGS(x=operand(self), dim=dim, log=log))

    # --- linear algebra ----------------------------------------------------

    def matmul(self, other):
        rhs = self._same_client(other)
        planned = self._client._dispatcher.plan_matmul(self._info, other._info)
        return self._run(planned, matmul=_MATMUL_ARGS(lhs=operand(self), rhs=rhs))

    mm = bmm = dot = matmul

    # --- reductions --------------------------------------------------------

    def _reduce(self, op, dim=None, keepdim=False):
        fields = {"op": op, "x": operand(self), "keepdim": bool(keepdim)}
        if isinstance(dim, (tuple, list)):
            dims = fields["dims"] = [int(d) for d in dim]
        elif dim is not None:
            dims = [int(dim)]
            fields["dim"] = dims[0]
        else:
            dims = []
        planned = self._client._dispatcher.plan_reduce(op, self._info, dims, bool(keepdim))
        return self._run(planned, reduce=_REDUCE_ARGS(**fields))

    def sum(self, dim=None, keepdim=False, dtype=None):
        result = self._reduce(pb.SUM, dim, keepdim)
        return result if dtype is None else result.to(dtype)

    def mean(self, dim=None, keepdim=False):
        return self._reduce(pb.MEAN, dim, keepdim)

    def norm(self, p="fro", dim=None, keepdim=False):
        if p not in ("fro", 2, 2.0, None):
            raise NotImplementedError(f"tensord's norm is the L2/Frobenius norm; p={p!r} is not offered")
        return self._reduce(pb.NORM, dim, keepdim)

    def argmax(self, dim=None, keepdim=False):
        return self._reduce(pb.ARGMAX, dim, keepdim)

    def argmin(self, dim=None, keepdim=False, _caller="argmin"):
        # No ARGMIN op: the first index where x equals its minimum. An empty
        # reduction is the caller's error (argmin's, or min(dim)'s), as torch
        # words it, not that of the MIN it sends.
        if dim is None and self.numel() == 0:
            raise make_error(grpc.StatusCode.INVALID_ARGUMENT, f"{_caller}(): Expected reduction "
                             "dim to be specified for input.numel() == 0.", "IndexError")
        if dim is not None and -max(self.dim(), 1) <= dim < max(self.dim(), 1) \
                and self.dim() > 0 and self.shape[dim] == 0:
            raise make_error(grpc.StatusCode.INVALID_ARGUMENT, f"{_caller}(): Expected reduction "
                             f"dim {dim % self.dim()} to have non-zero size.", "IndexError")
        lowest = self._reduce(pb.MIN, dim, keepdim=dim is not None)
        index = (self == lowest).to(_dtypes.int32)._reduce(pb.ARGMAX, dim, keepdim)
        return index

    def max(self, dim=None, keepdim=False):
        """x.max() -> the largest value; x.max(dim) -> (values, indices); x.max(other)."""
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        if dim is None:
            return self._reduce(pb.MAX)
        return ValuesIndices(self._reduce(pb.MAX, dim, keepdim), self.argmax(dim, keepdim))

    def min(self, dim=None, keepdim=False):
        """x.min() -> the smallest value; x.min(dim) -> (values, indices); x.min(other)."""
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        if dim is None:
            return self._reduce(pb.MIN)
        return ValuesIndices(self._reduce(pb.MIN, dim, keepdim),
                             self.argmin(dim, keepdim, _caller="min"))

    # --- shapes ------------------------------------------------------------

    def _view(self, kind, fields, *planned_args):
        """A view op `kind` of x with its args' other `fields`."""
        planned = self._client._dispatcher.plan_view(kind, self._info, *planned_args)
        return self._run(planned, **{kind: _VIEW_ARGS[kind](x=operand(self), **fields)})

    def reshape(self, *shape):
        dims = _dims_arg(shape)
        return self._view("reshape", {"shape": dims}, dims)

    # tensord's tensors are contiguous: a view is a reshape (a new tensor,
    # not memory shared with x).
    view = reshape

    def view_as(self, other):
        return self.reshape(other.shape)

    reshape_as = view_as

    def flatten(self, start_dim=0, end_dim=-1):
        shape = list(self.shape)
        if not shape:
            return self.reshape(1)
        start, end = _wrap_dim(start_dim, len(shape)), _wrap_dim(end_dim, len(shape))
        return self.reshape(shape[:start] + [math.prod(shape[start:end + 1])] + shape[end + 1:])

    def unsqueeze(self, dim):
        shape = list(self.shape)
        shape.insert(_wrap_dim(dim, len(shape) + 1), 1)
        return self.reshape(shape)

    def squeeze(self, dim=None):
        shape = list(self.shape)
        if dim is None:
            return self.reshape([n for n in shape if n != 1])
        dim = _wrap_dim(dim, len(shape))
        if shape and shape[dim] == 1:
            del shape[dim]
        return self.reshape(shape)

    def permute(self, *dims):
        dims = _dims_arg(dims)
        return self._view("permute", {"dims": dims}, dims)

    def transpose(self, dim0, dim1):
        dim0, dim1 = int(dim0), int(dim1)
        return self._view("transpose", {"dim0": dim0, "dim1": dim1}, dim0, dim1)

    swapaxes = transpose

    def t(self):
        if self.dim() > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.dim()}D")
        return self if self.dim() < 2 else self.transpose(0, 1)

    @property
    def T(self):
        return self if self.dim() < 2 else self.permute(list(range(self.dim() - 1, -1, -1)))

    def narrow(self, dim, start, length):
        dim, start, length = int(dim), int(start), int(length)
        return self._view("narrow", {"dim": dim, "start": start, "length": length},
                          dim, start, length)

    def select(self, dim, index):
        dim, index = int(dim), int(index)
        return self._view("select", {"dim": dim, "index": index}, dim, index)

    def contiguous(self):
        return self

    def clone(self):
        return Tensor._adopt(self._client, self._client._dispatcher.to(
            self._info.handle, self._info.device, copy=True))

    def __getitem__(self, index):
        """Integers, slices (step 1) and one Ellipsis, as select and narrow."""
        if not isinstance(index, tuple):
            index = (index,)
        if sum(i is Ellipsis for i in index) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in index:
            at = index.index(Ellipsis)
            rest = len(index) - 1
            index = index[:at] + (slice(None),) * (self.dim() - rest) + index[at + 1:]
        if len(index) > self.dim():
            raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
        result, dim = self, 0
        for i in index:
            size = result.shape[dim]
            if isinstance(i, (numbers.Integral, np.integer)) and not isinstance(i, bool):
                if not -size <= i < size:
                    raise IndexError(f"index {i} is out of bounds for dimension {dim} "
                                     f"with size {size}")
                result = result.select(dim, int(i) % size)
            elif isinstance(i, slice):
                start, stop, step = i.indices(size)
                if step != 1:
                    raise NotImplementedError("tensord slices with step 1 only in this version")
                if (start, stop) != (0, size):
                    result = result.narrow(dim, start, max(stop - start, 0))
                dim += 1
            else:
                raise TypeError(f"tensord indexes with integers, slices and '...' only, "
                                f"not {type(i).__name__}")
        return result

    def __iter__(self):
        if not self._info.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self.select(0, i) for i in range(self._info.shape[0]))

    # --- dtype and device --------------------------------------------------

    def to(self, *args, **kwargs):
        """x.to(device), x.to(dtype), x.to(device, dtype), x.to(other); copy=."""
        copy = kwargs.pop("copy", False)
        target_device = kwargs.pop("device", None)
        target_dtype = kwargs.pop("dtype", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for arg in args:
            if isinstance(arg, _dtypes.dtype):
                target_dtype = arg
            elif isinstance(arg, Tensor):
                target_device, target_dtype = arg.device, arg.dtype
            else:
                target_device = arg
        result = self
        if target_device is not None:
            info = self._client._dispatcher.to(self._info.handle, name_of(target_device), copy)
            result = Tensor._adopt(self._client, info)
            copy = False
        if target_dtype is not None and (target_dtype is not result.dtype or copy):
            planned = self._client._dispatcher.plan_cast(result._info, target_dtype.wire)
            result = result._run(planned, cast=_CAST_ARGS(x=operand(result),
                                                          dtype=target_dtype.wire))
        return result

    def type(self, dtype=None):
        if dtype is None:
            return f"torch.{self.dtype.name}"
        return self.to(dtype)

    def cuda(self, device=None):
        return self.to("cuda" if device is None else name_of(device))

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self.to(_dtypes.float32)

    def double(self):
        return self.to(_dtypes.float64)

    def half(self):
        return self.to(_dtypes.float16)

    def bfloat16(self):
        return self.to(_dtypes.bfloat16)

    def int(self):
        return self.to(_dtypes.int32)

    def long(self):
        return self.to(_dtypes.int64)

    def bool(self):
        return self.to(_dtypes.bool_)

    # --- in place ----------------------------------------------------------

    def _in_place(self, op, other, alpha=None):
        fields = {"op": op, "target": operand(self)}
        dispatcher = self._client._dispatcher
        if alpha is not None:
            alpha = _number(alpha)
            fields["alpha"] = scalar_bytes(alpha)
        if isinstance(other, Tensor):
            fields["other"] = self._same_client(other)
            dispatcher.plan_in_place(op, self._info, other._info, alpha=alpha)
        elif _is_number(other):
            number = _number(other)
            fields["scalar"] = scalar_bytes(number)
            dispatcher.plan_in_place(op, self._info, None, number, alpha)
        else:
            raise TypeError(f"expected a Tensor or a number, got {type(other).__name__}")
        return self._run(target=self._info.handle, in_place=_IN_PLACE_ARGS(**fields))

    def add_(self, other, alpha=1):
        if alpha != 1:
            if not isinstance(other, Tensor):
                return self._in_place(pb.ADD_, other * alpha)
            return self._in_place(pb.AXPY_, other, alpha)
        return self._in_place(pb.ADD_, other)

    def sub_(self, other, alpha=1):
        if alpha != 1:
            return self.add_(other, -alpha)
        return self._in_place(pb.SUB_, other)

    def mul_(self, other):
        return self._in_place(pb.MUL_, other)

    def div_(self, other):
        return self._in_place(pb.DIV_, other)

    # --- autograd (the server's) -------------------------------------------

    @property
    def requires_grad(self):
        return self._info.requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        self.requires_grad_(value)

    def requires_grad_(self, requires_grad=True):
        self._client._dispatcher.plan_requires_grad(self._info, bool(requires_grad))
        return self._run(target=self._info.handle, requires_grad=_REQUIRES_GRAD_ARGS(
            x=operand(self), requires_grad=bool(requires_grad)))

    @property
    def grad_fn(self):
        return GradFn(self._info.grad_fn) if self._info.grad_fn else None

    @property
    def is_leaf(self):
        return not self._info.grad_fn

    def backward(self, gradient=None, retain_graph=False):
        fields = {"root": operand(self), "retain_graph": bool(retain_graph)}
        if gradient is not None:
            fields["gradient"] = self._same_client(gradient)
        self._client._dispatcher.plan_backward(
            self._info, gradient._info if gradient is not None else None)
        self._run(target=self._info.handle, backward=_BACKWARD_ARGS(**fields))

    @property
    def grad(self):
        """x.grad: a new tensor on the gradient's memory, or None."""
        try:  # waits for the answer: a missing grad is None here, not an error later
            return Tensor._adopt(self._client, self._client._dispatcher.run_args(
                "grad", _GRAD_ARGS(x=operand(self)), wait=True))
        except TensordError as e:
            if "grad is None" in e.details:
                return None
            raise

    @grad.setter
    def grad(self, value):
        if value is not None:
            raise NotImplementedError("tensord sets .grad only to None (the server owns gradients)")
        self._client._dispatcher.plan_zero_grad([self._info])
        self._run(target=self._info.handle, zero_grad=_ZERO_GRAD_ARGS(tensors=[operand(self)]))

    def detach(self):
        planned = self._client._dispatcher.plan_detach(self._info)
        return self._run(planned, detach=_DETACH_ARGS(x=operand(self)))

    @property
    def data(self):
        """torch's .data: the same values outside autograd (a detach(), read-only here)."""
        return self.detach()

    # --- host copies -------------------------------------------------------

    def _read_ahead(self):
        """The bytes of a result whose reply has not come yet, read on the
        same round trip (None when its reply is in, or when the server found
        it over one reply or off its host devices: then the checks and the
        usual fetch follow)."""
        return self._client._dispatcher.read_ahead(self._info)

    def _host_array(self, progress=False, data=None):
        """The tensor's values in host memory (bfloat16 as uint16 bits);
        `data`: its bytes, when _read_ahead() had them."""
        if data is None:
            data = self._client._dispatcher.fetch(self._info, progress)
        storage = self.dtype.numpy_storage
        return np.frombuffer(data, dtype=storage).reshape(tuple(self._info.shape))

    def numpy(self, progress=False):
        """The explicit fetch: a host copy of a tensor on a server cpu device.
        progress=True: a fetch over 1 MiB draws a progress line on stderr
        (tqdm's when it is installed)."""
        data = self._read_ahead()  # before the checks, which wait for the reply
        if self.device.type != "cpu":
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        numpy_dtype = _dtypes.to_numpy_dtype(self.dtype)
        array = self._host_array(progress, data)
        # A streamed fetch lands in a fresh writable buffer: no second copy.
        return array.astype(numpy_dtype, copy=not array.flags.writeable)

    def fetch_shared(self, region, offset=0):
        """Zero-copy fetch: the server writes this tensor's bytes straight into
        `region`'s data area at `offset` (a tensord.SharedMemoryRegion of this
        client, Client.create_shared_memory); returns the numpy view of them
        there (region.array(self.shape, self.dtype, offset): bfloat16 as
        uint16 bits), valid until the region is written again. Any device
        (the server copies to host memory). OUT_OF_RANGE when the bytes do not
        fit; INVALID_ARGUMENT for a region of another session."""
        offset = int(offset)
        info = self._client._dispatcher.fetch_shared(self._info.handle, region, offset)
        return region.array(tuple(info.shape), self.dtype, offset)

    def __array__(self, dtype=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def _host_copy_to_export(self):
        """A host copy of this tensor for DLPack: numpy's, or torch's for
        bfloat16, which numpy lacks (bool exports where numpy's DLPack has
        it, numpy >= 1.25; older raises its BufferError)."""
        if self.device.type != "cpu":
            raise TypeError(f"can't export a {self.device} device type tensor through "
                            "DLPack: its memory is on the server. Use Tensor.cpu() to "
                            "copy the tensor to the server's host memory first.")
        if self.requires_grad:
            raise RuntimeError("Can't export tensors that require gradient, "
                               "use tensor.detach()")
        if self.dtype is _dtypes.bfloat16:
            try:
                return self.torch()
            except ImportError:
                raise BufferError(f"DLPack export of {self.dtype} needs PyTorch installed "
                                  "(numpy cannot export it)") from None
        return self.numpy()

    def __dlpack__(self, stream=None):
        """The DLPack capsule of a host copy, fetched now, of a tensor on a
        server cpu device (torch.from_dlpack(x), np.from_dlpack(x)). The
        copy is this process's, not a view of the server's memory: writes
        to it do not reach the tensor."""
        if stream is not None:
            raise BufferError("a host copy has no stream: pass stream=None")
        return self._host_copy_to_export().__dlpack__()

    def __dlpack_device__(self):
        """(kDLCPU, 0): where __dlpack__'s copy lives (TypeError off the server's cpu)."""
        if self.device.type != "cpu":
            self._host_copy_to_export()  # raises
        return (1, 0)

    def _python_values(self, data=None):
        """The flat values as Python numbers (bfloat16 widened); `data` as
        _host_array's."""
        array = self._host_array(data=data).reshape(-1)
        if self.dtype is _dtypes.bfloat16:
            array = (array.astype(np.uint32) << 16).view(np.float32)
        if self.dtype.is_floating_point:
            return array.astype(np.float64).tolist()
        return array.tolist()

    def tolist(self):
        values = self._python_values(self._read_ahead())  # one round trip, as item()
        shape = list(self._info.shape)
        for n in reversed(shape[1:]):
            values = [values[i:i + n] for i in range(0, len(values), n)]
        if not shape:
            return values[0]
        if shape[0] == 0:
            return []
        return values

    def item(self):
        data = self._read_ahead()  # loss.item(): one round trip, not two
        if self.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self._python_values(data)[0]

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def torch(self, progress=False):
        """A torch.Tensor (on the local CPU) with this tensor's values, dtype and shape.
        progress=True: a fetch over 1 MiB draws a progress line on stderr
        (tqdm's when it is installed), bfloat16's as the others'."""
        import torch
        array = self._host_array(progress)
        if self.dtype is _dtypes.bfloat16:
            return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(array.copy())

    # --- display -----------------------------------------------------------

    def __repr__(self):
        data = self._read_ahead()
        autograd = ""
        if self._info.grad_fn:
            autograd = f"grad_fn=<{self._info.grad_fn}>"
        elif self._info.requires_grad:
            autograd = "requires_grad=True"
        return format_tensor(list(self._info.shape), self.dtype, self._python_values(data),
                             self._info.device, autograd)

    __str__ = __repr__

    def __format__(self, spec):
        if self.dim() == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)


def where(condition, input, other):
    """torch.where(condition, input, other): input and other tensors or numbers
    (here, so that Tensor.where and tensord.where share it without an import
    loop; _functional re-exports it)."""
    fields = {"condition": operand(condition)}
    infos, numbers = [], []
    for value, tensor_field, scalar_field in ((input, "input", "input_scalar"),
                                              (other, "other", "other_scalar")):
        if isinstance(value, Tensor):
            fields[tensor_field] = condition._same_client(value)
            infos.append(value._info)
            numbers.append(None)
        else:
            number = _number(value)
            fields[scalar_field] = scalar_bytes(number)
            infos.append(None)
            numbers.append(number)
    planned = condition._client._dispatcher.plan_where(
        condition._info, infos[0], numbers[0], infos[1], numbers[1])
    return condition._run(planned, where=_WHERE_ARGS(**fields))
