"""tensord.distributed: torch.distributed's collectives over the devices of
one tensord server (docs/many-nodes.md#collectives).

    import tensord
    import tensord.distributed as dist
    client = tensord.connect()                 # tensord --host-devices 2
    group = dist.new_group(["cpu:0", "cpu:1"])
    g0 = client.tensor([1., 2.], device="cpu:0")
    g1 = client.tensor([3., 4.], device="cpu:1")
    dist.all_reduce([g0, g1], group=group)     # both tensor([4., 6.]) now
    dist.all_reduce([g0, g1], op=dist.ReduceOp.AVG, group=group)
    dist.broadcast([g0, g1], src=0, group=group)
    out = dist.all_gather_into_tensor([g0, g1], group=group)  # [4] on each

Contract: the server runs every rank (Gloo for host devices), so where
torch.distributed takes one process's tensor, these take one tensor per
member device, in any order: two on one device, none on another, or one on a
device outside the group raise FAILED_PRECONDITION naming them; tensors of
different dtypes or shapes INVALID_ARGUMENT. all_reduce and broadcast write
in place and return None (torch's async_op=False); all_gather_into_tensor
and reduce_scatter_tensor return new tensors, one per input on its device,
in the inputs' order. Collectives are not recorded by autograd. On a
pipelined client a collective is one command of the session's stream, in
order with the ops before and after it (a refusal raises at the call). A group is its
client's (the default client's unless `client=` says otherwise) and is
destroyed on the server when the ProcessGroup object is collected or by
destroy_process_group(group).
"""
import enum

import grpc

from tensord._client import default_client
from tensord._errors import make_error
from tensord._tensor import Tensor
from tensord.v1 import tensord_pb2 as pb

__all__ = ["ReduceOp", "ProcessGroup", "new_group", "all_reduce", "broadcast",
           "all_gather_into_tensor", "reduce_scatter_tensor", "barrier",
           "destroy_process_group", "get_world_size"]


class ReduceOp(enum.Enum):
    """torch.distributed.ReduceOp (AVG: floating dtypes only)."""
    SUM = pb.REDUCE_SUM
    AVG = pb.REDUCE_AVG
    PRODUCT = pb.REDUCE_PRODUCT
    MIN = pb.REDUCE_MIN
    MAX = pb.REDUCE_MAX


class ProcessGroup:
    """A group of one server's devices, one rank each in the order given."""

    def __init__(self, client, info):
        self._client = client
        self.id = info.group
        self.devices = list(info.devices)
        self.engine = info.engine
        self._destroyed = False

    def size(self):
        return len(self.devices)

    def __repr__(self):
        return f"ProcessGroup(devices={self.devices}, engine='{self.engine}')"

    def _destroy(self):
        if self._destroyed:
            return
        self._destroyed = True
        self._client._session.call("DestroyGroup", pb.DestroyGroupRequest(group=self.id),
                                   mutating=True)

    def __del__(self):
        try:
            self._destroy()
        except Exception:  # noqa: BLE001  (the session's end frees it anyway)
            pass


def new_group(devices, client=None):
    """A ProcessGroup over `devices` (names or tensord.device) of the client's
    server. FAILED_PRECONDITION for a CUDA device (NCCL is not wired yet) or
    a server built without Gloo."""
    client = client or default_client()
    reply = client._session.call("CreateGroup", pb.CreateGroupRequest(
        devices=[str(d) for d in devices]), mutating=True)
    return ProcessGroup(client, reply.group)


def _run(kind, tensors, group, op=ReduceOp.SUM, root=0):
    if group is None:
        raise make_error(grpc.StatusCode.INVALID_ARGUMENT,
                         "tensord.distributed needs a group (dist.new_group(devices)): "
                         "a server has no default group")
    if not isinstance(op, ReduceOp):
        raise make_error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"op must be a tensord.distributed.ReduceOp, not {op!r}")
    handles = []
    for t in tensors:
        if not isinstance(t, Tensor):
            raise make_error(grpc.StatusCode.INVALID_ARGUMENT,
                             f"a collective takes tensord Tensors, not {type(t).__name__}")
        if t._client is not group._client:
            raise make_error(grpc.StatusCode.INVALID_ARGUMENT,
                             f"tensor {t.handle} belongs to another Client's session: a "
                             "collective takes the tensors of its group's Client")
        handles.append(t.handle)
    infos = group._client._dispatcher.collective(pb.CollectiveRequest(
        group=group.id, kind=kind, op=op.value, root=root, tensors=handles))
    return [Tensor._adopt(group._client, info) for info in infos]


def all_reduce(tensors, op=ReduceOp.SUM, group=None):
    """In place: every tensor becomes the reduction of all of them."""
    _run(pb.ALL_REDUCE, tensors, group, op)


def broadcast(tensors, src=0, group=None):
    """In place: every tensor becomes the one on the group's rank `src`."""
    if not isinstance(src, int) or src < 0:
        raise make_error(grpc.StatusCode.INVALID_ARGUMENT,
                         f"broadcast: src is rank {src!r}; ranks count from 0")
    _run(pb.BROADCAST, tensors, group, root=src)


def all_gather_into_tensor(tensors, group=None):
    """New tensors, one per input on its device: every member's tensor
    concatenated along dim 0 in rank order (0-d inputs give 1-D)."""
    return _run(pb.ALL_GATHER, tensors, group)


def reduce_scatter_tensor(tensors, op=ReduceOp.SUM, group=None):
    """New tensors, one per input on its device: that member's slice along
    dim 0 of the reduction (dim 0 must divide by the group's size)."""
    return _run(pb.REDUCE_SCATTER, tensors, group, op)


def barrier(group=None):
    """Returns once every member of the group has arrived."""
    _run(pb.BARRIER, [], group)


def destroy_process_group(group):
    """Frees the group on the server now (its connections and threads)."""
    group._destroy()


def get_world_size(group):
    return group.size()
