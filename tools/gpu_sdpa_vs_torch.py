#!/usr/bin/env python3
"""tools/gpu_sdpa_vs_torch.py — heed's fused attention on CUDA against PyTorch's
torch.nn.functional.scaled_dot_product_attention, for correctness and speed.

For each case it draws q, k, v and an upstream gradient with torch (float32, seeded), writes
them as raw float32 files, runs heed's side through the probe program (tools/gpu_sdpa_probe.cpp,
built by tools/gpu_check.sh), and compares heed's output and gradients with a float64 torch
reference on the GPU (max |heed - ref| / max |ref|). It then times torch's SDPA in the same
dtype (and, for information, torch in float16, which may pick its own flash kernel) and prints
a table, last.

Usage: gpu_sdpa_vs_torch.py PROBE [--steps N] [--quick]
Exit status: 0 when every case is within tolerance, 1 when one is not, 2 on bad setup (no
torch, no GPU, no probe).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# (B, H, T, D, causal, dtype): odd T included; dtype is what heed receives (its flash kernel
# computes in float32 for 16-bit inputs).
CASES = [
    (2, 4, 127, 64, False, "float32"),
    (2, 4, 127, 64, True, "float32"),
    (4, 8, 1024, 64, True, "float32"),
    (4, 8, 1024, 64, True, "float16"),
    (2, 8, 2048, 128, True, "bfloat16"),
]
QUICK_CASES = CASES[:2]
# Relative (to max |ref|) tolerance by dtype: float32 differs by summation order only (TF32
# off); 16-bit inputs are rounded once, outputs once.
TOLERANCE = {"float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2}


def fail_setup(message):
    print(f"gpu_sdpa_vs_torch: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", help="path of the built gpu-sdpa-probe program")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="only the two small cases")
    args = parser.parse_args()
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except ImportError:
        fail_setup("PyTorch (a CUDA build) or NumPy is not installed")
    if not torch.cuda.is_available():
        fail_setup("torch sees no CUDA device (torch.cuda.is_available() is False)")
    if not os.access(args.probe, os.X_OK):
        fail_setup(f"probe program not found or not executable: {args.probe}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    to_torch_dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

    def time_torch(q, k, v, dout, causal, steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fwd, step = [], []
        for i in range(steps + 2):
            with torch.no_grad():
                start.record()
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                end.record()
                torch.cuda.synchronize()
                f_ms = start.elapsed_time(end)
            for t in (q, k, v):
                t.grad = None
            start.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(dout)
            end.record()
            torch.cuda.synchronize()
            if i >= 2:
                fwd.append(f_ms)
                step.append(start.elapsed_time(end))
        return sorted(fwd)[len(fwd) // 2], sorted(step)[len(step) // 2]

    rows, all_ok = [], True
    with tempfile.TemporaryDirectory(prefix="heed_sdpa_") as work:
        for (B, H, T, D, causal, dtype) in (QUICK_CASES if args.quick else CASES):
            gen = torch.Generator(device="cpu").manual_seed(1000 + T + D)
            tensors = {name: torch.randn(B, H, T, D, generator=gen) for name in ("q", "k", "v", "dout")}
            # What heed sees after its own rounding of the float32 files to `dtype`.
            rounded = {n: t.to(to_torch_dtype[dtype]).to(torch.float32) for n, t in tensors.items()}
            for name, t in tensors.items():
                t.contiguous().numpy().astype("<f4").tofile(os.path.join(work, name + ".bin"))
            cmd = [args.probe, work, str(B), str(H), str(T), str(D), "1" if causal else "0", dtype,
                   str(args.steps), "cuda"]
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                print(result.stderr, file=sys.stderr)
                fail_setup(f"probe failed ({result.returncode}): {' '.join(cmd)}")
            heed_times = json.loads(result.stdout.strip().splitlines()[-1])

            # float64 reference on the GPU from the same (rounded) inputs.
            q, k, v = (rounded[n].to(dev, torch.float64).requires_grad_() for n in ("q", "k", "v"))
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            ref.backward(rounded["dout"].to(dev, torch.float64))
            errors = {}
            for name, want in (("out", ref), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
                got = torch.from_numpy(np.fromfile(os.path.join(work, name + ".bin"), dtype="<f4"))
                got = got.reshape(B, H, T, D).to(dev, torch.float64)
                errors[name] = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
            ok = max(errors.values()) <= TOLERANCE[dtype]
            all_ok &= ok

            tdt = to_torch_dtype[dtype]
            qt, kt, vt = (rounded[n].to(dev, tdt).requires_grad_() for n in ("q", "k", "v"))
            torch_f, torch_s = time_torch(qt, kt, vt, rounded["dout"].to(dev, tdt), causal, args.steps)
            rows.append((f"B{B} H{H} T{T} D{D}{' causal' if causal else ''} {dtype}", max(errors.values()),
                         "ok" if ok else "FAIL", heed_times["forward_ms"], torch_f,
                         heed_times["forward_backward_ms"], torch_s))

    header = ("case", "max rel err", "", "heed fwd ms", "torch fwd ms", "heed f+b ms", "torch f+b ms")
    print(f"{header[0]:<36} {header[1]:>11} {header[2]:>4} {header[3]:>12} {header[4]:>12} {header[5]:>12} "
          f"{header[6]:>12}")
    for name, err, status, hf, tf, hs, ts in rows:
        print(f"{name:<36} {err:>11.2e} {status:>4} {hf:>12.3f} {tf:>12.3f} {hs:>12.3f} {ts:>12.3f}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
