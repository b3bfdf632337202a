"""wgml's LoRA adapters against PEFT's, both ways, on a model wgml trained:

  check    PEFT loads an adapter wgml wrote (PeftModel.from_pretrained, unchanged) and its
           logits on the ids of a `wgml logits --adapter` file match wgml's.
  make     PEFT writes an adapter of its own (random A and B, another rank, alpha and target
           set) for wgml to load, with its logits on the same ids.
  compare  two logits files (`wgml logits` format) agree; pure Python, for a machine
           without numpy or torch.

    python3 bench/peft_compare.py check --model BASE --adapter DIR --logits wgml.bin
    python3 bench/peft_compare.py make --model BASE --ids wgml.bin --out DIR    (DIR.bin beside it)
    python3 bench/peft_compare.py compare a.bin b.bin

The logits format: u32 n, u32 vocab, n u32 ids, n * vocab f32 (little-endian).
"""
import argparse
import array
import struct
import sys

TOL = 1e-4   # relative to the largest logit's magnitude: f32 GPU sums against f32 PyTorch


def read_logits(path):
    with open(path, "rb") as f:
        n, vocab = struct.unpack("<II", f.read(8))
        ids = array.array("I")
        ids.frombytes(f.read(4 * n))
        logits = array.array("f")
        logits.frombytes(f.read(4 * n * vocab))
    if sys.byteorder != "little":
        ids.byteswap()
        logits.byteswap()
    return n, vocab, list(ids), logits


def write_logits(path, ids, logits):
    n, vocab = logits.shape
    with open(path, "wb") as f:
        f.write(struct.pack("<II", n, vocab))
        f.write(struct.pack("<%dI" % n, *ids))
        f.write(logits.astype("<f4").tobytes())


def agree(name, got, want):
    scale = max(max(abs(x) for x in want), 1e-30)
    worst = max(abs(a - b) for a, b in zip(got, want)) / scale
    ok = worst <= TOL
    print("%s: %d logits, largest difference %.3g of the largest logit (tolerance %g): %s"
          % (name, len(want), worst, TOL, "ok" if ok else "FAILED"))
    return ok


def load_base(model):
    import torch
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM.from_pretrained(model, torch_dtype=torch.float32).eval()


def peft_logits(model, ids):
    import torch
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


def check(a):
    from peft import PeftModel
    n, vocab, ids, wgml = read_logits(a.logits)
    model = PeftModel.from_pretrained(load_base(a.model), a.adapter).eval()
    got = peft_logits(model, ids)
    assert got.shape == (n, vocab), got.shape
    return agree("PEFT on wgml's adapter %s" % a.adapter, list(got.reshape(-1)), list(wgml))


def make(a):
    import torch
    from peft import LoraConfig, get_peft_model
    n, vocab, ids, _ = read_logits(a.ids)
    torch.manual_seed(7)
    cfg = LoraConfig(r=6, lora_alpha=9, target_modules=["q_proj", "k_proj", "o_proj", "gate_proj", "up_proj"],
                     lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", init_lora_weights=False)
    model = get_peft_model(load_base(a.model), cfg).eval()
    model.save_pretrained(a.out)
    write_logits(a.out + ".bin", ids, peft_logits(model, ids))
    print("PEFT's adapter in %s, its logits in %s.bin" % (a.out, a.out))
    return True


def compare(a):
    n1, v1, ids1, x = read_logits(a.a)
    n2, v2, ids2, y = read_logits(a.b)
    if (n1, v1, ids1) != (n2, v2, ids2):
        print("the files hold other tokens: %d x %d against %d x %d" % (n1, v1, n2, v2))
        return False
    return agree("%s against %s" % (a.a, a.b), list(x), list(y))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--model", required=True)
    c.add_argument("--adapter", required=True)
    c.add_argument("--logits", required=True)
    m = sub.add_parser("make")
    m.add_argument("--model", required=True)
    m.add_argument("--ids", required=True)
    m.add_argument("--out", required=True)
    k = sub.add_parser("compare")
    k.add_argument("a")
    k.add_argument("b")
    a = p.parse_args()
    ok = {"check": check, "make": make, "compare": compare}[a.cmd](a)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
