"""PyTorch's tensor repr, as a pure function of a tensor's metadata and values.

Contract: format_tensor(shape, dtype, values, device, autograd="") returns
what `repr(t)` prints in PyTorch (torch/_tensor_str.py with the default print
options: precision 4, threshold 1000, edgeitems 3, linewidth 80) for a tensor
of `shape` and `dtype` (a tensord dtype) whose row-major elements are the
flat sequence `values` (Python or numpy numbers; bfloat16 already widened to
float), living on `device`, e.g. "tensor([ 5, 16,  3], device='cuda:0')".
The device suffix is left out for the default device ("cpu", "cpu:0", "");
the dtype suffix for the default dtypes (float32, int64, bool), except that
empty tensors name any dtype but float32. `autograd`, when not empty, is the
last suffix ("grad_fn=<MulBackward0>", "requires_grad=True"). A port of the
C++ client's client/tensor_repr.cc. Stateless.
"""
import math

PRECISION = 4
THRESHOLD = 1000
EDGE_ITEMS = 3
LINE_WIDTH = 80


def _py_format(value, spec):
    """Python's format(value, spec) of a float ("inf", "nan" as PyTorch)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return format(value, spec)


class _Formatter:
    """torch._tensor_str._Formatter: one width and notation for the tensor."""

    def __init__(self, shown, floating, is_bool):
        self.floating = floating
        self.is_bool = is_bool
        self.int_mode = True
        self.sci_mode = False
        self.width = 1
        if not floating:
            for v in shown:
                self.width = max(self.width, len(self._non_floating(v)))
            return
        nonzero_finite = [v for v in shown if math.isfinite(v) and v != 0]
        if not nonzero_finite:
            return
        abs_values = [abs(v) for v in nonzero_finite]
        min_abs, max_abs = min(abs_values), max(abs_values)
        self.int_mode = all(v == math.ceil(v) for v in nonzero_finite)
        self.sci_mode = (max_abs / min_abs > 1000.0 or max_abs > 1.0e8
                         or (not self.int_mode and min_abs < 1.0e-4))
        for v in nonzero_finite:
            self.width = max(self.width, len(self._floating(v)))

    def _non_floating(self, v):
        if self.is_bool:
            return "True" if v else "False"
        return str(int(v))

    def _floating(self, v):
        if self.sci_mode:
            return _py_format(v, f".{PRECISION}e")
        if self.int_mode:
            s = _py_format(v, ".0f")
            return s + "." if math.isfinite(v) else s
        return _py_format(v, f".{PRECISION}f")

    def format(self, v):
        s = self._floating(v) if self.floating else self._non_floating(v)
        return s.rjust(self.width)


class _Printer:
    """Walks the tensor the way _tensor_str_with_formatter does."""

    def __init__(self, shape, values, summarize):
        self.shape = list(shape)
        self.values = values
        self.summarize = summarize
        self.strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            self.strides[d] = self.strides[d + 1] * shape[d + 1]

    def indices(self, d):
        n = self.shape[d]
        if self.summarize and n > 2 * EDGE_ITEMS:
            return list(range(EDGE_ITEMS)) + [None] + list(range(n - EDGE_ITEMS, n))
        return list(range(n))

    def shown(self, d=0, base=0):
        if d == len(self.shape):
            return [self.values[base]]
        out = []
        for i in self.indices(d):
            if i is not None:
                out += self.shown(d + 1, base + i * self.strides[d])
        return out

    def print(self, formatter, indent):
        if not self.shape:
            return formatter.format(self.values[0])
        return self._dim(formatter, 0, 0, indent)

    def _dim(self, formatter, d, base, indent):
        if d + 1 == len(self.shape):  # _vector_str
            parts = [" ..." if i is None else formatter.format(self.values[base + i])
                     for i in self.indices(d)]
            per_line = max(1, (LINE_WIDTH - indent) // (formatter.width + 2))
            out = "["
            for k, part in enumerate(parts):
                if k > 0:
                    out += ",\n" + " " * (indent + 1) if k % per_line == 0 else ", "
                out += part
            return out + "]"
        parts = ["..." if i is None
                 else self._dim(formatter, d + 1, base + i * self.strides[d], indent + 1)
                 for i in self.indices(d)]
        separator = "," + "\n" * (len(self.shape) - d - 1) + " " * (indent + 1)
        return "[" + separator.join(parts) + "]"


def _add_suffixes(s, suffixes, indent):
    """_add_suffixes: on the last line while it fits, else on a new line."""
    newline = s.rfind("\n")
    last_line_len = len(s) - newline + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > LINE_WIDTH:
            s += ",\n" + " " * indent + suffix
            last_line_len = indent + len(suffix)
        else:
            s += ", " + suffix
            last_line_len += len(suffix) + 2
    return s + ")"


def format_tensor(shape, dtype, values, device, autograd=""):
    numel = math.prod(shape)
    if numel != len(values):
        raise ValueError(f"format_tensor: {len(values)} values for shape {tuple(shape)}")
    prefix = "tensor("
    dtype_suffix = f"dtype=torch.{dtype.name}"
    suffixes = []
    if device not in ("", "cpu", "cpu:0"):
        suffixes.append(f"device='{device}'")
    if numel == 0:
        # No element hints at the shape or the dtype.
        if len(shape) != 1:
            suffixes.append(f"size={tuple(shape)}")
        if dtype.name != "float32":
            suffixes.append(dtype_suffix)
        body = "[]"
    else:
        if dtype.name not in ("float32", "int64", "bool"):
            suffixes.append(dtype_suffix)
        printer = _Printer(shape, values, numel > THRESHOLD)
        formatter = _Formatter(printer.shown(), dtype.is_floating_point,
                               dtype.name == "bool")
        body = printer.print(formatter, len(prefix))
    if autograd:
        suffixes.append(autograd)
    return _add_suffixes(prefix + body, suffixes, len(prefix))
