#!/usr/bin/env python3
"""tools/gpu_sdpa_vs_torch.py — heed's fused attention on CUDA against PyTorch's
torch.nn.functional.scaled_dot_product_attention, for correctness and speed.

For each case it draws q, k, v and an upstream gradient with torch (float32, seeded), writes
them as raw float32 files, runs heed's side through the probe program (tools/gpu_sdpa_probe.cpp,
built by tools/gpu_check.sh), and compares heed's output and gradients with a float64 torch
reference on the GPU (max |heed - ref| / max |ref|). It then times torch's SDPA in the same
dtype (torch picks its own flash kernel for 16-bit inputs) and prints a table, last: both
sides' milliseconds, TFLOP/s (causal: only the visible pairs count; forward 2 matmuls,
forward+backward 7) and heed's speed as a fraction of torch's.

Usage: gpu_sdpa_vs_torch.py PROBE [--steps N] [--quick] [--json FILE]
Exit status: 0 when every case is within tolerance, 1 when one is not, 2 on bad setup (no
torch, no GPU, no probe).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# (B, H, T, D, causal, dtype): odd T included; dtype is what heed receives (16-bit with D 64 or
# 128 runs on heed's tensor-core kernels, float32 on its CUDA-core kernels). The last two are
# issue 18's target shape.
CASES = [
    (2, 4, 127, 64, False, "float32"),
    (2, 4, 127, 64, True, "float32"),
    (2, 4, 127, 64, True, "bfloat16"),
    (4, 8, 1024, 64, True, "float32"),
    (4, 8, 1024, 64, True, "float16"),
    (2, 8, 2048, 128, True, "bfloat16"),
    (4, 16, 4096, 128, True, "bfloat16"),
    (4, 16, 4096, 128, True, "float16"),
]
QUICK_CASES = CASES[:3]
# Relative (to max |ref|) tolerance by dtype: float32 differs by summation order only (TF32
# off); 16-bit inputs are rounded once, P once before P V (and dS before the gradient
# products), outputs and gradients once.
TOLERANCE = {"float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2}


def attention_tflop(B, H, T, D, causal, matmuls):
    """TFLOP of `matmuls` (T x T x D) products over the visible query-key pairs."""
    pairs = T * (T + 1) / 2 if causal else T * T
    return 2.0 * matmuls * B * H * pairs * D / 1e12


def fail_setup(message):
    print(f"gpu_sdpa_vs_torch: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", help="path of the built gpu-sdpa-probe program")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="only the three small cases")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
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
            fwd_tf, step_tf = attention_tflop(B, H, T, D, causal, 2), attention_tflop(B, H, T, D, causal, 7)
            hf, hs = heed_times["forward_ms"], heed_times["forward_backward_ms"]
            rows.append({"case": f"B{B} H{H} T{T} D{D}{' causal' if causal else ''} {dtype}",
                         "max_rel_err": max(errors.values()), "errors": errors, "ok": ok,
                         "heed_fwd_ms": hf, "torch_fwd_ms": torch_f, "heed_fb_ms": hs, "torch_fb_ms": torch_s,
                         "heed_fwd_tflops": fwd_tf / hf * 1e3, "torch_fwd_tflops": fwd_tf / torch_f * 1e3,
                         "heed_fb_tflops": step_tf / hs * 1e3, "torch_fb_tflops": step_tf / torch_s * 1e3,
                         "fwd_speed_vs_torch": torch_f / hf, "fb_speed_vs_torch": torch_s / hs})

    print(f"{'case':<36} {'max rel err':>11} {'':>4} {'heed fwd ms':>11} {'torch fwd':>9} {'TFLOP/s':>13} "
          f"{'heed f+b ms':>11} {'torch f+b':>9} {'TFLOP/s':>13} {'speed fwd':>9} {'f+b':>6}")
    for r in rows:
        print(f"{r['case']:<36} {r['max_rel_err']:>11.2e} {'ok' if r['ok'] else 'FAIL':>4} {r['heed_fwd_ms']:>11.3f} "
              f"{r['torch_fwd_ms']:>9.3f} {r['heed_fwd_tflops']:>6.1f}/{r['torch_fwd_tflops']:<6.1f} "
              f"{r['heed_fb_ms']:>11.3f} {r['torch_fb_ms']:>9.3f} {r['heed_fb_tflops']:>6.1f}/{r['torch_fb_tflops']:<6.1f} "
              f"{r['fwd_speed_vs_torch']:>9.3f} {r['fb_speed_vs_torch']:>6.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
