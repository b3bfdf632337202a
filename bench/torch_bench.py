"""PyTorch side of the benchmark suite: the same work as `wgml bench`, case for case.

Each case is keyed by (op, shape) exactly as in tools/bench_cases.c. Timing follows the
same rules: warm-up, then the median of N samples, each a batch of back-to-back calls
timed with CUDA events and divided by the batch size (batch grown to >= min_ms). f32
everywhere, TF32 off. Writes JSON lines like `wgml bench --json`.

    python3 bench/torch_bench.py --json out.jsonl [--filter SUBSTR]
"""
import argparse
import json
import itertools
import math
import sys

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"


def timeit(fn, samples=15, min_ms=20.0):
    import time
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:   # warm-up that keeps the GPU busy, as wgml bench does
        for _ in range(8):
            fn()
        torch.cuda.synchronize()
    inner, out = 1, []
    for _ in range(samples):
        while True:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                fn()
            e.record()
            torch.cuda.synchronize()
            ms = s.elapsed_time(e)
            if ms >= min_ms or inner >= 4096:
                break
            inner = min(4096, int(inner * (min_ms / max(ms, 1e-3)) * 1.2) + 1)
        out.append(ms / inner * 1e-3)
    out.sort()
    return out[len(out) // 2]


def host_chain(fn, n=1000, samples=15):
    """Host clock around n dependent calls and a synchronize: per-op overhead as a user sees it."""
    import time
    fn(); torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / n)
    out.sort()
    return out[len(out) // 2]


def graph_timeit(fn, calls=64):
    """The GPU's own time per call: `calls` calls captured in one CUDA graph, the graph timed
    as timeit times a call, divided by `calls` (no host cost per call, which PyTorch eager
    pays at about 9 us and which hides the GPU's time of products under about 10 us)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):   # warm-up off the capture stream, as capture requires
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return timeit(g.replay) / calls


def rnd(*shape, lo=-1.0, hi=1.0):
    return torch.empty(*shape, device=dev, dtype=torch.float32).uniform_(lo, hi)


CASES = {}


def case(op, shape):
    def reg(f):
        CASES[(op, shape)] = f
        return f
    return reg


N28, N26 = 1 << 28, 1 << 26


@case("add", "2^28")
def _():
    a, b, c = rnd(N28), rnd(N28), torch.empty(N28, device=dev)
    return timeit(lambda: torch.add(a, b, out=c))


@case("mul", "2^28")
def _():
    a, b, c = rnd(N28), rnd(N28), torch.empty(N28, device=dev)
    return timeit(lambda: torch.mul(a, b, out=c))


@case("add", "2^26")
def _():
    a, b, c = rnd(N26), rnd(N26), torch.empty(N26, device=dev)
    return timeit(lambda: torch.add(a, b, out=c))


@case("copy_tensor", "2^28")
def _():
    a, c = rnd(N28), torch.empty(N28, device=dev)
    return timeit(lambda: c.copy_(a))


def unary(f):
    x = rnd(N26, lo=-4, hi=4)
    return timeit(lambda: f(x))


CASES[("silu", "2^26")] = lambda: unary(F.silu)
CASES[("relu", "2^26")] = lambda: unary(torch.relu)


@case("silu_backward", "2^26")
def _():
    x, g = rnd(N26, lo=-4, hi=4), rnd(N26)
    return timeit(lambda: torch.ops.aten.silu_backward(g, x))


@case("silu_gate_fused", "2^26")
def _():
    up, gate = rnd(N26, lo=-4, hi=4), rnd(N26, lo=-4, hi=4)
    return timeit(lambda: F.silu(up) * gate)


@case("silu_gate_backward", "2^26")
def _():
    up, gate, go = rnd(N26, lo=-4, hi=4), rnd(N26, lo=-4, hi=4), rnd(N26)
    return timeit(lambda: (torch.ops.aten.silu_backward(go * gate, up), go * F.silu(up)))


@case("mul_backward", "2^26")
def _():
    a, b, go = rnd(N26), rnd(N26), rnd(N26)
    return timeit(lambda: (go * b, go * a))


@case("mse_loss", "2^26")
def _():
    p, t = rnd(N26), rnd(N26)
    return timeit(lambda: F.mse_loss(p, t, reduction="none"))


@case("gradient_accumulate", "2^26")
def _():
    a, b = rnd(N26), rnd(N26)
    return timeit(lambda: a.add_(b))


@case("gradient_scale", "2^26")
def _():
    a = rnd(N26)
    return timeit(lambda: a.mul_(0.999))


R, C = 16384, 4096


@case("rms_norm", "16384x4096")
def _():
    x, w = rnd(R, C, lo=-3, hi=3), rnd(C, lo=0.5, hi=1.5)
    return timeit(lambda: F.rms_norm(x, (C,), w, eps=1e-5))


@case("rms_norm_residual_with", "16384x4096")
def _():
    x, r, w = rnd(R, C, lo=-3, hi=3), rnd(R, C), rnd(C, lo=0.5, hi=1.5)

    def f():
        s = x + r
        return s, F.rms_norm(s, (C,), w, eps=1e-5)
    return timeit(f)


@case("rms_norm_backward", "16384x4096")
def _():
    x = rnd(R, C, lo=-3, hi=3).requires_grad_()
    w = rnd(C, lo=0.5, hi=1.5).requires_grad_()
    go = rnd(R, C)
    y = F.rms_norm(x, (C,), w, eps=1e-5)
    return timeit(lambda: torch.autograd.grad(y, (x, w), go, retain_graph=True))


@case("rms_norm_backward_with", "16384x4096 accumulate")
def _():
    # the input gradient added into an existing one, as autograd accumulates .grad
    x = rnd(R, C, lo=-3, hi=3).requires_grad_()
    w = rnd(C, lo=0.5, hi=1.5).requires_grad_()
    go, acc = rnd(R, C), torch.zeros(R, C, device=dev)
    y = F.rms_norm(x, (C,), w, eps=1e-5)

    def f():
        gx, gw = torch.autograd.grad(y, (x, w), go, retain_graph=True)
        acc.add_(gx)
        return gw
    return timeit(f)


@case("softmax", "16384x4096")
def _():
    x = rnd(R, C, lo=-3, hi=3)
    return timeit(lambda: torch.softmax(x, -1))


@case("softmax_backward", "16384x4096")
def _():
    y, go = torch.softmax(rnd(R, C, lo=-3, hi=3), -1), rnd(R, C)
    return timeit(lambda: torch._softmax_backward_data(go, y, -1, torch.float32))


@case("softmax", "8x262144")
def _():
    x = rnd(8, 262144, lo=-3, hi=3)
    return timeit(lambda: torch.softmax(x, -1))


@case("rope_theta", "1x4096x32x128")
def _():
    B, S, H, D = 1, 4096, 32, 128
    x = rnd(B, S, H, D)
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
    ang = torch.arange(S, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]

    def f():
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin
    return timeit(f)


@case("top_k", "151936 k50")
def _():
    x = rnd(151936, lo=-10, hi=10)
    return timeit(lambda: torch.topk(x, 50))


@case("top_k", "262144 k1024")
def _():
    x = rnd(262144, lo=-10, hi=10)
    return timeit(lambda: torch.topk(x, 1024))


@case("conv1d", "2048x8192")
def _():
    D, S = 2048, 8192
    x, w, b = rnd(1, D, S), rnd(D, 1, 3), rnd(D)
    return timeit(lambda: F.conv1d(x, w, b, padding=1, groups=D))


@case("affine_dequantize", "4096x14336 q8 g64")
def _():
    rows, cols = 4096, 14336
    wq = torch.randint(0, 256, (rows, cols // 64, 64), device=dev, dtype=torch.uint8)
    sc, bi = rnd(rows, cols // 64, 1, lo=-0.01, hi=0.01), rnd(rows, cols // 64, 1, lo=-0.1, hi=0.1)
    return timeit(lambda: torch.addcmul(bi, wq.float(), sc))


@case("adamw_update", "1e8")
def _():
    p = torch.nn.Parameter(rnd(100_000_000))
    p.grad = rnd(100_000_000, lo=-1e-3, hi=1e-3)
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.01, foreach=False, fused=True)
    opt.step()
    return timeit(opt.step)


@case("sgd_update", "1e8")
def _():
    p, g = rnd(100_000_000), rnd(100_000_000, lo=-1e-3, hi=1e-3)
    return timeit(lambda: p.add_(g, alpha=-1e-4))


@case("cross_entropy_batched", "4096x131072")
def _():
    N, V = 4096, 131072
    logits = rnd(N, V, lo=-8, hi=8).requires_grad_()
    t = torch.randint(0, V, (N,), device=dev)

    def f():
        loss = F.cross_entropy(logits, t)
        return torch.autograd.grad(loss, logits)
    return timeit(f)


@case("global_norm", "10x2^24")
def _():
    ts = [rnd(1 << 24) for _ in range(10)]
    return timeit(lambda: torch.linalg.vector_norm(torch.stack(torch._foreach_norm(ts))))


@case("embedding", "32000x4096 n16384")
def _():
    table, ids = rnd(32000, 4096), torch.randint(0, 32000, (16384,), device=dev)
    return timeit(lambda: F.embedding(ids, table))


@case("embedding_backward", "32000x4096 n16384")
def _():
    go, ids = rnd(16384, 4096), torch.randint(0, 32000, (16384,), device=dev)
    return timeit(lambda: torch.ops.aten.embedding_dense_backward(go, ids, 32000, -1, False))


def mm_case(op, shape, M, N, K):
    def f():
        c = torch.empty(M, N, device=dev)
        if op == "matmul":
            a, b = rnd(M, K), rnd(K, N)
            return timeit(lambda: torch.mm(a, b, out=c))
        if op == "matmul_bt":
            a, b = rnd(M, K), rnd(N, K)
            return timeit(lambda: torch.mm(a, b.t(), out=c))
        a, b = rnd(K, M), rnd(K, N)
        return timeit(lambda: torch.mm(a.t(), b, out=c))
    CASES[(op, shape)] = f


for op in ("matmul", "matmul_bt", "matmul_at"):
    for n in (4096, 8192):
        mm_case(op, f"{n}x{n}x{n}", n, n, n)


def mm_half_case(op, shape, M, N, K):
    """wgml's f16 precision beside PyTorch's f16 product (f16 in, f32 accumulation on tensor
    cores, f16 out), and its f16x3 beside PyTorch's f32 product (no TF32): the same accuracy"""
    if shape.endswith("f16x3"):
        mm_case(op, shape, M, N, K)
        return

    def f():
        c = torch.empty(M, N, device=dev, dtype=torch.half)
        if op == "matmul":
            a, b = rnd(M, K).half(), rnd(K, N).half()
            return timeit(lambda: torch.mm(a, b, out=c))
        if op == "matmul_bt":
            a, b = rnd(M, K).half(), rnd(N, K).half()
            return timeit(lambda: torch.mm(a, b.t(), out=c))
        a, b = rnd(K, M).half(), rnd(K, N).half()
        return timeit(lambda: torch.mm(a.t(), b, out=c))
    CASES[(op, shape)] = f


for op in ("matmul", "matmul_bt", "matmul_at"):
    mm_half_case(op, "4096x4096x4096 f16", 4096, 4096, 4096)
mm_half_case("matmul_bt", "4096x4096x4096 f16x3", 4096, 4096, 4096)
# the linear layers of a 12 x 768 model trained on 8 x 1024 tokens (bench_cases.c)
for op, M, N, K in (("matmul_bt", 8192, 2048, 768), ("matmul", 8192, 768, 2048), ("matmul_at", 2048, 768, 8192)):
    mm_case(op, f"{M}x{N}x{K}", M, N, K)
    mm_half_case(op, f"{M}x{N}x{K} f16", M, N, K)
mm_case("matmul_bt", "2048x11008x4096", 2048, 11008, 4096)
mm_case("matmul_bt", "2048x4096x11008", 2048, 4096, 11008)
mm_case("matmul", "2048x11008x4096", 2048, 11008, 4096)
mm_case("matmul_at", "4096x11008x2048", 4096, 11008, 2048)
mm_case("matmul_at", "7936x8448x8192", 7936, 8448, 8192)   # 8192^3's work in 4,092 tiles (wave probe)
for op in ("matmul", "matmul_bt", "matmul_at"):
    mm_case(op, "4095x4095x4095", 4095, 4095, 4095)   # no size a multiple of 4
mm_case("matmul_at", "4096x4096x4095", 4096, 4096, 4095)   # only K odd
mm_case("matmul_at", "4095x4095x4096", 4095, 4095, 4096)   # only M and N odd
mm_case("matmul_bt", "8192x50257x768", 8192, 50257, 768)   # a GPT-2 head: forward,
mm_case("matmul", "8192x768x50257", 8192, 768, 50257)      # input gradient,
mm_case("matmul_at", "50257x768x8192", 50257, 768, 8192)   # weight gradient
mm_case("matmul_bt", "1x4096x4096", 1, 4096, 4096)
mm_case("matmul_bt", "1x14336x4096", 1, 14336, 4096)
mm_case("matmul_bt", "1x4096x14336", 1, 4096, 14336)
mm_case("matmul", "1x4096x4096", 1, 4096, 4096)
mm_case("matmul", "1x4096x14336", 1, 4096, 14336)
mm_case("matmul", "1x14336x4096", 1, 14336, 4096)
mm_case("matmul_bt", "1x4096x512", 1, 4096, 512)   # 8 MiB of b, held in the L2:
mm_case("matmul", "1x4096x512", 1, 4096, 512)      # what each kernel costs beside its reads


def mm_cold_case(op, M, N, K, graph=False):
    """Decode with cold weights (tools/bench_cases.c, su_mm_cold): one b per call from copies
    totalling at least 256 MiB, so no call finds its b in the L2. graph: the `cold, fit` rows,
    timed in a CUDA graph (graph_timeit)."""
    def f():
        n = min(8, max(2, -(-(256 << 20) // (4 * N * K))))
        a, c, it = rnd(M, K), torch.empty(M, N, device=dev), itertools.count()
        if op == "matmul":
            bs = [rnd(K, N) for _ in range(n)]
            call = lambda: torch.mm(a, bs[next(it) % n], out=c)
        else:
            bs = [rnd(N, K) for _ in range(n)]
            call = lambda: torch.mm(a, bs[next(it) % n].t(), out=c)
        return graph_timeit(call, calls=8 * n) if graph else timeit(call)
    CASES[(op, f"{M}x{N}x{K} cold" + (", fit" if graph else ""))] = f


mm_cold_case("matmul_bt", 1, 4096, 4096)
mm_cold_case("matmul", 1, 4096, 4096)
mm_cold_case("matmul", 1, 4096, 14336)
mm_cold_case("matmul", 1, 14336, 4096)
for op in ("matmul", "matmul_bt"):   # the fit of fixed cost and streaming rate (bench/decode_fit.py)
    for k in (1024, 2048, 4096, 8192, 11008, 12288, 16384):
        mm_cold_case(op, 1, 4096, k, graph=True)


def mm_acc_case(shape, M, N, K):   # out += a @ b: cuBLAS with beta = 1
    def f():
        a, b, c = rnd(M, K), rnd(K, N), torch.zeros(M, N, device=dev)
        return timeit(lambda: c.addmm_(a, b))
    CASES[("matmul_with", shape)] = f


mm_acc_case("8192x768x768 accumulate", 8192, 768, 768)
mm_acc_case("8192x768x2048 accumulate", 8192, 768, 2048)


def attn_case(op, shape, B, Sq, H, KVH, D, Sk, causal, window=0, backward=False):
    def f():
        q, k, v = rnd(B, H, Sq, D), rnd(B, KVH, Sk, D), rnd(B, KVH, Sk, D)
        mask = None
        if window:
            i = torch.arange(Sq, device=dev)[:, None] + (Sk - Sq)
            j = torch.arange(Sk, device=dev)[None, :]
            mask = (j <= i) & (i - j < window)
            causal_flag = False
        else:
            causal_flag = causal and Sq > 1
        kw = dict(attn_mask=mask, is_causal=causal_flag, enable_gqa=KVH != H)
        if not backward:
            return timeit(lambda: F.scaled_dot_product_attention(q, k, v, **kw))
        q.requires_grad_(); k.requires_grad_(); v.requires_grad_()
        go = rnd(B, H, Sq, D)

        def fb():
            o = F.scaled_dot_product_attention(q, k, v, **kw)
            return torch.autograd.grad(o, (q, k, v), go)
        return timeit(fb)
    CASES[(op, shape)] = f


attn_case("flash_attention_v2", "B4 H32 S4096 D128 causal", 4, 4096, 32, 32, 128, 4096, True)
attn_case("flash_attention_v2", "B4 H32 S4096 D128", 4, 4096, 32, 32, 128, 4096, False)
# wgml's forward at F16 (f16 products, f32 sums) beside PyTorch's f32 SDPA: the goal
attn_case("flash_attention_v2", "B4 H32 S4096 D128 causal f16", 4, 4096, 32, 32, 128, 4096, True)
attn_case("flash_attention_v2", "B4 H32 S4096 D128 f16", 4, 4096, 32, 32, 128, 4096, False)
attn_case("flash_attention_v2", "B8 H12 S1024 D64 causal f16", 8, 1024, 12, 12, 64, 1024, True)
attn_case("flash_attention_v2 fwd+bwd", "B4 H32 S4096 D128 causal", 4, 4096, 32, 32, 128, 4096, True, backward=True)
# wgml keeping the forward's log-sum-exp for the backward (options.lse), as SDPA always does
attn_case("flash_attention_v2 fwd+bwd", "B4 H32 S4096 D128 causal lse", 4, 4096, 32, 32, 128, 4096, True, backward=True)
# ... at F16 in both directions, beside PyTorch's f32 SDPA
attn_case("flash_attention_v2 fwd+bwd", "B4 H32 S4096 D128 causal lse f16", 4, 4096, 32, 32, 128, 4096, True, backward=True)
attn_case("flash_attention_v2 fwd+bwd", "B8 H12 S1024 D64 causal lse f16", 8, 1024, 12, 12, 64, 1024, True, backward=True)
attn_case("flash_attention_v2", "B1 H32 KV8 S4096 D128 causal", 1, 4096, 32, 8, 128, 4096, True)
attn_case("flash_attention_v2", "B1 H32 S4096 D128 causal w1024", 1, 4096, 32, 32, 128, 4096, True, window=1024)
attn_case("flash_attention_v2", "decode H32 KV8 D128 ctx4096", 1, 1, 32, 8, 128, 4096, True)
attn_case("flash_attention_v2", "decode H32 KV8 D128 ctx32768", 1, 1, 32, 8, 128, 32768, True)


# the ops of one decode step of the end-to-end model (12 x 768, ffn 2048, 12 heads of 64)
mm_case("matmul_bt", "1x768x768", 1, 768, 768)
mm_case("matmul_bt", "1x2048x768", 1, 2048, 768)
mm_case("matmul_bt", "1x768x2048", 1, 768, 2048)
mm_case("matmul_bt", "1x256x768", 1, 256, 768)
attn_case("flash_attention_v2", "decode H12 D64 ctx512", 1, 1, 12, 12, 64, 512, True)


@case("rms_norm_residual_with", "1x768")
def _():
    x, r, w = rnd(1, 768, lo=-3, hi=3), rnd(1, 768), rnd(768, lo=0.5, hi=1.5)

    def f():
        s = x + r
        return s, F.rms_norm(s, (768,), w, eps=1e-5)
    return timeit(f)


@case("rope_theta", "1x1x12x64")
def _():
    D = 64
    x = rnd(1, 1, 12, D)
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
    emb = torch.cat([inv * 300.0, inv * 300.0], -1)
    cos, sin = emb.cos()[None, None, None, :], emb.sin()[None, None, None, :]

    def f():
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin
    return timeit(f)


@case("copy_tensor", "768")
def _():
    a, c = rnd(768), torch.empty(768, device=dev)
    return timeit(lambda: c.copy_(a))


@case("silu_gate_fused", "2048")
def _():
    up, gate = rnd(2048, lo=-4, hi=4), rnd(2048, lo=-4, hi=4)
    return timeit(lambda: F.silu(up) * gate)


@case("embedding", "256x768 n1")
def _():
    table, ids = rnd(256, 768), torch.randint(0, 256, (1,), device=dev)
    return timeit(lambda: F.embedding(ids, table))


@case("top_k", "256 k1")
def _():
    x = rnd(256, lo=-10, hi=10)
    return timeit(lambda: torch.topk(x, 1))


# the matrix products and attention of one training step of the end-to-end model
for op, (M, N, K) in (("matmul_bt", (8192, 768, 768)), ("matmul_bt", (8192, 2048, 768)), ("matmul_bt", (8192, 768, 2048)),
                      ("matmul", (8192, 768, 768)), ("matmul", (8192, 768, 2048)), ("matmul", (8192, 2048, 768)),
                      ("matmul_at", (768, 768, 8192)), ("matmul_at", (768, 2048, 8192)), ("matmul_at", (2048, 768, 8192))):
    mm_case(op, f"{M}x{N}x{K}", M, N, K)
attn_case("flash_attention_v2", "B8 H12 S1024 D64 causal", 8, 1024, 12, 12, 64, 1024, True)
attn_case("flash_attention_v2 fwd+bwd", "B8 H12 S1024 D64 causal", 8, 1024, 12, 12, 64, 1024, True, backward=True)
attn_case("flash_attention_v2 fwd+bwd", "B8 H12 S1024 D64 causal lse", 8, 1024, 12, 12, 64, 1024, True, backward=True)
# ... and its scores (options.scores); SDPA's backward recomputes them
attn_case("flash_attention_v2 fwd+bwd", "B8 H12 S1024 D64 causal lse scores", 8, 1024, 12, 12, 64, 1024, True, backward=True)
attn_case("flash_attention_v2", "B8 H12 S1024 D64 causal lse scores", 8, 1024, 12, 12, 64, 1024, True)
attn_case("flash_attention_v2 fwd+bwd", "B4 H16 S1024 D128 causal lse scores", 4, 1024, 16, 16, 128, 1024, True, backward=True)
attn_case("flash_attention_v2", "B4 H16 S1024 D128 causal lse scores", 4, 1024, 16, 16, 128, 1024, True)


@case("add", "1024 x1000 chain")
def _():
    a, b = rnd(1024, lo=-1e-3, hi=1e-3), rnd(1024, lo=-1e-3, hi=1e-3)
    return host_chain(lambda: a.add_(b))


@case("add", "1024 x1000 chain, GPU clock")
def _():
    """The GPU's time per dependent tiny kernel, without the host: 1000 adds in a CUDA graph."""
    a, b = rnd(1024, lo=-1e-3, hi=1e-3), rnd(1024, lo=-1e-3, hi=1e-3)
    return graph_timeit(lambda: a.add_(b), calls=1000)


@case("matmul", "1x256x256 x1000 chain, GPU clock")
def _():
    a, b, c = rnd(1, 256), rnd(256, 256), torch.empty(1, 256, device=dev)
    return graph_timeit(lambda: torch.mm(a, b, out=c), calls=1000)


def host_each(fn, n=2000, samples=15):
    """Host clock around n calls that each wait for the device: a round trip."""
    import time
    fn()
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    out.sort()
    return out[len(out) // 2]


@case("context_sync", "nothing pending")
def _():
    return host_each(torch.cuda.synchronize)


@case("tensor_read", "add 1024, read 4 bytes")
def _():
    a, b = rnd(1024, lo=-1e-3, hi=1e-3), rnd(1024, lo=-1e-3, hi=1e-3)
    return host_each(lambda: a.add_(b)[0].item())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--filter", default=None)
    args = ap.parse_args()
    with open(args.json, "w") as f:
        f.write(json.dumps({"kind": "meta", "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}) + "\n")
        for (op, shape), fn in CASES.items():
            if args.filter and args.filter not in op and args.filter not in shape:
                continue
            try:
                sec = fn()
                f.write(json.dumps({"kind": "case", "op": op, "shape": shape, "seconds": sec}) + "\n")
                print(f"torch {op:28s} {shape:28s} {sec * 1e6:10.2f} us", flush=True)
            except Exception as e:  # report and continue: one failing case must not hide the rest
                print(f"torch {op} {shape}: failed: {e}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
