"""torch.nn's modules over tensord: parameters are server tensors, forward sends ops.

Contract: Module keeps its parameters (leaf tensors that require grad,
assigned as attributes or through register_parameter) and its child
modules (assigned as attributes) in order; parameters()/named_parameters()
walk them as torch's do ("0.weight", "conv1.bias"); to(device)/cuda()/cpu()
move every parameter, keeping each a leaf that requires grad; train()/eval()
set `training` recursively; zero_grad() sets every grad to None;
state_dict() maps names to the parameter tensors; load_state_dict(d)
replaces them by copies of d's (tensord.save/load write and read them as
safetensors, with these names), buffers (register_buffer: BatchNorm's
running statistics) included in torch's order. Layers (Linear, Conv2d,
ReLU, Sigmoid, Tanh, Flatten, MaxPool2d, AvgPool2d, Dropout, BatchNorm1d,
BatchNorm2d, LayerNorm, Sequential,
CrossEntropyLoss, MSELoss, NLLLoss) take torch's arguments plus device=,
dtype= and client= (default: tensord's default client) and initialise
their parameters as torch does in distribution (uniform in
[-1/sqrt(fan_in), 1/sqrt(fan_in)]), drawn on the server (not torch's
values). No gradient math lives here: backward and the optimizers run on
the server.
"""
import collections
import math

from tensord import _client, _functional, _op_table
from tensord._grad_mode import no_grad
from tensord._tensor import Tensor
from tensord.nn import functional as F


_IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _uniform(client, shape, bound, device, dtype):
    with no_grad():
        u = client.rand(*shape, device=device, dtype=dtype)
        w = (u * (2 * bound) - bound).detach()
    return w.requires_grad_()


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("call Module.__init__() before assigning attributes")
        if isinstance(value, Module):
            self._modules[name] = value
        elif name in self._buffers:
            self._buffers[name] = value
        elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._parameters[name] = value
        elif name in self._parameters and value is None:
            self._parameters[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(table, {})
            if name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def register_parameter(self, name, tensor):
        if tensor is not None and not tensor.requires_grad:
            tensor.requires_grad_()
        self._parameters[name] = tensor

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor of the module's state that is not a parameter (BatchNorm's
        running statistics): in state_dict() and moved by to(), never trained."""
        if not persistent:
            raise NotImplementedError("tensord's modules keep persistent buffers only")
        self._buffers[name] = tensor

    def named_buffers(self, prefix=""):
        return self._named("_buffers", prefix)

    def buffers(self):
        return [b for _, b in self.named_buffers()]

    def _named_state(self, prefix=""):
        """torch's state_dict order: each module's parameters, its buffers, then
        its children's."""
        for table in (self._parameters, self._buffers):
            for name, t in table.items():
                if t is not None:
                    yield prefix + name, t
        for name, child in self._modules.items():
            yield from child._named_state(prefix + name + ".")

    def forward(self, *args):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def _named(self, table, prefix):
        """(dotted name, tensor) of each entry of `table` ("_parameters" or
        "_buffers"), this module's first, then each child's."""
        for name, t in getattr(self, table).items():
            if t is not None:
                yield prefix + name, t
        for name, child in self._modules.items():
            yield from child._named(table, prefix + name + ".")

    def named_parameters(self, prefix=""):
        return self._named("_parameters", prefix)

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def children(self):
        return iter(self._modules.values())

    def state_dict(self):
        return collections.OrderedDict(self._named_state())

    def load_state_dict(self, state_dict, strict=True):
        """Replaces each parameter named in `state_dict` by a copy of its value, on the
        parameter's device and dtype, as a fresh leaf that requires grad (the server
        has no in-place copy, so make optimizers after loading); values may also be
        torch tensors or numpy arrays. Returns torch's
        (missing_keys, unexpected_keys); with strict, either being non-empty raises
        torch's RuntimeError, as does a shape that differs, and nothing is replaced."""
        own = dict(self._named_state())
        missing = [name for name in own if name not in state_dict]
        unexpected = [name for name in state_dict if name not in own]
        errors = []
        if strict:
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in missing) + ". ")
        for name, value in state_dict.items():
            if name in own and tuple(value.shape) != tuple(own[name].shape):
                errors.append(f"size mismatch for {name}: copying a param with shape "
                              f"{value.shape} from checkpoint, the shape in current model "
                              f"is {own[name].shape}.")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:"
                               "\n\t" + "\n\t".join(errors))
        for name, value in state_dict.items():
            if name not in own:
                continue
            *path, leaf = name.split(".")
            module = self
            for part in path:
                module = module._modules[part]
            target = own[name]
            with no_grad():
                if isinstance(value, Tensor):
                    copy = value.detach().to(target.device, target.dtype, copy=True)
                else:  # a torch tensor or numpy array
                    copy = target._client.tensor(value, target.dtype, target.device)
            if leaf in module._parameters:
                module._parameters[leaf] = copy.requires_grad_()
            else:
                module._buffers[leaf] = copy
        return _IncompatibleKeys(missing, unexpected)

    def train(self, mode=True):
        object.__setattr__(self, "training", mode)
        for child in self._modules.values():
            child.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        _functional.zero_grad(self.parameters())

    def to(self, device=None, dtype=None):
        for name, p in list(self._parameters.items()):
            if p is None:
                continue
            moved = p.to(device) if device is not None else p
            if dtype is not None:
                moved = moved.to(dtype)
            if moved is not p:
                # A move has a grad_fn: a parameter stays a leaf, as torch keeps it.
                self._parameters[name] = moved.detach().requires_grad_()
        for name, b in list(self._buffers.items()):
            if b is None:
                continue
            # torch casts floating buffers only (num_batches_tracked stays int64).
            cast = dtype if dtype is not None and b.dtype.is_floating_point else None
            self._buffers[name] = b.to(device, cast) if cast else (
                b.to(device) if device is not None else b)
        for child in self._modules.values():
            child.to(device, dtype)
        return self

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    def cpu(self):
        return self.to("cpu")

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(child).replace("\n", "\n  ")
                 for name, child in self._modules.items()]
        if not lines:
            return f"{type(self).__name__}({self.extra_repr()})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


def _client_of(client):
    return client if client is not None else _client.default_client()


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None,
                 client=None):
        super().__init__()
        client = _client_of(client)
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        self.weight = _uniform(client, (out_features, in_features), bound, device, dtype)
        self.register_parameter(
            "bias", _uniform(client, (out_features,), bound, device, dtype) if bias else None)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, device=None, dtype=None, client=None):
        super().__init__()
        client = _client_of(client)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _pair(kernel_size), _pair(stride)
        self.padding, self.dilation, self.groups = _pair(padding), _pair(dilation), groups
        fan_in = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = _uniform(client, shape, bound, device, dtype)
        self.register_parameter(
            "bias", _uniform(client, (out_channels,), bound, device, dtype) if bias else None)

    def forward(self, input):
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding,
                        self.dilation, self.groups)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride or kernel_size, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride or kernel_size, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class _Elementwise(Module):
    _function = None

    def forward(self, input):
        return type(self)._function(input)


class ReLU(_Elementwise):
    _function = staticmethod(F.relu)


class _WithArgs(Module):
    """A module over one op table row with numeric arguments: its `params`
    (names and defaults, torch's) are the constructor's, then inplace."""
    _op = None  # the row's id

    def __init__(self, *args, inplace=False, **kwargs):
        super().__init__()
        params = next(r["params"] for r in _op_table.OPS if r["id"] == self._op)
        self._names = [name for name, _ in params]
        values = dict(params, **dict(zip(self._names, args)), **kwargs)
        if len(args) > len(params) or set(values) != set(self._names):
            raise TypeError(f"{type(self).__name__}({', '.join(self._names)}, inplace)")
        for name in self._names:
            setattr(self, name, values[name])
        self.inplace = inplace

    def forward(self, input):
        return getattr(F, self._op)(input, *(getattr(self, n) for n in self._names))

    def extra_repr(self):
        return ", ".join(f"{n}={getattr(self, n)}" for n in self._names)


class LeakyReLU(_WithArgs):
    _op = "leaky_relu"


class ELU(_WithArgs):
    _op = "elu"


class Hardtanh(_WithArgs):
    _op = "hardtanh"


class Sigmoid(_Elementwise):
    _function = staticmethod(F.sigmoid)


class Tanh(_Elementwise):
    _function = staticmethod(F.tanh)


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        self.p = p

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace=False"


class _BatchNorm(Module):
    """torch's _BatchNorm: weight (ones) and bias (zeros) when affine; running_mean
    (zeros), running_var (ones) and num_batches_tracked (0, int64) when tracking,
    updated by the server's batch_norm in training."""
    _dims = ()  # the input ranks the module takes

    def __init__(self, num_features, eps=1e-05, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, client=None):
        super().__init__()
        if momentum is None:
            raise NotImplementedError("tensord's BatchNorm takes a numeric momentum "
                                      "(a cumulative average, momentum=None, is not served)")
        client = _client_of(client)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        made = dict(dtype=dtype, device=device)
        self.register_parameter(
            "weight", client.ones(num_features, **made, requires_grad=True) if affine else None)
        self.register_parameter(
            "bias", client.zeros(num_features, **made, requires_grad=True) if affine else None)
        for name, value in (("running_mean", client.zeros(num_features, **made)),
                            ("running_var", client.ones(num_features, **made)),
                            ("num_batches_tracked",
                             client.tensor(0, device=device))):
            self.register_buffer(name, value if track_running_stats else None)

    def forward(self, input):
        if input.dim() not in type(self)._dims:
            ranks = " or ".join(f"{d}D" for d in type(self)._dims)
            raise ValueError(f"expected {ranks} input (got {input.dim()}D input)")
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        training = self.training or self.running_mean is None
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                            self.bias, training, self.momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    _dims = (4,)


class LayerNorm(Module):
    """torch's LayerNorm over the last dims: weight (ones) and bias (zeros) of
    normalized_shape when elementwise_affine."""

    def __init__(self, normalized_shape, eps=1e-05, elementwise_affine=True, device=None,
                 dtype=None, client=None):
        super().__init__()
        client = _client_of(client)
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        made = dict(dtype=dtype, device=device, requires_grad=True)
        self.register_parameter(
            "weight", client.ones(*self.normalized_shape, **made) if elementwise_affine else None)
        self.register_parameter(
            "bias", client.zeros(*self.normalized_shape, **made) if elementwise_affine else None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        for i, module in enumerate(modules):
            self._modules[str(i)] = module

    def forward(self, input):
        for module in self._modules.values():
            input = module(input)
        return input

    def __getitem__(self, index):
        return list(self._modules.values())[index]

    def __len__(self):
        return len(self._modules)


class CrossEntropyLoss(Module):
    def __init__(self, reduction="mean", ignore_index=-100):
        super().__init__()
        self.reduction, self.ignore_index = reduction, ignore_index

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.reduction, self.ignore_index)


class NLLLoss(CrossEntropyLoss):
    def forward(self, input, target):
        return F.nll_loss(input, target, self.reduction, self.ignore_index)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)
