"""torch.optim's SGD, Adam and AdamW as tensord's fused OptimizerStep op.

Contract: an optimizer holds its parameters (tensord tensors that require
grad) and, for SGD with momentum and for Adam/AdamW, state tensors it
creates on the server on the first step (zeros shaped like each parameter,
on its device); step() sends one OptimizerStep op for every parameter
(those whose grad is None are skipped by the server), with PyTorch 1.13's
arithmetic; zero_grad() sets every grad to None in one op. Arguments and
defaults are torch's, checked as torch checks them, in the constructor
(ValueError "Invalid learning rate: -0.1"); the server checks them again,
and each state tensor against its parameter, and step() is planned at the
line (_planner.plan_optimizer_step). No update math lives in Python.
"""
from tensord import _functional, _planner, _wire
from tensord.v1 import tensord_pb2 as pb

_STEP_ARGS = _wire.encoder(pb.OptimizerStepArgs)


class Optimizer:
    _kind = None

    def __init__(self, params, defaults, state_per_param):
        self.params = list(params)
        self.defaults = dict(defaults)
        self._state_per_param = state_per_param
        self._state = []
        self._step = 0
        # torch checks the hyperparameters here, raising ValueError: so do we
        # (the server checks them again at each step).
        _planner.check_optimizer_args(self._kind, dict(self._hyperparameters(), step=1),
                                      "ValueError", show=str)

    def zero_grad(self, set_to_none=True):
        _functional.zero_grad(self.params)

    def _hyperparameters(self):
        """The OptimizerStepArgs fields of this kind's hyperparameters."""
        raise NotImplementedError

    def step(self):
        if not self.params:
            return
        if self._state_per_param and not self._state:
            client = self.params[0]._client
            self._state = [client.zeros_like(p) for _ in range(self._state_per_param)
                           for p in self.params]
        self._step += 1
        # Written as wire bytes (_wire.encoder): once a step, 2-3 operands a parameter.
        hyperparameters = dict(self._hyperparameters(), step=self._step)
        dispatcher = self.params[0]._client._dispatcher
        dispatcher.plan_optimizer_step(self._kind, hyperparameters,
                                       [p._info for p in self.params],
                                       [s._info for s in self._state])
        handles = [p._info.handle for p in self.params]
        self.params[0]._run(target=handles[0], optimizer_step=_STEP_ARGS(
            kind=self._kind, params=[_wire.operand(h) for h in handles],
            state=[_wire.operand(s._info.handle) for s in self._state],
            **hyperparameters))
        recorder = self.params[0]._client._dispatcher.recorder
        if recorder is not None:  # a replay counts as a step (see _capture.py)
            recorder.optimizer_stepped(self)


class SGD(Optimizer):
    _kind = pb.SGD

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, maximize=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize), 1 if momentum != 0 else 0)

    def _hyperparameters(self):
        d = self.defaults
        return dict(lr=d["lr"], momentum=d["momentum"], dampening=d["dampening"],
                    weight_decay=d["weight_decay"], nesterov=d["nesterov"],
                    maximize=d["maximize"])


class Adam(Optimizer):
    _kind = pb.ADAM

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 maximize=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize), 2)

    def _hyperparameters(self):
        d = self.defaults
        beta1, beta2 = d["betas"]
        return dict(lr=d["lr"], eps=d["eps"], beta1=beta1, beta2=beta2,
                    weight_decay=d["weight_decay"], maximize=d["maximize"])


class AdamW(Adam):
    _kind = pb.ADAMW

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, maximize)
