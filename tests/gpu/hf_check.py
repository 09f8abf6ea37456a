"""The engine on Hugging Face checkpoints (llama --model) against transformers.

Makes random-initialised models of the real classes with save_pretrained
(safetensors; one file or sharded with the index; bf16, fp16, fp32), runs
nothing itself, and judges the engine's greedy token ids against
transformers on the same prompt. tests/gpu/hf_check.sh drives it:

  gen   DIR --case NAME [--seed N] [--device D]
        the model of case NAME (CASES or REFUSALS below) into DIR, and its
        prompt's token ids into DIR/prompt_ids.txt.
  check DIR LOG [--logits FILE] [--device D]
        LOG: the engine's output for DIR's prompt (its "new ids:" line);
        FILE: its --prompt-logits (the prefill's last prompt row, fp32).
        Prints the comparison, ends with PASS or FAIL, exits non-zero on FAIL.
  same  DIR LOG_A LOG_B [--device D]
        two engine runs on DIR's prompt (the prefill graph, --prefill steps):
        the same ids, or a first difference at a near tie (the rule below,
        on A's prefix, for both tokens).
  requests DIR FILE [--n N] [--seed S] [--bad] [--device D]
        N requests for DIR's model as JSON lines (llama --requests): prompts
        of 1..300 ids, 1..48 new tokens, a quarter with an end token (the one
        transformers' bf16 greedy run makes 5th, so most of them stop there);
        --bad appends lines the engine must refuse (their line numbers and
        reasons go to FILE.refusals, one "LINE reason" a line).
  many  DIR FILE IDS [--device D]
        IDS: the engine's ids.jsonl for requests FILE. Every served request's
        ids judged by the rule below on its own prefix (teacher forcing, one
        forward per request), near ties counted over all requests; a request
        stopped early must end with its end token.
  fake  DIR LOG [--bug none|swap] [--logits FILE] [--device D]
        writes LOG as the engine would, from transformers' own bf16 greedy
        tokens (--bug swap: one clear token replaced): tests `check` without
        the engine, on a CPU too.

The rule (what "the same tokens" means under bf16):
  Greedy decoding turns a logit difference into a discrete choice, so two
  correct bf16 implementations can pick different tokens where the top two
  logits are closer than their rounding noise, and from there the sequences
  differ. So each new token is judged on the engine's own prefix
  (teacher forcing): transformers in fp32 on the bf16-rounded weights
  ("ref", TF32 off, eager attention) runs the prompt plus the engine's
  tokens in one forward pass, and at step t the engine's token must be
  ref's argmax, OR a near tie: ref's logit of the engine's token within
  K_TIE x noise_t of ref's best, where noise_t is how far transformers
  itself in bf16 ("dev", as users run it) is from ref at that step (the
  largest |dev - ref| over the vocabulary; the engine's own bf16 error is
  of the same size: docs/llama_reference.md). Near ties are counted and
  must stay under MAX_TIE_FRACTION of the steps (a model whose logits are
  all ties would test nothing). Also reported: whether transformers'
  generate(do_sample=False) in bf16 made the very same ids, and if not,
  whether its first divergence is such a near tie.
The prompt's logits (--logits): the engine's last-row logits e against
ref's at the same position: max |e - ref| <= LOGIT_MAX_K x max |dev - ref|
and ||e - ref|| / ||ref|| <= LOGIT_NORM_K x ||dev - ref|| / ||ref|| (the
engine's bf16 error is transformers' own in size: llama_check found
0.71-0.89x of its norm error). Self-check: the bound rejects the logits of
the next position in place of the last prompt row's.
Self-check: at the step where ref's best leads its 5th best the most, that
5th token must be rejected; otherwise the bound is too loose to mean
anything and the check fails. For a llama3 rope_scaling case, the same
reference without the scaling must move the logits by more than the bound
(otherwise the case could not tell a missing table).
"""
import argparse
import json
import math
import os
import re
import sys

import torch

# Weight scales as tests/gpu/llama_ref.py (which explains them): every
# projection normal(0, gain / sqrt(fan_in)); q and k gain 1.5 and each query
# head correlated with its KV head's key map (SELF_BETA), so attention is
# peaked and recent tokens matter; o_proj gain 2; norms 1 + 0.1 N(0, 1);
# embeddings N(0, 1), or N(0, 0.1^2) when tied to the LM head (at std 1 the
# token's own embedding dominates the last hidden state, and a tied model
# repeats its input token forever whatever attention does). HF's own init
# (std 0.02) makes attention nearly uniform and a RoPE or cache mistake
# invisible.
QK_GAIN = 1.5
WO_GAIN = 2.0
NORM_SPREAD = 0.1
SELF_BETA = 0.39
TIED_EMBED_STD = 0.1

LOGIT_MAX_K = 3.0       # prompt logits: max error within 3x transformers' own bf16 max error
LOGIT_NORM_K = 2.0      # and the relative norm error within 2x its
K_TIE = 2.0             # a near tie: within K_TIE x transformers' own bf16 noise at that step
MAX_TIE_FRACTION = 0.25
NEW_TOKENS = 32

WIDTHS = {
    "8b": dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=14336),
    "70b": dict(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, head_dim=128, intermediate_size=28672),
    "qwen3b": dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=128,
                   intermediate_size=11008),
    "tiny": dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=128, intermediate_size=512),
    # Llama-3.2-1B: head_dim 64, 32 query heads over 8.
    "1b": dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64, intermediate_size=8192),
    # Qwen2.5-14B: 40 query heads over 8 (a group of 5).
    "qwen14b": dict(hidden_size=5120, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                    intermediate_size=13824),
    # Qwen2.5-0.5B: head_dim 64, 14 query heads over 2 (a group of 7).
    "qwen05b": dict(hidden_size=896, num_attention_heads=14, num_key_value_heads=2, head_dim=64,
                    intermediate_size=4864),
}
# Llama 3.1's scaling with original_max_position_embeddings 512 instead of
# 8192, so that at a prompt of ~200 tokens most frequencies are scaled (at
# the real 8192 the scaled ones hardly turn within 232 positions, and a
# missing table would pass unseen).
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 512, "rope_theta": 500000.0}
# Llama 3.2's factor (32), with the same shortened original length.
LLAMA32_SCALING = dict(LLAMA3_SCALING, factor=32.0)

# name: how to make it. family llama|mistral|qwen2; widths; layers; vocab;
# dtype of the files; shard: max_shard_size (None: one file); prompt length.
CASES = {
    "llama3_8b_bf16": dict(family="llama", widths="8b", layers=2, vocab=8192, dtype="bf16", shard=None, prompt=200,
                           rope={"rope_type": "default", "rope_theta": 500000.0}),
    "llama31_8b_fp16_tied_sharded": dict(family="llama", widths="8b", layers=2, vocab=8192, dtype="fp16",
                                         shard="300MB", prompt=200, tie=True, rope=LLAMA3_SCALING),
    "mistral_7b_fp32_sharded": dict(family="mistral", widths="8b", layers=2, vocab=8192, dtype="fp32", shard="1GB",
                                    prompt=150, rope={"rope_type": "default", "rope_theta": 1000000.0},
                                    sliding_window=4096),
    "llama3_70b_1layer_bf16": dict(family="llama", widths="70b", layers=1, vocab=4096, dtype="bf16", shard=None,
                                   prompt=120, rope={"rope_type": "default", "rope_theta": 500000.0}),
    # Qwen2.5-3B-like (group 8) with its q/k/v biases and tied embeddings.
    "qwen25_3b_bf16_bias_tied": dict(family="qwen2", widths="qwen3b", layers=2, vocab=8192, dtype="bf16", shard=None,
                                     prompt=200, tie=True, rope={"rope_type": "default", "rope_theta": 1000000.0}),
    # Llama-3.2-1B-like: head_dim 64, tied embeddings, Llama 3.2's rope scaling.
    "llama32_1b_hd64_tied": dict(family="llama", widths="1b", layers=2, vocab=8192, dtype="bf16", shard=None,
                                 prompt=200, tie=True, rope=LLAMA32_SCALING),
    # Qwen2.5-14B-like: a group of 5 (40 / 8), q/k/v biases.
    "qwen25_14b_group5_bias": dict(family="qwen2", widths="qwen14b", layers=2, vocab=8192, dtype="bf16", shard=None,
                                   prompt=200, rope={"rope_type": "default", "rope_theta": 1000000.0}),
    # Qwen2.5-0.5B-like: head_dim 64 and a group of 7 together, biases, tied.
    "qwen25_05b_hd64_group7": dict(family="qwen2", widths="qwen05b", layers=2, vocab=8192, dtype="bf16", shard=None,
                                   prompt=200, tie=True, rope={"rope_type": "default", "rope_theta": 1000000.0}),
    # For trying this script on a CPU (small enough to run there too).
    "tiny": dict(family="llama", widths="tiny", layers=2, vocab=512, dtype="bf16", shard=None, prompt=40,
                 rope={"rope_type": "default", "rope_theta": 500000.0}),
}
# Models the engine must refuse, with the message it must give (hf_check.sh
# runs them; the flags after the prompt are in the shell script).
REFUSALS = {
    "llama_attention_bias": dict(family="llama", widths="tiny", layers=1, vocab=512, dtype="bf16", shard=None,
                                 prompt=8, attention_bias=True, rope={"rope_type": "default", "rope_theta": 5e5}),
    "llama_head_dim_96": dict(family="llama", widths="tiny", layers=1, vocab=512, dtype="bf16", shard=None,
                              prompt=8, head_dim=96, rope={"rope_type": "default", "rope_theta": 500000.0}),
    "llama_group_32": dict(family="llama", widths="tiny", layers=1, vocab=512, dtype="bf16", shard=None,
                           prompt=8, heads=32, kv_heads=1, hidden=256,
                           rope={"rope_type": "default", "rope_theta": 500000.0}),
    "mistral_window_256": dict(family="mistral", widths="tiny", layers=1, vocab=512, dtype="bf16", shard=None,
                               prompt=8, sliding_window=256, rope={"rope_type": "default", "rope_theta": 1e6}),
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def make_config(case):
    import transformers
    fam = case["family"]
    kw = dict(WIDTHS[case["widths"]])
    if "head_dim" in case:
        kw["head_dim"] = case["head_dim"]
    if "heads" in case:
        kw.update(num_attention_heads=case["heads"], num_key_value_heads=case["kv_heads"], hidden_size=case["hidden"])
    kw.update(num_hidden_layers=case["layers"], vocab_size=case["vocab"], rms_norm_eps=1e-5, max_position_embeddings=8192,
              tie_word_embeddings=case.get("tie", False), rope_parameters=dict(case["rope"]))
    if fam == "llama":
        cfg = transformers.LlamaConfig(attention_bias=case.get("attention_bias", False), mlp_bias=False, **kw)
    elif fam == "mistral":
        cfg = transformers.MistralConfig(sliding_window=case.get("sliding_window"), **kw)
    elif fam == "qwen2":
        cfg = transformers.Qwen2Config(**kw)
    else:
        raise ValueError("unknown family %s" % fam)
    return cfg


def model_class(case):
    import transformers
    return {"llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
            "qwen2": transformers.Qwen2ForCausalLM}[case["family"]]


@torch.no_grad()
def reinit(model, cfg, g):
    """llama_ref.py's scales on the real model's parameters (see the top)."""
    dev = next(model.parameters()).device
    D = cfg.head_dim
    grp = cfg.num_attention_heads // cfg.num_key_value_heads
    params = dict(model.named_parameters())
    for name, p in params.items():
        if p.dim() == 1:
            if name.endswith(".bias"):  # Qwen2's q/k/v biases: large enough to matter (a third of q's and k's RMS)
                p.copy_(0.5 * torch.randn(p.shape, generator=g, device=dev))
            else:
                p.copy_(1.0 + NORM_SPREAD * torch.randn(p.shape, generator=g, device=dev))
            continue
        if "embed_tokens" in name:
            std = TIED_EMBED_STD if cfg.tie_word_embeddings else 1.0
            p.copy_(std * torch.randn(p.shape, generator=g, device=dev))
            continue
        fan_in = p.shape[1]
        gain = QK_GAIN if ("q_proj" in name or "k_proj" in name) else WO_GAIN if "o_proj" in name else 1.0
        if "q_proj" in name:
            gain *= math.sqrt(1.0 - SELF_BETA ** 2)
        p.copy_(torch.randn(p.shape, generator=g, device=dev) * (gain / math.sqrt(fan_in)))
    for name, p in params.items():  # query head j = SELF_BETA x its KV head's key map + noise
        if name.endswith("self_attn.q_proj.weight"):
            k = params[name.replace("q_proj", "k_proj")]
            kv = cfg.num_key_value_heads
            p.add_(SELF_BETA * k.view(kv, 1, D, -1).expand(-1, grp, -1, -1).reshape(p.shape))


def cmd_gen(a):
    case = dict(CASES.get(a.case) or REFUSALS.get(a.case) or sys.exit("gen: unknown case %s (%s)" % (
        a.case, ", ".join(list(CASES) + list(REFUSALS)))))
    dev = a.device or default_device()
    cfg = make_config(case)
    torch.manual_seed(a.seed)
    with torch.device(dev):
        model = model_class(case)(cfg)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    reinit(model, cfg, g)
    model = model.to(DTYPES[case["dtype"]])
    os.makedirs(a.dir, exist_ok=True)
    kw = {"max_shard_size": case["shard"]} if case["shard"] else {}
    model.save_pretrained(a.dir, **kw)
    gp = torch.Generator().manual_seed(a.seed + 1)
    ids = torch.randint(0, case["vocab"], (case["prompt"],), generator=gp).tolist()
    with open(os.path.join(a.dir, "prompt_ids.txt"), "w") as f:
        f.write(",".join(str(i) for i in ids) + "\n")
    with open(os.path.join(a.dir, "case.json"), "w") as f:
        json.dump(dict(case, name=a.case, seed=a.seed), f, indent=1)
    files = sorted(x for x in os.listdir(a.dir) if x.endswith(".safetensors"))
    print("gen: %s case %s: %s, %d layers, vocab %d, %s, %d file(s), prompt %d tokens (%s)" %
          (a.dir, a.case, type(model).__name__, case["layers"], case["vocab"], case["dtype"], len(files),
           case["prompt"], dev))


def read_prompt(d):
    with open(os.path.join(d, "prompt_ids.txt")) as f:
        return [int(x) for x in f.read().strip().split(",")]


def read_engine_ids(log):
    with open(log) as f:
        text = f.read()
    m = re.findall(r"^new ids: ?([0-9,]*)$", text, re.M)
    if not m:
        raise ValueError("%s: no 'new ids:' line (did the engine run?)" % log)
    ids = [int(x) for x in m[-1].split(",") if x]
    return ids, text


def load(d, dev, dtype, attn=None, config=None):
    from transformers import AutoModelForCausalLM
    kw = {"dtype": torch.bfloat16}
    if attn:
        kw["attn_implementation"] = attn
    if config is not None:
        kw["config"] = config
    m = AutoModelForCausalLM.from_pretrained(d, **kw).to(dev).eval()
    # Loaded in bf16 first: the fp32 reference runs on the bf16-rounded
    # weights. No .to(bf16) of a loaded model: it would also round RoPE's
    # fp32 inv_freq buffer to bf16, which transformers never does.
    return m if dtype == torch.bfloat16 else m.to(dtype)


@torch.no_grad()
def generate_bf16(m, prompt, n, dev):
    import copy
    gc = copy.deepcopy(m.generation_config)
    gc.eos_token_id = None  # random models: no end token; exactly n new tokens
    gc.pad_token_id = 0
    gc.bos_token_id = None
    gc.do_sample = False
    gc.max_new_tokens = gc.min_new_tokens = n
    x = torch.tensor([prompt], device=dev)
    out = m.generate(x, attention_mask=torch.ones_like(x), generation_config=gc)
    return out[0, len(prompt):].tolist()


@torch.no_grad()
def step_logits(m, prompt, toks, dev):
    """The logits that chose each of toks, given prompt + the tokens before it: [len(toks), vocab] fp32."""
    seq = torch.tensor([prompt + toks[:-1]], device=dev)
    return m(seq).logits[0, len(prompt) - 1:, :].float()


def cmd_check(a):
    dev = a.device or default_device()
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference in true fp32, as llama_ref.py's
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    with open(os.path.join(a.dir, "case.json")) as f:
        case = json.load(f)
    prompt = read_prompt(a.dir)
    eng, text = read_engine_ids(a.log)
    ok = True
    msgs = []
    if len(eng) != NEW_TOKENS:
        msgs.append("engine made %d tokens, expected %d" % (len(eng), NEW_TOKENS))
        ok = False
    if "device loop tokens identical" not in text:
        msgs.append("the engine's device loop did not report identical tokens")
        ok = False
    if not eng:
        print("\n".join(msgs) + "\nFAIL")
        return 1
    dev_m = load(a.dir, dev, torch.bfloat16)
    gen = generate_bf16(dev_m, prompt, len(eng), dev)
    lb = step_logits(dev_m, prompt, eng, dev)
    del dev_m
    ref_m = load(a.dir, dev, torch.float32, attn="eager")
    lf = step_logits(ref_m, prompt, eng, dev)
    del ref_m
    n = len(eng)
    noise = (lb - lf).abs().max(dim=1).values
    bound = K_TIE * noise
    best = lf.argmax(dim=1)
    agree = ties = wrong = tie_agree = 0
    rows = []
    for t in range(n):
        e, b = eng[t], int(best[t])
        top2 = torch.topk(lf[t], 2).values
        if e == b:
            agree += 1
            tie_agree += int(float(top2[0] - top2[1]) <= float(bound[t]))
            continue
        gap = float(lf[t, b] - lf[t, e])
        if gap <= float(bound[t]):
            ties += 1
            rows.append("  step %2d: engine %d, ref %d: near tie (gap %.4g <= bound %.4g)" % (t, e, b, gap, bound[t]))
        else:
            wrong += 1
            rows.append("  step %2d: engine %d, ref %d: WRONG (gap %.4g > bound %.4g; noise %.4g)" %
                        (t, e, b, gap, bound[t], noise[t]))
    print("hf_check %s: engine ids %s" % (case["name"], ",".join(map(str, eng))))
    print("hf_check %s: %d new tokens; teacher-forced against fp32 transformers on the engine's prefix: %d agree "
          "(%d of them with the top two within the bound), %d near ties, %d wrong; bf16 noise %.3g..%.3g" %
          (case["name"], n, agree, tie_agree, ties, wrong, float(noise.min()), float(noise.max())))
    for r in rows:
        print(r)
    if wrong:
        ok = False
        msgs.append("%d token(s) differ from transformers beyond bf16 noise" % wrong)
    if ties > MAX_TIE_FRACTION * n:
        ok = False
        msgs.append("%d near ties of %d steps: the model is too flat to test" % (ties, n))
    # transformers' own greedy run, as users run it.
    same = gen == eng
    if same:
        print("  generate(do_sample=False), bf16: the same %d ids" % n)
    else:
        k = next(i for i in range(n) if gen[i] != eng[i])
        gap = float(lf[k].max() - lf[k, gen[k]]), float(lf[k].max() - lf[k, eng[k]])
        print("  generate(do_sample=False), bf16: same ids up to step %d, then transformers %d, engine %d "
              "(ref's gaps %.4g and %.4g, bound %.4g: %s)" %
              (k, gen[k], eng[k], gap[0], gap[1], bound[k],
               "a near tie" if max(gap) <= bound[k] else "NOT a near tie"))
        if max(gap) > bound[k]:
            ok = False
            msgs.append("generate's first divergence (step %d) is not a near tie" % k)
    # Self-check: the bound must reject a token 5th in ref's ranking.
    top5 = torch.topk(lf, 5, dim=1)
    lead = top5.values[:, 0] - top5.values[:, 4]
    s = int(torch.argmax(lead - bound))
    rejected = float(lead[s]) > float(bound[s])
    print("  self-check: the 5th-ranked token at step %d (gap %.4g vs bound %.4g) %s" %
          (s, lead[s], bound[s], "is rejected" if rejected else "WOULD PASS"))
    if not rejected:
        ok = False
        msgs.append("self-check: the bound accepts a 5th-ranked token")
    if case["rope"].get("rope_type") == "llama3":
        # The case must be able to see a missing table: without the scaling,
        # transformers' logits on the same tokens move by more than the bound.
        from transformers import AutoConfig
        cfg = AutoConfig.from_pretrained(a.dir)
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": case["rope"]["rope_theta"]}
        plain = load(a.dir, dev, torch.float32, attn="eager", config=cfg)
        lp = step_logits(plain, prompt, eng, dev)
        del plain
        moved = (lp - lf).abs().max(dim=1).values
        seen = int((moved > bound).sum())
        print("  self-check: without llama3 scaling the logits move by up to %.4g (bound %.4g..%.4g): %d of %d "
              "steps would notice" % (float(moved.max()), float(bound.min()), float(bound.max()), seen, n))
        if seen == 0:
            ok = False
            msgs.append("self-check: this case cannot tell llama3 scaling from none")
    if a.logits:
        lok, lmsgs = check_prompt_logits(a.logits, lf, lb)
        ok &= lok
        msgs += lmsgs
    for m in msgs:
        print("  " + m)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def check_prompt_logits(path, lf, lb):
    """The engine's last-prompt-row logits (fp32 file) against ref's row 0 (see the top)."""
    import numpy as np
    e = torch.from_numpy(np.fromfile(path, dtype=np.float32)).to(lf.device)
    ref, dev = lf[0], lb[0]
    if e.numel() != ref.numel():
        return False, ["prompt logits: %s holds %d values, the vocabulary is %d" % (path, e.numel(), ref.numel())]
    noise = float((dev - ref).abs().max())
    err = float((e - ref).abs().max())
    rel_b = float((dev - ref).norm() / ref.norm())
    rel_e = float((e - ref).norm() / ref.norm())
    ok = bool(torch.isfinite(e).all()) and err <= LOGIT_MAX_K * noise and rel_e <= LOGIT_NORM_K * rel_b
    print("  prompt logits (last row, %d): engine max err %.4g (bound %.1fx bf16's %.4g), rel norm %.3g (bound %.1fx "
          "bf16's %.3g); argmax engine %d, ref %d: %s" %
          (e.numel(), err, LOGIT_MAX_K, noise, rel_e, LOGIT_NORM_K, rel_b, int(e.argmax()), int(ref.argmax()),
           "ok" if ok else "OUTSIDE"))
    msgs = [] if ok else ["the prompt's logits are outside transformers' bf16 bounds"]
    if lf.shape[0] > 1:  # self-check: the next position's logits must be rejected
        moved = float((lf[1] - ref).abs().max())
        seen = moved > LOGIT_MAX_K * noise
        print("  self-check: the next position's logits differ by %.4g: %s" % (moved, "rejected" if seen else
                                                                                 "WOULD PASS"))
        if not seen:
            ok = False
            msgs.append("self-check: the logit bound accepts another position's logits")
    return ok, msgs


def cmd_same(a):
    """Two engine runs (prefill graph vs --prefill steps): the same ids, or a near tie where they part."""
    dev = a.device or default_device()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    prompt = read_prompt(a.dir)
    ia, _ = read_engine_ids(a.log_a)
    ib, _ = read_engine_ids(a.log_b)
    if ia == ib:
        print("same: the two runs made the same %d ids\nPASS" % len(ia))
        return 0
    n = min(len(ia), len(ib))
    if n == 0:
        print("same: one run made no ids (%d vs %d)\nFAIL" % (len(ia), len(ib)))
        return 1
    k = next((i for i in range(n) if ia[i] != ib[i]), n)
    if k == n:
        print("same: one run stopped early (%d vs %d ids)\nFAIL" % (len(ia), len(ib)))
        return 1
    # Both runs share the prefix up to k: judge both tokens at step k there.
    dev_m = load(a.dir, dev, torch.bfloat16)
    lb = step_logits(dev_m, prompt, ia[:k + 1], dev)[k]
    del dev_m
    ref_m = load(a.dir, dev, torch.float32, attn="eager")
    lf = step_logits(ref_m, prompt, ia[:k + 1], dev)[k]
    del ref_m
    bound = K_TIE * float((lb - lf).abs().max())
    gaps = float(lf.max() - lf[ia[k]]), float(lf.max() - lf[ib[k]])
    tie = max(gaps) <= bound
    print("same: the ids part at step %d: %d vs %d (ref's gaps %.4g and %.4g, bound %.4g): %s" %
          (k, ia[k], ib[k], gaps[0], gaps[1], bound, "a near tie" if tie else "NOT a near tie"))
    print("PASS" if tie else "FAIL")
    return 0 if tie else 1


def cmd_requests(a):
    """Requests for the engine's --requests on DIR's model (see the top)."""
    import random
    dev = a.device or default_device()
    with open(os.path.join(a.dir, "case.json")) as f:
        vocab = json.load(f)["vocab"]
    rng = random.Random(a.seed)
    reqs = []
    for i in range(a.n):
        p = rng.choice([1, 2, 63, 64, 65]) if i < 5 else rng.randint(1, 300)
        reqs.append({"prompt_ids": [rng.randrange(vocab) for _ in range(p)], "max_new_tokens": rng.randint(1, 48),
                     "id": "r%d" % i})
    m = load(a.dir, dev, torch.bfloat16)
    for r in reqs[::4]:  # an end token the run is likely to make: transformers' own 5th
        r["max_new_tokens"] = max(r["max_new_tokens"], 8)
        r["end_token"] = generate_bf16(m, r["prompt_ids"], 5, dev)[4]
    del m
    lines = [json.dumps(r) for r in reqs]
    bad = []
    if a.bad:
        extra = [('{"prompt_ids": [1, 2', "column"),
                 ('{"prompt_ids": [1], "max_new_tokens": 2, "top_k": 5}', 'unknown key "top_k"'),
                 ('{"prompt_ids": [%d], "max_new_tokens": 2}' % vocab, "not below the vocabulary"),
                 ('{"prompt_ids": [1, 2], "max_new_tokens": 8191}', "a sequence holds at most"),
                 ('["not", "an", "object"]', "expected a JSON object")]
        for k, (text, why) in enumerate(extra):
            at = 3 + 7 * k  # among the good ones
            lines.insert(at, text)
        for no, text in enumerate(lines, 1):
            for t, why in extra:
                if text == t:
                    bad.append("%d %s" % (no, why))
    with open(a.file, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.file + ".refusals", "w") as f:
        f.write("".join(b + "\n" for b in bad))
    print("requests: %d requests, %d bad lines in %s" % (len(reqs), len(bad), a.file))


@torch.no_grad()
def cmd_many(a):
    """Every served request's ids against transformers by the near-tie rule."""
    dev = a.device or default_device()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    out = [json.loads(l) for l in open(a.ids) if l.strip()]
    served = [o for o in out if "ids" in o]
    lines = open(a.file).read().split("\n")
    good = {o["line"]: json.loads(lines[o["line"] - 1]) for o in served}  # the engine numbers lines from 1
    dev_m = load(a.dir, dev, torch.bfloat16)
    lb = {o["line"]: step_logits(dev_m, good[o["line"]]["prompt_ids"], o["ids"], dev) for o in served if o["ids"]}
    del dev_m
    ref_m = load(a.dir, dev, torch.float32, attn="eager")
    steps = agree = ties = wrong = stops = 0
    for o in served:
        r, ids = good[o["line"]], o["ids"]
        if not ids:
            wrong += 1
            print("  line %d: no ids" % o["line"])
            continue
        lf = step_logits(ref_m, r["prompt_ids"], ids, dev)
        bound = K_TIE * (lb[o["line"]] - lf).abs().max(dim=1).values
        best = lf.argmax(dim=1)
        for t, e in enumerate(ids):
            steps += 1
            if e == int(best[t]):
                agree += 1
            elif float(lf[t, best[t]] - lf[t, e]) <= float(bound[t]):
                ties += 1
            else:
                wrong += 1
                print("  line %d step %d: engine %d, ref %d: WRONG (gap %.4g > bound %.4g)" % (
                    o["line"], t, e, int(best[t]), float(lf[t, best[t]] - lf[t, e]), float(bound[t])))
        end = r.get("end_token")
        early = len(ids) < r["max_new_tokens"]
        stops += early
        if (early and ids[-1] != end) or (end is not None and end in ids[:-1]):
            wrong += 1
            print("  line %d: stopped at %d tokens of %d without its end token %s" % (o["line"], len(ids),
                                                                                        r["max_new_tokens"], end))
    ok = wrong == 0 and ties <= MAX_TIE_FRACTION * steps and len(served) > 0
    print("hf_check many: %d requests served, %d tokens: %d agree with fp32 transformers, %d near ties, %d wrong; "
          "%d stopped at their end token" % (len(served), steps, agree, ties, wrong, stops))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def cmd_fake(a):
    """The engine's output line from transformers' own bf16 greedy ids (a stand-in to test check)."""
    dev = a.device or default_device()
    prompt = read_prompt(a.dir)
    m = load(a.dir, dev, torch.bfloat16)
    ids = generate_bf16(m, prompt, NEW_TOKENS, dev)
    if a.bug == "swap":
        # The step where bf16 transformers' best leads its 5th the most gets its 5th.
        lb = step_logits(m, prompt, ids, dev)
        top5 = torch.topk(lb, 5, dim=1)
        s = int(torch.argmax(top5.values[:, 0] - top5.values[:, 4]))
        ids[s] = int(top5.indices[s, 4])
    if a.logits:  # the prompt's last-row logits as --prompt-logits writes them: bf16 transformers'
        step_logits(m, prompt, ids, dev)[0].float().cpu().numpy().tofile(a.logits)
    with open(a.log, "w") as f:
        f.write("llama: (fake) from transformers bf16 generate\nnew ids: %s\n" % ",".join(map(str, ids)))
        f.write("llama: %d new tokens, TP 1: (fake); device loop tokens identical\n" % len(ids))
    print("fake: %s (%s)" % (a.log, a.bug))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("dir")
    g.add_argument("--case", required=True)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--device")
    c = sub.add_parser("check")
    c.add_argument("dir")
    c.add_argument("log")
    c.add_argument("--logits")
    c.add_argument("--device")
    sm = sub.add_parser("same")
    sm.add_argument("dir")
    sm.add_argument("log_a")
    sm.add_argument("log_b")
    sm.add_argument("--device")
    q = sub.add_parser("requests")
    q.add_argument("dir")
    q.add_argument("file")
    q.add_argument("--n", type=int, default=40)
    q.add_argument("--seed", type=int, default=3)
    q.add_argument("--bad", action="store_true")
    q.add_argument("--device")
    mn = sub.add_parser("many")
    mn.add_argument("dir")
    mn.add_argument("file")
    mn.add_argument("ids")
    mn.add_argument("--device")
    f = sub.add_parser("fake")
    f.add_argument("dir")
    f.add_argument("log")
    f.add_argument("--bug", choices=["none", "swap"], default="none")
    f.add_argument("--logits")
    f.add_argument("--device")
    a = p.parse_args()
    if a.cmd == "gen":
        return cmd_gen(a) or 0
    if a.cmd == "check":
        return cmd_check(a)
    if a.cmd == "same":
        return cmd_same(a)
    if a.cmd == "requests":
        return cmd_requests(a) or 0
    if a.cmd == "many":
        return cmd_many(a)
    return cmd_fake(a) or 0


if __name__ == "__main__":
    sys.exit(main())
