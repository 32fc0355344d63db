"""torch.nn.functional's counterpart: the functional ops of tensord (see tensord._functional)."""
from tensord import _functional, _op_table
from tensord._functional import (  # noqa: F401
    adaptive_avg_pool2d, avg_pool2d, conv2d, cross_entropy, dropout, gelu, linear,
    log_softmax, max_pool2d, mse_loss, nll_loss, softmax)

# The op table's unary ops (rows marked `method`): relu, sigmoid, tanh, ...
globals().update({name: getattr(_functional, name) for name in _functional.UNARY_FROM_TABLE})

# Every function the op table's rows spell as F.<name>(...) (their `python`).
_SPELLED = {r["python"].split("(", 1)[0][2:] for r in _op_table.OPS
            if (r["python"] or "").startswith("F.")}
globals().update({name: getattr(_functional, name) for name in _SPELLED})
