"""tensord: PyTorch's tensor API on tensors that live on a remote tensord server.

    import tensord
    client = tensord.connect()                      # $TENSORD_ADDRESS or 127.0.0.1:50051
    dev = "cuda:0" if client.cuda.is_available() else "cpu"
    x = client.tensor([1, 2, 3], device=dev)
    y = client.tensor([5, 8, 1], device=dev)
    print(x * y)                                    # tensor([ 5, 16,  3], device='cuda:0')
    print((x * y).cpu().numpy())                    # the explicit fetch

Contract of this package: ops go out on the session's ordered command
stream without waiting (connect(pipeline=False): one unary call each), and
a result's metadata or values wait for the server's answer (_stream.py);
shapes, dtypes and errors are the server's (its messages are PyTorch's);
autograd and optimizers run on the server (no gradient math in Python).
Module-level factories (tensord.tensor, zeros, ...) use the default client,
the newest connect()'s. Every server error is a TensordError (a
RuntimeError with .code, a grpc.StatusCode); one torch raises as IndexError,
ValueError or TypeError is also that class (TensordIndexError, ...). tensord.cuda is the default
client's client.cuda. tensord.save(state_dict, path, progress=False) and
tensord.load(path, client=None, device=None, progress=False) write and read
safetensors files (_safetensors.py). tensord.SharedMemoryRegion is a
same-host region for zero-copy transfers (Client.create_shared_memory,
_shm.py). tensord.nn, tensord.optim and tensord.data (datasets and a
DataLoader whose batches are server tensors) load on first use.
"""
from tensord._client import Client, TensorRecord, connect, default_client
from tensord._device import device
from tensord._dtypes import (bfloat16, bool_, dtype, float16, float32, float64, int32,
                             int64)
from tensord._errors import TensordError, TensordIndexError, TensordTypeError, TensordValueError
from tensord._functional import cat, clamp, concat, matmul, maximum, minimum, stack, where
from tensord._grad_mode import enable_grad, is_grad_enabled, no_grad
from tensord._safetensors import load, save
from tensord._shm import Region as SharedMemoryRegion
from tensord._tensor import GradFn, Size, Tensor

bool = bool_  # noqa: A001  (torch.bool)
float = float32  # noqa: A001
double = float64
half = float16
int = int32  # noqa: A001
long = int64

__version__ = "0.1.0"


def _on_default_client(name):
    def factory(*args, **kwargs):
        return getattr(default_client(), name)(*args, **kwargs)
    factory.__name__ = name
    factory.__doc__ = f"client.{name}(...) on the default client (see tensord.connect)."
    return factory


tensor = _on_default_client("tensor")
as_tensor = _on_default_client("as_tensor")
from_numpy = _on_default_client("from_numpy")
from_torch = _on_default_client("from_torch")
zeros = _on_default_client("zeros")
ones = _on_default_client("ones")
full = _on_default_client("full")
empty = _on_default_client("empty")
arange = _on_default_client("arange")
rand = _on_default_client("rand")
randn = _on_default_client("randn")
zeros_like = _on_default_client("zeros_like")
ones_like = _on_default_client("ones_like")
full_like = _on_default_client("full_like")
rand_like = _on_default_client("rand_like")
randn_like = _on_default_client("randn_like")
manual_seed = _on_default_client("manual_seed")


def __getattr__(name):
    # tensord.cuda is the default client's (torch.cuda's queries, answered by
    # its server); tensord.nn, tensord.optim and tensord.data load on first use.
    if name == "cuda":
        return default_client().cuda
    if name in ("nn", "optim", "data"):
        import importlib
        return importlib.import_module(f"tensord.{name}")
    raise AttributeError(f"module 'tensord' has no attribute '{name}'")
