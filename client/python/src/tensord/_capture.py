"""client.capture(fn, *inputs): a step recorded once, registered as a
program (planned once on the server) and replayed with one RunProgram (a
run_program command on the command stream).

Contract:
  * capture(client, fn, *inputs) runs fn(*inputs) once, eagerly (its effects
    happen: a training step trains), recording every op fn sends
    (Tensor ops, backward, zero_grad, optimizer steps) and returns a
    CapturedStep. fn returns a Tensor, a tuple/list of Tensors, or None:
    those are the step's outputs, each the result of a recorded op
    (ValueError otherwise).
  * step(*new_inputs) runs the recorded ops as a program (RegisterProgram /
    RunProgram, docs/training.md) with each of the capture's `inputs`
    replaced by the new input at its position (same count, TypeError
    otherwise), and returns the outputs in fn's structure as new Tensors.
    An input is a Tensor, or a numpy array (or nested list) sent inline in
    the run's request, converted to the capture input's dtype for its
    device: a batch then costs no upload of its own. The step registers one
    program per input signature (each input's dtype, shape and device, and
    whether torch.no_grad() is on) the first time it sees it and reuses it
    (the last, smaller batch of an epoch gets its own); an op that cannot
    run on a signature fails its registration with the server's "op #i
    (...)" error. A program the server dropped (the session's least
    recently run, past Limits.max_session_programs) is registered again.
  * Ops read every other tensor by handle: parameters, optimizer state and
    tensors fn made during the capture (zeros, from_numpy, ...; made once,
    shared by every replay) stay the ones of the capture, held by the step.
    In-place updates (sub_, optimizer steps, grads) apply to them at each
    replay, as eager code would; each replay of an optimizer step counts as
    a step of its optimizer (Adam's bias correction sees 2, 3, ...) and uses
    its current learning rate, weight decay and (SGD's) momentum
    (optimizer.defaults): all are the run's arguments, not the program's
    (momentum may not cross zero: the server refuses it). A dropout draws a
    new mask at each replay: after manual_seed, the seeds the eager step
    would have taken (RunProgramRequest.seed_offset), so a captured
    training run equals the eager one.
  * A replay is one command on the client's command stream when it is open
    (pipelined clients), in order with what was sent before it, else one
    RunProgram call.
  * Recorded is what goes through the Dispatcher's run(); while capturing, a
    fetch (numpy(), item(), repr, bool()) or a move (to(), cuda(), cpu())
    raises RuntimeError, because a replay could not repeat it (make and move
    tensors before capturing; creating tensors is allowed, see above).
    Intermediates are not kept: the server frees them when the run ends.
Thread-safety: while one thread captures, no other thread may use the
client; a CapturedStep may be replayed from one thread at a time.
"""
import copy

import grpc

from tensord import _dtypes, _grad_mode
from tensord._errors import TensordError
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
        self.seeds = []             # the seeds of the seeded dropouts

    def record(self, op, result):
        op = copy.deepcopy(op)
        if op.WhichOneof("kind") == "dropout" and op.dropout.HasField("seed"):
            self.seeds.append(op.dropout.seed)
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
        raise RuntimeError(f"{what} inside a captured step: a replay (one RunProgram) could not "
                           "repeat it; do it before capturing or after a replay")


class CapturedStep:
    def __init__(self, client, recorder, inputs, outputs, single):
        self._client = client
        self._input_slot = recorder.input_slot
        self._optimizers = recorder.optimizers
        # Seeded dropouts draw new masks at each replay: the run's seed
        # offset moves their seeds to those the eager step would take next.
        self._seeds = len(recorder.seeds)
        self._first_seed = min(recorder.seeds, default=0)
        self._replays = 0
        self._held = recorder.held   # what the ops read by handle, kept alive
        self._single = single
        self._keep = []
        for t in outputs:
            if t.handle not in recorder.index_of_result:
                raise ValueError("a captured step's outputs must be results of its ops "
                                 "(not its inputs or tensors made outside it)")
            self._keep.append(recorder.index_of_result[t.handle])
        # The program's ops: each operand that was a capture input names the
        # input by position (Operand.input); the others stay handles (the
        # program's bound tensors) or earlier results.
        self._ops = recorder.ops
        for op in self._ops:
            for operand in _operands(op):
                if operand.WhichOneof("source") == "handle" and \
                        operand.handle in self._input_slot:
                    operand.input = self._input_slot[operand.handle]
        # The capture's inputs as placeholders: their dtypes and devices
        # stay each input's, whatever the shape a later batch has.
        self._placeholders = [(t._info.dtype, t._info.device) for t in inputs]
        self._programs = {}  # input signature -> program id

    @property
    def ops(self):
        """How many ops one replay runs."""
        return len(self._ops)

    @property
    def programs(self):
        """How many programs the step has registered (one per input
        signature: dtype, shape and device of each input)."""
        return len(self._programs)

    def _register(self, signature):
        no_grad = signature[-1]
        ops = self._ops
        if no_grad:
            ops = [copy.deepcopy(op) for op in ops]
            for op in ops:
                op.no_grad = True
        placeholders = [pb.ProgramInput(dtype=dtype, shape=shape, device=device)
                        for dtype, shape, device in signature[:-1]]
        program = self._client._session.call("RegisterProgram", pb.RegisterProgramRequest(
            inputs=placeholders, ops=ops, keep=self._keep, tag="capture"),
            mutating=True).program.program
        self._programs[signature] = program
        return program

    def _arguments(self, inputs, uploaded):
        """The RunProgram inputs and the signature of `inputs`: tensors by
        handle; numpy arrays (or nested lists) inline, converted to the
        capture input's dtype for its device (uploaded first, into
        `uploaded`, when over Limits.max_inline_bytes)."""
        args, signature = [], []
        max_inline = self._client._session.limits.max_inline_bytes
        for x, (dtype, device) in zip(inputs, self._placeholders):
            if isinstance(x, Tensor):
                info = x._info
                args.append(pb.ProgramArg(handle=info.handle))
                signature.append((info.dtype, tuple(info.shape), info.device))
                continue
            host_dtype = _dtypes.from_wire(dtype)
            array = _dtypes.host_array(x, host_dtype)
            if max_inline and array.nbytes > max_inline:
                t = self._client._from_array(x, host_dtype, device)
                args.append(pb.ProgramArg(handle=t._info.handle))
                uploaded.append(t)  # alive until the run
            else:
                args.append(pb.ProgramArg(data=array.tobytes()))
            signature.append((dtype, tuple(array.shape), device))
        signature.append(_grad_mode.no_grad_active())
        return args, tuple(signature)

    def _seed_offset(self):
        """This replay's RunProgramRequest.seed_offset: the seeded dropouts
        take the client's next seeds (manual_seed's sequence), as the eager
        step would; without one, each replay shifts them by their count."""
        if not self._seeds:
            return 0
        base = self._client._take_seeds(self._seeds)
        if base is None:
            base = self._first_seed + self._replays * self._seeds
        return (base - self._first_seed) % (1 << 64)

    def __call__(self, *inputs):
        if len(inputs) != len(self._placeholders):
            raise TypeError(f"the step was captured with {len(self._placeholders)} inputs, "
                            f"got {len(inputs)}")
        uploaded = []
        args, signature = self._arguments(inputs, uploaded)
        program = self._programs.get(signature)
        if program is None:
            program = self._register(signature)
        steps = []
        for index, optimizer in self._optimizers:
            optimizer._step += 1
            d = optimizer.defaults
            step = pb.ProgramStepArgs(op=index, step=optimizer._step, lr=d["lr"],
                                      weight_decay=d["weight_decay"])
            if "momentum" in d:  # SGD's
                step.momentum = d["momentum"]
            steps.append(step)
        self._replays += 1
        request = pb.RunProgramRequest(program=program, inputs=args, steps=steps,
                                       seed_offset=self._seed_offset())
        dispatcher = self._client._dispatcher
        try:
            kept = dispatcher.run_program(request)
        except TensordError as e:
            if e.code != grpc.StatusCode.NOT_FOUND or "unknown program" not in e.details:
                raise
            # Dropped as the session's least recently run program: again.
            request.program = self._register(signature)
            kept = dispatcher.run_program(request)
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
