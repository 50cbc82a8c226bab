#!/usr/bin/python3
"""tools/make_torch_golden.py — golden reference files written by PyTorch for tests/test_golden.cpp.

Run with Debian's interpreter and torch (apt-get install python3-torch python3-numpy):

    /usr/bin/python3 tools/make_torch_golden.py

Invariants:
  * Deterministic: fixed seeds, one CPU thread, float64 everywhere except the dtype interop
    file; rerunning rewrites byte-identical files (the script checks nothing else on disk).
  * Every file is a plain safetensors file (written by hand below; Debian's torch has no
    `safetensors` package) in exactly the layout heed's io::serialize_safetensors writes:
    u64 little-endian header length, compact JSON header (sorted "__metadata__" first, tensors
    in data order), padded with spaces to a multiple of 8, then the raw little-endian bytes.
  * Tensor names: parameters under heed's dotted names ("param.<name>"), their gradients
    ("grad.<name>"), inputs ("in.*"), outputs ("out.*"); masks are BOOL, token ids I64.
  * Models are built from torch's own layers (nn.TransformerEncoderLayer, nn.MultiheadAttention,
    ...) and mapped onto heed's parameter names; nothing of heed is reimplemented here except
    the two formulas heed documents and torch lacks (WarmupCosineLR, the float32 sinusoidal table).
  * The script also reads tests/golden/heed_written.safetensors (written by heed's test suite,
    see tests/test_golden.cpp) and checks heed's float16/bfloat16 rounding against torch's.
"""
import json
import math
import struct
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden"

torch.set_num_threads(1)  # one reduction order: byte-identical reruns
torch.set_default_dtype(torch.float64)

# ---- safetensors, by hand ---------------------------------------------------------------------

DTYPE_NAMES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
               torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}
NAME_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)  # numpy has no bfloat16; the bits are what is written
    assert sys.byteorder == "little"
    return t.numpy().tobytes()


def json_string(text):
    return json.dumps(text, ensure_ascii=False)


def serialize_safetensors(tensors, metadata):
    """tensors: list of (name, tensor) in data order; metadata: dict of str -> str."""
    parts = []
    if metadata:
        items = ",".join(f"{json_string(k)}:{json_string(v)}" for k, v in sorted(metadata.items()))
        parts.append(f'"__metadata__":{{{items}}}')
    offset, blobs, seen = 0, [], set()
    for name, t in tensors:
        assert name not in seen and name != "__metadata__", name
        seen.add(name)
        blob = tensor_bytes(t)
        shape = ",".join(str(s) for s in t.shape)
        parts.append(f'{json_string(name)}:{{"dtype":"{DTYPE_NAMES[t.dtype]}","shape":[{shape}],'
                     f'"data_offsets":[{offset},{offset + len(blob)}]}}')
        offset += len(blob)
        blobs.append(blob)
    header = ("{" + ",".join(parts) + "}").encode("utf-8")
    header += b" " * ((8 - len(header) % 8) % 8)
    return struct.pack("<Q", len(header)) + header + b"".join(blobs)


def read_safetensors(path):
    """Returns ({name: tensor}, metadata); checks that the tensors tile the data section."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors, end = {}, 0
    for name, entry in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, stop = entry["data_offsets"]
        assert begin == end, f"{path}: tensor {name} does not start where the previous one ends"
        end = stop
        dtype = NAME_DTYPES[entry["dtype"]]
        raw = bytearray(body[begin:stop])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"]).clone()
    assert end == len(body), f"{path}: {len(body) - end} trailing bytes"
    return tensors, metadata


def write(name, tensors, metadata):
    meta = {"generator": "tools/make_torch_golden.py", "torch": torch.__version__, "case": name}
    meta.update({k: str(v) for k, v in metadata.items()})
    blob = serialize_safetensors(list(tensors.items()), meta)
    assert len(blob) < 256 * 1024, f"{name}: {len(blob)} bytes is too large for a golden file"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.safetensors").write_bytes(blob)
    print(f"  {name}.safetensors: {len(tensors)} tensors, {len(blob)} bytes")


# ---- helpers ----------------------------------------------------------------------------------


def randn(*shape, scale=1.0):
    return torch.randn(*shape) * scale


def perturb_(module, scale=0.3):
    """Non-trivial values everywhere: norms near (1, 0), everything else N(0, scale^2)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "norm" in name and name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "embed" in name or "tok" in name or "pos" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(scale * torch.randn_like(p))


def activation_fn(kind):
    return {"gelu": "gelu", "relu": "relu", "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[kind]


def mha_names(prefix, mha, fused):
    """heed names of a torch nn.MultiheadAttention: (name, parameter, row slice or None)."""
    C = mha.embed_dim
    if fused:
        rows = [("qkv_proj", slice(0, 3 * C))]
    else:
        rows = [("q_proj", slice(0, C)), ("k_proj", slice(C, 2 * C)), ("v_proj", slice(2 * C, 3 * C))]
    out = []
    for proj, rs in rows:
        out.append((f"{prefix}{proj}.weight", mha.in_proj_weight, rs))
        out.append((f"{prefix}{proj}.bias", mha.in_proj_bias, rs))
    out.append((f"{prefix}out_proj.weight", mha.out_proj.weight, None))
    out.append((f"{prefix}out_proj.bias", mha.out_proj.bias, None))
    return out


def plain(prefix, module, names):
    return [(f"{prefix}{n}.{k}", getattr(getattr(module, src), k), None) for n, src in names for k in ("weight", "bias")
            if getattr(getattr(module, src), k, None) is not None]


def pick(t, rows):
    return t if rows is None else t[rows]


def params_and_grads(mapping, with_grads=True):
    out = {}
    for name, p, rows in mapping:
        out[f"param.{name}"] = pick(p.detach(), rows).clone()
    if with_grads:
        for name, p, rows in mapping:
            out[f"grad.{name}"] = pick(p.grad, rows).clone()
    return out


def causal_disallowed(T, S):
    """PyTorch's bool attn_mask convention (True = may NOT attend), bottom-right aligned like heed."""
    return ~torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)


# ---- decoder-only LM (heed nn::TransformerLM) --------------------------------------------------


class TorchLM(nn.Module):
    """heed's TransformerLM: tok + learned pos embeddings, pre-LN causal blocks (torch's own
    TransformerEncoderLayer, fused in_proj = heed's qkv_proj), final LayerNorm(eps 1e-5), tied
    or untied head with bias."""

    def __init__(self, cfg):
        super().__init__()
        V, C, H, L, ctx = cfg["vocab"], cfg["d_model"], cfg["heads"], cfg["layers"], cfg["context"]
        d_ff = cfg["d_ff"] or 4 * C
        self.tied = cfg["tie_embeddings"]
        self.tok_embed = nn.Embedding(V, C)
        self.pos_embed = nn.Embedding(ctx, C)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(C, H, d_ff, dropout=0.0, activation=activation_fn(cfg["activation"]),
                                       layer_norm_eps=1e-5, batch_first=True, norm_first=True) for _ in range(L)])
        self.norm = nn.LayerNorm(C, eps=1e-5)
        self.head = None if self.tied else nn.Linear(C, V, bias=True)

    def forward(self, idx):  # (B,T) -> (B,T,V)
        T = idx.shape[1]
        x = self.tok_embed(idx) + self.pos_embed.weight[:T]  # (B,T,C)
        mask = causal_disallowed(T, T)
        for block in self.blocks:
            x = block(x, src_mask=mask)
        x = self.norm(x)
        return x @ self.tok_embed.weight.t() if self.tied else self.head(x)

    def heed_names(self):
        m = [("tok_embed.weight", self.tok_embed.weight, None), ("pos_embed.weight", self.pos_embed.weight, None)]
        for i, b in enumerate(self.blocks):
            m += mha_names(f"blocks.{i}.self_attn.", b.self_attn, fused=True)
            m += plain(f"blocks.{i}.", b, [("ff.fc1", "linear1"), ("ff.fc2", "linear2"), ("norm1", "norm1"),
                                           ("norm2", "norm2")])
        m += plain("", self, [("norm", "norm")])
        if not self.tied:
            m += plain("", self, [("head", "head")])
        return m


def warmup_cosine_lr(step, base, warmup, total, min_lr):
    """heed's optim::WarmupCosineLR::get_lr (framework/src/train/lr_scheduler.cpp), one group."""
    if step < warmup:
        return base * step / warmup
    if step > total or total == warmup:
        return min_lr
    decay_ratio = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) * (base - min_lr)


def make_lm(name, cfg, seed):
    torch.manual_seed(seed)
    model = TorchLM(cfg)
    perturb_(model)
    model.eval()  # dropout is 0 anyway; eval keeps torch off any training-only path
    mapping = model.heed_names()
    B, T, V = 2, cfg["context"] - 1, cfg["vocab"]
    idx = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    tensors = {"in.idx": idx, "in.targets": targets}

    logits = model(idx)
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    tensors["out.logits"] = logits.detach()
    tensors["out.loss"] = loss.detach()
    tensors.update(params_and_grads(mapping))

    # 5 AdamW steps: zero_grad, forward, backward, clip_grad_norm_(1.0), lr from heed's
    # WarmupCosineLR (the lr of step s is get_lr(s); the scheduler steps after the optimizer).
    # eps 1e-6, not 1e-8: the key bias gets an exactly-zero gradient (softmax ignores a shift of
    # all scores of a query), so both frameworks hold roundoff there (~1e-17), and AdamW turns it
    # into an update of about lr * noise / eps; at 1e-8 that noise reaches 5e-11 of the 1e-10 budget.
    opt_cfg = dict(lr=0.05, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.1)
    sched = dict(warmup=2, total=5, min_lr=0.005)
    opt = torch.optim.AdamW(model.parameters(), foreach=False, **opt_cfg)
    losses, norms, lrs = [], [], []
    for step in range(5):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(idx).reshape(-1, V), targets.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        # torch scales by min(1, max_norm / (norm + 1e-6)), heed only when norm > max_norm: they
        # differ only for norms within 1e-6 below max_norm, kept out of the golden run.
        assert abs(norm.item() - 1.0) > 1e-3, norm
        lr = warmup_cosine_lr(step, opt_cfg["lr"], sched["warmup"], sched["total"], sched["min_lr"])
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        lrs.append(lr)
    assert max(norms) > 1.0, f"the golden run should exercise clipping: {norms}"
    print(f"    grad norms {[round(n, 3) for n in norms]}, losses {[round(l, 4) for l in losses]}")
    tensors["train.loss"] = torch.tensor(losses)
    tensors["train.grad_norm"] = torch.tensor(norms)
    tensors["train.lr"] = torch.tensor(lrs)
    for hname, p, rows in mapping:
        tensors[f"after.{hname}"] = pick(p.detach(), rows).clone()
    meta = {"config": json.dumps(cfg, sort_keys=True), "adamw": json.dumps(opt_cfg), "schedule": json.dumps(sched),
            "max_norm": "1.0"}
    write(name, tensors, meta)


# ---- seq2seq Transformer (heed nn::Transformer) ------------------------------------------------


def sinusoidal_table(max_len, C):
    """heed's SinusoidalPositionalEncoding table: computed in double, stored as float32."""
    pe = torch.zeros(max_len, C)
    for pos in range(max_len):
        for i in range(C):
            angle = pos * math.pow(10000.0, -(2 * (i // 2)) / C)
            pe[pos, i] = math.sin(angle) if i % 2 == 0 else math.cos(angle)
    return pe.float().double()


class TorchSeq2Seq(nn.Module):
    """heed's Transformer: embeddings * sqrt(C) + positions, torch's TransformerEncoder/Decoder
    layers (final LayerNorm on each stack only when pre-LN), source key padding in the encoder
    and in cross-attention, causal decoder self-attention, tied or untied (bias-free) output."""

    def __init__(self, cfg):
        super().__init__()
        C, H, d_ff = cfg["d_model"], cfg["heads"], cfg["d_ff"]
        self.cfg = cfg
        pad = cfg["pad_id"]
        self.tgt_embed = nn.Embedding(cfg["tgt_vocab"], C, padding_idx=pad)
        self.src_embed = self.tgt_embed if cfg["share_embeddings"] else nn.Embedding(cfg["src_vocab"], C,
                                                                                     padding_idx=pad)
        if cfg["positional"] == "sinusoidal":
            self.register_buffer("table", sinusoidal_table(cfg["max_len"], C))
        else:
            self.src_positions = nn.Embedding(cfg["max_len"], C)
            self.tgt_positions = nn.Embedding(cfg["max_len"], C)
        act = activation_fn(cfg["activation"])
        nf = cfg["norm_first"]
        self.encoder = nn.ModuleList([nn.TransformerEncoderLayer(C, H, d_ff, 0.0, act, 1e-5, True, nf)
                                      for _ in range(cfg["encoder_layers"])])
        self.decoder = nn.ModuleList([nn.TransformerDecoderLayer(C, H, d_ff, 0.0, act, 1e-5, True, nf)
                                      for _ in range(cfg["decoder_layers"])])
        self.encoder_norm = nn.LayerNorm(C, eps=1e-5) if nf else None
        self.decoder_norm = nn.LayerNorm(C, eps=1e-5) if nf else None
        self.output = None if cfg["tie_output"] else nn.Linear(C, cfg["tgt_vocab"], bias=False)

    def embed(self, table, positions, tokens):
        L = tokens.shape[1]
        pos = self.table[:L] if positions is None else positions.weight[:L]
        return F.embedding(tokens, table.weight, padding_idx=self.cfg["pad_id"]) * math.sqrt(self.cfg["d_model"]) + pos

    def forward(self, src, tgt):
        learned = self.cfg["positional"] == "learned"
        src_padding = src == self.cfg["pad_id"]  # (B,S) True = padding key
        x = self.embed(self.src_embed, self.src_positions if learned else None, src)
        for layer in self.encoder:
            x = layer(x, src_key_padding_mask=src_padding)
        memory = self.encoder_norm(x) if self.encoder_norm is not None else x
        T = tgt.shape[1]
        y = self.embed(self.tgt_embed, self.tgt_positions if learned else None, tgt)
        for layer in self.decoder:
            y = layer(y, memory, tgt_mask=causal_disallowed(T, T), memory_key_padding_mask=src_padding)
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        return self.output(y) if self.output is not None else y @ self.tgt_embed.weight.t()

    def heed_names(self):
        m = [("tgt_embed.weight", self.tgt_embed.weight, None)]
        if not self.cfg["share_embeddings"]:
            m.append(("src_embed.weight", self.src_embed.weight, None))
        if self.cfg["positional"] == "learned":
            m += [("src_positions.weight", self.src_positions.weight, None),
                  ("tgt_positions.weight", self.tgt_positions.weight, None)]
        for i, layer in enumerate(self.encoder):
            p = f"encoder.layers.{i}."
            m += mha_names(p + "self_attn.", layer.self_attn, fused=False)
            m += plain(p, layer, [("ff.fc1", "linear1"), ("ff.fc2", "linear2"), ("norm1", "norm1"), ("norm2", "norm2")])
        if self.encoder_norm is not None:
            m += plain("encoder.", self, [("norm", "encoder_norm")])
        for i, layer in enumerate(self.decoder):
            p = f"decoder.layers.{i}."
            m += mha_names(p + "self_attn.", layer.self_attn, fused=False)
            m += mha_names(p + "cross_attn.", layer.multihead_attn, fused=False)
            m += plain(p, layer, [("ff.fc1", "linear1"), ("ff.fc2", "linear2"), ("norm1", "norm1"), ("norm2", "norm2"),
                                  ("norm3", "norm3")])
        if self.decoder_norm is not None:
            m += plain("decoder.", self, [("norm", "decoder_norm")])
        if self.output is not None:
            m.append(("output.weight", self.output.weight, None))
        return m


def make_seq2seq(name, cfg, seed):
    torch.manual_seed(seed)
    model = TorchSeq2Seq(cfg)
    perturb_(model)
    with torch.no_grad():  # heed zeroes the padding rows at construction; the files follow
        model.tgt_embed.weight[cfg["pad_id"]].zero_()
        model.src_embed.weight[cfg["pad_id"]].zero_()
    model.eval()
    pad = cfg["pad_id"]
    # (B,S) sources with trailing padding (every row keeps real tokens); (B,T+1) targets.
    src = torch.randint(1, cfg["src_vocab"], (2, 7))
    src[0, 5:] = pad
    src[1, 3:] = pad
    tgt_full = torch.randint(1, cfg["tgt_vocab"], (2, 6))
    tgt_full[1, 4:] = pad
    tgt_in, tgt_out = tgt_full[:, :-1], tgt_full[:, 1:]
    logits = model(src, tgt_in)
    V = cfg["tgt_vocab"]
    loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad, label_smoothing=0.1)
    loss.backward()
    tensors = {"in.src": src, "in.tgt_in": tgt_in, "in.tgt_out": tgt_out, "out.logits": logits.detach(),
               "out.loss": loss.detach()}
    tensors.update(params_and_grads(model.heed_names()))
    write(name, tensors, {"config": json.dumps(cfg, sort_keys=True), "loss": "cross_entropy(ignore_index=pad_id, "
                                                                            "label_smoothing=0.1)"})


# ---- nn.MultiheadAttention vs heed's MultiHeadAttention -----------------------------------------


def make_mha(seed):
    torch.manual_seed(seed)
    B, T, S, C, H = 2, 4, 6, 8, 2
    mha = nn.MultiheadAttention(C, H, dropout=0.0, bias=True, batch_first=True)
    perturb_(mha)
    mha.eval()
    mapping = mha_names("", mha, fused=False)
    query, key, value = randn(B, T, C), randn(B, S, C), randn(B, S, C)
    g_out, g_w = randn(B, T, C), randn(B, H, T, S)
    key_padding = torch.zeros(B, S, dtype=torch.bool)  # True = padding (both conventions)
    key_padding[0, 4:] = True
    key_padding[1, 0] = True
    disallowed = torch.rand(T, S) < 0.35  # torch: True = NOT allowed; heed keep = ~disallowed
    disallowed[:, 1] = False  # key 1 is never padded: no row is fully masked
    additive = torch.rand(T, S) * 3.0 - 2.0
    additive[0, 3] = float("-inf")
    additive[2, 0] = float("-inf")
    variants = {"kpm": dict(key_padding_mask=key_padding),
                "bool": dict(key_padding_mask=key_padding, attn_mask=disallowed),
                "float": dict(attn_mask=additive)}
    tensors = {"in.query": query, "in.key": key, "in.value": value, "in.g_out": g_out, "in.g_weights": g_w,
               "in.key_padding": key_padding, "in.attn_mask_disallowed": disallowed, "in.attn_mask_additive": additive}
    tensors.update(params_and_grads(mapping, with_grads=False))
    for tag, masks in variants.items():
        q, k, v = (t.clone().requires_grad_(True) for t in (query, key, value))
        mha.zero_grad(set_to_none=True)
        out, weights = mha(q, k, v, need_weights=True, average_attn_weights=False, **masks)  # (B,T,C), (B,H,T,S)
        ((out * g_out).sum() + (weights * g_w).sum()).backward()
        tensors[f"{tag}.out"] = out.detach()
        tensors[f"{tag}.weights"] = weights.detach()
        for n, t in (("query", q), ("key", k), ("value", v)):
            tensors[f"{tag}.grad_in.{n}"] = t.grad
        for hname, p, rows in mapping:
            tensors[f"{tag}.grad.{hname}"] = pick(p.grad, rows).clone()
    write("mha", tensors, {"modes": "kpm: key_padding_mask; bool: key_padding_mask + bool attn_mask; "
                                    "float: additive attn_mask", "loss": "sum(out*g_out) + sum(weights*g_weights)"})


# ---- scaled dot-product attention ---------------------------------------------------------------


def torch_sdpa(q, k, v, keep=None, is_causal=False):
    """(output, weights). torch >= 2.0 has F.scaled_dot_product_attention (no weights); Debian's
    1.13 has the private F._scaled_dot_product_attention, same bool convention (True = attend)."""
    return F._scaled_dot_product_attention(q, k, v, keep, 0.0, True, is_causal)


def make_sdpa(seed):
    torch.manual_seed(seed)
    tensors = {}

    def run(tag, q, k, v, keep=None, is_causal=False, dead_rows=None):
        g = randn(*q.shape[:-1], v.shape[-1])
        tensors.update({f"{tag}.q": q, f"{tag}.k": k, f"{tag}.v": v, f"{tag}.g": g})
        if keep is not None:
            tensors[f"{tag}.keep"] = keep
        out_raw, w_raw = torch_sdpa(q, k, v, keep, is_causal)
        tensors[f"{tag}.out_raw"] = out_raw
        tensors[f"{tag}.weights_raw"] = w_raw
        # Gradients: PyTorch's fully masked rows are NaN and poison every gradient of their
        # (batch, head); rows are independent, so the reference for the other rows comes from
        # a run where those rows may attend anything and their cotangent is zero. heed's
        # documented answer there (zero output, zero gradient) is then what the test expects.
        g_ref, keep_ref = g.clone(), keep
        if dead_rows is not None:
            g_ref[dead_rows.expand(g.shape[:-1])] = 0.0
            keep_ref = keep | dead_rows.unsqueeze(-1)
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        out, _ = torch_sdpa(qq, kk, vv, keep_ref, is_causal)
        (out * g_ref).sum().backward()
        tensors.update({f"{tag}.grad_q": qq.grad, f"{tag}.grad_k": kk.grad, f"{tag}.grad_v": vv.grad})

    B, H, D = 2, 2, 4
    run("causal", randn(B, H, 5, D), randn(B, H, 5, D), randn(B, H, 5, 3), is_causal=True)
    # T < S: PyTorch's is_causal is top-left aligned, heed's bottom-right (KV-cache friendly); the
    # reference is an explicit bottom-right bool mask.
    run("causal_offset", randn(B, H, 3, D), randn(B, H, 5, D), randn(B, H, 5, D),
        keep=~causal_disallowed(3, 5))
    keep = torch.rand(B, 1, 4, 6) < 0.6  # broadcast over heads
    keep[0, 0, 1, :] = False
    keep[1, 0, 3, :] = False
    keep[0, 0, 2, :] = True
    dead = ~keep.any(-1)  # (B,1,T)
    run("bool_mask", randn(B, H, 4, D), randn(B, H, 6, D), randn(B, H, 6, D), keep=keep, dead_rows=dead)
    tensors["bool_mask.dead_rows"] = dead
    assert torch.isnan(tensors["bool_mask.out_raw"][0, :, 1]).all(), "PyTorch gives NaN on fully masked rows"
    write("sdpa", tensors, {"loss": "sum(out*g)", "scale": "1/sqrt(D)"})


# ---- small ops ----------------------------------------------------------------------------------


def grads_of(fn, inputs, g):
    xs = [t.clone().requires_grad_(True) for t in inputs]
    y = fn(*xs)
    (y * g).sum().backward() if g is not None else y.backward()
    return y.detach(), [x.grad for x in xs]


def make_ops(seed):
    torch.manual_seed(seed)
    t = {}
    # LayerNorm over the last dim, mean far from 0.
    x, w, b = randn(3, 4, 7) + 5.0, 1.0 + 0.3 * randn(7), 0.2 * randn(7)
    g = randn(3, 4, 7)
    y, (gx, gw, gb) = grads_of(lambda x, w, b: F.layer_norm(x, (7,), w, b, 1e-5), [x, w, b], g)
    t.update({"layer_norm.x": x, "layer_norm.weight": w, "layer_norm.bias": b, "layer_norm.g": g,
              "layer_norm.out": y, "layer_norm.grad_x": gx, "layer_norm.grad_weight": gw, "layer_norm.grad_bias": gb})
    # GELU, exact (erf) and tanh, over a wide range.
    x = torch.cat([torch.linspace(-8.0, 8.0, 33), randn(31) * 2.0])
    g = randn(64)
    t["gelu.x"], t["gelu.g"] = x, g
    for approx in ("none", "tanh"):
        y, (gx,) = grads_of(lambda x: F.gelu(x, approximate=approx), [x], g)
        t[f"gelu_{approx}.out"], t[f"gelu_{approx}.grad_x"] = y, gx
    # softmax / log_softmax, with a -inf entry and a row of large values, along both dims.
    x = randn(4, 6) * 3.0
    x[1, 2] = float("-inf")
    x[2] += 1000.0
    g = randn(4, 6)
    t["softmax.x"], t["softmax.g"] = x, g
    for dim in (-1, 0):
        for fname, fn in (("softmax", F.softmax), ("log_softmax", F.log_softmax)):
            y, (gx,) = grads_of(lambda x: fn(x, dim=dim), [x], g)
            t[f"{fname}_dim{dim % 2}.out"], t[f"{fname}_dim{dim % 2}.grad_x"] = y, gx
    # cross-entropy: (N,C) with ignore_index=-1 and label smoothing; (B,T,C) with the defaults.
    logits, targets = randn(6, 5) * 2.0, torch.tensor([0, 4, -1, 2, -1, 3])
    y, (gl,) = grads_of(lambda z: F.cross_entropy(z, targets, ignore_index=-1, label_smoothing=0.15), [logits], None)
    t.update({"ce_smooth.logits": logits, "ce_smooth.targets": targets, "ce_smooth.loss": y, "ce_smooth.grad": gl})
    logits, targets = randn(2, 3, 5) * 2.0, torch.tensor([[1, 0, 4], [-100, 2, 2]])
    y, (gl,) = grads_of(lambda z: F.cross_entropy(z.permute(0, 2, 1), targets), [logits], None)  # class dim 1 in torch
    t.update({"ce_3d.logits": logits, "ce_3d.targets": targets, "ce_3d.loss": y, "ce_3d.grad": gl})
    # Embedding with padding_idx: the padding row is read as is but gets no gradient.
    weight, idx, pad = randn(10, 4), torch.tensor([[1, 3, 3, 7, 0], [9, 1, 1, 3, 2], [3, 3, 5, 6, 1]]), 3
    g = randn(3, 5, 4)
    y, (gw,) = grads_of(lambda w: F.embedding(idx, w, padding_idx=pad), [weight], g)
    t.update({"embedding.weight": weight, "embedding.idx": idx, "embedding.g": g, "embedding.out": y,
              "embedding.grad_weight": gw})
    write("ops", t, {"layer_norm_eps": "1e-5", "ce_smooth": "ignore_index=-1, label_smoothing=0.15",
                     "embedding_padding_idx": str(pad)})


# ---- safetensors dtype interop ------------------------------------------------------------------

INTEROP_SOURCES = {
    # name: (dtype, shape, values as float64 before conversion)
    "f32": (torch.float32, (2, 5), [0.0, -0.0, 1.0, -2.5, math.pi, 1e-45, 3.4028234663852886e38, math.inf, -math.inf,
                                    math.nan]),
    "f64": (torch.float64, (8,), [0.0, -0.0, 1.0 / 3.0, -1e308, 5e-324, math.inf, math.nan, math.pi]),
    "f16": (torch.float16, (3, 4), [0.0, -0.0, 1.0, -2.5, 65504.0, 2.0 ** -24, 2.0 ** -14, 0.1, math.inf, -math.inf,
                                    math.nan, 1000.5]),
    "bf16": (torch.bfloat16, (2, 5), [0.0, -0.0, 1.0, -2.5, 3.140625, 1e38, 2.0 ** -133, math.inf, math.nan, 0.1]),
}
# float64 values to round to float16/bfloat16: ties, near-overflow, subnormals; the last two sit
# just above a float16 / bfloat16 tie but round to it in float32: torch converts float64 through
# float32 (1 + 2^-11 + 2^-40 -> 1.0 in float16, where one correct rounding gives 1 + 2^-10).
ROUNDING_SOURCE = [1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 65519.0, 65520.0,
                   2.0 ** -25, 2.0 ** -25 * 3, 1e-8, -0.1, 3.0e38, 3.4e38, 123.456, -7.0e-39, 0.3, 2.0 ** -126 * 1.5,
                   1.0 + 2.0 ** -11 + 2.0 ** -40, 1.0 + 2.0 ** -8 + 2.0 ** -40]


def make_interop():
    t = {}
    for name, (dtype, shape, values) in INTEROP_SOURCES.items():
        t[name] = torch.tensor(values, dtype=torch.float64).to(dtype).reshape(shape)
    t["i64"] = torch.tensor([0, -1, 1, -2 ** 63, 2 ** 63 - 1, 2 ** 40, -123456789012], dtype=torch.int64)
    t["i32"] = torch.tensor([0, -1, -2 ** 31, 2 ** 31 - 1], dtype=torch.int32)
    t["bool"] = torch.tensor([True, False, True])
    t["scalar"] = torch.tensor(42.5, dtype=torch.float64)
    t["empty"] = torch.zeros(0, 3, dtype=torch.float32)
    for name in INTEROP_SOURCES:  # the stored values, exactly, as float64
        t[f"expect.{name}"] = t[name].to(torch.float64)
    src = torch.tensor(ROUNDING_SOURCE, dtype=torch.float64)
    t["rounding.source"] = src
    t["rounding.f16"] = src.to(torch.float16)
    t["rounding.bf16"] = src.to(torch.bfloat16)
    t["rounding.f32"] = src.to(torch.float32)
    meta = {"format": "pt", "quote": 'a "quoted" \\ value', "unicode": "Grüße ✓"}
    write("interop", t, meta)


def check_heed_written():
    """tests/golden/heed_written.safetensors is what heed writes (tests/test_golden.cpp, case
    'safetensors interop'): its conversions of rounding.source to F16/BF16/F32 must equal torch's."""
    path = OUT / "heed_written.safetensors"
    if not path.exists():
        print("  heed_written.safetensors is missing: run the golden test with HEED_WRITE_GOLDEN=1, then rerun")
        return
    tensors, metadata = read_safetensors(path)
    assert metadata.get("writer") == "heed", metadata
    src = torch.tensor(ROUNDING_SOURCE, dtype=torch.float64)
    assert torch.equal(tensors["source"], src)
    for name, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16), ("f32", torch.float32)):
        mine, theirs = src.to(dtype), tensors[f"heed.{name}"]
        assert theirs.dtype == dtype, (name, theirs.dtype)
        assert torch.equal(mine.view(torch.int16 if dtype != torch.float32 else torch.int32),
                           theirs.view(torch.int16 if dtype != torch.float32 else torch.int32)), (name, mine, theirs)
    assert torch.equal(tensors["heed.i64"], torch.arange(-3, 3, dtype=torch.int64))
    assert torch.equal(tensors["heed.bool"], torch.tensor([True, False]))
    print(f"  heed_written.safetensors: read back, {len(tensors)} tensors agree with torch ({metadata})")


def main():
    print(f"torch {torch.__version__}: writing {OUT.relative_to(ROOT)}/")
    make_lm("lm_tied_gelu", dict(vocab=11, d_model=8, heads=2, layers=2, d_ff=0, context=7, tie_embeddings=True,
                                 activation="gelu"), seed=1)
    make_lm("lm_untied_gelu_tanh", dict(vocab=9, d_model=8, heads=4, layers=1, d_ff=12, context=6,
                                        tie_embeddings=False, activation="gelu_tanh"), seed=2)
    base = dict(src_vocab=13, tgt_vocab=11, d_model=8, heads=2, d_ff=16, encoder_layers=2, decoder_layers=2,
                max_len=10, pad_id=0)
    make_seq2seq("seq2seq_preln", dict(base, norm_first=True, positional="sinusoidal", tie_output=True,
                                       share_embeddings=False, activation="gelu"), seed=3)
    make_seq2seq("seq2seq_postln", dict(base, src_vocab=11, norm_first=False, positional="learned", tie_output=False,
                                        share_embeddings=True, activation="relu"), seed=4)
    make_mha(seed=5)
    make_sdpa(seed=6)
    make_ops(seed=7)
    make_interop()
    check_heed_written()


if __name__ == "__main__":
    main()
