"""The model `wgml train` trains and `wgml generate` runs, written in plain PyTorch, for an
end-to-end comparison of the two on one GPU: same architecture, same parameter names as
wgml's checkpoints, same training step, same decoding loop, same counting of tokens/s.

The model (src/model.c): a Llama-family decoder, no biases.
    h = embed[ids]
    per layer:  x = rmsnorm(h) * w_attn_norm           rmsnorm(h) = h / sqrt(mean(h^2) + eps)
                q, k, v = x Wq^T, x Wk^T, x Wv^T       [T, heads, head_dim], [T, kv_heads, head_dim]
                q, k = rope(q), rope(k)                rotate-half pairs (i, i + hd/2),
                                                       angle = pos * theta^(-2i/hd)
                a = softmax(q k^T / sqrt(hd) + causal) v   (query head h reads kv head h / (H/Hk))
                h = h + a Wo^T
                x = rmsnorm(h) * w_ffn_norm
                h = h + (silu(x Wg^T) * (x Wu^T)) Wd^T     (SwiGLU)
    logits = (rmsnorm(h) * w_final_norm) W_head^T       W_head = embed when tied
The training step (src/model.c wgml_trainer_*, tools/cmd_train.c): cross-entropy, mean over
the batch's tokens; gradients accumulated over --accum micro-batches each scaled by 1/accum;
global-norm clipping to --clip (factor min(1, clip / (norm + 1e-6))); AdamW (betas 0.9, 0.95,
eps 1e-8, bias-corrected, decoupled weight decay 0.1 on matrices and the embedding, none on
the norms); lr: linear warm-up over --warmup steps ((step+1)/warmup * lr), then cosine to
0.1 * lr at the last step.

Modes:
    --check CKPT [--wgml BIN | --wgml-logits FILE]
        loads a checkpoint written by `wgml train` (config.json + model.safetensors), runs a
        fixed text through it in float64 (the reference) and float32, through the full
        forward and through the KV-cache decoding path, and compares with the logits of
        `wgml logits` (every position): max |diff| / max |ref|.
    --train-check CKPT --wgml BIN --data FILE
        wgml's initial weights (splitmix64 + Box-Muller, same seed), wgml's batch order and
        lr schedule: trains here and with `wgml train` for a few steps and compares the
        per-step losses and the final weights (proves the optimizer step is the same).
    --bench [--model CKPT] [--data FILE]
        training tokens/s (tokens per step / step time after the first step) and decoding
        tokens/s (greedy, KV cache, prefill excluded, one host readback of the argmax per
        token), sizes as bench/e2e_h200.sh; prints one JSON object per measure.

Works with torch 1.13 (CPU) and torch 2.x; cuda when available. TF32 is turned off.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

CHECK_TEXT = ("static wgml_status check(const wgml_tensor *t, size_t n)\n{\n    if (!t) return WGML_ERROR_INVALID_ARGUMENT;\n"
              "    for (size_t i = 0; i < n; i++) sum += t->data[i] * 0.5f;   /* byte-level: every char is a token */\n}\n")
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


# ---- configuration and checkpoint files ---------------------------------------------------

class Config:
    def __init__(self, vocab=256, dim=768, layers=12, heads=12, kv_heads=12, ffn=2048, context=1024, eps=1e-5,
                 theta=10000.0, tied=True, head_dim=0):
        self.vocab, self.dim, self.layers, self.heads, self.kv_heads, self.ffn = vocab, dim, layers, heads, kv_heads, ffn
        self.context, self.eps, self.theta, self.tied = context, eps, theta, tied
        self.head_dim = head_dim or dim // heads

    @staticmethod
    def from_json(path):
        c = json.load(open(path))
        if c.get("rope_scaling"):
            raise SystemExit(f"{path}: rope_scaling is not implemented here (wgml train never writes it)")
        if c.get("attention_bias") or c.get("mlp_bias"):
            raise SystemExit(f"{path}: biases are not part of this model")
        heads = c["num_attention_heads"]
        return Config(vocab=c["vocab_size"], dim=c["hidden_size"], layers=c["num_hidden_layers"], heads=heads,
                      kv_heads=c.get("num_key_value_heads") or heads, ffn=c["intermediate_size"],
                      context=c.get("max_position_embeddings", 1024), eps=c.get("rms_norm_eps", 1e-5),
                      theta=c.get("rope_theta") or 10000.0, tied=bool(c.get("tie_word_embeddings", False)),
                      head_dim=c.get("head_dim") or 0)

    def __repr__(self):
        return (f"vocab {self.vocab}, dim {self.dim}, {self.layers} layers, {self.heads} heads ({self.kv_heads} kv), "
                f"head_dim {self.head_dim}, ffn {self.ffn}, context {self.context}, eps {self.eps:g}, theta {self.theta:g}, "
                f"{'tied' if self.tied else 'untied'} head")


ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "F64": np.float64}


def read_safetensors(path):
    """name -> float32 numpy array; the format is a u64 header length, a JSON header, data."""
    try:
        from safetensors.numpy import load_file
        return {k: v.astype(np.float32) for k, v in load_file(path).items()}
    except ImportError:
        pass
    raw = open(path, "rb").read()
    (hlen,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[base + a:base + b]
        if info["dtype"] == "BF16":
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in ST_DTYPES:
            arr = np.frombuffer(buf, dtype=np.dtype(ST_DTYPES[info["dtype"]]).newbyteorder("<")).astype(np.float32)
        else:
            raise SystemExit(f"{path}: tensor {name} has dtype {info['dtype']}, not a float")
        out[name] = arr.reshape(info["shape"])
    return out


# ---- the model ----------------------------------------------------------------------------

class Weight(nn.Module):
    def __init__(self, *shape):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(*shape))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.q_proj = Weight(c.heads * c.head_dim, c.dim)
        self.k_proj = Weight(c.kv_heads * c.head_dim, c.dim)
        self.v_proj = Weight(c.kv_heads * c.head_dim, c.dim)
        self.o_proj = Weight(c.dim, c.heads * c.head_dim)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = Weight(c.ffn, c.dim)
        self.up_proj = Weight(c.ffn, c.dim)
        self.down_proj = Weight(c.dim, c.ffn)


class Layer(nn.Module):
    # registration order = wgml's parameter order: attn norm, q, k, v, o, ffn norm, gate, up, down
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = Weight(c.dim)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = Weight(c.dim)
        self.mlp = MLP(c)


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = Weight(c.vocab, c.dim)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.layers)])
        self.norm = Weight(c.dim)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class KVCache:
    """Keys and values of up to cap positions per layer, [1, kv_heads, cap, head_dim]."""

    def __init__(self, model, cap):
        c = model.cfg
        p = model.model.embed_tokens.weight
        self.k = [torch.zeros(1, c.kv_heads, cap, c.head_dim, dtype=p.dtype, device=p.device) for _ in range(c.layers)]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.cap, self.len = cap, 0


class Model(nn.Module):
    def __init__(self, c, attn="auto"):
        super().__init__()
        self.cfg = c
        self.model = Body(c)
        if not c.tied:
            self.lm_head = Weight(c.vocab, c.dim)
        self.attn = ("sdpa" if HAS_SDPA else "math") if attn == "auto" else attn
        self.rope_cache = {}

    def head(self):
        return self.model.embed_tokens.weight if self.cfg.tied else self.lm_head.weight

    def rope_tables(self, n, dtype, device):
        """cos, sin [n, hd/2] of pos * theta^(-2i/hd), computed in float64 (wgml's kernel is
        exact to f32 rounding: its frequencies are fixed-point turn fractions)."""
        key = (n, dtype, device)
        if key not in self.rope_cache:
            hd = self.cfg.head_dim
            inv = self.cfg.theta ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64) / hd)
            ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
            self.rope_cache = {key: (ang.cos().to(dtype).to(device), ang.sin().to(dtype).to(device))}
        return self.rope_cache[key]

    def rope(self, x, pos):
        # x [B, T, heads, hd]; rotate-half: pairs (i, i + hd/2)
        T, half = x.shape[1], x.shape[3] // 2
        cos, sin = self.rope_tables(max(self.cfg.context, pos + T), x.dtype, x.device)
        cos, sin = cos[pos:pos + T, None, :], sin[pos:pos + T, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def attention(self, q, k, v, pos):
        # q [B, H, Tq, hd]; k, v [B, Hk, Tk, hd]; query i sits at position pos + i, sees keys j <= pos + i
        c = self.cfg
        Tq, Tk = q.shape[2], k.shape[2]
        if c.kv_heads != c.heads:
            k = k.repeat_interleave(c.heads // c.kv_heads, dim=1)
            v = v.repeat_interleave(c.heads // c.kv_heads, dim=1)
        need_mask = not (Tq == 1 and Tk == pos + 1)
        if self.attn == "sdpa":
            if Tq == Tk and pos == 0:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            mask = None
            if need_mask:
                mask = torch.arange(Tk, device=q.device)[None, :] <= pos + torch.arange(Tq, device=q.device)[:, None]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim))
        if need_mask:
            mask = torch.arange(Tk, device=q.device)[None, :] <= pos + torch.arange(Tq, device=q.device)[:, None]
            s = s.masked_fill(~mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    def forward(self, ids, cache=None):
        """ids [B, T] -> logits [B, T, vocab]. With a cache (B = 1): positions continue
        from cache.len, keys and values are appended."""
        c = self.cfg
        B, T = ids.shape
        pos = cache.len if cache is not None else 0
        h = F.embedding(ids, self.model.embed_tokens.weight)
        for li, L in enumerate(self.model.layers):
            x = rms_norm(h, L.input_layernorm.weight, c.eps)
            a = L.self_attn
            q = self.rope(F.linear(x, a.q_proj.weight).view(B, T, c.heads, c.head_dim), pos).transpose(1, 2)
            k = self.rope(F.linear(x, a.k_proj.weight).view(B, T, c.kv_heads, c.head_dim), pos).transpose(1, 2)
            v = F.linear(x, a.v_proj.weight).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
            if cache is not None:
                cache.k[li][:, :, pos:pos + T] = k
                cache.v[li][:, :, pos:pos + T] = v
                k, v = cache.k[li][:, :, :pos + T], cache.v[li][:, :, :pos + T]
            o = self.attention(q, k, v, pos).transpose(1, 2).reshape(B, T, c.heads * c.head_dim)
            h = h + F.linear(o, a.o_proj.weight)
            x = rms_norm(h, L.post_attention_layernorm.weight, c.eps)
            m = L.mlp
            h = h + F.linear(F.silu(F.linear(x, m.gate_proj.weight)) * F.linear(x, m.up_proj.weight), m.down_proj.weight)
        if cache is not None:
            cache.len += T
        return F.linear(rms_norm(h, self.model.norm.weight, c.eps), self.head())

    def load_wgml(self, ckpt):
        tensors = read_safetensors(os.path.join(ckpt, "model.safetensors"))
        names = dict(self.named_parameters())
        missing = [n for n in names if n not in tensors]
        extra = [n for n in tensors if n not in names]
        if missing or extra:
            raise SystemExit(f"{ckpt}: tensors missing {missing[:4]}, unexpected {extra[:4]}")
        with torch.no_grad():
            for n, p in names.items():
                if tuple(tensors[n].shape) != tuple(p.shape):
                    raise SystemExit(f"{ckpt}: {n} is {tensors[n].shape}, expected {tuple(p.shape)}")
                p.copy_(torch.from_numpy(np.ascontiguousarray(tensors[n])))
        return self

    def init_like_wgml(self, seed, std=0.02):
        """wgml_model_init_random (src/model.c): norms 1; every other tensor, in parameter
        order, N(0, std) from one splitmix64 stream through Box-Muller (pairs of draws give
        elements 2j, 2j+1), std / sqrt(2 * layers) for o_proj and down_proj."""
        golden = np.uint64(0x9E3779B97F4A7C15)
        state = np.uint64(seed)
        with torch.no_grad(), np.errstate(over="ignore"):
            for name, p in self.named_parameters():
                n = p.numel()
                if p.dim() == 1:
                    p.fill_(1.0)
                    continue
                sd = std / math.sqrt(2.0 * self.cfg.layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                npairs = (n + 1) // 2
                z = state + golden * np.arange(1, 2 * npairs + 1, dtype=np.uint64)
                state = state + golden * np.uint64(2 * npairs)
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                z = z ^ (z >> np.uint64(31))
                u = ((z >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)
                u1, u2 = u[0::2], u[1::2]
                r = np.sqrt(-2 * np.log(u1))
                out = np.empty(2 * npairs, dtype=np.float32)
                out[0::2] = (sd * r * np.cos(2 * 3.14159265358979323846 * u2)).astype(np.float32)
                out[1::2] = (sd * r * np.sin(2 * 3.14159265358979323846 * u2)).astype(np.float32)
                p.copy_(torch.from_numpy(out[:n]).view(p.shape))
        return self


# ---- training, as wgml_trainer + tools/cmd_train.c --------------------------------------------

def lr_at(step, steps, warmup, lr, min_frac=0.1):
    if step < warmup:
        return lr * (step + 1) / warmup
    span = steps - warmup
    p = (step - warmup) / (span - 1) if span > 1 else 1
    mn = lr * min_frac
    return mn + 0.5 * (lr - mn) * (1 + math.cos(3.14159265358979323846 * p))


def make_optimizer(model, weight_decay=0.1, fused=False):
    dec = [p for p in model.parameters() if p.dim() >= 2]
    nod = [p for p in model.parameters() if p.dim() < 2]
    kw = {"fused": True} if fused else {}
    return torch.optim.AdamW([{"params": dec, "weight_decay": weight_decay}, {"params": nod, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.95), eps=1e-8, **kw)


def train_step(model, opt, batches, lr, clip):
    """One optimizer step over the micro-batches [(ids, targets)]; returns the mean loss
    (a device tensor: nothing waits for the device)."""
    V = model.cfg.vocab
    total = None
    for ids, tg in batches:
        loss = F.cross_entropy(model(ids).view(-1, V), tg.view(-1))
        (loss * (1.0 / len(batches)) if len(batches) > 1 else loss).backward()
        total = loss.detach() if total is None else total + loss.detach()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total / len(batches)


class WgmlBatches:
    """tools/cmd_train.c's batch order: the first 90% of the tokens, windows at offsets
    splitmix64(seed ^ 0xD1B54A32D192ED03) % (ntrain - context)."""

    def __init__(self, data, context, batch, seed, device):
        self.data = data
        self.ntrain = len(data) - len(data) // 10
        self.T, self.B, self.device = context, batch, device
        self.s = (seed ^ 0xD1B54A32D192ED03) & 0xFFFFFFFFFFFFFFFF

    def next_u64(self):
        M = 0xFFFFFFFFFFFFFFFF
        self.s = (self.s + 0x9E3779B97F4A7C15) & M
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        return z ^ (z >> 31)

    def next(self):
        offs = [self.next_u64() % (self.ntrain - self.T) for _ in range(self.B)]
        x = np.stack([self.data[o:o + self.T + 1] for o in offs]).astype(np.int64)
        return (torch.from_numpy(x[:, :-1].copy()).to(self.device), torch.from_numpy(x[:, 1:].copy()).to(self.device))


def read_tokens(path):
    return np.frombuffer(open(path, "rb").read(), dtype=np.uint8)


# ---- decoding, as tools/cmd_generate.c at temperature 0 --------------------------------------

def generate(model, prompt_ids, tokens, sync):
    """Greedy decoding with a KV cache of prompt + tokens positions. Timed like wgml
    generate: prefill = the prompt's pass + the first token's readback; decode = every
    later token: one single-token pass, argmax on the device, the id read back (.item())."""
    dev = model.model.embed_tokens.weight.device
    cache = KVCache(model, len(prompt_ids) + tokens)
    out = []
    with torch.no_grad():
        sync()
        t0 = time.perf_counter()
        logits = model(torch.tensor([prompt_ids], device=dev), cache)
        nxt = int(logits[0, -1].argmax())
        t_prefill = time.perf_counter() - t0
        out.append(nxt)
        t_decode, decoded = 0.0, 0
        x = torch.empty(1, 1, dtype=torch.long, device=dev)
        while len(out) < tokens:
            t2 = time.perf_counter()
            x.fill_(nxt)
            logits = model(x, cache)
            nxt = int(logits[0, -1].argmax())
            t_decode += time.perf_counter() - t2
            decoded += 1
            out.append(nxt)
    return out, t_prefill, t_decode, decoded


# ---- modes -------------------------------------------------------------------------------------

def pick_device(name):
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def syncer(dev):
    return torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)


def emit(obj):
    print(json.dumps(obj), flush=True)


def read_wgml_logits(path):
    raw = open(path, "rb").read()
    n, vocab = struct.unpack_from("<II", raw, 0)
    ids = list(struct.unpack_from(f"<{n}I", raw, 8))
    return ids, np.frombuffer(raw, dtype="<f4", offset=8 + 4 * n).reshape(n, vocab).astype(np.float64)


def rel(a, ref):
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def mode_check(a):
    cfg = Config.from_json(os.path.join(a.check, "config.json"))
    print(f"checkpoint {a.check}: {cfg}")
    if cfg.vocab != 256:
        raise SystemExit("--check tokenizes bytes: the checkpoint must have vocab_size 256")
    text = a.text.encode("utf-8")[:cfg.context].decode("utf-8", "ignore")   # at most the trained context
    ids = list(text.encode("utf-8"))
    ref_model = Model(cfg, attn="math").load_wgml(a.check).double()
    with torch.no_grad():
        ref = ref_model(torch.tensor([ids]))[0].numpy()
        f32 = Model(cfg, attn="math").load_wgml(a.check)
        got32 = f32(torch.tensor([ids]))[0].numpy().astype(np.float64)
        cache = KVCache(f32, len(ids))
        half = len(ids) // 2
        rows = [f32(torch.tensor([ids[:half]]), cache)[0]]
        rows += [f32(torch.tensor([[t]]), cache)[0] for t in ids[half:]]
        dec32 = torch.cat(rows).numpy().astype(np.float64)
    res = {"check": "logits", "tokens": len(ids), "vocab": cfg.vocab, "max_abs_ref": float(np.abs(ref).max()),
           "torch_f32_vs_f64": rel(got32, ref), "torch_f32_kv_cache_vs_f64": rel(dec32, ref)}
    wl = a.wgml_logits
    if a.wgml and not wl:
        wl = os.path.join(tempfile.mkdtemp(), "wgml_logits.bin")
        subprocess.run([a.wgml, "logits", "--model", a.check, "--text", text, "--out", wl], check=True,
                       stdout=subprocess.DEVNULL)
    if wl:
        wids, got = read_wgml_logits(wl)
        if wids != ids:
            raise SystemExit(f"token ids differ: wgml {wids[:20]}..., here {ids[:20]}...")
        res["wgml_vs_f64"] = rel(got, ref)
        res["wgml_vs_f64_fro"] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        res["wgml_vs_torch_f32"] = rel(got, got32)
        res["argmax_agree"] = int((got.argmax(1) == ref.argmax(1)).sum())
        res["ok"] = res["wgml_vs_f64"] <= a.tol
    emit(res)
    print(f"logits [{len(ids)} x {cfg.vocab}] max-relative difference (max |x - ref| / max |ref|, ref = this model in float64):"
          f" torch f32 {res['torch_f32_vs_f64']:.3e}, torch f32 with KV cache {res['torch_f32_kv_cache_vs_f64']:.3e}"
          + (f", wgml {res['wgml_vs_f64']:.3e} (limit {a.tol:g}); argmax agrees at {res['argmax_agree']} of {len(ids)}"
             if wl else ""))
    return 0 if res.get("ok", True) else 1


def mode_train_check(a):
    """Trains from wgml's initial weights on wgml's batches, here and with wgml train."""
    ck = a.train_check
    cfg = Config(vocab=256, dim=a.dim, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads, ffn=a.ffn, context=a.context,
                 theta=a.rope_theta, tied=bool(a.tied))
    warmup = a.warmup if a.warmup < a.steps else a.steps // 10
    cmd = [a.wgml, "train", "--data", a.data, "--out", ck, "--dim", str(a.dim), "--layers", str(a.layers), "--heads",
           str(a.heads), "--kv-heads", str(a.kv_heads), "--ffn", str(a.ffn), "--context", str(a.context), "--batch",
           str(a.batch), "--steps", str(a.steps), "--warmup", str(a.warmup), "--lr", repr(a.lr), "--seed", str(a.seed),
           "--tied", str(a.tied), "--clip", repr(a.clip), "--eval-every", "0"]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wl = [float(line.split(",")[1]) for line in open(os.path.join(ck, "loss.csv")).read().splitlines()[1:]]
    dev = pick_device(a.device)
    dt = torch.float64 if a.double else torch.float32
    model = Model(cfg).init_like_wgml(a.seed).to(dev, dt)
    opt = make_optimizer(model)
    data = WgmlBatches(read_tokens(a.data), a.context, a.batch, a.seed, dev)
    tl = []
    for step in range(a.steps):
        tl.append(float(train_step(model, opt, [data.next()], lr_at(step, a.steps, warmup, a.lr), a.clip)))
    trained = Model(cfg).load_wgml(ck)
    pairs = [(p.detach().double().cpu(), q.detach().double()) for p, q in zip(model.parameters(), trained.parameters())]
    wdiff = max(float((p - q).abs().max() / q.abs().max()) for p, q in pairs)
    wfro = math.sqrt(sum(float((p - q).pow(2).sum()) for p, q in pairs) / sum(float(q.pow(2).sum()) for p, q in pairs))
    d = [abs(x - y) for x, y in zip(tl, wl)]
    res = {"check": "training", "steps": a.steps, "dtype": str(dt), "loss_wgml": wl, "loss_torch": tl,
           "max_abs_loss_diff": max(d), "first_step_loss_diff": d[0], "final_weights_max_rel_diff": wdiff,
           "final_weights_rel_fro": wfro}
    emit(res)
    for i, (x, y) in enumerate(zip(wl, tl)):
        print(f"step {i + 1:3d}: wgml {x:.6f}  torch {y:.6f}  diff {abs(x - y):.2e}")
    print(f"final weights: max over tensors of max |torch - wgml| / max |wgml| = {wdiff:.3e}; "
          f"||torch - wgml|| / ||wgml|| over all = {wfro:.3e}")
    return 0


def mode_bench(a):
    dev = pick_device(a.device)
    sync = syncer(dev)
    cfg = Config.from_json(os.path.join(a.model, "config.json")) if a.model else Config(
        dim=a.dim, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads, ffn=a.ffn, context=a.context, theta=a.rope_theta,
        tied=bool(a.tied))
    base = {"impl": "torch", "torch": torch.__version__, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "attn": None, "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}
    print(f"model: {cfg}; device {base['device']}; torch {torch.__version__}", file=sys.stderr, flush=True)

    if a.fused and dev.type != "cuda":
        print("--fused: AdamW(fused=True) needs CUDA here; training skipped", file=sys.stderr)
        a.train_steps = 0
    if a.train_steps > 0:
        model = Model(cfg, attn=a.attn).init_like_wgml(a.seed).to(dev)
        base["attn"] = model.attn
        opt = make_optimizer(model, fused=a.fused)
        if a.data:
            data = WgmlBatches(read_tokens(a.data), cfg.context, a.batch, a.seed, dev)
            get = data.next
        else:
            g = torch.Generator(device="cpu").manual_seed(a.seed)

            def get():
                x = torch.randint(0, cfg.vocab, (a.batch, cfg.context + 1), generator=g).to(dev)
                return x[:, :-1], x[:, 1:]
        N = a.batch * cfg.context * a.accum
        warmup = a.warmup if a.warmup < a.train_steps else a.train_steps // 10
        losses = []
        t_first = None
        sync()
        t0 = time.perf_counter()
        for step in range(a.train_steps):
            losses.append(train_step(model, opt, [get() for _ in range(a.accum)], lr_at(step, a.train_steps, warmup, a.lr),
                                     a.clip))
            if step + 1 == a.skip_steps:   # like wgml train: the rate counts the steps after the first
                sync()
                t_first = time.perf_counter()
        sync()
        t_end = time.perf_counter()
        counted = a.train_steps - a.skip_steps
        losses = [float(x) for x in losses]
        emit(dict(base, measure="train", tokens_per_s=counted * N / (t_end - t_first), steps=a.train_steps,
                  counted_steps=counted, tokens_per_step=N, step_ms=1e3 * (t_end - t_first) / counted,
                  first_steps_s=t_first - t0, batch=a.batch, context=cfg.context, accum=a.accum,
                  fused_adamw=bool(a.fused), losses=losses,
                  max_memory_gib=torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None))
        del model, opt
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    if a.tokens > 0:
        model = Model(cfg, attn=a.attn)
        model = (model.load_wgml(a.model) if a.model else model.init_like_wgml(a.seed)).to(dev)
        base["attn"] = model.attn
        model.eval()
        ids = list(a.prompt.encode("utf-8"))
        if len(ids) + a.tokens > cfg.context:
            raise SystemExit(f"prompt ({len(ids)}) + --tokens ({a.tokens}) exceed the context {cfg.context}: wgml generate "
                             "would shift its context there, which is not reproduced here")
        for run in range(a.decode_runs + 1):   # run 0 is cold, like a fresh wgml generate process
            out, tp, td, dec = generate(model, ids, a.tokens, sync)
            emit(dict(base, measure="decode" if run else "decode_cold", tokens_per_s=dec / td, decoded=dec, decode_s=td,
                      prefill_tokens=len(ids), prefill_s=tp, prefill_tokens_per_s=len(ids) / tp,
                      text=bytes(t for t in out if t < 256).decode("utf-8", "replace") if cfg.vocab == 256 else None))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    m = ap.add_mutually_exclusive_group(required=True)
    m.add_argument("--check", metavar="CKPT", help="compare logits with wgml's on a checkpoint of wgml train")
    m.add_argument("--train-check", metavar="OUTDIR", help="train here and with wgml train from the same start; compare")
    m.add_argument("--bench", action="store_true", help="training and decoding tokens/s")
    ap.add_argument("--wgml", help="the wgml binary (runs wgml logits / wgml train)")
    ap.add_argument("--wgml-logits", help="output of wgml logits on --text (instead of running --wgml)")
    ap.add_argument("--text", default=CHECK_TEXT, help="text of --check")
    ap.add_argument("--tol", type=float, default=1e-4, help="--check fails above this max-relative difference")
    ap.add_argument("--model", help="--bench: checkpoint folder for the sizes and the decoding weights")
    ap.add_argument("--data", help="text file: training batches in wgml train's order (else random tokens)")
    ap.add_argument("--device", help="cuda, cpu (default: cuda when available)")
    ap.add_argument("--double", action="store_true", help="--train-check in float64")
    ap.add_argument("--attn", default="auto", choices=["auto", "sdpa", "math"],
                    help="attention: F.scaled_dot_product_attention (torch 2) or matmul-softmax-matmul")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True) instead of the default implementation")
    for flag, typ, dflt in [("dim", int, 768), ("layers", int, 12), ("heads", int, 12), ("kv-heads", int, 12), ("ffn", int, 2048),
                            ("context", int, 1024), ("batch", int, 8), ("accum", int, 1), ("train-steps", int, 12),
                            ("steps", int, 12), ("skip-steps", int, 1), ("warmup", int, 2), ("lr", float, 3e-3),
                            ("clip", float, 1.0), ("rope-theta", float, 10000.0), ("tied", int, 1), ("seed", int, 1337),
                            ("tokens", int, 256), ("decode-runs", int, 1)]:
        ap.add_argument("--" + flag, type=typ, default=dflt)
    ap.add_argument("--prompt", default="static wgml_status ")
    a = ap.parse_args()
    if a.check:
        return mode_check(a)
    if a.train_check:
        if not (a.wgml and a.data):
            ap.error("--train-check needs --wgml and --data")
        return mode_train_check(a)
    if a.skip_steps < 1 or a.skip_steps >= a.train_steps > 0:
        ap.error("--skip-steps must be in [1, --train-steps)")
    return mode_bench(a)


if __name__ == "__main__":
    sys.exit(main())
