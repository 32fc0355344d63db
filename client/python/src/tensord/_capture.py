"""client.capture(fn, *inputs): a step recorded once and replayed as one Execute.

Contract:
  * capture(client, fn, *inputs) runs fn(*inputs) once, eagerly (its effects
    happen: a training step trains), recording every op fn sends
    (Tensor ops, backward, zero_grad, optimizer steps) and returns a
    CapturedStep. fn returns a Tensor, a tuple/list of Tensors, or None:
    those are the step's outputs, each the result of a recorded op
    (ValueError otherwise).
  * step(*new_inputs) sends the recorded ops as one Execute, with each of the
    capture's `inputs` replaced by the new input at its position (same
    count; shapes and dtypes are the server's to check, its error naming
    the op), and returns the outputs in fn's structure as new Tensors. Ops
    read every other tensor by handle: parameters, optimizer state and
    tensors fn made during the capture (zeros, from_numpy, ...; made once,
    shared by every replay) stay the ones of the capture. In-place updates
    (sub_, optimizer steps, grads) apply to them at each replay, as eager
    code would; each replay of an optimizer step counts as a step of its
    optimizer (Adam's bias correction sees 2, 3, ...).
  * Recorded is what goes through the Dispatcher's run(); while capturing, a
    fetch (numpy(), item(), repr, bool()) or a move (to(), cuda(), cpu())
    raises RuntimeError, because a replay could not repeat it (make and move
    tensors before capturing; creating tensors is allowed, see above).
    Intermediates are not kept: the server frees them when the Execute ends.
Thread-safety: while one thread captures, no other thread may use the
client; a CapturedStep may be replayed from any thread.
"""
import copy

from tensord._tensor import Tensor
from tensord.v1 import tensord_pb2 as pb


def _repeated(field):
    """Whether a FieldDescriptor is repeated: protobuf 7 has only
    is_repeated, releases before 5.29 only label."""
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:
        return is_repeated
    return field.label == field.LABEL_REPEATED


def _operands(message):
    """Every pb.Operand inside `message`, recursively."""
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        values = value if _repeated(field) else [value]
        for item in values:
            if isinstance(item, pb.Operand):
                yield item
            else:
                yield from _operands(item)


class Recorder:
    """The Dispatcher's hook while capturing: the ops run so far, in order."""

    def __init__(self, session, input_handles):
        self._session = session
        self.held = {}              # handle -> Tensor an op reads by handle
        self.ops = []
        self.index_of_result = {}   # handle of a new result -> its op's index
        self.input_slot = {h: i for i, h in enumerate(input_handles)}
        self.optimizers = []        # (op index, optimizer) of optimizer steps

    def record(self, op, result):
        op = copy.deepcopy(op)
        read = set()
        for operand in _operands(op):
            handle = operand.handle
            read.add(handle)
            if handle in self.index_of_result:
                operand.result_of = self.index_of_result[handle]
            elif handle not in self.input_slot and handle not in self.held:
                self.held[handle] = self._session.live(handle)
        # In-place ops, backward, zero_grad and optimizer steps answer with an
        # operand: that tensor is not a new result.
        if result.handle not in read and result.handle not in self.index_of_result:
            self.index_of_result[result.handle] = len(self.ops)
        self.ops.append(op)

    def optimizer_stepped(self, optimizer):
        self.optimizers.append((len(self.ops) - 1, optimizer))

    def refuse(self, what):
        raise RuntimeError(f"{what} inside a captured step: a replay (one Execute) could not "
                           "repeat it; do it before capturing or after a replay")


class CapturedStep:
    def __init__(self, client, recorder, inputs, outputs, single):
        self._client = client
        self._ops = recorder.ops
        self._input_slot = recorder.input_slot
        self._optimizers = recorder.optimizers
        self._inputs = list(inputs)  # held, so their handles stay the capture's
        self._held = recorder.held   # what the ops read by handle, kept alive
        self._single = single
        self._keep = []
        for t in outputs:
            if t.handle not in recorder.index_of_result:
                raise ValueError("a captured step's outputs must be results of its ops "
                                 "(not its inputs or tensors made outside it)")
            self._keep.append(recorder.index_of_result[t.handle])

    @property
    def ops(self):
        """How many ops one replay sends."""
        return len(self._ops)

    def __call__(self, *inputs):
        if len(inputs) != len(self._input_slot):
            raise TypeError(f"the step was captured with {len(self._input_slot)} inputs, "
                            f"got {len(inputs)}")
        ops = [copy.deepcopy(op) for op in self._ops]
        for op in ops:
            for operand in _operands(op):
                if operand.WhichOneof("source") == "handle" and \
                        operand.handle in self._input_slot:
                    operand.handle = inputs[self._input_slot[operand.handle]].handle
        for index, optimizer in self._optimizers:
            optimizer._step += 1
            ops[index].optimizer_step.step = optimizer._step
        kept = self._client._dispatcher.execute(ops, self._keep)
        outputs = [Tensor._adopt(self._client, info) for info in kept]
        if self._single is None:
            return None
        return outputs[0] if self._single else tuple(outputs)


def capture(client, fn, *inputs):
    dispatcher = client._dispatcher
    if dispatcher.recorder is not None:
        raise RuntimeError("capture() inside a capture")
    recorder = Recorder(client._session, [t.handle for t in inputs])
    dispatcher.recorder = recorder
    try:
        result = fn(*inputs)
    finally:
        dispatcher.recorder = None
    if result is None:
        return CapturedStep(client, recorder, inputs, [], None)
    if isinstance(result, Tensor):
        return CapturedStep(client, recorder, inputs, [result], True)
    return CapturedStep(client, recorder, inputs, list(result), False)
