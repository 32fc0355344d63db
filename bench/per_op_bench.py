"""per_op_bench: what one tiny op costs in tensord, beside PyTorch's own eager op, in microseconds per op.

    python3 bench/per_op_bench.py [--tensord build/server/tensord]
        [--ops 10000] [--rounds 5]

Run it with a Python where `tensord` and `torch` import (the CTest venv,
build/tests/python/python-client-venv, sees Debian's torch). Against one
tensord daemon started here as a separate process (tests/python/daemon.py),
over TCP loopback, each a median over --rounds interleaved rounds:
  * execute: one Execute of --ops chained adds of two 4-element float32
    tensors (op i adds op i-1's result and y; only the last is kept), its
    request encoded once before the rounds and sent as bytes through a bare
    grpcio call: the server's per-op cost (receiving, parsing, planning,
    running and freeing each op) with one round trip for all of them;
  * execute + encode: the same call with Python protobuf encoding the
    request each time (what a Python caller building the message pays on
    top: the client's cost, not the server's);
  * program: the same chain registered once as a program (RegisterProgram:
    x is its input, y bound; planned once on the server) and run with one
    RunProgram, its request encoded once: execute minus this is what
    receiving, parsing and planning the ops cost per op;
  * program100 call: one RunProgram of a 100-add program, per call (not
    per op), beside the unary floor's call: issue 34 asks for <= 1.3x;
  * stream: the same adds through the Python client's pipelined command
    stream (`z = z + y`, then one sync): the client's and the server's
    per-op cost together;
  * stream unplanned: the stream row with the client's planning at the
    line switched off (Dispatcher._plan answering None, as it does for an
    op on a tensor of unknown metadata): stream minus this is what
    planning costs per op;
  * unary floor: a bare grpcio KeepAlive, one round trip, for scale;
  * torch eager: the same adds on local CPU tensors from Python, torch at
    one thread (torch.set_num_threads(1)), in the same rounds.
The issue it serves (ops declared once, planned once) asks for the execute
row at <= 1.5x torch eager per op. Prints a table, then one JSON line.
Exits 1 if a result is wrong.
"""
import argparse
import json
import os
import statistics
import sys
import time

import grpc
import numpy as np
import torch

import tensord
from tensord.v1 import tensord_pb2 as pb
from tensord.v1 import tensord_pb2_grpc as pb_grpc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from daemon import Daemon  # noqa: E402  (tests/python/daemon.py)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensord", default=os.path.join(REPO, "build/server/tensord"))
    parser.add_argument("--ops", type=int, default=10000, help="adds per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    return parser.parse_args()


def check(condition, what):
    if not condition:
        raise SystemExit(f"per_op_bench: wrong result: {what}")


def main():
    args = parse_args()
    torch.set_num_threads(1)
    with Daemon(args.tensord) as daemon:
        channel = grpc.insecure_channel(daemon.address)
        stub = pb_grpc.TensorServiceStub(channel)
        session = stub.OpenSession(pb.OpenSessionRequest(client_name="per-op")).session

        def create(values):
            data = np.asarray(values, np.float32)
            return stub.Create(pb.CreateRequest(session=session, device="cpu", dtype=pb.FLOAT32,
                                                shape=list(data.shape),
                                                data=data.tobytes())).tensor.handle

        x, y = create([0, 0, 0, 0]), create([1, 1, 1, 1])
        ops = [pb.Op(binary=pb.BinaryArgs(
            op=pb.ADD, lhs=pb.Operand(handle=x) if i == 0 else pb.Operand(result_of=i - 1),
            rhs=pb.Operand(handle=y))) for i in range(args.ops)]
        request = pb.ExecuteRequest(session=session, ops=ops, keep=[args.ops - 1])
        encoded = request.SerializeToString()
        execute_bytes = channel.unary_unary("/tensord.v1.TensorService/Execute",
                                            response_deserializer=pb.ExecuteResponse.FromString)

        def register(n):
            chain = [pb.Op(binary=pb.BinaryArgs(
                op=pb.ADD, lhs=pb.Operand(input=0) if i == 0 else pb.Operand(result_of=i - 1),
                rhs=pb.Operand(handle=y))) for i in range(n)]
            info = stub.RegisterProgram(pb.RegisterProgramRequest(
                session=session, ops=chain, keep=[n - 1],
                inputs=[pb.ProgramInput(dtype=pb.FLOAT32, shape=[4], device="cpu")])).program
            return pb.RunProgramRequest(session=session, program=info.program,
                                        inputs=[pb.ProgramArg(handle=x)])

        program_encoded = register(args.ops).SerializeToString()
        program100_request = register(100)
        run_bytes = channel.unary_unary("/tensord.v1.TensorService/RunProgram",
                                        response_deserializer=pb.RunProgramResponse.FromString)

        client = tensord.connect(daemon.address)
        check(client.pipelined, "the client did not open the command stream")
        cx, cy = client.zeros(4), client.ones(4)
        tx, ty = torch.zeros(4), torch.ones(4)

        def execute():
            kept = execute_bytes(encoded).kept[0]
            check(kept.shape == [4], "execute result")
            stub.Release(pb.ReleaseRequest(session=session, handle=kept.handle))

        def program():
            kept = run_bytes(program_encoded).kept[0]
            check(kept.shape == [4], "program result")
            stub.Release(pb.ReleaseRequest(session=session, handle=kept.handle))

        def program100():
            # Each call's result rides the next call's `release`, as a
            # client lets go of a step's loss: one RPC a call.
            previous = []
            for _ in range(args.ops // 10 or 1):
                request = program100_request
                if previous:
                    request = pb.RunProgramRequest()
                    request.CopyFrom(program100_request)
                    request.release.extend(previous)
                previous = [run_bytes(request.SerializeToString()).kept[0].handle]
            stub.Release(pb.ReleaseRequest(session=session, release=previous))

        def execute_encoded():
            kept = stub.Execute(request).kept[0]
            stub.Release(pb.ReleaseRequest(session=session, handle=kept.handle))

        def stream():
            z = cx
            for _ in range(args.ops):
                z = z + cy
            check(z.tolist() == [float(args.ops)] * 4, "stream sum")

        def stream_unplanned():
            dispatcher = client._dispatcher
            dispatcher._plan = lambda *args: None  # shadows the method
            try:
                stream()
            finally:
                del dispatcher._plan

        def torch_eager():
            z = tx
            for _ in range(args.ops):
                z = z + ty
            check(z.tolist() == [float(args.ops)] * 4, "torch sum")

        def unary():
            for _ in range(args.ops // 10 or 1):
                stub.KeepAlive(pb.KeepAliveRequest(session=session))

        bodies = {"execute": (execute, args.ops),
                  "execute + encode": (execute_encoded, args.ops),
                  "program": (program, args.ops),
                  "stream": (stream, args.ops),
                  "stream unplanned": (stream_unplanned, args.ops),
                  "torch eager": (torch_eager, args.ops),
                  "unary floor": (unary, args.ops // 10 or 1),
                  "program100 call": (program100, args.ops // 10 or 1)}
        for body, _ in bodies.values():  # warm-up
            body()
        samples = {name: [] for name in bodies}
        for _ in range(args.rounds):
            for name, (body, count) in bodies.items():
                start = time.perf_counter()
                body()
                samples[name].append((time.perf_counter() - start) * 1e6 / count)
        client.close()
        stub.CloseSession(pb.CloseSessionRequest(session=session))
        channel.close()
        code, log = daemon.stop()
        check(code == 0, f"tensord exited {code}")

    medians = {name: statistics.median(values) for name, values in samples.items()}
    torch_us = medians["torch eager"]
    print(f"per_op_bench: {args.ops} adds of float32[4], median of {args.rounds} interleaved "
          f"rounds, TCP loopback, torch {torch.__version__} at 1 thread")
    print(f"{'path':<17} {'us/op':>10} {'x torch eager':>14}")
    for name, value in medians.items():
        print(f"{name:<17} {value:10.2f} {value / torch_us:14.2f}")
    print(json.dumps({"benchmark": "per_op_bench", "ops": args.ops, "rounds": args.rounds,
                      "torch": torch.__version__, "torch_threads": 1,
                      "results": {name: {"us_per_op": round(v, 3),
                                         "x_torch_eager": round(v / torch_us, 3)}
                                  for name, v in medians.items()}}))


if __name__ == "__main__":
    main()
