#!/usr/bin/env python3
"""tools/gpu_lm_vs_torch.py — heed's Transformer LM training step on CUDA under bf16 autocast
against the same model in PyTorch eager (torch.autocast, F.scaled_dot_product_attention), in
tokens per second, side by side in one run.

heed's side is `heed-bench lm --device cuda --amp bf16` (one JSON line); PyTorch's is the model
below: pre-LN decoder-only Transformer, token + position embeddings, fused QKV projection,
causal SDPA, GELU MLP of width 4d, final LayerNorm and an untied head, AdamW (lr 3e-4) with
global-norm clipping at 1.0, float32 master weights, as heed's TransformerLM and heed-bench.
Each side runs `--warmup` untimed and `--steps` timed steps; the median step is reported.

Usage: gpu_lm_vs_torch.py HEED_BENCH [--steps N] [--warmup N] [--quick] [--json FILE]
Exit status: 0 when both ran (the ratio is reported, not judged), 2 on bad setup.
"""
import argparse
import json
import subprocess
import sys
import time

# (vocab, d, heads, layers, seq, batch): GPT-2 small's shape, and a smaller one for --quick.
CASES = [(50257, 768, 12, 12, 1024, 8), (256, 512, 8, 4, 512, 16)]
QUICK_CASES = CASES[1:]


def fail_setup(message):
    print(f"gpu_lm_vs_torch: {message}", file=sys.stderr)
    sys.exit(2)


def torch_tokens_per_s(torch, vocab, d, heads, layers, seq, batch, steps, warmup):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.lnf, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.lnf(x))

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = LM().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x = torch.randint(0, vocab, (batch, seq), device=dev)
    y = torch.randint(0, vocab, (batch, seq), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).view(-1, vocab).float(), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()  # waits for the step, as heed-bench's loss.item()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    ms = sorted(times)[len(times) // 2] * 1e3
    return batch * seq / ms * 1e3, ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", help="path of heed-bench (a build with the CUDA backend)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="only the smaller case")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        fail_setup("PyTorch (a CUDA build) is not installed")
    if not torch.cuda.is_available():
        fail_setup("torch sees no CUDA device")
    rows = []
    for (vocab, d, heads, layers, seq, batch) in (QUICK_CASES if args.quick else CASES):
        cmd = [args.bench, "lm", "--device", "cuda", "--amp", "bf16", "--vocab", str(vocab), "--d", str(d),
               "--heads", str(heads), "--layers", str(layers), "--seq", str(seq), "--batch", str(batch),
               "--steps", str(args.steps), "--warmup", str(args.warmup)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            print(result.stderr, file=sys.stderr)
            fail_setup(f"heed-bench failed ({result.returncode}): {' '.join(cmd)}")
        heed = json.loads(result.stdout.strip().splitlines()[-1])
        torch_tps, torch_ms = torch_tokens_per_s(torch, vocab, d, heads, layers, seq, batch, args.steps, args.warmup)
        torch.cuda.empty_cache()
        rows.append({"case": f"lm V{vocab} d{d} h{heads} L{layers} T{seq} B{batch} bf16",
                     "heed_ms": heed["ms_per_step"], "torch_ms": round(torch_ms, 2),
                     "heed_tokens_per_s": heed["tokens_per_s"], "torch_tokens_per_s": round(torch_tps),
                     "heed_over_torch": round(heed["tokens_per_s"] / torch_tps, 3)})
    print(f"{'case':<44} {'heed ms':>9} {'torch ms':>9} {'heed tok/s':>11} {'torch tok/s':>11} {'heed/torch':>10}")
    for r in rows:
        print(f"{r['case']:<44} {r['heed_ms']:>9.2f} {r['torch_ms']:>9.2f} {r['heed_tokens_per_s']:>11.0f} "
              f"{r['torch_tokens_per_s']:>11.0f} {r['heed_over_torch']:>10.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
