#!/usr/bin/python3
"""tools/make_torch_ddp_golden.py — a PyTorch DistributedDataParallel golden for tests/test_dist_golden.cpp.

Run with Debian's interpreter and torch (python3-torch 1.13, which has Gloo):

    /usr/bin/python3 tools/make_torch_ddp_golden.py

It spawns 2 processes with torch.distributed (backend gloo, rendezvous through a file in a
temporary directory), trains a small float64 MLP (Linear(4, 8) -> tanh -> Linear(8, 3), MSE)
with DDP + AdamW for 5 steps, each rank on its own batch of 5 rows, and writes
tests/golden/ddp_mlp.safetensors with:
  init.<name>             the initial parameters (heed's names: fc1.weight (8, 4), ...)
  x.rank<r>, y.rank<r>    rank r's inputs (steps, 5, 4) and targets (steps, 5, 3)
  step<s>.<name>          the parameters after step s = 1..steps (identical on both ranks:
                          the script asserts it)
and the configuration (optimizer hyper-parameters, sizes) as JSON in the metadata "config".

Invariants: deterministic (fixed seed, one thread per process, float64): reruns write
byte-identical files; the file is small (< 50 KB) and in heed's safetensors layout (the writer
of tools/make_torch_golden.py); nothing of heed is reimplemented here.
"""
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_torch_golden import serialize_safetensors  # noqa: E402  (the shared writer)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "ddp_mlp.safetensors"

WORLD = 2
STEPS = 5
BATCH = 5  # rows per rank and step
CONFIG = dict(world=WORLD, steps=STEPS, batch_per_rank=BATCH, in_features=4, hidden=8, out_features=3,
              lr=0.05, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01, loss="mse_mean")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(CONFIG["in_features"], CONFIG["hidden"])
        self.fc2 = nn.Linear(CONFIG["hidden"], CONFIG["out_features"])

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def rank_main(rank, tmp):
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=WORLD)
    data = torch.load(f"{tmp}/data.pt")
    model = MLP()
    model.load_state_dict(data["init"])
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=CONFIG["lr"], betas=tuple(CONFIG["betas"]), eps=CONFIG["eps"],
                            weight_decay=CONFIG["weight_decay"], foreach=False)
    history = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(ddp(data[f"x.rank{rank}"][s]), data[f"y.rank{rank}"][s])
        loss.backward()
        opt.step()
        history.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    torch.save(history, f"{tmp}/history.rank{rank}.pt")
    dist.destroy_process_group()


def main():
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(2024)
    model = MLP()
    data = {"init": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    for r in range(WORLD):
        data[f"x.rank{r}"] = torch.randn(STEPS, BATCH, CONFIG["in_features"])
        data[f"y.rank{r}"] = torch.randn(STEPS, BATCH, CONFIG["out_features"])
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(data, f"{tmp}/data.pt")
        mp.spawn(rank_main, args=(tmp,), nprocs=WORLD, join=True)
        histories = [torch.load(f"{tmp}/history.rank{r}.pt") for r in range(WORLD)]
    for s in range(STEPS):
        for k in histories[0][s]:
            assert torch.equal(histories[0][s][k], histories[1][s][k]), f"ranks differ at step {s + 1}: {k}"
    tensors = {f"init.{k}": v for k, v in data["init"].items()}
    for r in range(WORLD):
        tensors[f"x.rank{r}"] = data[f"x.rank{r}"]
        tensors[f"y.rank{r}"] = data[f"y.rank{r}"]
    for s in range(STEPS):
        for k, v in histories[0][s].items():
            tensors[f"step{s + 1}.{k}"] = v
    meta = {"generator": "tools/make_torch_ddp_golden.py", "torch": torch.__version__, "case": "ddp_mlp",
            "config": json.dumps(CONFIG, sort_keys=True)}
    blob = serialize_safetensors(list(tensors.items()), meta)
    assert len(blob) < 50 * 1024, f"{len(blob)} bytes is too large for a golden file"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(blob)
    moved = max((histories[0][-1][k] - data["init"][k]).abs().max().item() for k in data["init"])
    print(f"  {OUT.relative_to(ROOT)}: {len(tensors)} tensors, {len(blob)} bytes; "
          f"largest parameter change over {STEPS} steps {moved:.3g}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
