"""conv2d, max_pool2d, avg_pool2d and the losses (nll_loss, cross_entropy,
mse_loss) over the wire, compared with PyTorch:
Python stubs generated from tensord.proto drive a real daemon, and every
result is checked against torch.nn.functional's on the same inputs (values,
dtype, shape) over stride/padding/dilation/groups combinations, batched and
unbatched, float64 and float32; the argument errors carry PyTorch's own
messages. Needs Debian's python3-torch (test-only; deploy/install-deps.sh).

  tests/python/run_pytest.py --env TENSORD_BINARY=BUILD/server/tensord \
      tests/python/proto/test_nn_ops_torch.py
"""
import itertools
import os

import grpc
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tensord_stubs  # beside this file

TENSORD = os.environ.get("TENSORD_BINARY") or pytest.skip(
    "no tensord binary: set TENSORD_BINARY", allow_module_level=True)
pb, pb_grpc = tensord_stubs.load()

h = tensord_stubs.h


def pair(v):
    return [v] if isinstance(v, int) else list(v)


class NnOpsTorchTest(tensord_stubs.SessionTestCase):
    client_name = "py-nn-ops"

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        super().setUpClass()
        cls.rng = np.random.default_rng(11)


    def release(self, *infos):
        self.stub.Release(pb.ReleaseRequest(session=self.session,
                                            release=[i.handle for i in infos]))


    def error_of(self, **kind):
        with self.assertRaises(grpc.RpcError) as err:
            self.run_op(**kind)
        return err.exception

    def assert_matches(self, got_info, want, what):
        got = self.fetch(got_info)
        want = want.numpy()
        self.assertEqual(got.dtype, want.dtype, what)
        self.assertEqual(got.shape, want.shape, what)
        tol = 1e-12 if want.dtype == np.float64 else 1e-5
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str(what))

    def test_conv2d_matches_torch(self):
        cases = 0
        for (n, c, oc, groups, hw, k, stride, padding, dilation, bias, dtype) in [
                (4, 3, 6, 1, (32, 32), (5, 5), 1, 0, 1, True, np.float32),  # seed 001's conv1
                (4, 6, 16, 1, (14, 14), (5, 5), 1, 0, 1, True, np.float32),  # and conv2
                (2, 3, 4, 1, (7, 9), (3, 2), (2, 1), (1, 0), 1, True, np.float64),
                (1, 4, 6, 2, (8, 8), (3, 3), 1, 1, (2, 1), False, np.float64),
                (3, 6, 6, 6, (5, 6), (3, 3), 2, 1, 1, True, np.float64),  # depthwise
                (2, 4, 8, 4, (9, 7), (1, 1), (3, 2), 0, 1, True, np.float64),
                (None, 3, 5, 1, (6, 6), (3, 3), 1, 2, 2, True, np.float64),  # unbatched
                (0, 3, 5, 1, (6, 6), (3, 3), 1, 0, 1, True, np.float64),  # no images
                (2, 2, 3, 1, (4, 4), (4, 4), 1, 0, 1, False, np.float32),  # one window
        ]:
            shape = (c,) + hw if n is None else (n, c) + hw
            x = self.rng.standard_normal(shape).astype(dtype)
            w = self.rng.standard_normal((oc, c // groups) + k).astype(dtype)
            b = self.rng.standard_normal(oc).astype(dtype) if bias else None
            tx, tw = self.create(x), self.create(w)
            tb = self.create(b) if bias else None
            args = pb.Conv2dArgs(x=h(tx), weight=h(tw), stride=pair(stride),
                                 padding=pair(padding), dilation=pair(dilation),
                                 groups=groups)
            if bias:
                args.bias.CopyFrom(h(tb))
            out = self.run_op(conv2d=args)
            want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                            None if b is None else torch.from_numpy(b),
                            stride=stride, padding=padding, dilation=dilation,
                            groups=groups)
            self.assert_matches(out, want, (shape, w.shape, stride, padding, dilation, groups))
            self.release(out, tx, tw, *([tb] if bias else []))
            cases += 1
        self.assertEqual(cases, 9)

    def test_pooling_matches_torch(self):
        x = self.rng.standard_normal((2, 3, 9, 8))
        tx = self.create(x)
        tx32 = self.create(x.astype(np.float32))
        checked = 0
        for k, stride, padding, dilation in itertools.product(
                [1, 2, 3, (3, 2)], [None, 1, 2, (2, 3)], [0, 1], [1, 2]):
            kk = pair(k) * (2 // len(pair(k)))
            if isinstance(padding, int) and padding > min(kk) // 2:
                continue
            for t, dtype in ((tx, np.float64), (tx32, np.float32)):
                xt = torch.from_numpy(x.astype(dtype))
                base = dict(x=h(t), kernel_size=pair(k),
                            stride=[] if stride is None else pair(stride),
                            padding=pair(padding))
                span = [(kk[i] - 1) * dilation + 1 for i in range(2)]
                if all(xt.shape[2 + i] + 2 * padding >= span[i] for i in range(2)):
                    out = self.run_op(pool2d=pb.Pool2dArgs(op=pb.MAX_POOL,
                                                           dilation=pair(dilation), **base))
                    want = F.max_pool2d(xt, k, stride=stride, padding=padding,
                                        dilation=dilation)
                    self.assert_matches(out, want, ("max", k, stride, padding, dilation))
                    self.release(out)
                    checked += 1
                if dilation != 1:
                    continue
                for include in (True, False):
                    out = self.run_op(pool2d=pb.Pool2dArgs(op=pb.AVG_POOL,
                                                           exclude_pad=not include, **base))
                    want = F.avg_pool2d(xt, k, stride=stride, padding=padding,
                                        count_include_pad=include)
                    self.assert_matches(out, want, ("avg", k, stride, padding, include))
                    self.release(out)
                    checked += 1
        self.assertGreater(checked, 100)
        # Unbatched, and -inf padding never wins over real values.
        x3 = -np.abs(self.rng.standard_normal((3, 5, 5)))
        t3 = self.create(x3)
        out = self.run_op(pool2d=pb.Pool2dArgs(op=pb.MAX_POOL, x=h(t3), kernel_size=[3],
                                               stride=[2], padding=[1]))
        self.assert_matches(out, F.max_pool2d(torch.from_numpy(x3), 3, 2, 1), "unbatched")

    def test_errors_carry_torchs_messages(self):
        def torch_message(fn):
            with self.assertRaises(RuntimeError) as err:
                fn()
            return str(err.exception).split("\n")[0]

        x = self.create(np.zeros((4, 1, 32, 32), np.float32))
        w = self.create(np.zeros((6, 3, 5, 5), np.float32))
        small = self.create(np.zeros((1, 3, 4, 4), np.float32))
        cases = [
            (dict(conv2d=pb.Conv2dArgs(x=h(x), weight=h(w))),
             lambda: F.conv2d(torch.zeros(4, 1, 32, 32), torch.zeros(6, 3, 5, 5))),
            (dict(conv2d=pb.Conv2dArgs(x=h(small), weight=h(w))),
             lambda: F.conv2d(torch.zeros(1, 3, 4, 4), torch.zeros(6, 3, 5, 5))),
            (dict(conv2d=pb.Conv2dArgs(x=h(small), weight=h(w), stride=[0])),
             lambda: F.conv2d(torch.zeros(1, 3, 4, 4), torch.zeros(6, 3, 5, 5), stride=0)),
            (dict(conv2d=pb.Conv2dArgs(x=h(small), weight=h(w), bias=h(self.create(np.zeros(5, np.float32))))),
             lambda: F.conv2d(torch.zeros(1, 3, 8, 8), torch.zeros(6, 3, 5, 5), torch.zeros(5))),
            (dict(pool2d=pb.Pool2dArgs(op=pb.MAX_POOL, x=h(self.create(np.zeros((1, 3, 2, 2), np.float32))),
                                       kernel_size=[3])),
             lambda: F.max_pool2d(torch.zeros(1, 3, 2, 2), 3)),
            (dict(pool2d=pb.Pool2dArgs(op=pb.AVG_POOL, x=h(small), kernel_size=[5], padding=[3])),
             lambda: F.avg_pool2d(torch.zeros(1, 3, 8, 8), 5, padding=3)),
        ]
        for request, fn in cases:
            err = self.error_of(**request)
            self.assertEqual(err.code(), grpc.StatusCode.INVALID_ARGUMENT, err.details())
            self.assertIn(torch_message(fn), err.details())
        # No integer convolution or pooling (PyTorch has none on the CPU either).
        xi = self.create(np.zeros((1, 3, 8, 8), np.int64))
        err = self.error_of(pool2d=pb.Pool2dArgs(op=pb.MAX_POOL, x=h(xi), kernel_size=[2]))
        self.assertEqual(err.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(err.details(), "\"max_pool2d\" not implemented for 'Long'")
        # The server kept serving.
        self.assertEqual(self.fetch(x).shape, (4, 1, 32, 32))

    def test_losses_match_torch(self):
        reductions = {pb.REDUCTION_MEAN: "mean", pb.REDUCTION_SUM: "sum",
                      pb.REDUCTION_NONE: "none"}
        for dtype in (np.float64, np.float32):
            logits = self.rng.standard_normal((6, 10)).astype(dtype)
            target = np.array([3, 0, 9, 3, -100, 7], np.int64)
            log_probs = torch.log_softmax(torch.from_numpy(logits), 1)
            tl, tp = self.create(logits), self.create(log_probs.numpy())
            tt = self.create(target)
            for red, name in reductions.items():
                for ignore in (-100, 3):
                    kept = target if ignore == -100 else np.where(target < 0, 0, target)
                    tk = self.create(kept)
                    got = self.run_op(loss=pb.LossArgs(op=pb.CROSS_ENTROPY, input=h(tl),
                                                       target=h(tk), reduction=red,
                                                       ignore_index=ignore))
                    want = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(kept),
                                           reduction=name, ignore_index=ignore)
                    self.assert_matches(got, want, ("cross_entropy", dtype, name, ignore))
                    got = self.run_op(loss=pb.LossArgs(op=pb.NLL_LOSS, input=h(tp),
                                                       target=h(tk), reduction=red,
                                                       ignore_index=ignore))
                    want = F.nll_loss(log_probs, torch.from_numpy(kept), reduction=name,
                                      ignore_index=ignore)
                    self.assert_matches(got, want, ("nll_loss", dtype, name, ignore))
                    self.release(got, tk)
                # The default ignore_index (-100) skips the fifth row.
                got = self.run_op(loss=pb.LossArgs(op=pb.NLL_LOSS, input=h(tp), target=h(tt),
                                                   reduction=red))
                self.assert_matches(got, F.nll_loss(log_probs, torch.from_numpy(target),
                                                    reduction=name), ("nll default", name))
                # Unbatched: one row [C], a 0-d target.
                row, one = self.create(logits[1]), self.create(np.array(4, np.int64))
                got = self.run_op(loss=pb.LossArgs(op=pb.CROSS_ENTROPY, input=h(row),
                                                   target=h(one), reduction=red))
                want = F.cross_entropy(torch.from_numpy(logits[1]), torch.tensor(4),
                                       reduction=name)
                self.assert_matches(got, want, ("unbatched", name))
                a = self.rng.standard_normal((3, 4)).astype(dtype)
                b = self.rng.standard_normal((4,)).astype(dtype)
                got = self.run_op(loss=pb.LossArgs(op=pb.MSE_LOSS, input=h(self.create(a)),
                                                   target=h(self.create(b)), reduction=red))
                want = F.mse_loss(torch.from_numpy(a),
                                  torch.from_numpy(b).expand(3, 4), reduction=name)
                self.assert_matches(got, want, ("mse", name))
        # Every target ignored: the mean is NaN, as PyTorch's.
        ignored = self.create(np.full(6, -100, np.int64))
        got = self.fetch(self.run_op(loss=pb.LossArgs(op=pb.CROSS_ENTROPY, input=h(tl),
                                                      target=h(ignored))))
        self.assertTrue(np.isnan(got))

    def test_adaptive_pool_and_dropout(self):
        for shape, size in (((2, 3, 9, 7), [4, 3]), ((3, 5, 5), [5]), ((1, 2, 6, 8), [1]),
                            ((2, 1, 4, 4), [7, 2])):
            for dtype in (np.float64, np.float32):
                x = self.rng.standard_normal(shape).astype(dtype)
                got = self.run_op(pool2d=pb.Pool2dArgs(op=pb.ADAPTIVE_AVG_POOL,
                                                       x=h(self.create(x)), output_size=size))
                want = F.adaptive_avg_pool2d(torch.from_numpy(x), size if len(size) == 2 else size[0])
                self.assert_matches(got, want, ("adaptive", shape, size))
        err = self.error_of(pool2d=pb.Pool2dArgs(op=pb.ADAPTIVE_AVG_POOL,
                                                 x=h(self.create(np.zeros((1, 3, 0, 4)))),
                                                 output_size=[2]))
        with self.assertRaises(RuntimeError) as want:
            F.adaptive_avg_pool2d(torch.zeros(1, 3, 0, 4), 2)
        self.assertEqual(err.details(), str(want.exception))
        # Dropout: the same seed, the same mask; kept elements scaled by
        # 1 / (1 - p); about p of them zeroed; a copy when not training.
        x = np.ones((100, 100), np.float32)
        tx = self.create(x)
        a = self.fetch(self.run_op(dropout=pb.DropoutArgs(x=h(tx), p=0.3, seed=5)))
        b = self.fetch(self.run_op(dropout=pb.DropoutArgs(x=h(tx), p=0.3, seed=5)))
        np.testing.assert_array_equal(a, b)
        self.assertTrue(np.all((a == 0) | np.isclose(a, 1 / 0.7)))
        self.assertAlmostEqual(float(np.mean(a == 0)), 0.3, delta=0.03)
        c = self.fetch(self.run_op(dropout=pb.DropoutArgs(x=h(tx), p=0.3, training=False)))
        np.testing.assert_array_equal(c, x)
        err = self.error_of(dropout=pb.DropoutArgs(x=h(tx), p=1.5))
        self.assertEqual(err.details(), "dropout probability has to be between 0 and 1, but got 1.5")

    def test_loss_errors(self):
        x = self.create(np.zeros((3, 5), np.float32))
        for bad, value in ((np.array([0, 5, 1]), 5), (np.array([0, -2, 1]), -2)):
            err = self.error_of(loss=pb.LossArgs(op=pb.CROSS_ENTROPY, input=h(x),
                                                 target=h(self.create(bad.astype(np.int64)))))
            self.assertEqual(err.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual(err.details(), f"Target {value} is out of bounds.")
            with self.assertRaises(IndexError) as want:
                F.cross_entropy(torch.zeros(3, 5), torch.from_numpy(bad.astype(np.int64)))
            self.assertEqual(str(want.exception), err.details())
        err = self.error_of(loss=pb.LossArgs(op=pb.NLL_LOSS, input=h(x),
                                             target=h(self.create(np.zeros(2, np.int64)))))
        self.assertEqual(err.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(err.details(), "Expected input batch_size (3) to match target "
                                        "batch_size (2).")
        err = self.error_of(loss=pb.LossArgs(op=pb.NLL_LOSS, input=h(x),
                                             target=h(self.create(np.zeros(3, np.float32)))))
        self.assertEqual(err.details(), "expected scalar type Long but found Float")
        # The session lost nothing.
        self.assertEqual(self.fetch(x).shape, (3, 5))

