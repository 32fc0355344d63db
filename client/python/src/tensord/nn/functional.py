"""torch.nn.functional's counterpart: the functional ops of tensord (see tensord._functional)."""
from tensord import _functional
from tensord._functional import (  # noqa: F401
    adaptive_avg_pool2d, avg_pool2d, conv2d, cross_entropy, dropout, gelu, linear,
    log_softmax, max_pool2d, mse_loss, nll_loss, relu, sigmoid, silu, softmax, tanh)

# The op table's unary ops with numeric arguments (rows marked `method`).
globals().update({name: getattr(_functional, name) for name in _functional.UNARY_WITH_ARGS})
