"""Checks wgml against Hugging Face transformers on a model built here: a tokenizer trained
with `tokenizers` (byte-level BPE, or SentencePiece-style BPE with byte fallback through the
Prepend / Replace normalizer or the Metaspace pre-tokenizer, as Llama 2 and Mistral files
have them), a random-weight model of the family (transformers' own config class: Llama
shaped like a small SmolLM2, Mistral with a sliding window shorter than the text, Qwen2
with its q, k, v biases, Qwen3 with its q and k norms, LFM2 with gated short-convolution
layers between its attention layers and the MLP's size from block_auto_adjust_ff_dim's rule,
Gemma 3 with sliding and global layers at head_dim 256 and its (1 + w) norms randomised),
saved with save_pretrained. Then `wgml logits` runs a text through it, and the script compares
the token ids (exactly) and every position's logits (within 1e-4 relative) with transformers'
in float64.

    python3 bench/hf_compare.py --wgml build-device/wgml [--family llama|mistral|qwen2|qwen3|lfm2|gemma3]
                                [--tokenizer bytelevel|sentencepiece|metaspace] [--dir /tmp/hf-tiny]
"""
import argparse
import os
import struct
import subprocess
import sys

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
import transformers

TEXT = ("wgml trains and runs transformer language models on any GPU through WebGPU. "
        "The same code runs on an NVIDIA H200 through Vulkan and on a CPU through lavapipe: "
        "matrices, attention, norms -- 12345 tokens/s? Unicode: déjà vu, naïve, 東京.")


SPC = "\u2581"


def train_tokenizer(kind):
    corpus = [open(__file__).read()] * 4 + [TEXT] * 8
    if kind == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                            show_progress=False))
        return tok
    # SentencePiece style: learn pieces over U+2581-spelled text, then rebuild the model
    # with <unk> <s> </s> and the 256 <0xNN> byte tokens first, as Llama 2's file has them
    # (a few characters of TEXT are left out of the training text: they take the fallback)
    learn = Tokenizer(models.BPE())
    learn.normalizer = normalizers.Sequence([normalizers.Prepend(SPC), normalizers.Replace(" ", SPC)])
    learn.train_from_iterator([c.replace("\u6771", "").replace("\u00ef", "") for c in corpus],
                              trainers.BpeTrainer(vocab_size=300, show_progress=False))
    state = __import__("json").loads(learn.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(state["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if kind == "sentencepiece":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPC), normalizers.Replace(" ", SPC)])
        tok.decoder = decoders.Sequence([decoders.Replace(SPC, " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPC, prepend_scheme="first", split=True)
        tok.decoder = decoders.Metaspace(replacement=SPC, prepend_scheme="first", split=True)
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


def family_model(family, vocab):
    common = dict(vocab_size=vocab, hidden_size=192, intermediate_size=512, num_hidden_layers=3, num_attention_heads=6,
                  num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=True)
    if family == "llama":
        cfg = transformers.LlamaConfig(rope_theta=100000.0, **common)
        cls = transformers.LlamaForCausalLM
    elif family == "mistral":   # a window of 16 tokens over a text of about 100
        cfg = transformers.MistralConfig(rope_theta=10000.0, sliding_window=16, **common)
        cls = transformers.MistralForCausalLM
    elif family == "qwen2":
        cfg = transformers.Qwen2Config(rope_theta=1000000.0, use_sliding_window=False, **common)
        cls = transformers.Qwen2ForCausalLM
    elif family == "qwen3":
        cfg = transformers.Qwen3Config(rope_theta=1000000.0, head_dim=32, attention_bias=False, **common)
        cls = transformers.Qwen3ForCausalLM
    elif family == "gemma3":   # sliding (16 tokens of a text of about 130), sliding, global; Gemma's head_dim 256
        g = {k: v for k, v in common.items() if k != "num_hidden_layers"}
        cfg = transformers.Gemma3TextConfig(num_hidden_layers=3, head_dim=256, query_pre_attn_scalar=64, sliding_window=16,
                                            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                            rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                            hidden_activation="gelu_pytorch_tanh", **g)
        cls = transformers.Gemma3ForCausalLM
    else:   # LFM2: norm_eps; block_auto_adjust_ff_dim takes 2/3 of intermediate_size 512 (341), rounded up to 256: 512
        lfm2 = {k: v for k, v in common.items() if k not in ("rms_norm_eps", "num_hidden_layers")}
        cfg = transformers.Lfm2Config(rope_theta=1000000.0, norm_eps=1e-5, num_hidden_layers=4,
                                      layer_types=["conv", "full_attention", "conv", "full_attention"],
                                      conv_L_cache=3, conv_bias=False, **lfm2)
        cls = transformers.Lfm2ForCausalLM
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(cfg).float().eval()
    with torch.no_grad():   # larger than the default init, so the logits are not all near 0
        for name, p in model.named_parameters():
            if name.endswith("conv.conv.weight"):   # LFM2's convolution taps: large enough to matter
                p.normal_(0.0, 0.5)
            elif p.dim() > 1:
                p.normal_(0.0, 0.05)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.3)
            elif "q_norm" in name or "k_norm" in name or "q_layernorm" in name or "k_layernorm" in name:
                p.uniform_(0.7, 1.3)
            elif family == "gemma3" and "norm" in name:   # w of Gemma's (1 + w): zero at init
                p.uniform_(-0.3, 0.3)
    return model


def build(d, family, kind):
    os.makedirs(d, exist_ok=True)
    tok = train_tokenizer(kind)
    tok.save(os.path.join(d, "tokenizer.json"))
    model = family_model(family, tok.get_vocab_size())
    model.save_pretrained(d, safe_serialization=True)
    return tok, model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgml", required=True)
    ap.add_argument("--dir", default="/tmp/hf-tiny")
    ap.add_argument("--family", default="llama", choices=["llama", "mistral", "qwen2", "qwen3", "lfm2", "gemma3"])
    ap.add_argument("--tokenizer", default="bytelevel", choices=["bytelevel", "sentencepiece", "metaspace"])
    a = ap.parse_args()
    tok, model = build(a.dir, a.family, a.tokenizer)
    print(f"{a.family} model, {a.tokenizer} tokenizer")
    ids_ref = tok.encode(TEXT).ids
    with torch.no_grad():
        ref = model.double()(torch.tensor([ids_ref])).logits[0].numpy()
    out = os.path.join(a.dir, "wgml_logits.bin")
    subprocess.run([a.wgml, "logits", "--model", a.dir, "--text", TEXT, "--out", out], check=True)
    raw = open(out, "rb").read()
    n, vocab = struct.unpack_from("<II", raw, 0)
    ids = list(struct.unpack_from(f"<{n}I", raw, 8))
    got = np.frombuffer(raw, dtype="<f4", offset=8 + 4 * n).reshape(n, vocab).astype(np.float64)
    ok_ids = ids == ids_ref
    decoded = tok.decode(ids_ref)
    print(f"tokenizers decodes its ids back to the text: {decoded == TEXT}")
    print(f"tokenizer: {len(ids_ref)} ids from tokenizers, {n} from wgml: {'identical' if ok_ids else 'DIFFERENT'}")
    if not ok_ids:
        print("  tokenizers:", ids_ref[:40])
        print("  wgml:      ", ids[:40])
        sys.exit(1)
    diff = np.abs(got - ref)
    rel_max = diff.max() / np.abs(ref).max()
    rel_fro = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    print(f"logits [{n} x {vocab}]: max |wgml - transformers| = {diff.max():.3e}, max |ref| = {np.abs(ref).max():.3f}, "
          f"max-relative {rel_max:.3e}, ||diff||/||ref|| {rel_fro:.3e} (limit 1e-4)")
    argmax_same = int((got.argmax(1) == ref.argmax(1)).sum())
    print(f"argmax agrees at {argmax_same} of {n} positions")
    sys.exit(0 if rel_max <= 1e-4 else 1)


if __name__ == "__main__":
    main()
