"""torch.no_grad() and torch.enable_grad(): the per-thread grad mode.

Contract: inside `with no_grad():` (or a function decorated with it) every op
this thread sends is marked Op.no_grad, so the server records nothing for
autograd and the results do not require grad; enable_grad() turns recording
back on inside it. Modes nest and are per thread, as PyTorch's. No gradient
math lives here: the server's autograd does it all.
"""
import functools
import threading

_state = threading.local()


def no_grad_active():
    return getattr(_state, "no_grad", False)


def is_grad_enabled():
    return not no_grad_active()


class _GradMode:
    _no_grad = True

    def __enter__(self):
        self._saved = no_grad_active()
        _state.no_grad = self._no_grad
        return self

    def __exit__(self, *exc):
        _state.no_grad = self._saved
        return False

    def __call__(self, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return function(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Ops inside are not recorded for autograd (torch.no_grad)."""
    _no_grad = True


class enable_grad(_GradMode):
    """Ops inside are recorded again (torch.enable_grad)."""
    _no_grad = False
