"""Autograd in the server, over the wire, compared with PyTorch's:
Python stubs generated from tensord.proto drive a real daemon. Seed 001's
CIFAR-10 network runs forward, cross_entropy and backward as one Execute,
and every parameter's grad matches torch.autograd's on the same inputs
(float64, 1e-10); so do conv2d and pooling grads over stride, padding,
dilation and groups; a hand-written SGD step under no_grad matches torch's;
and the autograd errors carry PyTorch's own messages. Needs Debian's
python3-torch (test-only; deploy/install-deps.sh).

  tests/python/run_pytest.py --env TENSORD_BINARY=BUILD/server/tensord \
      tests/python/proto/test_autograd_torch.py
"""
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


def r(i):
    return pb.Operand(result_of=i)


class AutogradTorchTest(tensord_stubs.SessionTestCase):
    client_name = "py-autograd"

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        super().setUpClass()
        cls.rng = np.random.default_rng(12)

    def create(self, array, requires_grad=False):
        info = super().create(array)
        if requires_grad:
            info = self.run_op(requires_grad=pb.RequiresGradArgs(x=h(info)))
            self.assertTrue(info.requires_grad)
        return info


    def execute(self, ops, keep):
        return self.stub.Execute(pb.ExecuteRequest(
            session=self.session, ops=ops, keep=keep)).kept

    def grad(self, info):
        return self.fetch(self.run_op(grad=pb.GradArgs(x=h(info))))

    def error_of(self, call):
        with self.assertRaises(grpc.RpcError) as err:
            call()
        return err.exception

    def torch_error(self, call):
        with self.assertRaises(RuntimeError) as err:
            call()
        return str(err.exception)

    def test_seed_001_net_gradients_match_torch(self):
        # Conv2d(3,6,5) -> ReLU -> MaxPool2d(2,2) -> Conv2d(6,16,5) -> ReLU ->
        # MaxPool2d(2,2) -> flatten -> Linear(400,120) -> ReLU ->
        # Linear(120,84) -> ReLU -> Linear(84,10); CrossEntropyLoss.
        shapes = {"conv1.weight": (6, 3, 5, 5), "conv1.bias": (6,),
                  "conv2.weight": (16, 6, 5, 5), "conv2.bias": (16,),
                  "fc1.weight": (120, 400), "fc1.bias": (120,),
                  "fc2.weight": (84, 120), "fc2.bias": (84,),
                  "fc3.weight": (10, 84), "fc3.bias": (10,)}
        params = {k: self.rng.standard_normal(s) * 0.1 for k, s in shapes.items()}
        x = self.rng.standard_normal((4, 3, 32, 32))
        labels = np.array([3, 0, 9, 5], dtype=np.int64)
        remote = {k: self.create(v, requires_grad=True) for k, v in params.items()}
        tx, tl = self.create(x), self.create(labels)

        P = lambda k: h(remote[k])  # noqa: E731
        ops = [
            pb.Op(conv2d=pb.Conv2dArgs(x=h(tx), weight=P("conv1.weight"),
                                       bias=P("conv1.bias"))),          # 0
            pb.Op(unary=pb.UnaryArgs(op=pb.RELU, x=r(0))),              # 1
            pb.Op(pool2d=pb.Pool2dArgs(op=pb.MAX_POOL, x=r(1),
                                       kernel_size=[2], stride=[2])),   # 2
            pb.Op(conv2d=pb.Conv2dArgs(x=r(2), weight=P("conv2.weight"),
                                       bias=P("conv2.bias"))),          # 3
            pb.Op(unary=pb.UnaryArgs(op=pb.RELU, x=r(3))),              # 4
            pb.Op(pool2d=pb.Pool2dArgs(op=pb.MAX_POOL, x=r(4),
                                       kernel_size=[2], stride=[2])),   # 5
            pb.Op(reshape=pb.ReshapeArgs(x=r(5), shape=[4, 400])),      # 6
            pb.Op(linear=pb.LinearArgs(x=r(6), weight=P("fc1.weight"),
                                       bias=P("fc1.bias"))),            # 7
            pb.Op(unary=pb.UnaryArgs(op=pb.RELU, x=r(7))),              # 8
            pb.Op(linear=pb.LinearArgs(x=r(8), weight=P("fc2.weight"),
                                       bias=P("fc2.bias"))),            # 9
            pb.Op(unary=pb.UnaryArgs(op=pb.RELU, x=r(9))),              # 10
            pb.Op(linear=pb.LinearArgs(x=r(10), weight=P("fc3.weight"),
                                       bias=P("fc3.bias"))),            # 11
            pb.Op(loss=pb.LossArgs(op=pb.CROSS_ENTROPY, input=r(11),
                                   target=h(tl))),                      # 12
            pb.Op(backward=pb.BackwardArgs(root=r(12))),                # 13
        ]
        (loss,) = self.execute(ops, keep=[13])
        self.assertEqual(loss.grad_fn, "NllLossBackward0")
        # The kept one-element result's bytes ride the reply.
        self.assertEqual(np.frombuffer(loss.value, np.float64)[0],
                         self.fetch(loss)[()])

        t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
        y = F.max_pool2d(F.relu(F.conv2d(torch.from_numpy(x), t["conv1.weight"],
                                         t["conv1.bias"])), 2, 2)
        y = F.max_pool2d(F.relu(F.conv2d(y, t["conv2.weight"], t["conv2.bias"])),
                         2, 2)
        y = torch.flatten(y, 1)
        y = F.relu(F.linear(y, t["fc1.weight"], t["fc1.bias"]))
        y = F.relu(F.linear(y, t["fc2.weight"], t["fc2.bias"]))
        y = F.linear(y, t["fc3.weight"], t["fc3.bias"])
        want = F.cross_entropy(y, torch.from_numpy(labels))
        want.backward()
        np.testing.assert_allclose(self.fetch(loss), want.detach().numpy(),
                                   rtol=1e-12)
        for k in params:
            np.testing.assert_allclose(self.grad(remote[k]), t[k].grad.numpy(),
                                       rtol=1e-10, atol=1e-12, err_msg=k)

    def test_window_op_gradients_match_torch(self):
        convs = [((2, 3, 7, 9), (4, 3, 3, 2), 1, (2, 1), (1, 0), 1),
                 ((1, 4, 8, 8), (6, 2, 3, 3), 2, 1, 1, (2, 1)),
                 ((3, 6, 5, 6), (6, 1, 3, 3), 6, 2, 1, 1),
                 ((3, 5, 5), (2, 3, 3, 3), 1, 1, 2, 2)]  # unbatched
        for xs, ws, groups, stride, padding, dilation in convs:
            x = self.rng.standard_normal(xs)
            w = self.rng.standard_normal(ws)
            b = self.rng.standard_normal(ws[0])
            tx, tw, tb = (self.create(v, requires_grad=True) for v in (x, w, b))
            up = self.rng.standard_normal(
                F.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                         stride=stride, padding=padding, dilation=dilation,
                         groups=groups).shape)
            tu = self.create(up)
            pairs = lambda v: [v] if isinstance(v, int) else list(v)  # noqa: E731
            self.execute([
                pb.Op(conv2d=pb.Conv2dArgs(
                    x=h(tx), weight=h(tw), bias=h(tb), stride=pairs(stride),
                    padding=pairs(padding), dilation=pairs(dilation),
                    groups=groups)),
                pb.Op(backward=pb.BackwardArgs(root=r(0), gradient=h(tu))),
            ], keep=[])
            X, W, B = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
            F.conv2d(X, W, B, stride=stride, padding=padding, dilation=dilation,
                     groups=groups).backward(torch.from_numpy(up))
            for remote, local in ((tx, X), (tw, W), (tb, B)):
                np.testing.assert_allclose(self.grad(remote), local.grad.numpy(),
                                           rtol=1e-10, atol=1e-12,
                                           err_msg=str((xs, ws)))
        pools = [("max", 2, 2, 0, 1, True), ("max", (3, 2), (2, 1), 1, (1, 2), True),
                 ("avg", 3, 2, 1, 1, True), ("avg", 3, 2, 1, 1, False),
                 ("avg", (2, 3), 1, (1, 0), 1, False)]
        for kind, k, s, p, d, include in pools:
            x = self.rng.standard_normal((2, 3, 7, 6))
            tx = self.create(x, requires_grad=True)
            args = pb.Pool2dArgs(op=pb.MAX_POOL if kind == "max" else pb.AVG_POOL,
                                 x=h(tx), kernel_size=np.atleast_1d(k).tolist(),
                                 stride=np.atleast_1d(s).tolist(),
                                 padding=np.atleast_1d(p).tolist())
            X = torch.tensor(x, requires_grad=True)
            if kind == "max":
                args.dilation.extend(np.atleast_1d(d).tolist())
                y = F.max_pool2d(X, k, s, p, d)
            else:
                args.exclude_pad = not include
                y = F.avg_pool2d(X, k, s, p, count_include_pad=include)
            up = self.rng.standard_normal(y.shape)
            y.backward(torch.from_numpy(up))
            self.execute([pb.Op(pool2d=args),
                          pb.Op(backward=pb.BackwardArgs(
                              root=r(0), gradient=h(self.create(up))))], keep=[])
            np.testing.assert_allclose(self.grad(tx), X.grad.numpy(), rtol=1e-10,
                                       atol=1e-12, err_msg=str((kind, k, s, p, d)))

    def test_sgd_steps_under_no_grad_match_torch(self):
        w0 = self.rng.standard_normal((3, 4))
        x = self.rng.standard_normal((5, 4))
        target = self.rng.standard_normal((5, 3))
        tw = self.create(w0, requires_grad=True)
        tx, tt = self.create(x), self.create(target)
        W = torch.tensor(w0, requires_grad=True)
        for _ in range(3):
            self.execute([
                pb.Op(linear=pb.LinearArgs(x=h(tx), weight=h(tw))),        # 0
                pb.Op(loss=pb.LossArgs(op=pb.MSE_LOSS, input=r(0),
                                       target=h(tt))),                     # 1
                pb.Op(backward=pb.BackwardArgs(root=r(1))),                # 2
                pb.Op(grad=pb.GradArgs(x=h(tw))),                          # 3
                pb.Op(in_place=pb.InPlaceArgs(
                    op=pb.AXPY_, target=h(tw), other=r(3),
                    alpha=pb.Scalar(float_value=-0.1)), no_grad=True),     # 4
                pb.Op(zero_grad=pb.ZeroGradArgs(tensors=[h(tw)])),         # 5
            ], keep=[])
            F.mse_loss(F.linear(torch.from_numpy(x), W),
                       torch.from_numpy(target)).backward()
            with torch.no_grad():
                W -= 0.1 * W.grad
            W.grad = None
        np.testing.assert_allclose(self.fetch(tw), W.detach().numpy(), rtol=1e-12)

    def test_optimizers_match_torch_for_ten_steps(self):
        configs = [
            ("SGD", dict(lr=0.1)),
            ("SGD", dict(lr=0.05, momentum=0.9)),
            ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
            ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
            ("SGD", dict(lr=0.05, momentum=0.5, maximize=True)),
            ("Adam", dict()),
            ("Adam", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
            ("Adam", dict(lr=0.01, maximize=True)),
            ("AdamW", dict(lr=0.01, weight_decay=0.05)),
        ]
        kinds = {"SGD": pb.SGD, "Adam": pb.ADAM, "AdamW": pb.ADAMW}
        x = self.rng.standard_normal((6, 4))
        target = self.rng.standard_normal((6, 3))
        tx, tt = self.create(x), self.create(target)
        for name, cfg in configs:
            w0, b0 = self.rng.standard_normal((3, 4)), self.rng.standard_normal(3)
            params = [self.create(w0, requires_grad=True),
                      self.create(b0, requires_grad=True)]
            states = 2 if name != "SGD" else (1 if cfg.get("momentum") else 0)
            state = [self.stub.Create(pb.CreateRequest(
                session=self.session, device="cpu", dtype=pb.FLOAT64,
                shape=list(p.shape), fill=pb.Fill(kind=pb.Fill.ZEROS))).tensor
                for _ in range(states) for p in params]
            W = torch.tensor(w0, requires_grad=True)
            B = torch.tensor(b0, requires_grad=True)
            opt = getattr(torch.optim, name)([W, B], **cfg)
            for step in range(1, 11):
                args = pb.OptimizerStepArgs(
                    kind=kinds[name], params=[h(p) for p in params],
                    state=[h(s) for s in state], lr=cfg.get("lr", 0.001),
                    weight_decay=cfg.get("weight_decay", 0),
                    maximize=cfg.get("maximize", False),
                    momentum=cfg.get("momentum", 0),
                    dampening=cfg.get("dampening", 0),
                    nesterov=cfg.get("nesterov", False), step=step)
                if "betas" in cfg:
                    args.beta1, args.beta2 = cfg["betas"]
                if "eps" in cfg:
                    args.eps = cfg["eps"]
                self.execute([
                    pb.Op(linear=pb.LinearArgs(x=h(tx), weight=h(params[0]),
                                               bias=h(params[1]))),
                    pb.Op(loss=pb.LossArgs(op=pb.MSE_LOSS, input=r(0),
                                           target=h(tt))),
                    pb.Op(backward=pb.BackwardArgs(root=r(1))),
                    pb.Op(optimizer_step=args),
                    pb.Op(zero_grad=pb.ZeroGradArgs(tensors=[h(p) for p in params])),
                ], keep=[])
                opt.zero_grad()
                F.mse_loss(F.linear(torch.from_numpy(x), W, B),
                           torch.from_numpy(target)).backward()
                opt.step()
            for remote, local in zip(params, (W, B)):
                np.testing.assert_allclose(self.fetch(remote), local.detach().numpy(),
                                           rtol=1e-12, atol=1e-14,
                                           err_msg=f"{name} {cfg}")
        # PyTorch's argument messages.
        p = self.create(np.zeros(2), requires_grad=True)
        for args, want in [
                (pb.OptimizerStepArgs(kind=pb.SGD, lr=-0.1, step=1),
                 lambda: torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=-0.1)),
                (pb.OptimizerStepArgs(kind=pb.SGD, lr=0.1, nesterov=True, step=1),
                 lambda: torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1,
                                         nesterov=True)),
                (pb.OptimizerStepArgs(kind=pb.ADAM, beta1=1.0, step=1),
                 lambda: torch.optim.Adam([torch.zeros(1, requires_grad=True)],
                                          betas=(1.0, 0.9)))]:
            args.params.append(h(p))
            err = self.error_of(lambda: self.run_op(optimizer_step=args))
            self.assertEqual(err.code(), grpc.StatusCode.INVALID_ARGUMENT)
            with self.assertRaises(ValueError) as torch_err:
                want()
            self.assertEqual(err.details(), str(torch_err.exception))

    def test_errors_carry_pytorchs_messages(self):
        x = self.create(np.array([1.0, 2.0]), requires_grad=True)
        X = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        y = self.run_op(binary=pb.BinaryArgs(op=pb.MUL, lhs=h(x), rhs=h(x)))
        self.assertEqual(y.grad_fn, "MulBackward0")
        err = self.error_of(lambda: self.run_op(backward=pb.BackwardArgs(root=h(y))))
        self.assertEqual(err.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(err.details(), self.torch_error(lambda: (X * X).backward()))

        s = self.run_op(reduce=pb.ReduceArgs(op=pb.SUM, x=h(y)))
        self.run_op(backward=pb.BackwardArgs(root=h(s)))
        err = self.error_of(lambda: self.run_op(backward=pb.BackwardArgs(root=h(s))))
        self.assertEqual(err.code(), grpc.StatusCode.FAILED_PRECONDITION)
        S = (X * X).sum()
        S.backward()
        self.assertEqual(err.details(), self.torch_error(S.backward))

        err = self.error_of(lambda: self.run_op(in_place=pb.InPlaceArgs(
            op=pb.ADD_, target=h(x), scalar=pb.Scalar(float_value=1))))
        self.assertEqual(err.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(err.details(), self.torch_error(lambda: X.add_(1)))

        plain = self.create(np.array([1.0, 2.0]))
        total = self.run_op(reduce=pb.ReduceArgs(op=pb.SUM, x=h(plain)))
        err = self.error_of(lambda: self.run_op(backward=pb.BackwardArgs(root=h(total))))
        self.assertEqual(err.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(err.details(), self.torch_error(
            lambda: torch.tensor([1.0, 2.0]).sum().backward()))

        ints = self.create(np.array([1, 2], dtype=np.int64))
        err = self.error_of(lambda: self.run_op(
            requires_grad=pb.RequiresGradArgs(x=h(ints))))
        self.assertEqual(err.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(err.details(), self.torch_error(
            lambda: torch.tensor([1, 2]).requires_grad_()))

        # An in-place change to a tensor saved for backward: PyTorch's text up
        # to the saving op (it says "output 0 of", naming the op that made the
        # saved tensor; tensord names the op that saved it).
        w = self.create(np.array([3.0, 4.0]))
        z = self.run_op(binary=pb.BinaryArgs(op=pb.MUL, lhs=h(x), rhs=h(w)))
        zs = self.run_op(reduce=pb.ReduceArgs(op=pb.SUM, x=h(z)))
        self.run_op(in_place=pb.InPlaceArgs(op=pb.ADD_, target=h(w),
                                            scalar=pb.Scalar(float_value=1)))
        err = self.error_of(lambda: self.run_op(backward=pb.BackwardArgs(root=h(zs))))
        self.assertEqual(err.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("one of the variables needed for gradient computation has "
                      "been modified by an inplace operation: "
                      "[torch.DoubleTensor [2]], which is input 1 of MulBackward0, "
                      "is at version 1; expected version 0 instead.", err.details())

