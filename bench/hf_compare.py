"""Checks wgml against Hugging Face transformers on a model built here: a byte-level BPE
tokenizer trained with `tokenizers`, a random-weight LlamaForCausalLM shaped like a small
SmolLM2 (GQA, rope_theta 100000, tied embeddings), saved with save_pretrained. Then
`wgml logits` runs a text through it, and the script compares the token ids (exactly) and
every position's logits (within 1e-4 relative) with transformers' in float64.

    python3 bench/hf_compare.py --wgml build-device/wgml [--dir /tmp/hf-tiny]
"""
import argparse
import os
import struct
import subprocess
import sys

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

TEXT = ("wgml trains and runs transformer language models on any GPU through WebGPU. "
        "The same code runs on an NVIDIA H200 through Vulkan and on a CPU through lavapipe: "
        "matrices, attention, norms -- 12345 tokens/s? Unicode: déjà vu, naïve, 東京.")


def build(d):
    os.makedirs(d, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [open(__file__).read()] * 4 + [TEXT] * 8
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=192, intermediate_size=512, num_hidden_layers=3,
                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512, rope_theta=100000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, torch_dtype="float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():   # larger than the default init, so the logits are not all near 0
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.05)
    model.save_pretrained(d, safe_serialization=True)
    return tok, model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgml", required=True)
    ap.add_argument("--dir", default="/tmp/hf-tiny")
    a = ap.parse_args()
    tok, model = build(a.dir)
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
