#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets into tests/fuzz/corpus/<target>/: small valid
inputs of every shape the parsers accept, and near misses of each rule they enforce.

    python3 tests/fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- safetensors --------------------------------------------------------------------------

BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
        "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4,
        "F6_E2M3": 6, "F6_E3M2": 6}


def st(tensors, metadata=None, pad=True, raw_header=None):
    """tensors: [(name, dtype, shape)]; data is laid out in order."""
    header, off, data = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = n * BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
        data += bytes((off + i) * 37 & 255 for i in range(size))
        off += size
    h = (raw_header if raw_header is not None else json.dumps(header, separators=(",", ":"))).encode()
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "small_f32", st([("w", "F32", [2, 3])]))
put("safetensors", "mixed", st([("model.embed_tokens.weight", "BF16", [4, 2]), ("norm", "F32", [2]), ("ids", "I64", [3]),
                                 ("mask", "BOOL", [5]), ("q4", "F4", [6]), ("q6", "F6_E2M3", [4])],
                                {"format": "pt", "note": "caf\u00e9"}))
put("safetensors", "scalar_empty", st([("s", "F32", []), ("e", "F16", [0, 7]), ("u", "U8", [1])]))
put("safetensors", "metadata_only", st([], {"format": "pt"}))
put("safetensors", "empty", st([]))
put("safetensors", "unicode_names", st([("\u4f60\u597d", "U8", [2]), ("a\"b\\c", "U8", [1])]))
put("safetensors", "all_dtypes", st([("t_" + k, k, [8]) for k in BITS]))
put("safetensors", "reversed", st([], raw_header='{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}') + b"\0" * 4)
put("safetensors", "overlap", st([], raw_header='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                                '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}') + b"\0" * 12)
put("safetensors", "hole", st([], raw_header='{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}') + b"\0" * 2)
put("safetensors", "mismatch", st([], raw_header='{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}') + b"\0" * 8)
put("safetensors", "overflow", st([], raw_header='{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}'))
put("safetensors", "huge_len", struct.pack("<Q", 1 << 62) + b"{}")
put("safetensors", "short", b"\x02\x00\x00")
put("safetensors", "dup", st([], raw_header='{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                            '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}') + b"\0" * 2)

# ---- config.json ---------------------------------------------------------------------------

smollm2 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 0, "eos_token_id": 0,
           "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536, "max_position_embeddings": 8192,
           "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
           "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True,
           "torch_dtype": "bfloat16", "vocab_size": 49152}
llama31 = {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
           "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "max_position_embeddings": 131072}
mlx = {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
       "num_attention_heads": 32, "num_key_value_heads": 4, "quantization": {"group_size": 64, "bits": 4},
       "quantization_config": {"group_size": 64, "bits": 4}, "rope_parameters": {"rope_type": "linear", "factor": 2.0}}
lfm2 = {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "vocab_size": 65536, "hidden_size": 1024,
        "intermediate_size": 6656, "block_ff_dim": 6656, "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0,
        "block_multiple_of": 256, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8,
        "norm_eps": 1e-05, "conv_L_cache": 3, "conv_bias": False, "theta": 1000000.0, "tie_embedding": True,
        "layer_types": ["conv", "conv", "full_attention", "conv"], "full_attn_idxs": [2]}
put("config", "lfm2.json", json.dumps(lfm2))
gemma3 = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 1152,
          "intermediate_size": 6912, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 1,
          "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256, "sliding_window": 512,
          "sliding_window_pattern": 6, "rms_norm_eps": 1e-06,
          "attn_logit_softcapping": None, "final_logit_softcapping": None,
          "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 2,
          "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
put("config", "gemma3.json", json.dumps(gemma3))
put("config", "smollm2.json", json.dumps(smollm2, indent=2))
put("config", "llama31.json", json.dumps(llama31))
put("config", "mlx.json", json.dumps(mlx))
put("config", "minimal.json", '{"vocab_size":256,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,'
                              '"num_attention_heads":4}')
put("config", "bad_heads.json", '{"vocab_size":10,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,'
                                '"num_attention_heads":6}')
put("config", "bad_type.json", '{"vocab_size":"10"}')
put("config", "bad_json.json", '{"vocab_size":10,')

# ---- tokenizer.json, and texts for the built-in tokenizers (first byte: which) ----------------

def alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = alphabet()


def spell(s):
    return "".join(B2U[b] for b in s.encode())


LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def tokenizer(pre, merges, pair_form=False, added=(), ignore=False):
    vocab = {B2U[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(spell(a + b), len(vocab))
    ms = [[spell(a), spell(b)] if pair_form else spell(a) + " " + spell(b) for a, b in merges]
    adds = [{"id": len(vocab) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True} for i, c in enumerate(added)]
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": adds, "normalizer": None,
                       "pre_tokenizer": pre, "post_processor": None,
                       "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                                 "ignore_merges": ignore, "vocab": vocab, "merges": ms}}, ensure_ascii=False)


BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (" ", "w"), ("o", "r"), (" w", "or"), ("l", "d"),
          (" wor", "ld"), (" ", " "), ("1", "2"), ("12", "3"), ("t", "h"), ("th", "e"), (" ", "the")]
put("tokenizer", "tok_gpt2", tokenizer(BL, MERGES, added=["<|endoftext|>"]).encode())
put("tokenizer", "tok_llama3", tokenizer(
    {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated",
                                            "invert": False}, dict(BL, use_regex=False)]},
    MERGES, pair_form=True, added=["<|begin_of_text|>", "<|eot_id|>"], ignore=True).encode())
put("tokenizer", "tok_smollm2", tokenizer(
    {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BL]}, MERGES,
    added=["<|endoftext|>", "<|im_start|>"]).encode())
put("tokenizer", "tok_bad_merge", tokenizer(BL, MERGES).replace('"h e"', '"h q z"').encode())
SPC = "\u2581"


def sp_tokenizer(metaspace, byte_fallback=True):
    """A SentencePiece-style tokenizer.json: the Prepend / Replace normalizer (or Metaspace),
    <0xNN> byte tokens, pieces spelled with U+2581."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if byte_fallback:
        for b in range(256):
            vocab["<0x%02X>" % b] = len(vocab)
    merges = [("t", "h"), ("th", "e"), (SPC, "the"), ("a", "n"), (SPC, "an"), (SPC, SPC), ("e", SPC)]
    for ch in [SPC, "t", "h", "e", "a", "n", "\u00e9"]:
        vocab.setdefault(ch, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    if metaspace:
        norm, pre = None, {"type": "Metaspace", "replacement": SPC, "prepend_scheme": "first", "split": True}
        dec = {"type": "Metaspace", "replacement": SPC, "prepend_scheme": "first", "split": True}
    else:
        norm = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SPC},
                                                    {"type": "Replace", "pattern": {"String": " "}, "content": SPC}]}
        pre = None
        dec = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": SPC}, "content": " "},
                                                {"type": "ByteFallback"}, {"type": "Fuse"},
                                                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    adds = [{"id": i, "content": c, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    return json.dumps({"version": "1.0", "added_tokens": adds, "normalizer": norm, "pre_tokenizer": pre,
                       "post_processor": None, "decoder": dec,
                       "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": byte_fallback,
                                 "vocab": vocab, "merges": [a + " " + b for a, b in merges]}}, ensure_ascii=False)


put("tokenizer", "tok_sp_normalizer", sp_tokenizer(False).encode())
put("tokenizer", "tok_sp_metaspace", sp_tokenizer(True, byte_fallback=False).encode())
put("tokenizer", "tok_sp_bad_fallback", sp_tokenizer(False).replace('"<0x41>"', '"<0x4G>"').encode())
TEMPLATE = {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                              {"Sequence": {"id": "A", "type_id": 0}},
                                              {"SpecialToken": {"id": "</s>", "type_id": 0}}],
     "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                    "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}]}
with_template = json.loads(sp_tokenizer(False))
with_template["post_processor"] = TEMPLATE
put("tokenizer", "tok_sp_template", json.dumps(with_template, ensure_ascii=False).encode())
texts = {"prose": "Hello world! The quick brown fox, it's 12345 o'clock.\n\nNew paragraph  with  spaces.",
         "code": "def f(x):\n\tif x == 0:\n\t\treturn [1, 2, 3]\r\n    return {'a': x ** 2}  # done\n",
         "unicode": "caf\u00e9 na\u00efve \u4f60\u597d\u4e16\u754c \U0001F600\U0001F44D \u0645\u0631\u062d\u0628\u0627 \u00bd\u2163 e\u0301",
         "specials": "<|endoftext|>hi<|im_start|> <|x|> x<|x|>y \u00e9t\u00e9 <|endoftext|",
         "spaces": " \t \n\n \r\n   \u00a0\u3000 x  ",
         "digits": "1234567890 3.14 1,000 \u0663\u0664\u0665 x1y22z333"}
for kind in range(8):
    for name, t in texts.items():
        put("encode", "text%d_%s" % (kind, name), bytes([kind]) + t.encode())
put("encode", "text0_invalid_utf8", bytes([0]) + b"ab\xff\xfe\xc3(\xe4\xbd \xf0\x9f\x98 z")

# ---- model.safetensors.index.json -------------------------------------------------------------

put("index", "two_shards.json", json.dumps({"metadata": {"total_size": 24}, "weight_map": {
    "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"}}))
put("index", "traversal.json", '{"weight_map":{"a":"../x.safetensors"}}')
put("index", "absolute.json", '{"weight_map":{"a":"/etc/passwd"}}')
put("index", "not_string.json", '{"weight_map":{"a":1}}')
put("index", "empty.json", '{"weight_map":{}}')

# ---- GGUF -------------------------------------------------------------------------------------

GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144),
        "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}


def gs(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gkv(key, vtype, payload):
    return gs(key) + struct.pack("<I", vtype) + payload


def gguf(kvs, tensors, version=3, align=32):
    """kvs: raw pairs; tensors: [(name, type, shape innermost first)]; data filled in order."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    off, sizes = 0, []
    for name, typ, shape in tensors:
        code, block, size = GGML[typ]
        n = 1
        for d in shape:
            n *= d
        sizes.append(n // block * size)
        out += gs(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", code, off)
        off += (sizes[-1] + align - 1) // align * align
    out += b"\0" * (-len(out) % align)
    for i, size in enumerate(sizes):
        out += bytes((i * 16 + j) & 255 for j in range(size)) + b"\0" * (-size % align)
    return out


META = [gkv("general.architecture", 8, gs("llama")), gkv("llama.block_count", 4, struct.pack("<I", 1)),
        gkv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)), gkv("flag", 7, b"\1"),
        gkv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + gs("a") + gs("") + gs("\u00e9")),
        gkv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<ff", -1.0, -2.5)),
        gkv("i64", 11, struct.pack("<q", -5)), gkv("f64", 12, struct.pack("<d", 0.25))]
TENSORS = [("token_embd.weight", "F32", [4, 3]), ("blk.0.attn_q.weight", "Q8_0", [32, 2]),
           ("blk.0.ffn_down.weight", "Q4_K", [256, 1]), ("blk.0.ffn_up.weight", "Q6_K", [256, 1]),
           ("output_norm.weight", "BF16", [3]), ("x", "Q4_0", [64]), ("h", "F16", [2, 2, 2, 2])]
put("gguf", "model", gguf(META, TENSORS))
# tokenizers: SentencePiece ("llama": pieces, scores, types 1/2/3/6) and byte-level ("gpt2")
SPM_TOKENS = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + ["\u2581", "a", "b", "\u2581a", "ab"]
SPM_TYPES = [2, 3, 3] + [6] * 256 + [1] * 5
SPM_SCORES = [0.0] * 259 + [0.0, 0.0, 0.0, -2.0, -1.0]
def str_array(items):
    return struct.pack("<IQ", 8, len(items)) + b"".join(gs(t) for t in items)
SPM_META = [gkv("general.architecture", 8, gs("llama")), gkv("tokenizer.ggml.model", 8, gs("llama")),
            gkv("tokenizer.ggml.tokens", 9, str_array(SPM_TOKENS)),
            gkv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, len(SPM_SCORES)) + struct.pack("<%df" % len(SPM_SCORES), *SPM_SCORES)),
            gkv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(SPM_TYPES)) + struct.pack("<%di" % len(SPM_TYPES), *SPM_TYPES)),
            gkv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)), gkv("tokenizer.ggml.add_bos_token", 7, b"\1")]
put("gguf", "tokenizer_spm", gguf(SPM_META, []))
BPE_TOKENS = [B2U[b] for b in range(256)] + [B2U[ord("a")] + B2U[ord("b")]]
BPE_META = [gkv("tokenizer.ggml.model", 8, gs("gpt2")), gkv("tokenizer.ggml.tokens", 9, str_array(BPE_TOKENS)),
            gkv("tokenizer.ggml.merges", 9, str_array(["a b"]))]
put("gguf", "tokenizer_bpe", gguf(BPE_META, []))
put("gguf", "aligned64", gguf(META + [gkv("general.alignment", 4, struct.pack("<I", 64))], TENSORS[:3], align=64))
put("gguf", "version2", gguf(META[:2], TENSORS[:1], version=2))
put("gguf", "version1", gguf([], [], version=1))
put("gguf", "empty", gguf([], []))
put("gguf", "dup_key", gguf([META[0], META[0]], []))
put("gguf", "dup_tensor", gguf([], [TENSORS[0], TENSORS[0]]))
put("gguf", "bad_align", gguf([gkv("general.alignment", 4, struct.pack("<I", 48))], TENSORS[:1]))
put("gguf", "nested", gguf([gkv("a", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 0))], []))
put("gguf", "bad_bool", gguf([gkv("b", 7, b"\2")], []))
put("gguf", "bad_utf8", gguf([gkv("k\xff".encode("latin-1"), 0, b"\1")], []))
put("gguf", "partial_block", gguf([], [("w", "Q4_0", [48])]).replace(struct.pack("<Q", 48), struct.pack("<Q", 40), 1))
put("gguf", "truncated", gguf(META, TENSORS)[:-40])
put("gguf", "huge_count", b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 1 << 60))
