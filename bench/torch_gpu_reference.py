#!/usr/bin/env python3
"""torch_gpu_reference: PyTorch's side of the GPU table in docs/gpu-validation.md.

Run on the GPU machine, in the same session as bench/gpu_bench, logging_bench
and train_bench --device cuda:0, so each tensord number has PyTorch's beside
it on the same card:

  * matmul TFLOP/s, n x n x n, float32 (exact), TF32, bfloat16, float16:
    operands made with rand on the GPU, products queued back to back, then a
    synchronize (the service's gpu_bench does the same with a fetch);
  * host->device and device->host GB/s for --transfer-mib MiB, from pinned and
    from pageable host memory;
  * the d2l logging exercise (--steps matmuls of 100x100 and the Frobenius
    norm of each): a .item() per step, and the log kept on the device with
    one synchronize at the end.

Prints a table to stderr and one JSON object to stdout.

  python3 bench/torch_gpu_reference.py [--sizes 1024,2048,4096,8192]
      [--min-seconds 0.5] [--transfer-mib 256] [--steps 1000] [--device cuda:0]
"""
import argparse
import json
import sys
import time

import torch


def matmul_tflops(n, dtype, tf32, device, min_seconds):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.rand(n, n, device=device, dtype=dtype)
    b = torch.rand(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    torch.cuda.synchronize(device)
    iterations, seconds = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(iterations):
            c = a @ b
        torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0
        if seconds >= min_seconds or iterations >= 100000:
            break
        iterations *= 2
    del c
    torch.backends.cuda.matmul.allow_tf32 = False
    return 2.0 * n ** 3 * iterations / seconds / 1e12


def copy_gbps(nbytes, device, pinned, to_device):
    host = torch.ones(nbytes // 4, dtype=torch.float32, pin_memory=pinned)
    dev = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    best = 0.0
    for _ in range(4):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        if to_device:
            dev.copy_(host, non_blocking=pinned)
        else:
            host.copy_(dev, non_blocking=pinned)
        torch.cuda.synchronize(device)
        best = max(best, nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def logging_exercise(device, steps, size):
    torch.manual_seed(0)
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    # d2l: a fetch (.item()) per step.
    best_fetch = 1e30
    best_kept = 1e30
    for _ in range(3):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        log = []
        for _ in range(steps):
            log.append(torch.linalg.norm(a @ b).item())
        best_fetch = min(best_fetch, time.perf_counter() - t0)
        # The log kept on the device, one synchronize at the end.
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        kept = torch.empty(steps, device=device)
        for i in range(steps):
            kept[i] = torch.linalg.norm(a @ b)
        kept.cpu()
        best_kept = min(best_kept, time.perf_counter() - t0)
    return best_fetch, best_kept


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1024,2048,4096,8192")
    p.add_argument("--min-seconds", type=float, default=0.5)
    p.add_argument("--transfer-mib", type=int, default=256)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--device", default="cuda:0")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "torch sees no CUDA device"}))
        return 0
    device = torch.device(args.device)
    out = {"benchmark": "torch_gpu_reference", "torch": torch.__version__,
           "device": args.device, "model": torch.cuda.get_device_name(device),
           "matmul": []}
    precisions = [("float32", torch.float32, False), ("tf32", torch.float32, True),
                  ("bfloat16", torch.bfloat16, False), ("float16", torch.float16, False)]
    print(f"{out['model']} torch {torch.__version__}", file=sys.stderr)
    for n in [int(s) for s in args.sizes.split(",")]:
        for name, dtype, tf32 in precisions:
            t = matmul_tflops(n, dtype, tf32, device, args.min_seconds)
            out["matmul"].append({"n": n, "precision": name, "tflops": round(t, 2)})
            print(f"matmul {n:6d} {name:9s} {t:9.2f} TFLOP/s", file=sys.stderr)
    nbytes = args.transfer_mib << 20
    for pinned in (True, False):
        kind = "pinned" if pinned else "pageable"
        up = copy_gbps(nbytes, device, pinned, True)
        down = copy_gbps(nbytes, device, pinned, False)
        out[f"h2d_{kind}_gbps"] = round(up, 2)
        out[f"d2h_{kind}_gbps"] = round(down, 2)
        print(f"{kind:9s} host->device {up:7.2f} GB/s  device->host {down:7.2f} GB/s",
              file=sys.stderr)
    fetch, kept = logging_exercise(device, args.steps, 100)
    out["logging_fetch_per_step_ms"] = round(fetch * 1e3, 2)
    out["logging_kept_on_device_ms"] = round(kept * 1e3, 2)
    print(f"logging exercise ({args.steps} steps): item() per step {fetch*1e3:.1f} ms,"
          f" kept on device {kept*1e3:.1f} ms", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
