"""Concurrency: several threads making, computing, fetching and dropping tensors on one client.

A Client may be shared by threads (its contract): each thread checks its own
results against numpy, while the others' calls and releases interleave with
its own, through the unary path and the Upload/Fetch streams, eager
autograd included; afterwards the session holds nothing.
"""
import gc
import threading

import numpy as np

THREADS = 6
ROUNDS = 25


def run_in_threads(work):
    errors = []

    def guarded(index):
        try:
            work(index)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if errors:
        raise errors[0]


def assert_holds_nothing(client):
    gc.collect()
    assert client.tensors() == []
    assert client.held() == []
    assert client.held_bytes() == 0


def test_threads_compute_on_one_client(client):
    def work(index):
        rng = np.random.default_rng(index)
        for round_ in range(ROUNDS):
            a = rng.standard_normal((16, 16)).astype(np.float32)
            b = rng.standard_normal((16, 16)).astype(np.float32)
            x, y = client.from_numpy(a), client.from_numpy(b)
            z = (x @ y + x * 2).relu()
            np.testing.assert_allclose(z.numpy(), np.maximum(a @ b + a * 2, 0),
                                       rtol=1e-5, atol=1e-5)
            assert np.isclose((x.sum() - y.sum()).item(), a.sum() - b.sum(), atol=1e-4)

    run_in_threads(work)
    assert_holds_nothing(client)


def test_threads_stream_large_tensors(client):
    def work(index):
        for round_ in range(3):
            a = np.full(400_000, index * 10 + round_, np.float32)  # 1.6 MB: Upload + Fetch
            x = client.from_numpy(a)
            np.testing.assert_array_equal((x + 1).numpy(), a + 1)

    run_in_threads(work)
    assert_holds_nothing(client)


def test_threads_run_backward_on_one_client(client):
    def work(index):
        rng = np.random.default_rng(100 + index)
        for round_ in range(ROUNDS // 5):
            a = rng.standard_normal(64).astype(np.float32)
            w = client.from_numpy(a).requires_grad_()
            loss = (w * w).sum()
            loss.backward()
            np.testing.assert_allclose(w.grad.numpy(), 2 * a, rtol=1e-6)

    run_in_threads(work)
    assert_holds_nothing(client)


def test_threads_drop_tensors_others_made(client):
    made = [client.full([128], i) for i in range(THREADS * 10)]
    lock = threading.Lock()

    def work(index):
        for _ in range(10):
            with lock:
                t = made.pop()
            assert t.sum().item() == 128 * t[0].item()
            del t

    run_in_threads(work)
    assert made == []
    assert_holds_nothing(client)
