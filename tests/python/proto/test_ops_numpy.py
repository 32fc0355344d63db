"""The op set over the wire, compared with numpy: Python stubs generated
from tensord.proto drive a real daemon through Run and Execute, and every
result is checked against numpy's (values, dtype and shape), including the
broadcasting and promotion tables, errors, and Execute's no-leak rule.

  tests/python/run_pytest.py --env TENSORD_BINARY=BUILD/server/tensord \
      tests/python/proto/test_ops_numpy.py
"""
import os

import grpc
import numpy as np
import pytest

import tensord_stubs  # beside this file

TENSORD = os.environ.get("TENSORD_BINARY") or pytest.skip(
    "no tensord binary: set TENSORD_BINARY", allow_module_level=True)
pb, pb_grpc = tensord_stubs.load()

NP = {pb.FLOAT32: np.float32, pb.FLOAT64: np.float64, pb.INT32: np.int32,
      pb.INT64: np.int64, pb.BOOL: np.bool_}


h = tensord_stubs.h


class OpsNumpyTest(tensord_stubs.SessionTestCase):
    daemon_flags = ("--host-devices", "2")
    client_name = "py-ops"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.rng = np.random.default_rng(4)


    def held(self):
        return sum(d.held_memory for d in self.stub.ListDevices(pb.ListDevicesRequest()).devices)

    def check(self, info, expected, rtol=1e-5):
        got = self.fetch(info)
        self.assertEqual(got.dtype, expected.dtype)
        self.assertEqual(got.shape, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-6)

    def test_binary_ops_broadcast_like_numpy(self):
        a = self.rng.standard_normal((3, 1, 4)).astype(np.float32)
        b = self.rng.uniform(0.5, 2, (5, 1)).astype(np.float32)
        ta, tb = self.create(a), self.create(b)
        table = {pb.ADD: np.add, pb.SUB: np.subtract, pb.MUL: np.multiply,
                 pb.DIV: np.divide, pb.MAXIMUM: np.maximum, pb.MINIMUM: np.minimum,
                 pb.EQ: np.equal, pb.NE: np.not_equal, pb.LT: np.less,
                 pb.LE: np.less_equal, pb.GT: np.greater, pb.GE: np.greater_equal}
        for op, fn in table.items():
            out = self.run_op(binary=pb.BinaryArgs(op=op, lhs=h(ta), rhs=h(tb)))
            self.check(out, fn(a, b))
        pos = self.create(np.abs(a) + 0.1)
        self.check(self.run_op(binary=pb.BinaryArgs(op=pb.POW, lhs=h(pos), rhs=h(tb))),
                   np.power(np.abs(a) + 0.1, b), rtol=1e-4)

    def test_promotion_table(self):
        # (lhs dtype, rhs dtype or python number) -> torch.result_type
        cases = [(np.int32, np.int64, np.int64), (np.int32, np.float32, np.float32),
                 (np.bool_, np.int32, np.int32), (np.float32, np.float64, np.float64),
                 (np.int64, 2, np.int64), (np.int32, 2, np.int32),
                 (np.int32, 2.5, np.float32), (np.bool_, 3, np.int64),
                 (np.float64, 2.5, np.float64), (np.bool_, 1.5, np.float32)]
        for lt, rt, want in cases:
            a = np.array([1, 0, 1], dtype=lt)
            ta = self.create(a)
            if isinstance(rt, (int, float)):
                scalar = pb.Scalar(int_value=rt) if isinstance(rt, int) else pb.Scalar(float_value=rt)
                out = self.run_op(binary=pb.BinaryArgs(op=pb.ADD, lhs=h(ta), scalar=scalar))
                expected = (a.astype(want) + rt).astype(want)
            else:
                b = np.array([1, 1, 0], dtype=rt)
                out = self.run_op(binary=pb.BinaryArgs(op=pb.ADD, lhs=h(ta), rhs=h(self.create(b))))
                expected = np.logical_or(a, b) if want == np.bool_ else a.astype(want) + b.astype(want)
            self.assertEqual(NP[out.dtype], want, (lt, rt))
            self.check(out, expected.astype(want))
        # 0-d tensors do not promote dimensioned ones of the same category.
        a = self.create(np.array([1, 2], np.int32))
        s = self.create(np.array(5, np.int64))
        out = self.run_op(binary=pb.BinaryArgs(op=pb.MUL, lhs=h(a), rhs=h(s)))
        self.assertEqual(out.dtype, pb.INT32)

    def test_unary_ops(self):
        x = self.rng.uniform(0.1, 3, (4, 5)).astype(np.float32)
        tx = self.create(x)
        table = {pb.NEG: np.negative, pb.ABS: np.abs, pb.EXP: np.exp, pb.LOG: np.log,
                 pb.SQRT: np.sqrt, pb.TANH: np.tanh,
                 pb.RELU: lambda v: np.maximum(v, 0).astype(v.dtype),
                 pb.SIGMOID: lambda v: (1 / (1 + np.exp(-v))).astype(v.dtype)}
        for op, fn in table.items():
            self.check(self.run_op(unary=pb.UnaryArgs(op=op, x=h(tx))), fn(x), rtol=1e-5)
        ti = self.create(np.array([1, 4, 9], np.int64))
        self.check(self.run_op(unary=pb.UnaryArgs(op=pb.SQRT, x=h(ti))),
                   np.array([1, 2, 3], np.float32))

    def test_reductions(self):
        x = self.rng.standard_normal((3, 4, 5)).astype(np.float64)
        tx = self.create(x)
        for dim in [None, 0, 1, -1]:
            for keepdim in [False, True]:
                kw = {} if dim is None else {"dim": dim}
                axis = None if dim is None else dim
                for op, fn in [(pb.SUM, np.sum), (pb.MEAN, np.mean), (pb.MAX, np.max),
                               (pb.MIN, np.min)]:
                    out = self.run_op(reduce=pb.ReduceArgs(op=op, x=h(tx), keepdim=keepdim, **kw))
                    self.check(out, np.asarray(fn(x, axis=axis, keepdims=keepdim)))
                out = self.run_op(reduce=pb.ReduceArgs(op=pb.ARGMAX, x=h(tx), keepdim=keepdim, **kw))
                expected = np.argmax(x, axis=axis)
                if keepdim:
                    expected = np.expand_dims(expected, axis) if axis is not None \
                        else expected.reshape([1] * x.ndim)
                self.check(out, np.asarray(expected, np.int64))
        self.check(self.run_op(reduce=pb.ReduceArgs(op=pb.NORM, x=h(tx))),
                   np.asarray(np.linalg.norm(x)))
        # Dims apart: reduced a run at a time (sum, mean).
        y = self.rng.standard_normal((3, 4, 5, 6))
        for dtype in (np.float64, np.float32, np.int32):
            v = (y * 4).astype(dtype)
            tv = self.create(v)
            for dims in ([0, 2], [0, 2, 3], [1, 3], [0, 3]):
                for keepdim in (False, True):
                    out = self.run_op(reduce=pb.ReduceArgs(
                        op=pb.SUM, x=h(tv), dims=dims, keepdim=keepdim))
                    want = v.astype(np.float64).sum(axis=tuple(dims), keepdims=keepdim)
                    kind = np.int64 if dtype == np.int32 else dtype
                    self.check(out, want.astype(kind), rtol=1e-6)
                    if dtype != np.int32:
                        out = self.run_op(reduce=pb.ReduceArgs(
                            op=pb.MEAN, x=h(tv), dims=dims, keepdim=keepdim))
                        self.check(out, v.astype(np.float64).mean(
                            axis=tuple(dims), keepdims=keepdim).astype(dtype),
                            rtol=1e-6)
        ti = self.create(np.array([[1, 2], [3, 4]], np.int32))
        self.check(self.run_op(reduce=pb.ReduceArgs(op=pb.SUM, x=h(ti), dim=0)),
                   np.array([4, 6], np.int64))
        with self.assertRaises(grpc.RpcError) as err:
            self.run_op(reduce=pb.ReduceArgs(op=pb.MEAN, x=h(ti)))
        self.assertEqual(err.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)

    def test_shape_ops_linear_cast(self):
        x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        tx = self.create(x)
        self.check(self.run_op(permute=pb.PermuteArgs(x=h(tx), dims=[2, 0, 1])),
                   x.transpose(2, 0, 1).copy())
        self.check(self.run_op(transpose=pb.TransposeArgs(x=h(tx), dim0=0, dim1=-1)),
                   np.swapaxes(x, 0, -1).copy())
        self.check(self.run_op(reshape=pb.ReshapeArgs(x=h(tx), shape=[4, -1])), x.reshape(4, -1))
        self.check(self.run_op(narrow=pb.NarrowArgs(x=h(tx), dim=2, start=1, length=2)),
                   x[:, :, 1:3].copy())
        self.check(self.run_op(select=pb.SelectArgs(x=h(tx), dim=1, index=-1)), x[:, -1].copy())
        y = np.ones((2, 1, 4), np.float64)
        self.check(self.run_op(cat=pb.CatArgs(xs=[h(tx), h(self.create(y))], dim=1)),
                   np.concatenate([x, y], axis=1))
        self.check(self.run_op(cast=pb.CastArgs(x=h(tx), dtype=pb.INT32)), x.astype(np.int32))
        w = self.rng.standard_normal((5, 4)).astype(np.float32)
        b = self.rng.standard_normal(5).astype(np.float32)
        out = self.run_op(linear=pb.LinearArgs(x=h(tx), weight=h(self.create(w)),
                                               bias=h(self.create(b))))
        self.check(out, x @ w.T + b, rtol=1e-4)
        a = self.rng.standard_normal((2, 1, 3, 4)).astype(np.float32)
        c = self.rng.standard_normal((5, 4, 2)).astype(np.float32)
        self.check(self.run_op(matmul=pb.MatMulArgs(lhs=h(self.create(a)), rhs=h(self.create(c)))),
                   a @ c, rtol=1e-4)

    def test_errors_name_shapes(self):
        ta = self.create(np.zeros((2, 3), np.float32))
        tb = self.create(np.zeros((4,), np.float32))
        with self.assertRaises(grpc.RpcError) as err:
            self.run_op(binary=pb.BinaryArgs(op=pb.ADD, lhs=h(ta), rhs=h(tb)))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(err.exception.details(), "The size of tensor a (3) must match the "
                         "size of tensor b (4) at non-singleton dimension 1")
        tbool = self.create(np.array([True, False]))
        with self.assertRaises(grpc.RpcError) as err:
            self.run_op(binary=pb.BinaryArgs(op=pb.SUB, lhs=h(tbool), rhs=h(tbool)))
        self.assertEqual(err.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)

    def test_execute_dependencies_error_and_no_leak(self):
        a = self.rng.standard_normal((4, 4)).astype(np.float32)
        ta = self.create(a)
        held = self.held()
        ops = [pb.Op(matmul=pb.MatMulArgs(lhs=h(ta), rhs=h(ta))),
               pb.Op(matmul=pb.MatMulArgs(lhs=pb.Operand(result_of=0), rhs=h(ta))),
               pb.Op(reduce=pb.ReduceArgs(op=pb.NORM, x=pb.Operand(result_of=1)))]
        resp = self.stub.Execute(pb.ExecuteRequest(session=self.session, ops=ops, keep=[2, 1]))
        self.assertEqual(len(resp.kept), 2)
        self.check(resp.kept[0], np.asarray(np.linalg.norm(a @ a @ a), np.float32), rtol=1e-4)
        self.check(resp.kept[1], a @ a @ a, rtol=1e-4)
        for t in resp.kept:
            self.stub.Release(pb.ReleaseRequest(session=self.session, handle=t.handle))
        self.assertEqual(self.held(), held)
        bad = ops[:2] + [pb.Op(matmul=pb.MatMulArgs(lhs=pb.Operand(result_of=1),
                                                    rhs=h(self.create(np.zeros((3, 2), np.float32)))))]
        with self.assertRaises(grpc.RpcError) as err:
            self.stub.Execute(pb.ExecuteRequest(session=self.session, ops=bad, keep=[0, 2]))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("op #2 (matmul; operands: result of op #1 [4, 4] float32",
                      err.exception.details())
        self.assertEqual(self.held(), held + 24)  # only the [3, 2] operand

