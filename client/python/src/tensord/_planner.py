"""Planning at the line: what an op makes, or the error the server would raise, before it is sent.

Contract: the Python twin of the server's planner (core/planner) for the
op families the pipelined client plans: binary, in-place and unary
elementwise ops, reductions, matmul and linear, views, casts, softmax,
conv2d and the poolings, the losses, where, clamp, cat, dropout, the
norms, backward, zero_grad and the optimizer steps (every op but grad,
whose answer — a grad or None — is autograd's state). From
the operands' metadata (Meta: wire dtype, shape, the server's device name)
and the target device's capability table (Capabilities, from ListDevices),
each plan_* returns the result's Meta, or raises the error the server's
planner gives for the same request: a TensordError (a RuntimeError, or
torch's IndexError/ValueError class where the server names one) with the
server's gRPC code and its exact message, PyTorch's words. So the pipelined
client raises on the op's line, as the C++ client does, and sends nothing
for a refused op.

Each function names the C++ rule it mirrors (core/planner/planner.cc,
op_plan.cc, window_plan.cc, loss_plan.cc, norm_plan.cc, core/base/dtype.cc, shape.cc,
op_checks.cc); the unary dtype rules and the op names come from the op
table (tensord._op_table, made from ops.json), as the server's do.
tests/python/client/test_planner_differential.py proves the two equal over
generated requests (valid and invalid, every op of these families, every
dtype, broadcasting, 0-d and empty tensors, two devices) against the real
server. What only the server knows — values (a loss's target range),
autograd's state, memory, quotas, a tensor whose own command failed — still
surfaces at sync points. Stateless.
"""
import collections
import math

import grpc

from tensord._errors import make_error
from tensord._op_table import OPS
from tensord.v1 import tensord_pb2 as pb

# A tensor's metadata as the planner reads it: the wire DType, the shape as
# a tuple of ints, the server's name of its device.
Meta = collections.namedtuple("Meta", "dtype shape device")

MAX_RANK = 8  # core/base/shape.h kMaxRank
_FLOATING = frozenset((pb.FLOAT32, pb.FLOAT64, pb.FLOAT16, pb.BFLOAT16))
# core/base/dtype.cc PromotionRank: float16 and bfloat16 tie (PromoteTypes).
_RANK = {pb.BOOL: 0, pb.INT32: 1, pb.INT64: 2, pb.FLOAT16: 3, pb.BFLOAT16: 3,
         pb.FLOAT32: 4, pb.FLOAT64: 5}
# ScalarTypeName: torch's names, as its messages quote them.
_SCALAR_TYPE = {pb.FLOAT32: "Float", pb.FLOAT64: "Double", pb.INT32: "Int",
                pb.INT64: "Long", pb.BOOL: "Bool", pb.FLOAT16: "Half",
                pb.BFLOAT16: "BFloat16"}
_COMPARISONS = frozenset((pb.EQ, pb.NE, pb.LT, pb.LE, pb.GT, pb.GE))
# The unary rows of the op table by wire value ("unary NEG" -> pb.NEG).
_UNARY = {pb.UnaryOp.Value(row["wire"].split()[1]): row
          for row in OPS if row["kind"] == "Unary"}
# LossName: each loss's name ("cross_entropy", ...) by wire value.
_LOSS_NAME = {pb.LossOp.Value(row["wire"].split()[1]): row["name"]
              for row in OPS if row["kind"] == "Loss"}
# ReduceOpName: each reduction's name ("sum", "argmax", ...) by wire value.
_REDUCE_NAME = {pb.ReduceOp.Value(row["wire"].split()[1]): row["name"]
                for row in OPS if row["kind"] == "Reduce"}


def _error(code, message, kind=0):
    return make_error(code, message, kind)


def wrap_dim(dim, rank):
    """planner.cc WrapDim (maybe_wrap_dim): a 0-d tensor takes 0 and -1;
    IndexError otherwise."""
    return _wrap(dim, rank)


def not_implemented(op, dtype, device=None):
    """op_checks.cc NotImplementedError: '"pow" not implemented for 'Bool''
    (then ' on <device>' for a kernel one device lacks)."""
    message = f"\"{op}\" not implemented for '{_SCALAR_TYPE[dtype]}'"
    if device is not None:
        message += f" on {device}"
    return _error(grpc.StatusCode.FAILED_PRECONDITION, message)


class Capabilities:
    """A device's capability table (DeviceInfo.capabilities): for each op
    family, the dtypes it runs it in (core/base/device.h Capabilities)."""

    __slots__ = ("device", "_dtypes")

    def __init__(self, device_info):
        self.device = device_info.name
        self._dtypes = {c.family: c.dtypes for c in device_info.capabilities}

    def has(self, family, dtype):
        """Capabilities::Has: whether the device runs `family` in `dtype`."""
        return bool(self._dtypes.get(family, 0) >> dtype & 1)

    def check(self, family, dtype, kind):
        """Capabilities::Check: raises '"<kind>" not implemented for
        '<dtype>' on <device>' unless the device runs `family` in `dtype`."""
        if not self.has(family, dtype):
            raise not_implemented(kind, dtype, self.device)

    def cast(self, source, target):
        """PlanCast: converting `source` to `target` on this device."""
        if source != target:
            self.check(pb.CAST, source, "cast")
            self.check(pb.CAST, target, "cast")


def promote_types(a, b):
    """dtype.cc PromoteTypes (torch.promote_types)."""
    if a == b:
        return a
    if {a, b} == {pb.FLOAT16, pb.BFLOAT16}:
        return pb.FLOAT32
    return a if _RANK[a] >= _RANK[b] else b


def _category(dtype):
    """bool < integral < floating, result_type's categories."""
    return 0 if dtype == pb.BOOL else 2 if dtype in _FLOATING else 1


def result_type(a, a_is_scalar, b, b_is_scalar):
    """dtype.cc ResultType: of two tensors, a 0-d one counting only when
    it is of a higher category than a dimensioned one."""
    if a_is_scalar == b_is_scalar:
        return promote_types(a, b)
    dim, zero_dim = (b, a) if a_is_scalar else (a, b)
    if _category(zero_dim) > _category(dim):
        return promote_types(dim, zero_dim)
    return dim


def scalar_result_type(dtype, integral):
    """planner.cc ScalarResultType: a Python number promotes by category
    only; a higher-category number gives int64 or float32."""
    if (1 if integral else 2) > _category(dtype):
        return pb.INT64 if integral else pb.FLOAT32
    return dtype


def broadcast_shapes(a, b):
    """shape.cc BroadcastShapes (torch's infer_size), from the right."""
    rank = max(len(a), len(b))
    dims = [0] * rank
    for i in range(rank - 1, -1, -1):
        ai, bi = i - (rank - len(a)), i - (rank - len(b))
        da = a[ai] if ai >= 0 else 1
        db = b[bi] if bi >= 0 else 1
        if da != db and da != 1 and db != 1:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"The size of tensor a ({da}) must match the size of tensor b "
                         f"({db}) at non-singleton dimension {i}")
        dims[i] = db if da == 1 else da
    return tuple(dims)


def check_same_device(operands):
    """op_plan.cc PlanOp: every operand on the first one's device."""
    first = operands[0].device
    for other in operands[1:]:
        if other.device != first:
            raise _error(grpc.StatusCode.FAILED_PRECONDITION,
                         "Expected all tensors to be on the same device, but found at "
                         f"least two devices, {first} and {other.device}!")


def plan_binary(op, a, b, number, caps, into=None, number_first=False):
    """planner.cc PlanBinary (as PlanOp calls it): a (op) b, or a (op) the
    Python number `number` (an int or a float; b None; number (op) a with
    number_first), written into the tensor `into` (a Meta) for an in-place
    op. The result's Meta."""
    if b is not None:
        if b.device != a.device:
            check_same_device((a, b))
        shape = a.shape if a.shape == b.shape else broadcast_shapes(a.shape, b.shape)
        compute = (a.dtype if a.dtype == b.dtype
                   else result_type(a.dtype, not a.shape, b.dtype, not b.shape))
    else:
        shape = a.shape
        integral = isinstance(number, int)
        compute = scalar_result_type(a.dtype, integral)
    if op == pb.DIV and compute not in _FLOATING:
        compute = pb.FLOAT32  # true division of integers: float32
    out_dtype = pb.BOOL if op in _COMPARISONS else compute
    if compute == pb.BOOL:  # op_checks.cc CheckBinaryOpDType
        if op == pb.SUB:
            raise _error(grpc.StatusCode.FAILED_PRECONDITION,
                         "Subtraction, the `-` operator, with two bool tensors is not "
                         "supported. Use the `^` or `logical_xor()` operator instead.")
        if op == pb.POW:
            raise not_implemented("pow", compute)
    if (op == pb.POW and b is None and not number_first and integral and number < 0
            and compute not in _FLOATING):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "Integers to negative integer powers are not allowed.")
    if into is not None:
        if shape != into.shape:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"output with shape {_dims(into.shape)} doesn't match the "
                         f"broadcast shape {_dims(shape)}")
        if not can_cast(out_dtype, into.dtype):
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"result type {_SCALAR_TYPE[out_dtype]} can't be cast to the "
                         f"desired output type {_SCALAR_TYPE[into.dtype]}")
    caps.check(pb.BINARY_FAMILY, compute, "binary")
    if a.dtype != compute:
        caps.cast(a.dtype, compute)
    # planner.cc NumberDType: a number reaches the device as int64 or float64.
    other = b.dtype if b is not None else pb.INT64 if integral else pb.FLOAT64
    if other != compute:
        caps.cast(other, compute)
    if into is not None and out_dtype != into.dtype:
        caps.cast(out_dtype, into.dtype)
    return Meta(out_dtype, shape, a.device)


# op_plan.cc InPlaceBinaryOp: the binary op each in-place op runs.
_IN_PLACE_BINARY = {pb.ADD_: pb.ADD, pb.SUB_: pb.SUB, pb.MUL_: pb.MUL, pb.DIV_: pb.DIV,
                    pb.AXPY_: pb.ADD}


def plan_in_place(op, target, other, number, alpha, caps):
    """op_plan.cc PlanInPlace: target (op)= other (a Meta) or `number`;
    AXPY_ is target += alpha * other (alpha a Python number). The result is
    the target, its Meta unchanged."""
    if other is not None and other.device != target.device:
        check_same_device((target, other))
    if op == pb.AXPY_:
        if isinstance(alpha, float) and other.dtype not in _FLOATING:  # CheckAxpyAlpha
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "axpy_: for integral input tensors, alpha must not be a floating "
                         f"point number (got {_python_float(alpha)})")
        other = plan_binary(pb.MUL, other, None, alpha, caps)
    plan_binary(_IN_PLACE_BINARY[op], target, other, number, caps, into=target)
    return target


def plan_reduce(op, x, dims, keepdim, caps):
    """planner.cc PlanReduce: op (sum, mean, max, min, argmax, norm) of x
    over `dims` (a list; empty: every dim), kept as size 1 with `keepdim`."""
    floating = x.dtype in _FLOATING
    compute = pb.INT64 if op == pb.SUM and not floating else x.dtype
    if op == pb.MEAN and not floating:
        raise _error(grpc.StatusCode.FAILED_PRECONDITION,
                     "mean(): could not infer output dtype. Input dtype must be either a "
                     f"floating point or complex dtype. Got: {_SCALAR_TYPE[x.dtype]}")
    if op == pb.NORM and not floating:
        raise _error(grpc.StatusCode.FAILED_PRECONDITION,
                     "norm(): input dtype should be either floating point or complex. "
                     f"Got {_SCALAR_TYPE[x.dtype]} instead.")
    name = _REDUCE_NAME[op]
    needs_element = op in (pb.MAX, pb.MIN, pb.ARGMAX)
    if needs_element and len(dims) > 1:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"{name}() reduces over one dim, got {len(dims)} dims")
    out_dtype = pb.INT64 if op == pb.ARGMAX else compute
    rank = len(x.shape)
    reduced = [not dims] * max(rank, 1)
    for d in dims:
        axis = wrap_dim(d, rank)
        if reduced[axis]:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"dim {axis} appears multiple times in the list of dims")
        reduced[axis] = True
    out, count = [], 1  # count: the elements each result reduces
    for i, size in enumerate(x.shape):
        if not reduced[i]:
            out.append(size)
        else:
            count *= size
            if keepdim:
                out.append(1)
    if needs_element and count == 0:
        if dims:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"{name}(): Expected reduction dim {wrap_dim(dims[0], rank)} to "
                         "have non-zero size.", "IndexError")
        message = f"{name}(): Expected reduction dim to be specified for input.numel() == 0."
        if op == pb.ARGMAX:  # torch: IndexError for argmax, RuntimeError for max/min
            raise _error(grpc.StatusCode.INVALID_ARGUMENT, message, "IndexError")
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     message + " Specify the reduction dim with the 'dim' argument.")
    caps.check(pb.REDUCE_FAMILY, compute, "reduce")
    if x.dtype != compute:
        caps.cast(x.dtype, compute)
    return Meta(out_dtype, tuple(out), x.device)


def _matmul_error(a, b, caps):
    """planner.cc MatMulError: torch.matmul's first error for a @ b, if
    any, as ATen's dispatch to dot, mv, mm or bmm words it."""
    ra, rb = len(a.shape), len(b.shape)
    if ra == 0 or rb == 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "both arguments to matmul need to be at least 1D, but they are "
                     f"{ra}D and {rb}D")

    def kernel(name, dtype):
        if not caps.has(pb.MATMUL_FAMILY, dtype):
            raise not_implemented(name, dtype)

    def same_dtype(first, second):
        if first != second:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"expected scalar type {_SCALAR_TYPE[first]} but found "
                         f"{_SCALAR_TYPE[second]}")

    def mm(m, k1, d1, k2, n, d2):
        if k1 != k2:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"mat1 and mat2 shapes cannot be multiplied ({m}x{k1} and {k2}x{n})")
        same_dtype(d1, d2)
        kernel("addmm_impl_cpu_", d1)

    def mv(m, k, d1, kv, d2):
        if k != kv:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"size mismatch, got {m}, {m}x{k},{kv}")
        same_dtype(d1, d2)
        kernel("addmv_impl_cpu", d1)

    sa, sb = a.shape, b.shape
    if ra == 1 and rb == 1:
        if a.dtype != b.dtype:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "dot : expected both vectors to have same dtype, but found "
                         f"{_SCALAR_TYPE[a.dtype]} and {_SCALAR_TYPE[b.dtype]}")
        if sa[0] != sb[0]:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"inconsistent tensor size, expected tensor [{sa[0]}] and src "
                         f"[{sb[0]}] to have the same number of elements, but got "
                         f"{sa[0]} and {sb[0]} elements respectively")
        kernel("dot", a.dtype)
    elif ra <= 2 and rb <= 2:
        if rb == 1:
            mv(sa[0], sa[1], a.dtype, sb[0], b.dtype)
        else:
            mm(1 if ra == 1 else sa[0], sa[-1], a.dtype, sb[0], sb[1], b.dtype)
    elif rb <= 2:  # a's batch folded into rows: [batch * m, k]
        rows = math.prod(sa[:-1])
        if rb == 2:
            mm(rows, sa[-1], a.dtype, sb[0], sb[1], b.dtype)
        else:
            mv(rows, sa[-1], a.dtype, sb[0], b.dtype)
    elif ra <= 2:  # b transposed and folded, times a transposed
        rows = math.prod(sb[:-2]) * sb[-1]
        if ra == 2:
            mm(rows, sb[-2], b.dtype, sa[1], sa[0], a.dtype)
        else:
            mv(rows, sb[-2], b.dtype, sa[0], a.dtype)
    else:
        batch = broadcast_shapes(sa[:-2], sb[:-2])
        if sa[-1] != sb[-2]:
            n = math.prod(batch)
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "Expected size for first two dimensions of batch2 tensor to be: "
                         f"[{n}, {sa[-1]}] but got: [{n}, {sb[-2]}].")
        same_dtype(a.dtype, b.dtype)
        kernel("bmm", a.dtype)


def plan_matmul(a, b, caps):
    """planner.cc PlanMatMul (torch.matmul): a 1-D lhs is a row, a 1-D rhs a
    column, the added dim dropped; leading dims are batch dims and
    broadcast."""
    if b.device != a.device:
        check_same_device((a, b))
    _matmul_error(a, b, caps)
    a_vector, b_vector = len(a.shape) == 1, len(b.shape) == 1
    batch = broadcast_shapes(a.shape[:0 if a_vector else -2], b.shape[:0 if b_vector else -2])
    out = batch + (() if a_vector else (a.shape[-2],)) + (() if b_vector else (b.shape[-1],))
    return Meta(a.dtype, out, a.device)


def check_expand(tensor, target):
    """shape.cc CheckExpand: `tensor` expands to `target` (torch's expand)."""
    if len(tensor) > len(target):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"expand: the number of sizes provided ({len(target)}) must be greater "
                     "or equal to the number of dimensions in the tensor "
                     f"({len(tensor)})")
    for i in range(len(target) - 1, -1, -1):
        ti = i - (len(target) - len(tensor))
        if ti < 0:
            break
        if tensor[ti] != 1 and tensor[ti] != target[i]:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"The expanded size of the tensor ({target[i]}) must match the "
                         f"existing size ({tensor[ti]}) at non-singleton dimension {i}.  "
                         f"Target sizes: {_dims(target)}.  Tensor sizes: {_dims(tensor)}")


def plan_linear(x, weight, bias, caps):
    """op_plan.cc PlanLinear (F.linear): x @ weight.t() (+ bias)."""
    check_same_device((x, weight) if bias is None else (x, weight, bias))
    w = weight.shape
    if len(w) > 2:  # planner.cc CheckLinearShapes: w.t()'s and matmul's errors
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"t() expects a tensor with <= 2 dimensions, but self is {len(w)}D")
    if not x.shape or not w:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "both arguments to matmul need to be at least 1D, but they are "
                     f"{len(x.shape)}D and {len(w)}D")
    if len(w) == 1:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "linear: weight must be 2-D [out_features, in_features], but has shape "
                     f"{_dims(w)}")
    y = plan_matmul(x, Meta(weight.dtype, (w[1], w[0]), weight.device), caps)
    if bias is None:
        return y
    if len(x.shape) in (2, 3):  # torch: addmm, which expands the bias to [rows, out]
        check_expand(bias.shape, (math.prod(x.shape[:-1]), w[0]))
    return plan_binary(pb.ADD, y, bias, None, caps, into=y)


def _wrap(index, size):
    """planner.cc Wrap: an index into `size` slots (at least one), negative
    from the end; torch's IndexError past either end."""
    bound = max(size, 1)
    if not -bound <= index < bound:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Dimension out of range (expected to be in range of [{-bound}, "
                     f"{bound - 1}], but got {index})", "IndexError")
    return index + bound if index < 0 else index


def make_shape(dims):
    """shape.cc Shape::Make's checks: rank, negative dims, the element count."""
    if len(dims) > MAX_RANK:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"rank {len(dims)} exceeds the maximum rank {MAX_RANK}")
    for i, d in enumerate(dims):
        if d < 0:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"dimension {i} is {d}; dims must be >= 0")
    if 0 not in dims and math.prod(dims) >= 1 << 63:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"shape {_dims(dims)} has too many elements: the element count "
                     "overflows a 64-bit integer")
    return tuple(dims)


def plan_reshape(x, dims):
    """planner.cc PlanReshape (view/reshape): one dim may be -1."""
    numel = math.prod(x.shape)

    def invalid():
        return _error(grpc.StatusCode.INVALID_ARGUMENT,
                      f"shape '{_dims(dims)}' is invalid for input of size {numel}")
    out, infer, known = list(dims), -1, 1
    for i, d in enumerate(out):
        if d == -1:
            if infer >= 0:
                raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                             "only one dimension can be inferred")
            infer = i
        elif d < 0:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"invalid shape dimension {d}")
        else:
            known *= d
            if known >= 1 << 63:
                raise invalid()
    if infer >= 0:
        if known == 0 or numel % known:
            raise invalid()
        out[infer] = numel // known
    shape = make_shape(out)
    if math.prod(shape) != numel:
        raise invalid()
    return Meta(x.dtype, shape, x.device)


def plan_permute(x, dims):
    """planner.cc PlanPermute."""
    rank = len(x.shape)
    if len(dims) != rank:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "permute(sparse_coo): number of dimensions in the tensor input does not "
                     "match the length of the desired ordering of dimensions i.e. "
                     f"input.dim() = {rank} is not equal to len(dims) = {len(dims)}")
    seen, out = set(), []
    for d in dims:
        axis = wrap_dim(d, rank)
        if axis in seen:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "permute(): duplicate dims are not allowed.")
        seen.add(axis)
        out.append(x.shape[axis])
    return Meta(x.dtype, tuple(out), x.device)


def plan_transpose(x, dim0, dim1):
    """op_plan.cc TransposePerm, then PlanPermute."""
    rank = len(x.shape)
    d0, d1 = wrap_dim(dim0, rank), wrap_dim(dim1, rank)
    perm = list(range(rank))
    if rank:
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return plan_permute(x, perm)


def _check_not_0d(x, op):
    if not x.shape:  # torch: an IndexError for select, a RuntimeError for narrow
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"{op}() cannot be applied to a 0-dim tensor.",
                     "IndexError" if op == "select" else 0)


def plan_narrow(x, dim, start, length):
    """planner.cc PlanNarrow: start wraps as a dim of the size would, but
    start == size is the (valid) end."""
    _check_not_0d(x, "narrow")
    axis = wrap_dim(dim, len(x.shape))
    size = x.shape[axis]
    wrapped = start if start == size else _wrap(start, size)
    if length < 0 or wrapped > size - length:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"start ({wrapped}) + length ({length}) exceeds dimension size ({size}).")
    return Meta(x.dtype, x.shape[:axis] + (length,) + x.shape[axis + 1:], x.device)


def plan_select(x, dim, index):
    """planner.cc PlanSelect: the dim is removed."""
    _check_not_0d(x, "select")
    axis = wrap_dim(dim, len(x.shape))
    size = x.shape[axis]
    wrapped = index + size if index < 0 else index
    if not 0 <= wrapped < size:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"select(): index {index} out of range for tensor of size "
                     f"{_dims(x.shape)} at dimension {axis}", "IndexError")
    return Meta(x.dtype, x.shape[:axis] + x.shape[axis + 1:], x.device)


def plan_cast(x, dtype, caps):
    """op_plan.cc PlanOp's cast: x converted to `dtype` (PlanCast)."""
    if dtype != x.dtype:
        caps.cast(x.dtype, dtype)
    return Meta(dtype, x.shape, x.device)


def plan_softmax(x, dim, log):
    """planner.cc PlanSoftmax: floating inputs only, the kernel named for
    the dim it runs on (torch wraps the dim first)."""
    axis = wrap_dim(dim, len(x.shape))
    if x.dtype not in _FLOATING:
        last = axis == max(len(x.shape), 1) - 1
        kernel = ("log_" if log and last else "") + "softmax" + ("_lastdim" if last else "")
        raise not_implemented(kernel + "_kernel_impl", x.dtype)
    return x


_CPP_TYPE = {pb.FLOAT32: "float", pb.FLOAT64: "double", pb.INT32: "int", pb.INT64: "long int",
             pb.BOOL: "bool", pb.FLOAT16: "c10::Half", pb.BFLOAT16: "c10::BFloat16"}


def _pair(values, fallback, bad_length):
    """window_plan.cc Pair: (h, w) from an empty, one- or two-value list."""
    if not values:
        return fallback
    if len(values) == 1:
        return values[0], values[0]
    if len(values) == 2:
        return values[0], values[1]
    raise _error(grpc.StatusCode.INVALID_ARGUMENT, bad_length)


def _windows(size, k, stride, pad, dilation):
    """window_plan.cc Windows: windows along one dim (0 when none fits)."""
    room = size + 2 * pad - (dilation * (k - 1) + 1)
    return 0 if room < 0 else min(room // stride + 1, (1 << 63) - 1)


def _nchw(shape):
    return (shape[0], *shape[1:]) if len(shape) == 4 else (1, *shape)


def _window_out(x, c, oh, ow):
    return ((x.shape[0],) if len(x.shape) == 4 else ()) + (c, oh, ow)


def _check_columns(n, c, kh, kw, oh, ow, op):
    """window_plan.cc CheckColumns: im2col's columns must be a tensor too."""
    if 0 not in (c, kh, kw, n, oh, ow) and c * kh * kw * n * oh * ow >= 1 << 63:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"{op}: the unfolded input ({c} x {kh} x {kw} x {n} x {oh} x {ow} "
                     "elements) is too large")


def plan_conv2d(x, weight, bias, stride, padding, dilation, groups, caps):
    """window_plan.cc PlanConv2d (F.conv2d), torch's checks in torch's order."""
    check_same_device((x, weight) if bias is None else (x, weight, bias))
    xs, ws = x.shape, weight.shape
    if len(xs) not in (3, 4):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got "
                     f"input of size: {_dims(xs)}")
    if len(ws) >= 3 and len(ws) != 4:
        # torch sizes stride by the weight's rank first (2 values by then); a
        # list of another length is quoted as it came.
        shown = _dims(_pair(stride, (1, 1), "") if len(stride) <= 2 else stride)
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "expected stride to be a single integer value or a list of "
                     f"{len(ws) - 2} values to match the convolution dimensions, but got "
                     f"stride={shown}")
    if len(ws) != 4:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Expected 4-dimensional weight for {len(xs)}-dimensional input "
                     f"{_dims(xs)}, but got {len(ws)}-dimensional weight of size "
                     f"{_dims(ws)} instead")

    def bad_length(name, values):
        return (f"expected {name} to be a single integer value or a list of 2 values to "
                f"match the convolution dimensions, but got {name}={_dims(values)}")
    sh, sw = _pair(stride, (1, 1), bad_length("stride", stride))
    ph, pw = _pair(padding, (0, 0), bad_length("padding", padding))
    dh, dw = _pair(dilation, (1, 1), bad_length("dilation", dilation))
    if sh <= 0 or sw <= 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, "non-positive stride is not supported")
    if ph < 0 or pw < 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, "negative padding is not supported")
    if dh <= 0 or dw <= 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"dilation should be greater than zero, but got [{dh}, {dw}]")
    if groups <= 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, "non-positive groups is not supported")
    if bias is not None and bias.dtype != x.dtype:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Input type ({_CPP_TYPE[x.dtype]}) and bias type "
                     f"({_CPP_TYPE[bias.dtype]}) should be the same")
    oc, g = ws[0], groups
    if oc < g or oc % g:
        expected = f"at least {g}" if oc < g else f"divisible by {g}"
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Given groups={g}, expected weight to be {expected} at dimension 0, "
                     f"but got weight of size [{_dims(ws)}] instead")
    n, c, h, w = _nchw(xs)
    if c != ws[1] * g:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Given groups={g}, weight of size {_dims(ws)}, expected input"
                     f"{_dims(xs)} to have {ws[1] * g} channels, but got {c} channels "
                     "instead")
    if bias is not None and (len(bias.shape) != 1 or bias.shape[0] != oc):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Given weight of size {_dims(ws)}, expected bias to be 1-dimensional "
                     f"with {oc} elements, but got bias of size {_dims(bias.shape)} instead")
    kh, kw = ws[2], ws[3]
    oh, ow = _windows(h, kh, sh, ph, dh), _windows(w, kw, sw, pw, dw)
    if oh < 1 or ow < 1:
        def text(v):
            return "(too large)" if v >= 1 << 63 else str(v)
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Calculated padded input size per channel: ({text(h + 2 * ph)} x "
                     f"{text(w + 2 * pw)}). Kernel size: ({text(dh * (kh - 1) + 1)} x "
                     f"{text(dw * (kw - 1) + 1)}). Kernel size can't be greater than "
                     "actual input size")
    if weight.dtype != x.dtype:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"expected scalar type {_SCALAR_TYPE[x.dtype]} but found "
                     f"{_SCALAR_TYPE[weight.dtype]}")
    if x.dtype not in _FLOATING or not caps.has(pb.MATMUL_FAMILY, x.dtype):
        raise not_implemented("conv2d", x.dtype)
    _check_columns(n, c, kh, kw, oh, ow, "conv2d")
    return Meta(x.dtype, _window_out(x, oc, oh, ow), x.device)


def plan_pool2d(op, x, kernel_size, stride, padding, dilation, caps):
    """window_plan.cc PlanPool2d (F.max_pool2d, F.avg_pool2d)."""
    name = "max_pool2d" if op == pb.MAX_POOL else "avg_pool2d"
    xs, rank = x.shape, len(x.shape)
    empty_plane = rank >= 3 and 0 in xs[-3:]
    if op == pb.MAX_POOL and rank not in (3, 4):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "non-empty 3D or 4D (batch mode) tensor expected for input")
    if op == pb.AVG_POOL:  # avg_pool2d reads dim -3's size first
        wrap_dim(-3, rank)
    if rank not in (3, 4) or empty_plane:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size "
                     f"for input, but got:{_dims(xs)}")
    if op == pb.AVG_POOL and dilation:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, "avg_pool2d takes no dilation")
    if not kernel_size:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, f"{name} needs a kernel_size")
    kernel = _pair(kernel_size, (0, 0),
                   f"{name}: kernel_size must either be a single int, or a tuple of two ints")
    sh, sw = _pair(stride, kernel, f"{name}: stride must either be omitted, a single int, "
                   "or a tuple of two ints")
    ph, pw = _pair(padding, (0, 0),
                   f"{name}: padding must either be a single int, or a tuple of two ints")
    dh, dw = _pair(dilation, (1, 1),
                   f"{name}: dilation must be either a single int, or a tuple of two ints")
    if sh == 0 or sw == 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, "stride should not be zero")
    for p, k in ((ph, kernel[0]), (pw, kernel[1])):
        if p < 0:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"pad must be non-negative, but got pad: {p}")
        if p > _trunc_half(k):
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"pad should be at most half of kernel size, but got pad={p} and "
                         f"kernel_size={k}")
    kh, kw = kernel
    if kh <= 0 or kw <= 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"kernel size should be greater than zero, but got kH: {kh} kW: {kw}")
    if sh <= 0 or sw <= 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"stride should be greater than zero, but got dH: {sh} dW: {sw}")
    if dh <= 0 or dw <= 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "dilation should be greater than zero, but got dilationH: "
                     f"{dh} dilationW: {dw}")
    if x.dtype not in _FLOATING or not caps.has(pb.REDUCE_FAMILY, x.dtype):
        raise not_implemented(name, x.dtype)
    n, c, h, w = _nchw(xs)
    oh, ow = _windows(h, kh, sh, ph, dh), _windows(w, kw, sw, pw, dw)
    if oh < 1 or ow < 1:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Given input size: ({c}x{h}x{w}). Calculated output size: "
                     f"({c}x{oh}x{ow}). Output size is too small")
    _check_columns(n, c, kh, kw, oh, ow, name)
    return Meta(x.dtype, _window_out(x, c, oh, ow), x.device)


def _trunc_half(k):
    """C++'s k / 2 (toward zero, for a negative k too)."""
    return -(-k // 2) if k < 0 else k // 2


def plan_adaptive_avg_pool2d(x, output_size, caps):
    """window_plan.cc PlanAdaptiveAvgPool2d."""
    xs, rank = x.shape, len(x.shape)
    if rank not in (3, 4):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {_dims(xs)}")
    for d in range(rank - 3, rank):
        if xs[d] == 0:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "adaptive_avg_pool2d(): Expected input to have non-zero size for "
                         f"non-batch dimensions, but input has sizes {_dims(xs)} with "
                         f"dimension {d} being empty")
    oh, ow = _pair(output_size, (-1, -1), "adaptive_avg_pool2d: output_size must be 2")
    if not output_size:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT, "adaptive_avg_pool2d: output_size must be 2")
    if oh < 0 or ow < 0:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "adaptive_avg_pool2d: elements of output_size must be greater than or "
                     f"equal to 0 but received {{{oh}, {ow}}}")
    if x.dtype not in _FLOATING or not caps.has(pb.MATMUL_FAMILY, x.dtype):
        raise not_implemented("adaptive_avg_pool2d", x.dtype)
    _, c, _, _ = _nchw(xs)
    return Meta(x.dtype, _window_out(x, c, oh, ow), x.device)


def plan_loss(op, x, target, reduction, caps):
    """loss_plan.cc PlanLoss (F.nll_loss, F.cross_entropy, F.mse_loss), in
    torch's order of checks; the targets' range is the server's to check
    when it reads them."""
    check_same_device((x, target))
    name = _LOSS_NAME[op]
    if op == pb.MSE_LOSS:
        broadcast_shapes(x.shape, target.shape)  # torch: broadcast_tensors first
        if x.dtype not in _FLOATING and target.dtype not in _FLOATING:
            raise not_implemented(
                "mse_cpu", result_type(x.dtype, False, target.dtype, False))
        for d in (x.dtype, target.dtype):
            if d not in _FLOATING:
                raise not_implemented(name, d)
        diff = plan_binary(pb.SUB, x, target, None, caps)
        return Meta(diff.dtype, diff.shape if reduction == pb.REDUCTION_NONE else (),
                    x.device)
    xs, ts = x.shape, target.shape
    if op == pb.CROSS_ENTROPY:
        if xs == ts:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"{name}: a target of the input's size {_dims(xs)} gives class "
                         "probabilities, which are not offered yet: give class indices "
                         "(int64, one per row)")
        if x.dtype not in _FLOATING:
            raise not_implemented("log_softmax_lastdim_kernel_impl", x.dtype)
    if not xs:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Expected 1 or more dimensions (got {len(xs)})", "ValueError")
    if len(xs) != 1:
        target_batch = ts[0] if ts else 0
        if xs[0] != target_batch:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"Expected input batch_size ({xs[0]}) to match target batch_size "
                         f"({target_batch}).", "ValueError")
    if len(xs) > 2:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"{name}: input of size {_dims(xs)} is not supported: give [N, C] or "
                     "unbatched [C] (the K-dimensional form is not offered yet)")
    if len(ts) > 1:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "0D or 1D target tensor expected, multi-target not supported")
    batched = len(xs) == 2
    if batched == (not ts):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"size mismatch (got input: {_dims(xs)}, target: {_dims(ts)})")
    if x.dtype not in _FLOATING:
        raise not_implemented("nll_loss_out_frame", x.dtype)
    if target.dtype != pb.INT64:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"expected scalar type Long but found {_SCALAR_TYPE[target.dtype]}")
    caps.check(pb.REDUCE_FAMILY, x.dtype, "reduce")
    out = (xs[0],) if reduction == pb.REDUCTION_NONE and batched else ()
    return Meta(x.dtype, out, x.device)


def plan_where(cond, x, x_number, y, y_number, caps):
    """planner.cc PlanWhere (torch.where): x and y tensors (Metas) or the
    numbers x_number, y_number."""
    tensors = [t for t in (cond, x, y) if t is not None]
    check_same_device(tensors)
    if cond.dtype != pb.BOOL:
        raise _error(grpc.StatusCode.FAILED_PRECONDITION,
                     "where expected condition to be a boolean tensor, but got a tensor with "
                     f"dtype {_SCALAR_TYPE[cond.dtype]}")
    shape = cond.shape
    for t in (x, y):
        if t is not None:
            shape = broadcast_shapes(shape, t.shape)
    if x is not None and y is not None:
        dtype = result_type(x.dtype, not x.shape, y.dtype, not y.shape)
    elif x is not None or y is not None:
        tensor = x if x is not None else y
        number = y_number if x is not None else x_number
        dtype = scalar_result_type(tensor.dtype, isinstance(number, int))
    else:
        dtype = (pb.INT64 if isinstance(x_number, int) and isinstance(y_number, int)
                 else pb.FLOAT32)
    caps.check(pb.WHERE_FAMILY, dtype, "where")
    for t, number in ((x, x_number), (y, y_number)):
        source = t.dtype if t is not None else pb.INT64 if isinstance(number, int) \
            else pb.FLOAT64
        if source != dtype:
            caps.cast(source, dtype)
    return Meta(dtype, shape, cond.device)


def plan_cat(xs, dim, caps):
    """planner.cc PlanCat (torch.cat) of the Metas `xs`."""
    if len(xs) > 1024:  # op_plan.cc CheckArity
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"cat takes 1 to 1024 tensor operands, got {len(xs)}")
    check_same_device(xs)
    for i, t in enumerate(xs):
        if not t.shape:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    first = xs[0].shape
    rank = len(first)
    axis = wrap_dim(dim, rank)
    dtype, total = xs[0].dtype, 0
    for i, t in enumerate(xs):
        if len(t.shape) != rank:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "Tensors must have same number of dimensions: got "
                         f"{rank} and {len(t.shape)}")
        for d in range(rank):
            if d != axis and t.shape[d] != first[d]:
                raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                             f"Sizes of tensors must match except in dimension {axis}. "
                             f"Expected size {first[d]} but got size {t.shape[d]} for tensor "
                             f"number {i} in the list.")
        dtype = promote_types(dtype, t.dtype)
        total += t.shape[axis]
    shape = make_shape(first[:axis] + (total,) + first[axis + 1:])
    for t in xs:
        if t.dtype != dtype:
            caps.cast(t.dtype, dtype)
    return Meta(dtype, shape, xs[0].device)


def plan_dropout(x, p, train, caps):
    """planner.cc PlanDropout (F.dropout): the result is x's shape and dtype."""
    if not 0 <= p <= 1:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "dropout probability has to be between 0 and 1, but got "
                     f"{_python_float(p)}", "ValueError")
    floating = x.dtype in _FLOATING
    if not floating and train:  # torch scales by 1 / (1 - p) into x's dtype
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "result type Float can't be cast to the desired output type "
                     f"{_SCALAR_TYPE[x.dtype]}")
    if not floating or (train and not caps.has(pb.RANDOM_FILL, pb.FLOAT32)):
        raise not_implemented("dropout", x.dtype)
    return x


def check_requires_grad(x, requires_grad):
    """planner.cc CheckRequiresGrad (requires_grad_)."""
    if requires_grad and x.dtype not in _FLOATING:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "only Tensors of floating point dtype can require gradients")
    return x


def _combine_categories(higher, lower):
    """c10's combine_categories: the lower class's dtype counts only when
    its category is higher."""
    if higher is None:
        return lower
    if lower is None or higher in _FLOATING:
        return higher
    if higher == pb.BOOL or lower in _FLOATING:
        return promote_types(higher, lower)
    return higher


def result_type_of(tensors, numbers):
    """planner.cc ResultTypeState (torch.result_type of any number of
    tensors, Metas, and Python numbers): dimensioned tensors, 0-d tensors and
    numbers promote within their class, then the classes combine."""
    dim = zero_dim = number = None
    for t in tensors:
        if t.shape:
            dim = t.dtype if dim is None else promote_types(dim, t.dtype)
        else:
            zero_dim = t.dtype if zero_dim is None else promote_types(zero_dim, t.dtype)
    for n in numbers:
        d = pb.INT64 if isinstance(n, int) else pb.FLOAT32
        number = d if number is None else promote_types(number, d)
    result = _combine_categories(dim, _combine_categories(zero_dim, number))
    return pb.FLOAT32 if result is None else result


def plan_clamp(x, lo, lo_number, hi, hi_number, caps):
    """op_plan.cc PlanClampOp (torch.clamp): bounds tensors (Metas) or
    numbers, None when not given; as the executor runs it, every tensor in
    the result dtype, then maximum(x, min), then minimum(that, max)."""
    tensors = [t for t in (x, lo, hi) if t is not None]
    check_same_device(tensors)
    numbers = [n for n in (lo_number, hi_number) if n is not None]
    if len(tensors) == 1 and not numbers:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "torch.clamp: At least one of 'min' or 'max' must not be None")
    dtype = result_type_of(tensors, numbers)
    for t in tensors:
        if t.dtype != dtype:
            caps.cast(t.dtype, dtype)
    out = x.shape
    for op, bound, number in ((pb.MAXIMUM, lo, lo_number), (pb.MINIMUM, hi, hi_number)):
        if bound is None and number is None:
            continue
        b = Meta(dtype, bound.shape, x.device) if bound is not None else None
        out = plan_binary(op, Meta(dtype, out, x.device), b,
                          None if bound is not None else number, caps).shape
    return Meta(dtype, out, x.device)


def can_cast(source, target):
    """planner.cc CanCast (torch's canCast): no floating into an integer,
    nothing but bool into bool."""
    if source in _FLOATING and target not in _FLOATING:
        return False
    return source == pb.BOOL or target != pb.BOOL


def _dims(shape):
    """shape.cc DimsToString: "[2, 3]"."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _python_float(value):
    """ops.cc PythonFloat: Python's repr of a float ("2.0", "1e-05", "inf")."""
    return repr(float(value))


def plan_unary(op, x, caps):
    """planner.cc PlanUnary with op_checks.cc CheckUnaryOpDType: the op
    table's row says what an integer or bool input does (keeps its dtype,
    computes in float32, or is refused)."""
    row = _UNARY[op]
    integers = row.get("integers")
    floating = x.dtype in _FLOATING
    refused = (not floating if integers == "refuse"
               else x.dtype == pb.BOOL if integers == "keep" else False)
    if refused:
        if row.get("bool_error") and x.dtype == pb.BOOL:
            raise _error(grpc.StatusCode.FAILED_PRECONDITION, row["bool_error"])
        raise not_implemented(row.get("kernel_name"), x.dtype)
    compute = pb.FLOAT32 if integers != "keep" and not floating else x.dtype
    caps.check(pb.UNARY_FAMILY, compute, "unary")
    if x.dtype != compute:
        caps.cast(x.dtype, compute)
    return Meta(compute, x.shape, x.device)


def check_arity(name, n, lo, hi):
    """op_plan.cc CheckArity: `name` takes lo to hi tensor operands."""
    if not lo <= n <= hi:
        count = str(lo) if lo == hi else f"{lo} to {hi}"
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"{name} takes {count} tensor operand{'' if hi == 1 else 's'}, got {n}")


def _numel(shape):
    return math.prod(shape)


def plan_norm(op, x, weight, bias, running_mean, running_var, normalized_shape, training,
              caps):
    """norm_plan.cc PlanNorm (F.batch_norm, F.layer_norm; op a wire NormOp),
    after op_convert.cc's pairing of the running statistics and PlanOp's
    same-device rule. The tensors are Metas, None where not given; the
    result is x's shape and dtype."""
    if (running_mean is None) != (running_var is None):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "running_mean and running_var are given together or not at all")
    # NormSlotsOf's order: weight, bias, running_mean, running_var.
    slots = [(name, t) for name, t in (("weight", weight), ("bias", bias),
                                       ("running_mean", running_mean),
                                       ("running_var", running_var)) if t is not None]
    check_same_device([x] + [t for _, t in slots])
    batch = op == pb.BATCH_NORM
    if batch:
        wrap_dim(1, len(x.shape))
        channels = x.shape[1]
        named = dict(slots)
        for name in ("running_mean", "running_var", "weight", "bias"):  # CheckChannels
            t = named.get(name)
            if t is not None and _numel(t.shape) != channels:
                raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                             f"{name} should contain {channels} elements not "
                             f"{_numel(t.shape)}")
    else:
        _check_layer_shape(x, tuple(normalized_shape), slots)
    if x.dtype not in (pb.FLOAT32, pb.FLOAT64):
        raise not_implemented("batch_norm" if batch else "LayerNormKernelImpl", x.dtype)
    for _, t in slots:
        if t.dtype != x.dtype:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "mixed dtype (CPU): expect parameter to have scalar type of "
                         f"{_SCALAR_TYPE[x.dtype]}" if batch else
                         f"expected scalar type {_SCALAR_TYPE[x.dtype]} but found "
                         f"{_SCALAR_TYPE[t.dtype]}")
    caps.check(pb.REDUCE_FAMILY, x.dtype, "reduce")
    caps.check(pb.BINARY_FAMILY, x.dtype, "binary")
    caps.check(pb.UNARY_FAMILY, x.dtype, "unary")
    if batch and not training and running_mean is None:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "running_mean must be defined in evaluation mode")
    # NormLayoutOf: a batch statistic is over every dim but 1.
    if batch and training and _numel(x.shape[:1] + x.shape[2:]) == 1:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "Expected more than 1 value per channel when training, got input size "
                     f"torch.Size({_dims(x.shape)})", "ValueError")
    return x


def _check_layer_shape(x, norm, slots):
    """norm_plan.cc CheckLayerShape."""
    if not norm:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "Expected normalized_shape to be at least 1-dimensional, i.e., "
                     "containing at least one element, but got normalized_shape = []")
    if len(norm) > MAX_RANK:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"normalized_shape has {len(norm)} dims; a tensor has at most {MAX_RANK}")
    if any(name == "running_mean" for name, _ in slots):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     "layer_norm takes no running_mean or running_var")
    lead = len(x.shape) - len(norm)
    if lead < 0 or tuple(x.shape[lead:]) != norm:
        joined = ", ".join(str(d) for d in norm)
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Given normalized_shape={_dims(norm)}, expected input with shape "
                     f"[*, {joined}], but got input of size{_dims(x.shape)}")
    for name, t in slots:
        if tuple(t.shape) != norm:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"Expected {name} to be of same shape as normalized_shape, but got "
                         f"{name} of shape {_dims(t.shape)} and normalized_shape = "
                         f"{_dims(norm)}")


def plan_backward(root, gradient):
    """planner.cc CheckBackwardRoot (x.backward(gradient)), after PlanOp's
    same-device rule; the root keeps its Meta. Whether the root requires
    grad is autograd's state: the server's to say."""
    if gradient is None:
        if _numel(root.shape) != 1:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "grad can be implicitly created only for scalar outputs")
        return root
    check_same_device([root, gradient])
    if tuple(gradient.shape) != tuple(root.shape):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"Mismatch in shape: grad_output[0] has a shape of "
                     f"torch.Size({_dims(gradient.shape)}) and output[0] has a shape of "
                     f"torch.Size({_dims(root.shape)}).")
    return root


MAX_OPERANDS = 1024  # op_plan.cc CheckArity: zero_grad's and cat's most tensors


def plan_zero_grad(tensors):
    """zero_grad of the tensors' Metas (on any devices): op_plan.cc CheckArity."""
    check_arity("zero_grad", len(tensors), 1, MAX_OPERANDS)
    return tensors[0]


# Each optimizer's name ("SGD.step") by wire value, and its state tensors' names.
_OPTIMIZER_NAME = {pb.OptimizerKind.Value(row["wire"].split()[1]): row["name"]
                   for row in OPS if row["kind"] == "OptimizerStep"}
_STATE_NAMES = {pb.SGD: ("momentum_buffer",), pb.ADAM: ("exp_avg", "exp_avg_sq"),
                pb.ADAMW: ("exp_avg", "exp_avg_sq")}
# OptimizerStepArgs' defaults for its optional fields.
_OPTIMIZER_DEFAULTS = dict(lr=1e-3, weight_decay=0.0, momentum=0.0, dampening=0.0,
                           nesterov=False, beta1=0.9, beta2=0.999, eps=1e-8, step=0)


def check_optimizer_args(kind, a, error_kind=0, show=None):
    """op_plan.cc CheckOptimizerArgs (kind a wire OptimizerKind, `a` every
    OptimizerStepArgs field of it): torch.optim's checks and messages, a
    value written by `show` (default: as the server writes a double); the
    error of class `error_kind` (torch's constructors raise ValueError and
    write the value as given: show=str)."""
    show = show or _python_float

    def invalid(what, value):
        return _error(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid {what}: {show(value)}",
                      error_kind)
    if not a["lr"] >= 0:
        raise invalid("learning rate", a["lr"])
    if kind == pb.SGD:
        if not a["momentum"] >= 0:
            raise invalid("momentum value", a["momentum"])
        if not a["weight_decay"] >= 0:
            raise invalid("weight_decay value", a["weight_decay"])
        if a["nesterov"] and (a["momentum"] <= 0 or a["dampening"] != 0):
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         "Nesterov momentum requires a momentum and zero dampening", error_kind)
    else:
        if not a["eps"] >= 0:
            raise invalid("epsilon value", a["eps"])
        for i, beta in enumerate((a["beta1"], a["beta2"])):
            if not 0 <= beta < 1:
                raise invalid(f"beta parameter at index {i}", beta)
        if not a["weight_decay"] >= 0:
            raise invalid("weight_decay value", a["weight_decay"])
    if a["step"] < 1:
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"step must count from 1, got {a['step']}")


def plan_optimizer_step(kind, hyperparameters, params, state):
    """op_plan.cc PlanOptimizerStep (optimizer.step(); kind a wire
    OptimizerKind, hyperparameters OptimizerStepArgs' fields, defaults for
    those not given): the parameters' and state tensors' Metas may sit on
    any devices, each state tensor on its parameter's, with its shape and
    dtype. The result is the first parameter's Meta."""
    tensors = list(params) + list(state)
    name = _OPTIMIZER_NAME[kind]
    check_arity(name, len(tensors), 1, 3 * MAX_OPERANDS)
    a = dict(_OPTIMIZER_DEFAULTS, **hyperparameters)
    check_optimizer_args(kind, a)
    k = (1 if a["momentum"] != 0 else 0) if kind == pb.SGD else 2  # OptimizerStateCount
    if len(tensors) % (k + 1):
        raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                     f"{name} takes the parameters and, for each, {k} "
                     f"{'state tensor' if k == 1 else 'state tensors'}: {len(tensors)} "
                     f"tensors is not a multiple of {k + 1}")
    n = len(tensors) // (k + 1)

    def describe(t):
        return f"{_dims(t.shape)} {pb.DType.Name(t.dtype).lower()} on {t.device}"
    for i in range(n):
        p = tensors[i]
        if p.dtype not in _FLOATING:
            raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"{name}: parameter {i} is {pb.DType.Name(p.dtype).lower()}; "
                         "parameters are floating")
        for j in range(k):
            s = tensors[n * (j + 1) + i]
            if s.dtype != p.dtype or tuple(s.shape) != tuple(p.shape) or s.device != p.device:
                raise _error(grpc.StatusCode.INVALID_ARGUMENT,
                             f"{name}: {_STATE_NAMES[kind][j]} of parameter {i} is "
                             f"{describe(s)}; the parameter is {describe(p)}")
    return tensors[0]
