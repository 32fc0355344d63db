"""python_client_bench: what the Python client (client/python) costs, beside bare grpcio and the C++ client.

    python3 bench/python_client_bench.py [--tensord build/server/tensord]
        [--cpp-bench build/bench/tensord-bench] [--iterations 2000]
        [--rounds 3] [--mib 256] [--train-bench build/bench/train_bench]
        [--step-batch 8] [--step-steps 50]

Run it with a Python where `tensord` is importable (pip install
./client/python, or the CTest venv: build/tests/python/python-client-venv).

Measured, over TCP loopback against one tensord daemon (--tensord, started
here with its defaults), each as p50 (and p99) latency in microseconds or
as GB/s:
  * small ops: create_3 (an int64 tensor of 3 elements), mul, fetch_3 (the
    unary Read), each through the client with pipelining off
    (connect(pipeline=False): one unary call each; client.tensor, x * y,
    x.numpy()) and through bare grpcio stubs of the same RPCs;
  * the eager 4-call loop: two creates, a mul, a fetch (and the releases of
    the three dropped tensors, riding the next call's request as the
    client sends them), through bare grpcio, the client unary
    (pipeline=False) and the client pipelined (the default: the four go on
    the session's command stream without waiting, the fetch's reply ends
    the iteration), and the same four commands in one message on a bare
    grpcio Stream whose replies the calling thread reads itself (grpcio's
    floor under the pipelined loop: no thread of the client's in the way);
  * bulk: a --mib MiB float32 upload (client.from_numpy: the Upload stream
    in 1 MiB chunks) and fetch (x.numpy(): the Fetch stream), beside bare
    grpcio streams of the same bytes in the same chunks (the request
    messages built before the clock starts: grpcio's floor);
  * seed 001's training step at --step-batch (zero_grad, forward,
    cross_entropy, backward, SGD step, loss.item(); the example's Net,
    train_bench's inputs and optimizer: resident inputs, lr 0.001, momentum
    0.9), milliseconds per step from Python (pipelined) and from C++
    (train_bench --address: the C++ client on the same daemon), one of each
    per round; the medians over --rounds count.
The Python measurements are interleaved in rounds (every body a slice of
each round), so drift on a shared machine lands on all alike; a bulk row
is the best of --rounds. The C++ rows come from tensord-bench (--only
small,bulk, its TCP rows, run between the Python rounds; the best of its
runs): its create_3/mul/fetch_3 are raw C++ stubs, its loop is
client_create_mul_fetch_unary (the C++ client on the same path as Python's
unary loop, one unary call per op) and client_create_mul_fetch (the C++
client pipelined, beside Python's pipelined loop), its bulk the C++
client's upload/fetch. tensord-bench serves from its own process (an
in-process server), so a C++ ratio compares clients on different server
processes of the same build. Ratios are what matter on a shared machine.
Prints a table, then one JSON line. Exits 1 if a result is wrong.
"""
import argparse
import json
import os
import queue
import secrets
import subprocess
import sys
import time

import grpc
import numpy as np

import tensord
from tensord import _wire
from tensord.v1 import tensord_pb2 as pb
from tensord.v1 import tensord_pb2_grpc as pb_grpc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
sys.path.insert(0, os.path.join(REPO, "client", "python", "examples"))
from daemon import Daemon  # noqa: E402  (tests/python/daemon.py: the one daemon helper)
from train_cifar_net import Net  # noqa: E402  (seed 001's network)

CHUNK_BYTES = 1 << 20
MAX_MESSAGE_BYTES = 64 << 20
SLICES_PER_ROUND = 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensord", default=os.path.join(REPO, "build/server/tensord"))
    parser.add_argument("--cpp-bench", default=os.path.join(REPO, "build/bench/tensord-bench"),
                        help="tensord-bench for the C++ rows ('' to skip them)")
    parser.add_argument("--iterations", type=int, default=2000,
                        help="timed calls per small-op measurement")
    parser.add_argument("--rounds", type=int, default=3, help="bulk and C++ runs (best counts)")
    parser.add_argument("--mib", type=int, default=256, help="bulk transfer size")
    parser.add_argument("--train-bench", default=os.path.join(REPO, "build/bench/train_bench"),
                        help="train_bench for the C++ step ('' to skip the step rows)")
    parser.add_argument("--step-batch", type=int, default=8)
    parser.add_argument("--step-steps", type=int, default=50, help="timed steps per run")
    return parser.parse_args()


def check(condition, what):
    if not condition:
        raise SystemExit(f"python_client_bench: wrong result: {what}")


def measure_interleaved(iterations, bodies):
    """{name: sorted latencies in us} of each body, run in interleaved slices."""
    for body in bodies.values():  # warm-up
        for _ in range(max(20, iterations // 20)):
            body()
    samples = {name: [] for name in bodies}
    per_slice = max(1, iterations // SLICES_PER_ROUND)
    clock = time.perf_counter_ns
    for _ in range(SLICES_PER_ROUND):
        for name, body in bodies.items():
            record = samples[name].append
            for _ in range(per_slice):
                start = clock()
                body()
                record((clock() - start) / 1e3)
    return {name: sorted(values) for name, values in samples.items()}


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class BareGrpc:
    """tensord's RPCs through grpcio stubs alone: the floor under the client."""

    def __init__(self, address):
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)])
        self.stub = pb_grpc.TensorServiceStub(self.channel)
        self.session = self.stub.OpenSession(pb.OpenSessionRequest(client_name="bare")).session
        self.made = []
        self.values_x = np.array([1, 2, 3], np.int64).tobytes()
        self.values_y = np.array([5, 8, 1], np.int64).tobytes()
        self.x = self.create(self.values_x)
        self.y = self.create(self.values_y)

    def create(self, data, release=()):
        return self.stub.Create(pb.CreateRequest(
            session=self.session, dtype=pb.INT64, shape=[3], data=data,
            release=release)).tensor.handle

    def mul(self, lhs, rhs, release=()):
        op = pb.Op(binary=pb.BinaryArgs(op=pb.MUL, lhs=pb.Operand(handle=lhs),
                                        rhs=pb.Operand(handle=rhs)))
        return self.stub.Run(pb.RunRequest(session=self.session, op=op,
                                           release=release)).tensor.handle

    def read(self, handle):
        return self.stub.Read(pb.ReadRequest(session=self.session, handle=handle)).data

    def release_made(self):
        while self.made:
            batch, self.made = self.made[:1000], self.made[1000:]
            self.stub.Release(pb.ReleaseRequest(session=self.session, release=batch))

    def upload(self, messages):
        return self.stub.Upload(iter(messages)).tensor

    def fetch(self, handle):
        return [chunk.data for chunk in self.stub.Fetch(
            pb.FetchRequest(session=self.session, handle=handle))]

    def close(self):
        self.stub.CloseSession(pb.CloseSessionRequest(session=self.session))
        self.channel.close()


class BareStream:
    """The pipelined loop's four commands through a bare grpcio Stream: one
    message out, its replies read on the calling thread (no client library,
    no reader or writer thread of ours): grpcio's floor under the pipelined
    loop."""

    def __init__(self, bare):
        self.bare = bare
        self.queue = queue.Queue()
        self.seq = 0
        self.handle = (1 << 63) | (secrets.randbits(62) >> 1)
        self.received = 0
        self.dropped = []
        self.call = bare.stub.Stream(iter(self.queue.get, None))
        self.first = True

    def loop(self):
        a, b, product = self.handle, self.handle + 1, self.handle + 2
        self.handle += 3
        request = pb.StreamRequest(received_through=self.received)
        if self.first:
            request.open.session = self.bare.session
            request.open.stream = secrets.randbits(62) + 1
            self.first = False
        mul = pb.Op(binary=pb.BinaryArgs(op=pb.MUL, lhs=pb.Operand(handle=a),
                                         rhs=pb.Operand(handle=b)))
        for result, kind, body in (
                (a, "create", pb.CreateRequest(dtype=pb.INT64, shape=[3],
                                               data=self.bare.values_x, release=self.dropped)),
                (b, "create", pb.CreateRequest(dtype=pb.INT64, shape=[3],
                                               data=self.bare.values_y)),
                (product, "run", pb.RunRequest(op=mul)),
                (0, "read", pb.ReadRequest(handle=product))):
            self.seq += 1
            request.commands.add(seq=self.seq, result=result, **{kind: body})
        self.queue.put(request)
        data = None
        while self.received < self.seq:
            for reply in next(self.call).replies:
                check(reply.code == 0, f"bare stream: {reply.message}")
                self.received = reply.seq
                if reply.HasField("chunk"):
                    data = reply.chunk.data
        check(np.frombuffer(data, np.int64)[1] == 16, "bare stream loop")
        self.dropped = [a, b, product]

    def close(self):
        self.queue.put(None)
        self.call.cancel()


def small_ops(address, iterations):
    client = tensord.connect(address, client_name="python-client-bench", pipeline=False)
    piped = tensord.connect(address, client_name="python-client-bench-pipelined")
    check(piped.pipelined and not client.pipelined, "the server has no command stream")
    bare = BareGrpc(address)
    bare_stream = BareStream(bare)
    x, y = client.tensor([1, 2, 3]), client.tensor([5, 8, 1])
    pending = []  # the bare loop's dropped handles, riding its next Create

    def bare_loop():
        a = bare.create(bare.values_x, release=pending)
        b = bare.create(bare.values_y)
        product = bare.mul(a, b)
        check(np.frombuffer(bare.read(product), np.int64)[1] == 16, "bare loop")
        pending[:] = [a, b, product]

    def client_loop():
        a = client.tensor([1, 2, 3])
        b = client.tensor([5, 8, 1])
        check((a * b).numpy()[1] == 16, "client loop")

    def pipelined_loop():
        a = piped.tensor([1, 2, 3])
        b = piped.tensor([5, 8, 1])
        check((a * b).numpy()[1] == 16, "pipelined loop")

    bodies = {
        "bare_unary": lambda: bare.stub.KeepAlive(pb.KeepAliveRequest(session=bare.session)),
        "create_3/bare": lambda: bare.made.append(bare.create(bare.values_x)),
        "create_3/python": lambda: client.tensor([1, 2, 3]),
        "mul/bare": lambda: bare.made.append(bare.mul(bare.x, bare.y)),
        "mul/python": lambda: x * y,
        "fetch_3/bare": lambda: bare.read(bare.x),
        "fetch_3/python": x.numpy,
        "loop/bare": bare_loop,
        "loop/python": client_loop,
        "loop/pipelined": pipelined_loop,
        "loop/bare_stream": bare_stream.loop,
    }
    latencies = measure_interleaved(iterations, bodies)
    bare_stream.close()
    bare.release_made()
    bare.close()
    client.close()
    piped.close()
    return {name: (percentile(v, 0.5), percentile(v, 0.99)) for name, v in latencies.items()}


def bulk_round(address, mib):
    """GB/s of one upload and one fetch of `mib` MiB, client and bare."""
    client = tensord.connect(address, client_name="python-client-bench")
    bare = BareGrpc(address)
    array = np.arange(mib << 18, dtype=np.float32)
    nbytes = array.nbytes
    view = memoryview(array).cast("B")
    header = pb.UploadRequest.Header(session=bare.session, dtype=pb.FLOAT32,
                                     shape=[array.size])
    messages = [pb.UploadRequest(header=header, data=bytes(view[:CHUNK_BYTES]))]
    messages += [pb.UploadRequest(data=bytes(view[at:at + CHUNK_BYTES]))
                 for at in range(CHUNK_BYTES, nbytes, CHUNK_BYTES)]
    rates = {}

    def timed(name, body, *args):
        start = time.perf_counter()
        result = body(*args)
        rates[name] = nbytes / (time.perf_counter() - start) / 1e9
        return result

    uploaded = timed("upload/bare", bare.upload, messages)
    del messages
    tensor = timed("upload/python", client.from_numpy, array)
    chunks = timed("fetch/bare", bare.fetch, uploaded.handle)
    check(sum(len(c) for c in chunks) == nbytes, "bare fetch size")
    del chunks
    fetched = timed("fetch/python", tensor.numpy)
    check(np.array_equal(fetched, array), "fetched values")
    del fetched, tensor
    bare.close()
    client.close()
    return rates


def python_step(address, batch, steps):
    """Milliseconds per seed-001 training step from Python, as train_bench's."""
    import tensord.nn.functional as F
    import tensord.optim as optim
    client = tensord.connect(address, client_name="python-client-bench-step")
    try:
        client.manual_seed(1)
        net = Net()
        optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
        inputs = client.randn(batch, 3, 32, 32, seed=2)
        target = client.tensor([i % 10 for i in range(batch)])

        def step():
            optimizer.zero_grad()
            loss = F.cross_entropy(net(inputs), target)
            loss.backward()
            optimizer.step()
            return loss.item()

        for _ in range(3):
            step()
        start = time.perf_counter()
        for _ in range(steps):
            check(step() > 0, "a positive loss")
        return (time.perf_counter() - start) * 1e3 / steps
    finally:
        client.close()


def cpp_step(binary, address, batch, steps):
    """train_bench's milliseconds per step (the C++ client) against `address`."""
    out = subprocess.run([binary, "--address", address, "--batches", str(batch),
                          "--steps", str(steps), "--repeats", "1", "--convs", "",
                          "--block=false", "--sessions", "0"],
                         capture_output=True, text=True, check=True).stdout
    rows = json.loads(out.strip().splitlines()[-1])["rows"]
    return next(r["tensord_ms"] for r in rows if r["row"] == "train_step")


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def cpp_round(binary, iterations, mib):
    """{row name: (value, p99)} of tensord-bench's TCP rows."""
    out = subprocess.run([binary, "--only", "small,bulk", "--sizes", f"{mib}MiB",
                          "--iterations", str(iterations), "--seconds", "0.5",
                          "--threads", "1"], capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return {r["name"]: (r["value"], r["p99"]) for r in result["results"]
            if r["transport"] == "tcp"}


def best(runs, name, key):
    values = [run[name] for run in runs if name in run]
    return key(values) if values else None


def main():
    args = parse_args()
    with Daemon(args.tensord) as daemon:
        small = small_ops(daemon.address, args.iterations)
        bulk_runs, cpp_runs, steps = [], [], {"python": [], "c++": []}
        for _ in range(args.rounds):
            bulk_runs.append(bulk_round(daemon.address, args.mib))
            if args.cpp_bench:
                cpp_runs.append(cpp_round(args.cpp_bench, args.iterations, args.mib))
            if args.train_bench:
                steps["python"].append(python_step(daemon.address, args.step_batch,
                                                   args.step_steps))
                steps["c++"].append(cpp_step(args.train_bench, daemon.address,
                                             args.step_batch, args.step_steps))
        daemon.stop()

    def cpp_latency(name):
        return best(cpp_runs, name, lambda v: min(v, key=lambda x: x[0]))

    def cpp_rate(name):
        return best(cpp_runs, name, lambda v: max(v, key=lambda x: x[0]))

    rows = []  # (group, measurement, side, value, p99, unit, ratios)
    bare_p50 = small["bare_unary"][0]
    rows.append(("latency", "bare_unary (KeepAlive)", "grpcio", *small["bare_unary"], "us",
                 {}))
    cpp_of = {"create_3": "create_3", "mul": "mul", "fetch_3": "fetch_3",
              "loop": "client_create_mul_fetch_unary"}
    for op in ("create_3", "mul", "fetch_3", "loop"):
        bare_value = small[f"{op}/bare"][0]
        rows.append(("latency", op, "grpcio", *small[f"{op}/bare"], "us",
                     {"bare_unary": small[f"{op}/bare"][0] / bare_p50}))
        cpp = cpp_latency(cpp_of[op])
        python = small[f"{op}/python"]
        ratios = {"grpcio": python[0] / bare_value}
        if cpp:
            ratios["c++"] = python[0] / cpp[0]
        rows.append(("latency", op, "python", *python, "us", ratios))
        if cpp:
            rows.append(("latency", op, "c++" + ("" if op == "loop" else " stub"), *cpp, "us",
                         {}))
    pipelined = cpp_latency("client_create_mul_fetch")
    python_piped = small["loop/pipelined"]
    bare_stream = small["loop/bare_stream"]
    ratios = {"python unary": python_piped[0] / small["loop/python"][0],
              "grpcio": python_piped[0] / small["loop/bare"][0],
              "grpcio stream": python_piped[0] / bare_stream[0]}
    if pipelined:
        ratios["c++ pipelined"] = python_piped[0] / pipelined[0]
    rows.append(("latency", "loop", "python pipelined", *python_piped, "us", ratios))
    bare_ratios = {"c++ pipelined": bare_stream[0] / pipelined[0]} if pipelined else {}
    rows.append(("latency", "loop", "grpcio stream", *bare_stream, "us", bare_ratios))
    if pipelined:
        rows.append(("latency", "loop", "c++ pipelined", *pipelined, "us", {}))
    for way, cpp_name, cpp_bare in (("upload", "upload", "bare_stream_up"),
                                    ("fetch", "fetch", "bare_stream_down")):
        name = f"{way}_{args.mib}MiB"
        bare_rate = best(bulk_runs, f"{way}/bare", max)
        python_rate = best(bulk_runs, f"{way}/python", max)
        rows.append(("bulk", name, "grpcio", bare_rate, None, "GB/s", {}))
        cpp = cpp_rate(f"{cpp_name}_{args.mib}MiB")
        ratios = {"grpcio": python_rate / bare_rate}
        if cpp:
            ratios["c++"] = python_rate / cpp[0]
        rows.append(("bulk", name, "python", python_rate, None, "GB/s", ratios))
        if cpp:
            rows.append(("bulk", name, "c++", cpp[0], None, "GB/s", {}))
            rows.append(("bulk", name, "c++ bare", cpp_rate(f"{cpp_bare}_{args.mib}MiB")[0],
                         None, "GB/s", {}))

    if steps["python"]:
        name = f"seed001_step_batch{args.step_batch}"
        python_ms, cpp_ms = median(steps["python"]), median(steps["c++"])
        rows.append(("step", name, "python", python_ms, None, "ms",
                     {"c++": python_ms / cpp_ms}))
        rows.append(("step", name, "c++", cpp_ms, None, "ms", {}))

    print(f"python_client_bench: {args.iterations} calls per latency, best of "
          f"{args.rounds} bulk/C++ runs (steps: their medians), TCP loopback; the client checks fetched "
          f"chunks with {_wire.CRC32_IMPLEMENTATION}'s CRC-32")
    print(f"{'group':<8} {'measurement':<24} {'side':<16} {'value':>10} {'p99':>10} "
          f"{'unit':<5} ratios (value over)")
    for group, name, side, value, p99, unit, ratios in rows:
        shown = "  ".join(f"{r:.3f} x {of}" for of, r in ratios.items())
        p99_text = f"{p99:10.1f}" if p99 is not None and p99 >= 0 else f"{'-':>10}"
        print(f"{group:<8} {name:<24} {side:<16} {value:10.2f} {p99_text} {unit:<5} {shown}")
    print(json.dumps({"benchmark": "python_client_bench", "iterations": args.iterations,
                      "crc32": _wire.CRC32_IMPLEMENTATION,
                      "rounds": args.rounds, "results": [
                          {"group": g, "name": n, "side": s, "value": round(v, 3),
                           "p99": None if p is None else round(p, 3), "unit": u,
                           "ratios": {k: round(r, 4) for k, r in ratios.items()}}
                          for g, n, s, v, p, u, ratios in rows]}))


if __name__ == "__main__":
    main()
