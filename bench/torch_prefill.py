"""Time to first token: the example engine's prefill (llama --model, its
M-row graphs) against the same model in PyTorch, in one call, beside the
FLOP floor.

One GPU (TP 1). The model is a Llama-3-like checkpoint written here with
save_pretrained (random weights, bf16, the real widths of --config and
--layers layers, vocabulary --vocab): the engine reads it with --model, and
PyTorch runs the very same files through transformers' LlamaForCausalLM
(attn_implementation="sdpa": the flash / efficient kernels), as a user
would: model(ids, use_cache=True, logits_to_keep=1) then argmax, which is
the prefill and the first token. Measured forms:
  torch eager     the call as is
  torch compile   the same under torch.compile (Inductor, static shapes, one
                  compile per prompt length; reported as "-" if it fails)
  ours            llama --model DIR --prompt-ids ... --max-new-tokens 1
                  --iters N --prefill-chunk C for each C of --chunks: the
                  engine's own median of N prefills (host wall time from the
                  first launch to the token on the host, and the device time
                  between events around the chunk launches)
PyTorch is timed with torch_timing.timed (runs queued back to back, each
between two events, median), after --warmup runs. --passes P alternates
ours and PyTorch P times and reports the median of the passes.

The floor: the prompt's FLOPs over 790 TFLOP/s (H200 dense bf16, about what
the GEMMs can reach): per layer 2 P x (QKV, O, gate/up, down weights) plus
causal attention 4 P (P + 1) / 2 x head_dim x heads, and the LM head on one
row, 2 x hidden x vocab.

Usage (from the repository root, the bundle unpacked in .gpu):
  python3 bench/torch_prefill.py --config 8b --layers 4 --prompts 512,2048 --chunks 256,2048 \\
      --ours "LD_LIBRARY_PATH=.gpu/bin:$CUBLAS_LIB bash .gpu/run.sh llama" --json /tmp/prefill.json
  (CUBLAS_LIB: the toolkit's /usr/local/cuda/lib64, or PyTorch's copy:
   python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))')
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import timed  # noqa: E402

CONFIGS = {
    "8b": dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               intermediate_size=14336),
    "70b": dict(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                intermediate_size=28672),
    # Llama-3.2-1B's widths: head_dim 64.
    "1b": dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
               intermediate_size=8192),
    # Qwen2.5-14B's widths as a Llama (no biases): a group of 5 (40 / 8).
    "14b": dict(hidden_size=5120, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                intermediate_size=13824),
}
PEAK_FLOPS = 790e12


def flops(c, layers, vocab, P):
    H, D, F = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    nq, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    weights = H * (nq + 2 * nkv) * D + nq * D * H + 3 * H * F
    attn = 4 * D * nq * P * (P + 1) / 2
    return layers * (2 * P * weights + attn) + 2 * H * vocab


def make_model(a, d):
    import transformers
    cfg = transformers.LlamaConfig(num_hidden_layers=a.layers, vocab_size=a.vocab, rms_norm_eps=1e-5,
                                   max_position_embeddings=8192, tie_word_embeddings=False,
                                   rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                                   **CONFIGS[a.config])
    torch.manual_seed(a.seed)
    with torch.device("cuda"):
        m = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    m.save_pretrained(d)
    return cfg


def run_ours(a, d, ids, chunk):
    """The engine's prefill of ids: (host ms, device ms) medians, from its output."""
    # through env(1), so that the command may start with VAR=value settings
    cmd = ["env"] + shlex.split(a.ours) + ["--model", d, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", "1",
                                 "--iters", str(a.iters_ours), "--prefill-chunk", str(chunk)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    m = re.search(r"prefill of (\d+) tokens in (\d+) chunk\(s\) of up to (\d+) rows.*?: ([0-9.]+) ms, device "
                  r"([0-9.]+) ms", r.stdout)
    if r.returncode or not m:
        sys.stderr.write("ours failed (rc %d):\n%s\n%s\n" % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return None
    return float(m.group(4)), float(m.group(5))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="8b", choices=sorted(CONFIGS))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--prompts", default="512,2048")
    p.add_argument("--chunks", default="256,2048", help="the engine's --prefill-chunk values to time")
    p.add_argument("--ours", default="", help="the engine's command (without --model ...); empty: PyTorch only")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--iters-ours", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dir", help="where the checkpoint goes (default: a temporary directory)")
    p.add_argument("--json")
    a = p.parse_args()
    if not dist.is_initialized():  # torch_timing.timed starts every measurement with a barrier
        store = tempfile.mktemp(prefix="torch_prefill_store.")
        dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
    torch.backends.cuda.matmul.allow_tf32 = True
    prompts = [int(x) for x in a.prompts.split(",")]
    chunks = [int(x) for x in a.chunks.split(",")]
    tmp = None if a.dir else tempfile.TemporaryDirectory(prefix="torch_prefill.")
    d = a.dir or tmp.name
    cfg = make_model(a, d)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    compiled = None if a.no_compile else torch.compile(model, dynamic=False)
    g = torch.Generator().manual_seed(a.seed + 1)
    rows = []
    for P in prompts:
        ids = torch.randint(0, a.vocab, (P,), generator=g).tolist()
        x = torch.tensor([ids], device="cuda")

        def prefill(m):
            with torch.no_grad():
                return m(x, use_cache=True, logits_to_keep=1).logits[0, -1].argmax()

        res = {"eager": [], "compile": []}
        ours = {c: [] for c in chunks}
        tok = {}
        for _ in range(a.passes):
            for c in ours:
                if a.ours:
                    r = run_ours(a, d, ids, c)
                    if r:
                        ours[c].append(r)
            res["eager"].append(timed(lambda: prefill(model), a.iters, a.warmup))
            tok["eager"] = int(prefill(model))
            if compiled is not None:
                try:
                    res["compile"].append(timed(lambda: prefill(compiled), a.iters, a.warmup))
                    tok["compile"] = int(prefill(compiled))
                except Exception as e:  # report, do not stop the table
                    sys.stderr.write("torch.compile at P=%d failed: %s\n" % (P, str(e)[:500]))
                    compiled = None
        floor_ms = flops(CONFIGS[a.config], a.layers, a.vocab, P) / PEAK_FLOPS * 1e3
        row = dict(config=a.config, layers=a.layers, vocab=a.vocab, prompt=P, floor_ms=floor_ms,
                   torch_eager_ms=statistics.median(res["eager"]) / 1e3,
                   torch_compile_ms=statistics.median(res["compile"]) / 1e3 if res["compile"] else None,
                   torch_first_token=tok.get("eager"),
                   ours={str(c): dict(host_ms=statistics.median(v[0] for v in ours[c]),
                                      device_ms=statistics.median(v[1] for v in ours[c])) for c in ours if ours[c]})
        rows.append(row)
        line = "prefill %s L%d P %5d: floor %7.2f ms | torch eager %7.2f ms" % (
            a.config, a.layers, P, floor_ms, row["torch_eager_ms"])
        line += " | torch compile %s" % ("%7.2f ms" % row["torch_compile_ms"] if row["torch_compile_ms"] else "-")
        for c, v in row["ours"].items():
            best_torch = min(t for t in (row["torch_eager_ms"], row["torch_compile_ms"]) if t)
            line += " | ours chunk %s: %7.2f ms (device %7.2f; %.2fx floor, %.2fx torch's best)" % (
                c, v["host_ms"], v["device_ms"], v["host_ms"] / floor_ms, v["host_ms"] / best_torch)
        print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.destroy_process_group()
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
