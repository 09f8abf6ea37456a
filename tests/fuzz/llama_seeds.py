#!/usr/bin/env python3
"""The seed corpora of the llama parsers' fuzz harnesses (tests/fuzz/*_fuzz.cc):
good files of every kind the engine reads, one of each way a file was found
to be wrong (the "regress-" seeds: each row of docs/reliability.md's model
files table that fits a fuzz input), written as the harnesses read them.

    python3 tests/fuzz/llama_seeds.py      # rewrites tests/fuzz/{json,safetensors,checkpoint,cli,requests}_corpus/

Deterministic: the same files every time, so a rerun changes nothing in git.
Inputs the fuzzers learn go to $TPG_FUZZ_OUT, not here (tests/fuzz/run.sh)."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"\n--8<--\n"   # checkpoint_fuzz.cc's file separator


def write(corpus, name, data):
    d = os.path.join(HERE, corpus)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def header(h):
    """A safetensors header: the 8-byte length, the JSON padded with spaces to 8."""
    text = h if isinstance(h, str) else json.dumps(h, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text.encode()


def tensor_bytes(n, size, k):
    return bytes(((k * 31 + i * 7) & 0x3f) for i in range(n * size))


def safetensors(tensors, metadata={"format": "pt"}):
    """tensors: [(name, dtype, shape)], data in that order, sizes exact."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F64": 8}
    h, data = {}, b""
    if metadata is not None:
        h["__metadata__"] = metadata
    for k, (name, dtype, shape) in enumerate(tensors):
        n = 1
        for d in shape:
            n *= d
        b = tensor_bytes(n, sizes[dtype], k)
        h[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return header(h) + data


def json_seeds():
    for name, doc in [
        ("config-llama", CONFIG),
        ("config-qwen2", dict(CONFIG, architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                              use_sliding_window=False, sliding_window=None)),
        ("config-llama31", dict(CONFIG, rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8192,
                                                      "rope_type": "llama3"})),
        ("index", {"metadata": {"total_size": 1234}, "weight_map": {"model.norm.weight": "a.safetensors",
                                                                    "lm_head.weight": "b.safetensors"}}),
        ("header", {"__metadata__": {"format": "pt"},
                    "t": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}}),
    ]:
        write("json_corpus", "seed-" + name, json.dumps(doc, indent=2))
    for name, text in [
        ("scalars", '[0, -0, 1.5e-3, 1E+2, 18446744073709551615, true, false, null, "x"]'),
        ("escapes", '{"a\\"b": "\\u00e9\\ud83d\\ude00\\n\\t\\/\\\\", "c": "\xc3\xa9"}'),
        ("nested", "[" * 40 + "{}" + "]" * 40),
        ("empty", " {} "),
    ]:
        write("json_corpus", "seed-" + name, text)
    for name, text in [
        ("duplicate-last", "{" + ",".join('"k%d":0' % i for i in range(400)) + ',"k0":1}'),
        ("nan", '{"rms_norm_eps": NaN}'),
        ("lone-surrogate", '"\\udc00"'),
        ("bom", "\ufeff{}"),
        ("deep", "[" * 200 + "]" * 200),
        ("trailing", '{"a": 1} x'),
        ("key-escapes", '{"a\\u001b[2J": 1, "a\\u001b[2J": 2}'),
    ]:
        write("json_corpus", "regress-" + name, text)


def safetensors_seeds():
    write("safetensors_corpus", "seed-bf16-2d", safetensors([("w", "BF16", (4, 8)), ("n", "BF16", (8,))]))
    write("safetensors_corpus", "seed-mixed", safetensors([("a", "F16", (3, 5)), ("b", "F32", (2, 2)),
                                                           ("c", "U8", (3,)), ("d", "BF16", (1, 16))]))
    write("safetensors_corpus", "seed-empty-tensor", safetensors([("z", "F32", (0, 3)), ("a", "BF16", (2,))], None))
    write("safetensors_corpus", "seed-no-tensors", header({}))
    f4 = lambda off: '{"dtype":"F32","shape":[1],"data_offsets":%s}' % off
    for name, h, data in [
        ("overlap", '{"a":%s,"b":%s}' % (f4("[0,4]"), f4("[2,6]")), 8),
        ("gap", '{"a":%s,"b":%s}' % (f4("[0,4]"), f4("[8,12]")), 12),
        ("trailing-bytes", '{"a":%s}' % f4("[0,4]"), 8),
        ("float-shape", '{"t":{"dtype":"F32","shape":[2.0,1e0],"data_offsets":[0,8]}}', 8),
        ("unknown-dtype", '{"t":{"dtype":"Q4","shape":[3],"data_offsets":[0,5]}}', 5),
        ("metadata-number", '{"__metadata__":7}', 0),
        ("nul-name", '{"a\\u0000b":%s}' % f4("[0,4]"), 4),
        ("overflow", '{"t":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,4]}}', 4),
        ("duplicate", '{"t":%s,"t":%s}' % (f4("[0,4]"), f4("[4,8]")), 8),
        ("keys", "{" + ",".join('"k%d":0' % i for i in range(300)) + "}", 0),
    ]:
        write("safetensors_corpus", "regress-" + name, header(h) + bytes(data))
    write("safetensors_corpus", "regress-length", struct.pack("<Q", 1 << 32) + b"{}")


# The smallest model the engine runs: head dim 64, one or two heads.
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
          "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 64, "intermediate_size": 16,
          "num_hidden_layers": 1, "vocab_size": 16, "rms_norm_eps": 1e-05, "hidden_act": "silu",
          "max_position_embeddings": 256, "tie_word_embeddings": False,
          "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}


def model_tensors(cfg, qkv_bias=False, extra=()):
    H, D, F, V = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"]
    nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    t = []
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        t += [(p + "input_layernorm.weight", "BF16", (H,)), (p + "post_attention_layernorm.weight", "BF16", (H,)),
              (p + "self_attn.q_proj.weight", "BF16", (nq * D, H)), (p + "self_attn.k_proj.weight", "BF16", (nkv * D, H)),
              (p + "self_attn.v_proj.weight", "BF16", (nkv * D, H)), (p + "self_attn.o_proj.weight", "BF16", (H, nq * D)),
              (p + "mlp.gate_proj.weight", "BF16", (F, H)), (p + "mlp.up_proj.weight", "BF16", (F, H)),
              (p + "mlp.down_proj.weight", "BF16", (H, F))]
        if qkv_bias:
            t += [(p + "self_attn.q_proj.bias", "BF16", (nq * D,)), (p + "self_attn.k_proj.bias", "BF16", (nkv * D,)),
                  (p + "self_attn.v_proj.bias", "BF16", (nkv * D,))]
    t += [("model.norm.weight", "BF16", (H,)), ("model.embed_tokens.weight", "BF16", (V, H))]
    if not cfg["tie_word_embeddings"]:
        t.append(("lm_head.weight", "BF16", (V, H)))
    return t + list(extra)


def checkpoint(options, cfg, tensors, files=1):
    """checkpoint_fuzz.cc's input: options byte, config.json, index, files."""
    parts = [json.dumps(cfg).encode()]
    if files == 1:
        parts += [b"", safetensors(tensors)]
    else:
        names = ["a.safetensors", "b.safetensors", "c.safetensors"][:files]
        shards = [[t for k, t in enumerate(tensors) if k % files == f] for f in range(files)]
        wm = {t[0]: names[f] for f in range(files) for t in shards[f]}
        parts += [json.dumps({"metadata": {}, "weight_map": wm}).encode()] + [safetensors(s) for s in shards]
    return bytes([options]) + SEP.join(parts)


def checkpoint_seeds():
    tied = dict(CONFIG, tie_word_embeddings=True)
    two = dict(CONFIG, num_attention_heads=2, num_key_value_heads=2)
    qwen = dict(two, architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                sliding_window=None)
    llama31 = dict(tied, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 64})
    write("checkpoint_corpus", "seed-llama", checkpoint(0, CONFIG, model_tensors(CONFIG)))
    write("checkpoint_corpus", "seed-llama-tied-sharded", checkpoint(2, tied, model_tensors(tied), files=2))
    write("checkpoint_corpus", "seed-tp2", checkpoint(1, two, model_tensors(two)))
    write("checkpoint_corpus", "seed-qwen2-bias-tp2", checkpoint(1, qwen, model_tensors(qwen, qkv_bias=True), 3))
    write("checkpoint_corpus", "seed-llama31-inv-freq",
          checkpoint(4, llama31, model_tensors(llama31, extra=[("model.layers.0.self_attn.rotary_emb.inv_freq",
                                                                "F32", (32,))])))
    huge = dict(CONFIG, num_hidden_layers=2147483647)
    write("checkpoint_corpus", "regress-2pow31-layers", checkpoint(0, huge, []))
    write("checkpoint_corpus", "regress-q-norm",
          checkpoint(0, CONFIG, model_tensors(CONFIG, extra=[("model.layers.0.self_attn.q_norm.weight", "BF16",
                                                               (64,))])))
    write("checkpoint_corpus", "regress-more-layers",
          checkpoint(0, CONFIG, model_tensors(dict(CONFIG, num_hidden_layers=2))))
    write("checkpoint_corpus", "regress-eps-1e-300", checkpoint(0, dict(CONFIG, rms_norm_eps=1e-300),
                                                                model_tensors(CONFIG)))
    write("checkpoint_corpus", "regress-theta-1e39",
          checkpoint(0, dict(CONFIG, rope_parameters={"rope_theta": 1e39}), model_tensors(CONFIG)))
    write("checkpoint_corpus", "regress-vocab-2pow24",
          checkpoint(0, dict(CONFIG, vocab_size=(1 << 24) + 8), model_tensors(CONFIG)))


CONFIG_TXT = ("hidden 256\nheads 4\nkv_heads 2\nhead_dim 64\nffn 512\nlayers 2\nvocab 0\neps 1e-05\n"
              "theta 500000.0\nbatch 1\nctx 16\nsteps 4\nmax_ctx 0\nseed 7\n")


def cli_seeds():
    def cli(gpus, args, config=None):
        text = "".join(a + "\n" for a in args)
        if config is not None:
            text += "--config.txt--\n" + config
        return bytes([gpus]) + text.encode()
    for name, gpus, args, config in [
        ("defaults", 8, [], None),
        ("help", 1, ["--help"], None),
        ("70b-lm-head", 8, ["--config", "70b", "--lm-head", "--vocab", "1008"], None),
        ("weights", 2, ["--weights", "@"], CONFIG_TXT),
        ("decode", 1, ["--decode", "16", "--lm-head", "--batch", "8", "--ctx", "100"], None),
        ("bench", 4, ["--bench", "--sweep", "--mode", "capture", "--attn", "tc", "--no-pdl"], None),
        ("model", 8, ["--model", "@", "--prompt-ids", "1,2,3", "--max-new-tokens", "8", "--prefill", "steps"], None),
        ("logits", 1, ["--model", "@", "--prompt-ids", "5", "--prompt-logits", "logits.bin"], None),
    ]:
        write("cli_corpus", "seed-" + name, cli(gpus, args, config))
    bad = CONFIG_TXT.replace("kv_heads 2", "kv_heads 0")
    write("cli_corpus", "regress-kv-heads-0", cli(8, ["--weights", "@"], bad))
    write("cli_corpus", "regress-negative", cli(1, ["--weights", "@"], CONFIG_TXT.replace("layers 2", "layers -3")))
    write("cli_corpus", "regress-float-layers", cli(1, ["--weights", "@"], CONFIG_TXT.replace("layers 2", "layers 4.0")))
    write("cli_corpus", "regress-empty-id", cli(1, ["--prompt-ids", "1,,2"], None))


# requests_fuzz.cc's options byte: two bits each for the vocabulary (0: not
# known yet, 16, 1000, 128256), max_ctx (8192, 2, 16, 300), max_line (1 MiB,
# 16, 64, 1024) and max_requests (100000, 1, 3, 16) with max_lines (10^7, 4,
# 8, 24).
def ropts(vocab=0, ctx=0, line=0, reqs=0):
    return bytes([vocab | ctx << 2 | line << 4 | reqs << 6])


def req(prompt, new, **kw):
    d = {"prompt_ids": prompt, "max_new_tokens": new}
    d.update(kw)
    return json.dumps(d)


def requests_seeds():
    def w(name, opts, lines, end="\n", file=False):
        text = lines if isinstance(lines, bytes) else "".join(l + end for l in lines).encode()
        if file:  # blank lines to a size the harness also reads as a file (a multiple of 8)
            text += b"\n" * (-(len(opts) + len(text)) % 8)
        write("requests_corpus", name, opts + text)
    llama = ropts(vocab=3)
    w("seed-single", llama, [req([128000, 791, 6460], 64, end_token=128009, id="a")], file=True)
    many = [req([(k * 37 + i) % 128256 for i in range(1 + k % 9)], 1 + k * 3,
                **({"end_token": 128009} if k % 3 == 0 else {"end_token": None} if k % 3 == 1 else {}),
                **({"id": "r%d" % k} if k % 2 else {"id": k})) for k in range(24)]
    w("seed-many", llama, [l for k, l in enumerate(many) for l in ([l, ""] if k % 5 == 4 else [l])])
    w("seed-end-tokens", ropts(vocab=1), [req([1, 2, 3], 4, end_token=15), req([0], 1, end_token=0),
                                          req([15], 2, end_token=None, id="x")])
    w("seed-crlf", llama, [req([1, 2], 2), "", req([3], 1, id="\u00e9")], end="\r\n")
    w("seed-no-final-newline", llama, (req([1], 1) + "\n" + req([2], 2)).encode())
    w("seed-blank-only", ropts(), b"\n \t\r\n\r\n\n   ")
    w("seed-at-the-limit", ropts(vocab=1, ctx=2), [req([15], 1), req([0], 1, end_token=15)])
    w("seed-8192", ropts(), [req([5] * 8191, 1), req([1], 8191)])
    # One of each refusal docs/serving.md lists, with the production limits.
    for name, opts, lines in [
        ("not-json", llama, ['{"prompt_ids": [1], "max_new_tokens": 2', "prompt_ids=1", "{} {}", "{},"]),
        ("not-object", llama, ["[1, 2]", "7", '"x"', "null"]),
        ("duplicate-key", llama, ['{"prompt_ids": [1], "max_new_tokens": 2, "max_new_tokens": 3}']),
        ("unknown-key", llama, [req([1], 2, temperature=0), '{"prompt_ids": [1], "max_new_token": 2}']),
        ("wrong-kind", llama, ['{"prompt_ids": "1 2", "max_new_tokens": 2}', req([1, 2.5], 2), req([1], 2.0),
                               req([1], "2"), req([1], 2, end_token="9"), req([1], 2, id=1.5), req([1], 2, id=None),
                               req([1], 2, id=True), req([[1]], 2)]),
        ("outside-vocab", ropts(vocab=1), [req([16], 1), req([1, -1], 1), req([1], 1, end_token=16)]),
        ("too-long-a-sequence", llama, [req([5] * 5, 8190), req([5], 8192)]),
        ("too-long-a-sequence-300", ropts(vocab=3, ctx=3), [req([5] * 300, 1), req([5] * 299, 1), req([5] * 5, 296)]),
        ("missing", llama, ['{"max_new_tokens": 2}', '{"prompt_ids": [1]}', "{}", req([], 3), req([1], 0)]),
        ("huge-numbers", llama, [req([1], 99999999999999999999), req([18446744073709551616], 1),
                                 '{"prompt_ids": [1], "max_new_tokens": 1e400}', req([9007199254740993], 1),
                                 req([1], 1, id=99999999999999999999), req([1], 1, id=-9007199254740993),
                                 '{"prompt_ids": [-0], "max_new_tokens": 1E0}', req([2147483648], 1)]),

        ("long-lines", ropts(line=1), [req([1], 1), " " * 15, " " * 17, "x" * 40, req([2], 2)]),
    ]:
        w("regress-" + name, opts, lines)
    w("regress-too-many", ropts(reqs=1), [req([1], 1), "", req([2], 2)], file=True)
    w("regress-too-many-lines", ropts(reqs=2), ["", req([1], 1), "", " ", "\t", "", "", "", "", req([2], 2)])
    w("regress-nul", llama, b'{"prompt_ids": [1], "max_new_tokens": 2}\x00\n{"prompt_ids": [1],\x00 "max_new_tokens": 2}\n'
      b'{"prompt_ids": [1], "max_new_tokens": 2, "id": "a\\u0000b"}\n\x00\n')
    w("regress-bytes", llama, b'\xef\xbb\xbf{"prompt_ids": [1], "max_new_tokens": 2}\n{"id": "\xff"}\n\r\r\n\x0c\n\x1b[2J\n')
    # Found by requests_fuzz: a key's DEL reached a refusal raw; the JSON
    # reader's messages showed keys raw too (an escape, a newline).
    w("regress-key-escapes", llama, [req([1], 1, **{"max_ne\x7f_tokens": 1}), '{"\\u001b[2J" 1}',
                                     '{"a\\nb": 1, "a\\nb": 2}', '{"%s": 1}' % ("k" * 300)])
    w("regress-cr-alone", llama, (req([1], 1) + "\r" + req([2], 2) + "\r").encode())


if __name__ == "__main__":
    json_seeds()
    safetensors_seeds()
    checkpoint_seeds()
    cli_seeds()
    requests_seeds()
