"""The PyTorch + PEFT side of bench/lora_h200.sh: LoRA fine-tuning in PEFT and transformers
(eager, f32, TF32 off) on the same random-weight models and data as `wgml finetune`.

  build  --shape smollm2|1b --out DIR [--corpus FILE]
         a LlamaForCausalLM of that shape with random weights (transformers' config class,
         seed 0) saved in f32, a byte-level BPE tokenizer.json trained with `tokenizers` on
         the corpus, and DIR/curve.jsonl: 8 text records for the loss-curve comparison
  init   --model DIR --out ADAPTER
         PEFT's initial adapter (rank 8, alpha 16, the seven projections; A Kaiming-uniform,
         B zero) for both sides to start from
  curve  --model DIR --adapter ADAPTER --data JSONL --steps N --lr LR --warmup W --min-lr F
         --context T --out CSV
         PEFT training on every record at each step (one batch of all of them, as
         `wgml finetune --batch 8` takes them: each text's tokens and EOS, cut to T + 1,
         padded with ignored labels), AdamW (0.9, 0.999, 1e-8, no weight decay), wgml's
         schedule (linear warm-up, cosine to F * LR), gradient norm clipped to 1
  speed  --model DIR --batch B --context T --steps S [--json FILE]
         tokens/s of LoRA steps on random tokens after 3 warm-up steps, and the peak GPU
         memory PyTorch allocated
"""
import argparse
import json
import math
import os
import time

import torch

SHAPES = {
    # SmolLM2-135M and Llama-3.2-1B as their config.json files give them
    "smollm2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=True),
    "1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
               rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def no_tf32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def build(a):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM
    os.makedirs(a.out, exist_ok=True)
    text = open(a.corpus, encoding="utf-8", errors="replace").read()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text[i:i + 4096] for i in range(0, len(text), 4096)],
                            trainers.BpeTrainer(vocab_size=4000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                show_progress=False))
    tok.save(os.path.join(a.out, "tokenizer.json"))
    cfg = LlamaConfig(**SHAPES[a.shape], bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).float()
    model.save_pretrained(a.out, safe_serialization=True)
    with open(os.path.join(a.out, "curve.jsonl"), "w") as f:
        for i in range(8):
            f.write(json.dumps({"text": text[20000 * i:20000 * i + 3000]}) + "\n")
    print("built %s (%d parameters) in %s" % (a.shape, sum(p.numel() for p in model.parameters()), a.out))


def load(model_dir, device="cuda"):
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to(device)


def init(a):
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(1)
    m = get_peft_model(load(a.model, "cpu"), LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0,
                                                        bias="none", task_type="CAUSAL_LM"))
    m.save_pretrained(a.out)


def lr_at(step, steps, warmup, lr, min_frac):
    """bench's copy of tools/train_loop.c's lr_at"""
    if step < warmup:
        return lr * (step + 1) / warmup
    span = steps - warmup
    p = (step - warmup) / (span - 1) if span > 1 else 1
    lo = lr * min_frac
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * p))


def curve(a):
    from peft import PeftModel
    from tokenizers import Tokenizer
    no_tf32()
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    rows = [json.loads(l)["text"] for l in open(a.data)]
    T = a.context
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    labels = torch.full((len(rows), T), -100, dtype=torch.long)
    for r, text in enumerate(rows):
        t = (tok.encode(text).ids + [2])[:T + 1]   # EOS 2 after the text, as wgml appends it
        ids[r, :len(t) - 1] = torch.tensor(t[:-1])
        if len(t) < T + 1:   # padding: the example's last id, never learned
            ids[r, len(t) - 1:] = t[-1]
        labels[r, :len(t) - 1] = torch.tensor(t[1:])
    model = PeftModel.from_pretrained(load(a.model), a.adapter, is_trainable=True)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    ids, labels = ids.cuda(), labels.cuda()
    with open(a.out, "w") as f:
        f.write("step,loss\n")
        for step in range(a.steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, a.steps, a.warmup, a.lr, a.min_lr)
            logits = model(input_ids=ids).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                     ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            f.write("%d,%.6f\n" % (step + 1, loss.item()))
    print("PEFT curve written to %s" % a.out)


def speed(a):
    from peft import LoraConfig, get_peft_model
    no_tf32()
    torch.manual_seed(1)
    model = get_peft_model(load(a.model), LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0,
                                                     bias="none", task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    vocab = model.config.vocab_size
    ids = torch.randint(0, min(vocab, 4000), (a.batch, a.context + 1), device="cuda")
    torch.cuda.reset_peak_memory_stats()

    def step():
        logits = model(input_ids=ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    r = {"side": "peft", "batch": a.batch, "context": a.context, "tokens_per_s": a.steps * a.batch * a.context / dt,
         "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
         "trainable": sum(p.numel() for p in params)}
    print(json.dumps(r))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(r) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--shape", choices=sorted(SHAPES), required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--corpus", default="/tmp/wgml-corpus.txt")
    i = sub.add_parser("init")
    i.add_argument("--model", required=True)
    i.add_argument("--out", required=True)
    c = sub.add_parser("curve")
    for k in ("--model", "--adapter", "--data", "--out"):
        c.add_argument(k, required=True)
    c.add_argument("--steps", type=int, default=20)
    c.add_argument("--lr", type=float, default=1e-3)
    c.add_argument("--warmup", type=int, default=2)
    c.add_argument("--min-lr", type=float, default=0.1)
    c.add_argument("--context", type=int, default=256)
    s = sub.add_parser("speed")
    s.add_argument("--model", required=True)
    s.add_argument("--batch", type=int, default=8)
    s.add_argument("--context", type=int, default=512)
    s.add_argument("--steps", type=int, default=10)
    s.add_argument("--json")
    a = p.parse_args()
    {"build": build, "init": init, "curve": curve, "speed": speed}[a.cmd](a)


if __name__ == "__main__":
    main()
