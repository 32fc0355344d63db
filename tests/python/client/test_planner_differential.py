"""The client's planner (tensord/_planner.py) against the server's own: 20,000 generated requests, no mismatch.

Each request is a binary op of two tensors or of a tensor and a number, an
in-place one (add_, sub_, mul_, div_, and axpy_: add_ with alpha), a unary
op, a reduction (every op, over all dims, one dim or several, in range or
not, named twice or not, kept or not), a matmul or F.linear (every rank),
a view (reshape with -1s and bad sizes, permute, transpose, narrow,
select, dims and indices in range and one past), a cast to every dtype, a
softmax or log_softmax over any dim, a conv2d, max/avg or adaptive
pooling (windows of every length, sign and fit, groups), a loss (every
reduction), a where, clamp, cat or dropout, a batch_norm or layer_norm
(parameters of the right size and dtype or not, running statistics paired
or not, training or not), a backward (from a leaf that requires grad or
not, with a gradient of the root's shape or not), an optimizer step (SGD,
Adam, AdamW: hyperparameters in and out of torch's ranges, state tensors
matching their parameters or not) or a zero_grad, over tiny tensors of every dtype in shapes that broadcast and
shapes that do not (0-d and empty ones among them), mostly on one device
and sometimes on two (cpu:0 and cpu:1 of the suite's --host-devices 2
daemon). The Python module plans it; the server runs it as a real Run (a
unary call: the path a client's op takes, with no server code kept only
for this test; at most 12 elements a tensor, so the run takes seconds).
Both must agree on the result's dtype, shape and device, or on the error:
its gRPC code, its class (torch's, from the server's error kind) and its
message, word for word — except an error that reads the tensors' values
(a loss's target out of range) or autograd's state (a backward from a
tensor that does not require grad): SERVER_ONLY, which no planner can
give. The autograd requests take leaves of their own (LEAF_SHAPES, floating,
requiring grad); an optimizer step's state tensors and a batch_norm's
running statistics are the pool's, their values changed in place.
"""
import random
import re

import pytest

import tensord
from tensord import _op_table, _planner
from tensord._errors import TensordError
from tensord.v1 import tensord_pb2 as pb

REQUESTS = 20_000
# The errors only the server can give, from a tensor's values (the pool's
# values change under the in-place requests: a loss's target out of range)
# or from autograd's state (a backward from a tensor that does not require grad).
SERVER_ONLY = re.compile(r"Target -?\d+ is out of bounds\.|element 0 of tensors does not "
                         r"require grad and does not have a grad_fn")
DTYPES = (tensord.float32, tensord.float64, tensord.float16, tensord.bfloat16,
          tensord.int32, tensord.int64, tensord.bool)
SHAPES = ((), (0,), (1,), (2,), (3,), (2, 1), (1, 3), (2, 3), (3, 2), (0, 3), (2, 0),
          (1, 1, 3), (2, 2, 3), (2, 3, 2), (1, 2, 4, 4), (2, 1, 3, 3), (2, 2, 3, 3),
          (1, 1, 1, 1), (3, 1, 2, 2), (1, 2, 0, 3))
WINDOW_LISTS = ([], [], [1], [2], [1, 2], [0], [-1], [3], [1, 1, 1])
LEAF_SHAPES = ((), (1,), (3,), (2, 3), (0,), (1, 1, 1, 1), (2, 1, 3, 3))
DEVICES = ("cpu:0", "cpu:1")
BINARY = [pb.BinaryOp.Value(r["wire"].split()[1]) for r in _op_table.OPS if r["kind"] == "Binary"]
UNARY = [pb.UnaryOp.Value(r["wire"].split()[1]) for r in _op_table.OPS if r["kind"] == "Unary"]
REDUCE = [pb.ReduceOp.Value(r["wire"].split()[1]) for r in _op_table.OPS if r["kind"] == "Reduce"]
LOSSES = [pb.LossOp.Value(r["wire"].split()[1]) for r in _op_table.OPS if r["kind"] == "Loss"]
VIEWS = ("reshape", "permute", "transpose", "narrow", "select")
IN_PLACE = [pb.InPlaceOp.Value(r["wire"].split()[1]) for r in _op_table.OPS
            if r["kind"] == "InPlace"]
NUMBERS = (pb.Scalar(int_value=3), pb.Scalar(int_value=-2), pb.Scalar(int_value=0),
           pb.Scalar(int_value=1), pb.Scalar(float_value=0.5), pb.Scalar(float_value=-1.5))


def _outcome(plan):
    """("ok", dtype, shape, device) or ("error", code, class, message)."""
    try:
        meta = plan()
    except TensordError as e:
        return ("error", e.code, type(e).__name__, str(e))
    return ("ok", meta.dtype, tuple(meta.shape), meta.device)


def _requests(rng, pool, labels, leaves):
    """REQUESTS (pb.Op, its operands' Metas) pairs, seeded; `labels`: per
    device, int64 zeros no request writes (a loss's class indices);
    `leaves`: floating (handle, Meta)s that require grad."""
    by_device = {d: [t for t in pool if t[1].device == d] for d in DEVICES}
    for _ in range(REQUESTS):
        a_handle, a = rng.choice(pool)
        roll = rng.random()
        if roll < 0.30:  # tensor (op) tensor: one device, one time in ten two
            others = pool if rng.random() < 0.1 else by_device[a.device]
            b_handle, b = rng.choice(others)
            op = pb.Op(binary=pb.BinaryArgs(op=rng.choice(BINARY),
                                            lhs=pb.Operand(handle=a_handle),
                                            rhs=pb.Operand(handle=b_handle)))
            yield op, (a, b)
        elif roll < 0.38:  # in place: target (op)= tensor or number, target += alpha * tensor
            op = rng.choice(IN_PLACE)
            args = pb.InPlaceArgs(op=op, target=pb.Operand(handle=a_handle))
            metas = (a,)
            if op == pb.AXPY_ or rng.random() < 0.6:
                others = pool if rng.random() < 0.1 else by_device[a.device]
                b_handle, b = rng.choice(others)
                args.other.handle = b_handle
                metas = (a, b)
            else:
                args.scalar.CopyFrom(rng.choice(NUMBERS))
            if op == pb.AXPY_:
                args.alpha.CopyFrom(rng.choice(NUMBERS))
            yield pb.Op(in_place=args), metas
        elif roll < 0.46:  # a reduction over all dims, one dim or several
            args = pb.ReduceArgs(op=rng.choice(REDUCE), x=pb.Operand(handle=a_handle),
                                 keepdim=rng.random() < 0.5)
            rank = len(a.shape)
            pick = rng.random()
            if pick < 0.4:
                args.dim = rng.randint(-rank - 1, rank)
            elif pick < 0.7:
                args.dims.extend(rng.randint(-rank - 1, rank) for _ in range(rng.randint(1, 3)))
            yield pb.Op(reduce=args), (a,)
        elif roll < 0.52:  # a @ b, on shapes of every rank
            others = pool if rng.random() < 0.1 else by_device[a.device]
            b_handle, b = rng.choice(others)
            yield pb.Op(matmul=pb.MatMulArgs(lhs=pb.Operand(handle=a_handle),
                                            rhs=pb.Operand(handle=b_handle))), (a, b)
        elif roll < 0.55:  # F.linear(x, w[, bias])
            args = pb.LinearArgs(x=pb.Operand(handle=a_handle))
            metas = _weight_and_bias(rng, a, pool, by_device, args, 0.6)
            yield pb.Op(linear=args), metas
        elif roll < 0.62:  # views: reshape, permute, transpose, narrow, select
            rank = len(a.shape)
            dim = lambda: rng.randint(-rank - 1, rank)  # noqa: E731 — in range or one past
            pick = rng.randrange(5)
            x = pb.Operand(handle=a_handle)
            if pick == 0:
                numel = 1
                for d in a.shape:
                    numel *= d
                shape = rng.choice([[numel], [-1], [numel, 1], [-1, 2], [2, -1, 1], [3, 2],
                                    [-1, -1], [0, -1], [-2], [1] * 9, [1] * 8, [2, 0]])
                yield pb.Op(reshape=pb.ReshapeArgs(x=x, shape=shape)), (a,)
            elif pick == 1:
                dims = [dim() for _ in range(rng.choice([rank, rank, rank + 1, max(rank - 1, 0)]))]
                yield pb.Op(permute=pb.PermuteArgs(x=x, dims=dims)), (a,)
            elif pick == 2:
                yield pb.Op(transpose=pb.TransposeArgs(x=x, dim0=dim(), dim1=dim())), (a,)
            elif pick == 3:
                yield pb.Op(narrow=pb.NarrowArgs(x=x, dim=dim(), start=rng.randint(-4, 4),
                                                 length=rng.randint(-1, 3))), (a,)
            else:
                yield pb.Op(select=pb.SelectArgs(x=x, dim=dim(), index=rng.randint(-4, 4))), (a,)
        elif roll < 0.66:  # a cast to every dtype, a softmax or log_softmax on any dim
            x = pb.Operand(handle=a_handle)
            if rng.random() < 0.5:
                yield pb.Op(cast=pb.CastArgs(x=x, dtype=rng.choice(DTYPES).wire)), (a,)
            else:
                rank = len(a.shape)
                yield pb.Op(softmax=pb.SoftmaxArgs(x=x, dim=rng.randint(-rank - 1, rank),
                                                   log=rng.random() < 0.5)), (a,)
        elif roll < 0.72:  # conv2d, max/avg pooling, adaptive average pooling
            x = pb.Operand(handle=a_handle)
            window = lambda: rng.choice(WINDOW_LISTS)  # noqa: E731
            pick = rng.random()
            if pick < 0.5:
                args = pb.Conv2dArgs(x=x, stride=window(), padding=window(), dilation=window())
                if rng.random() < 0.8:
                    args.groups = rng.choice([1, 1, 1, 2, 0, 3])
                metas = _weight_and_bias(rng, a, pool, by_device, args, 0.4)
                yield pb.Op(conv2d=args), metas
            elif pick < 0.85:
                op = rng.choice([pb.MAX_POOL, pb.AVG_POOL])
                args = pb.Pool2dArgs(op=op, x=x, kernel_size=rng.choice([[], [2], [1, 2], [3],
                                                                        [0], [5], [2, 2, 2]]),
                                     stride=window(), padding=rng.choice([[], [0], [1], [2], [-1]]),
                                     dilation=rng.choice([[], [], [1], [2], [0]]))
                yield pb.Op(pool2d=args), (a,)
            else:
                args = pb.Pool2dArgs(op=pb.ADAPTIVE_AVG_POOL, x=x, output_size=rng.choice(
                    [[], [1], [2, 3], [0], [-1, 2], [1, 2, 3], [3]]))
                yield pb.Op(pool2d=args), (a,)
        elif roll < 0.76:  # the losses, every reduction, mostly with class indices
            others = pool if rng.random() < 0.05 else by_device[a.device]
            t_handle, t = rng.choice(labels[a.device] if rng.random() < 0.6 else others)
            args = pb.LossArgs(op=rng.choice(LOSSES), input=pb.Operand(handle=a_handle),
                               target=pb.Operand(handle=t_handle),
                               reduction=rng.choice([pb.REDUCTION_MEAN, pb.REDUCTION_SUM,
                                                     pb.REDUCTION_NONE]))
            yield pb.Op(loss=args), (a, t)
        elif roll < 0.82:  # where, cat, dropout
            pick = rng.random()
            same = lambda: rng.choice(pool if rng.random() < 0.05 else by_device[a.device])  # noqa: E731
            if pick < 0.4:  # mostly on a bool condition
                if rng.random() < 0.7:
                    a_handle, a = rng.choice([t for t in by_device[a.device]
                                              if t[1].dtype == pb.BOOL])
                args = pb.WhereArgs(condition=pb.Operand(handle=a_handle))
                metas = [a]
                for tensor_field, scalar_field in (("input", "input_scalar"),
                                                   ("other", "other_scalar")):
                    if rng.random() < 0.6:
                        handle, meta = same()
                        getattr(args, tensor_field).handle = handle
                        metas.append(meta)
                    else:
                        getattr(args, scalar_field).CopyFrom(rng.choice(NUMBERS))
                        metas.append(None)
                yield pb.Op(where=args), tuple(metas)
            elif pick < 0.6:  # clamp: each bound a tensor, a number or none
                args = pb.ClampArgs(x=pb.Operand(handle=a_handle))
                metas = [a]
                for tensor_field, scalar_field in (("min", "min_scalar"), ("max", "max_scalar")):
                    pick = rng.random()
                    if pick < 0.4:
                        handle, meta = same()
                        getattr(args, tensor_field).handle = handle
                        metas.append(meta)
                    else:
                        if pick < 0.8:
                            getattr(args, scalar_field).CopyFrom(rng.choice(NUMBERS))
                        metas.append(None)
                yield pb.Op(clamp=args), tuple(metas)
            elif pick < 0.8:
                others = [same() for _ in range(rng.randint(0, 2))]
                args = pb.CatArgs(xs=[pb.Operand(handle=a_handle)]
                                  + [pb.Operand(handle=h) for h, _ in others],
                                  dim=rng.randint(-len(a.shape) - 1, len(a.shape)))
                yield pb.Op(cat=args), (a, *(m for _, m in others))
            else:
                args = pb.DropoutArgs(x=pb.Operand(handle=a_handle),
                                      p=rng.choice([0.0, 0.5, 1.0, -0.1, 1.5]),
                                      training=rng.random() < 0.7, seed=1)
                yield pb.Op(dropout=args), (a,)
        elif roll < 0.90:  # the norms, backward, an optimizer step, zero_grad
            pick = rng.random()
            if pick < 0.5:
                yield _norm_request(rng, a_handle, a, pool, by_device)
            elif pick < 0.72:
                yield _backward_request(rng, pool, by_device, leaves)
            elif pick < 0.95:
                yield _optimizer_request(rng, pool, leaves)
            else:
                picked = [rng.choice(pool + leaves) for _ in range(rng.randint(1, 3))]
                yield (pb.Op(zero_grad=pb.ZeroGradArgs(
                    tensors=[pb.Operand(handle=h) for h, _ in picked])),
                       tuple(m for _, m in picked))
        elif roll < 0.95:  # tensor (op) number, either way round
            op = pb.Op(binary=pb.BinaryArgs(op=rng.choice(BINARY),
                                            lhs=pb.Operand(handle=a_handle),
                                            scalar=rng.choice(NUMBERS),
                                            scalar_first=rng.random() < 0.3))
            yield op, (a,)
        else:
            op = pb.Op(unary=pb.UnaryArgs(op=rng.choice(UNARY), x=pb.Operand(handle=a_handle)))
            yield op, (a,)


def _norm_request(rng, a_handle, a, pool, by_device):
    """A batch_norm or layer_norm of x (mostly a floating x on its device);
    its Metas in plan_norm's order: x, weight, bias, running_mean, running_var."""
    same = by_device[a.device]
    if rng.random() < 0.6:
        a_handle, a = rng.choice([t for t in same if t[1].dtype in (pb.FLOAT32, pb.FLOAT64)])
    batch = rng.random() < 0.6
    args = pb.NormArgs(op=pb.BATCH_NORM if batch else pb.LAYER_NORM,
                       input=pb.Operand(handle=a_handle))
    rank = len(a.shape)
    if batch:
        wanted = (a.shape[1],) if rank > 1 else (3,)
    else:
        k = rng.randint(0, min(rank, 3))
        wanted = (a.shape[rank - k:] if rng.random() < 0.85
                  else rng.choice([(3,), (2, 3), (), (4,), (1,) * 9]))
        args.normalized_shape.extend(wanted)

    def parameter():  # mostly of the wanted shape and x's dtype, on x's device
        fitting = [t for t in same if t[1].shape == wanted and t[1].dtype == a.dtype]
        if fitting and rng.random() < 0.85:
            return rng.choice(fitting)
        return rng.choice(pool if rng.random() < 0.05 else same)
    metas = {}
    for name in ("weight", "bias"):
        if rng.random() < 0.6:
            handle, metas[name] = parameter()
            getattr(args, name).handle = handle
    running = rng.random()
    names = (("running_mean", "running_var") if running < (0.6 if batch else 0.05)
             else (rng.choice(["running_mean", "running_var"]),) if running > 0.95 else ())
    for name in names:
        handle, metas[name] = parameter()
        getattr(args, name).handle = handle
    if rng.random() < 0.8:
        args.training = rng.random() < 0.6
    if rng.random() < 0.3:
        args.momentum, args.eps = 0.2, 1e-3
    return pb.Op(norm=args), (a, *(metas.get(name) for name in
                                   ("weight", "bias", "running_mean", "running_var")))


def _backward_request(rng, pool, by_device, leaves):
    """root.backward(gradient?): mostly from a leaf that requires grad, the
    gradient mostly of the root's shape."""
    root_handle, root = rng.choice(leaves if rng.random() < 0.85 else pool)
    args = pb.BackwardArgs(root=pb.Operand(handle=root_handle))
    if rng.random() < 0.5:
        return pb.Op(backward=args), (root,)
    fitting = [t for t in by_device[root.device] if t[1].shape == root.shape]
    g_handle, g = rng.choice(fitting if rng.random() < 0.7 else
                             pool if rng.random() < 0.1 else by_device[root.device])
    args.gradient.handle = g_handle
    return pb.Op(backward=args), (root, g)


def _optimizer_request(rng, pool, leaves):
    """An SGD, Adam or AdamW step: 1-3 parameters (mostly leaves that
    require grad), each one's state tensors mostly a pool tensor of its
    shape, dtype and device; hyperparameters mostly in torch's ranges."""
    kind = rng.choice([pb.SGD, pb.ADAM, pb.ADAMW])
    params = [rng.choice(leaves if rng.random() < 0.8 else pool)
              for _ in range(rng.choice([1, 1, 2, 3]))]
    args = pb.OptimizerStepArgs(kind=kind, params=[pb.Operand(handle=h) for h, _ in params],
                                step=rng.choice([1, 1, 2, 5, 0, -1]))
    often = lambda good, *bad: good if rng.random() < 0.85 else rng.choice(bad)  # noqa: E731
    if rng.random() < 0.9:
        args.lr = often(0.01, 0.0, -0.1, float("nan"))
    args.weight_decay = often(0.0, 0.01, -1.0)
    if kind == pb.SGD:
        args.momentum = rng.choice([0.0, 0.9, 0.9, -0.5])
        args.dampening = often(0.0, 0.1)
        args.nesterov = rng.random() < 0.2
        states = 1 if args.momentum != 0 else 0
    else:
        if rng.random() < 0.7:
            args.beta1, args.beta2 = often(0.9, 1.0, -0.1), often(0.999, 1.5)
        if rng.random() < 0.7:
            args.eps = often(1e-8, -1e-8)
        states = 2
    metas = [m for _, m in params]
    for _ in range(states):
        for _, p in params:
            fitting = [t for t in pool if t[1] == p]
            if rng.random() >= 0.85:  # its shape and dtype on any device, or any tensor
                fitting = pool if rng.random() < 0.5 else [
                    t for t in pool if t[1].shape == p.shape and t[1].dtype == p.dtype]
            handle, meta = rng.choice(fitting)
            args.state.add(handle=handle)
            metas.append(meta)
    if args.state and rng.random() < 0.05:
        del args.state[-1]
        metas.pop()
    return pb.Op(optimizer_step=args), tuple(metas)


def _value(scalar):
    return scalar.int_value if scalar.WhichOneof("value") == "int_value" else scalar.float_value


def _weight_and_bias(rng, a, pool, by_device, args, bias_odds):
    """Sets args.weight (on a's device, one time in twenty any) and, with
    bias_odds, args.bias; the operands' Metas."""
    w_handle, w = rng.choice(by_device[a.device] if rng.random() < 0.95 else pool)
    args.weight.handle = w_handle
    if rng.random() >= bias_odds:
        return (a, w)
    b_handle, bias = rng.choice(by_device[a.device])
    args.bias.handle = b_handle
    return (a, w, bias)


def _planned(op, metas, caps):
    kind = op.WhichOneof("kind")
    if kind == "norm":
        args = op.norm
        training = args.HasField("training") and args.training
        return lambda: _planner.plan_norm(args.op, *metas, tuple(args.normalized_shape),
                                          training, caps[metas[0].device])
    if kind == "backward":
        return lambda: _planner.plan_backward(metas[0], metas[1] if len(metas) > 1 else None)
    if kind == "zero_grad":
        return lambda: _planner.plan_zero_grad(metas)
    if kind == "optimizer_step":
        args = op.optimizer_step
        n = len(args.params)
        hyperparameters = {f.name: v for f, v in args.ListFields()
                           if f.name not in ("kind", "params", "state")}
        return lambda: _planner.plan_optimizer_step(args.kind, hyperparameters, metas[:n],
                                                    metas[n:])
    if op.WhichOneof("kind") == "in_place":
        args = op.in_place
        b = metas[1] if len(metas) > 1 else None
        number = _value(args.scalar) if b is None else None
        alpha = _value(args.alpha) if args.HasField("alpha") else None
        return lambda: _planner.plan_in_place(args.op, metas[0], b, number, alpha,
                                              caps[metas[0].device])
    kind = op.WhichOneof("kind")
    if kind in VIEWS:
        args = getattr(op, kind)
        values = {"reshape": lambda: (list(args.shape),), "permute": lambda: (list(args.dims),),
                  "transpose": lambda: (args.dim0, args.dim1),
                  "narrow": lambda: (args.dim, args.start, args.length),
                  "select": lambda: (args.dim, args.index)}[kind]()
        return lambda: getattr(_planner, "plan_" + kind)(metas[0], *values)
    if kind == "where":
        args = op.where
        numbers = [None if m is not None else _value(getattr(args, field))
                   for m, field in zip(metas[1:], ("input_scalar", "other_scalar"))]
        return lambda: _planner.plan_where(metas[0], metas[1], numbers[0], metas[2],
                                           numbers[1], caps[metas[0].device])
    if kind == "clamp":
        args = op.clamp
        numbers = [_value(getattr(args, field)) if args.HasField(field) else None
                   for field in ("min_scalar", "max_scalar")]
        return lambda: _planner.plan_clamp(metas[0], metas[1], numbers[0], metas[2],
                                           numbers[1], caps[metas[0].device])
    if kind == "cat":
        return lambda: _planner.plan_cat(list(metas), op.cat.dim, caps[metas[0].device])
    if kind == "dropout":
        return lambda: _planner.plan_dropout(metas[0], op.dropout.p, op.dropout.training,
                                             caps[metas[0].device])
    if kind == "loss":
        return lambda: _planner.plan_loss(op.loss.op, metas[0], metas[1], op.loss.reduction,
                                          caps[metas[0].device])
    if kind == "conv2d":
        args = op.conv2d
        bias = metas[2] if len(metas) > 2 else None
        groups = args.groups if args.HasField("groups") else 1
        return lambda: _planner.plan_conv2d(metas[0], metas[1], bias, list(args.stride),
                                            list(args.padding), list(args.dilation), groups,
                                            caps[metas[0].device])
    if kind == "pool2d":
        args = op.pool2d
        if args.op == pb.ADAPTIVE_AVG_POOL:
            return lambda: _planner.plan_adaptive_avg_pool2d(metas[0], list(args.output_size),
                                                             caps[metas[0].device])
        return lambda: _planner.plan_pool2d(args.op, metas[0], list(args.kernel_size),
                                            list(args.stride), list(args.padding),
                                            list(args.dilation), caps[metas[0].device])
    if kind == "cast":
        return lambda: _planner.plan_cast(metas[0], op.cast.dtype, caps[metas[0].device])
    if kind == "softmax":
        return lambda: _planner.plan_softmax(metas[0], op.softmax.dim, op.softmax.log)
    if op.WhichOneof("kind") == "matmul":
        return lambda: _planner.plan_matmul(metas[0], metas[1], caps[metas[0].device])
    if op.WhichOneof("kind") == "linear":
        bias = metas[2] if len(metas) > 2 else None
        return lambda: _planner.plan_linear(metas[0], metas[1], bias, caps[metas[0].device])
    if op.WhichOneof("kind") == "reduce":
        args = op.reduce
        dims = list(args.dims) or ([args.dim] if args.HasField("dim") else [])
        return lambda: _planner.plan_reduce(args.op, metas[0], dims, args.keepdim,
                                            caps[metas[0].device])
    if op.WhichOneof("kind") == "binary":
        args = op.binary
        b = metas[1] if len(metas) > 1 else None
        number = _value(args.scalar) if b is None else None
        return lambda: _planner.plan_binary(args.op, metas[0], b, number,
                                            caps[metas[0].device],
                                            number_first=b is None and args.scalar_first)
    return lambda: _planner.plan_unary(op.unary.op, metas[0], caps[metas[0].device])


# The requests whose reply is an operand (updated), not a new tensor.
_IN_PLACE = ("in_place", "backward", "zero_grad", "optimizer_step")


def _served(session, op):
    def run():
        info = session.call("Run", pb.RunRequest(op=op), mutating=True).tensor
        if op.WhichOneof("kind") not in _IN_PLACE:  # in place: the pool's own tensor
            session.drop(info.handle)
        return _planner.Meta(info.dtype, tuple(info.shape), info.device)
    return run


def test_the_planner_equals_the_servers(daemon, pipeline_mode):
    if not pipeline_mode:
        pytest.skip("pipeline-independent (unary Runs on both sides): runs in the --pipeline=on run")
    c = tensord.connect(daemon.address, pipeline=False)
    try:
        caps = {d.name: _planner.Capabilities(d) for d in c.devices()}
        assert set(DEVICES) <= set(caps)
        keep, pool = [], []
        for device in DEVICES:
            for dtype in DTYPES:
                for shape in SHAPES:
                    t = c.zeros(*shape, dtype=dtype, device=device)
                    keep.append(t)
                    pool.append((t.handle, _planner.Meta(dtype.wire, tuple(shape), device)))
        labels = {device: [] for device in DEVICES}
        for device in DEVICES:
            for shape in ((), (1,), (2,), (3,), (0,)):
                t = c.zeros(*shape, dtype=tensord.int64, device=device)
                keep.append(t)
                labels[device].append((t.handle, _planner.Meta(pb.INT64, shape, device)))
        leaves = []
        for device in DEVICES:
            for dtype in (tensord.float32, tensord.float64, tensord.float16, tensord.bfloat16):
                for shape in LEAF_SHAPES:
                    t = c.zeros(*shape, dtype=dtype, device=device, requires_grad=True)
                    keep.append(t)
                    leaves.append((t.handle, _planner.Meta(dtype.wire, tuple(shape), device)))
        rng = random.Random(20261201)
        mismatches, counts = [], {"ok": 0, "error": 0}
        for op, metas in _requests(rng, pool, labels, leaves):
            mine = _outcome(_planned(op, metas, caps))
            theirs = _outcome(_served(c._session, op))
            counts[theirs[0]] += 1
            if mine[0] == "ok" and theirs[0] == "error" and SERVER_ONLY.fullmatch(theirs[3]):
                continue  # a check of the values, which only the server reads
            if mine != theirs:
                mismatches.append((str(op).replace("\n", " "), metas, mine, theirs))
        assert not mismatches, (f"{len(mismatches)} of {REQUESTS} differ; the first:\n"
                                + "\n".join(map(repr, mismatches[:10])))
        # The generator reached both kinds of outcome in earnest.
        assert counts["ok"] > REQUESTS // 4 and counts["error"] > REQUESTS // 20, counts
    finally:
        c.close()
