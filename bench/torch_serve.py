"""The serving comparison: llama --requests (examples/llama, docs/serving.md)
beside what a PyTorch user has, on the same checkpoint and requests.

Subcommands:
  gen FILE --n N [--seed S] [--vocab V]
        N synthetic requests as JSON lines, the very requests the engine's
        --requests synthetic:N:S makes (splitmix64; prompts 50..1000, outputs
        50..500, each length lo + min(a, b) for a, b uniform in [0, hi - lo]).
  checkpoint DIR [--layers L] [--vocab V] [--seed S]
        a Llama-3-8B-shaped LlamaForCausalLM (4096 hidden, 32/8 heads, head
        dim 128, ffn 14336) with random bf16 weights, written by
        save_pretrained (transformers' own initialisation: the values do not
        change the time).
  run DIR REQUESTS [--modes cb,static] [--batch B] [--json OUT]
        the baselines on checkpoint DIR and the requests file:
        cb      transformers' continuous batching: the model's
                ContinuousBatchingManager (paged KV cache, chunked prefill,
                its CUDA graphs captured in its warm-up, outside the timing),
                one add_request per request with its own max_new_tokens and
                end token, timestamps per token.
        static  a static-batch loop: batches of B requests in file order, each
                prompt left-padded to the batch's longest, one prefill pass,
                then the decode step under torch.compile captured in a
                torch.cuda.graph (one compile and one graph for every batch:
                the cache is as long as the longest request; the last batch is
                padded with copies), run until the batch's longest request is
                done (the waste continuous batching removes); a request's
                tokens are counted up to its own max_new_tokens or end token.
        Each runs in a process of its own (cmd_run starts one per mode).
        Both time from the moment every request is known (all arrive at once,
        as the engine's run counts them): output tokens/s over the whole run,
        time to first token and inter-token latency p50/p99 per token, as
        the engine's summary. Compile, warm-up and capture are reported apart.

  python3 bench/torch_serve.py gen /tmp/r.jsonl --n 256
  python3 bench/torch_serve.py checkpoint /tmp/llama8b --layers 32
  python3 bench/torch_serve.py run /tmp/llama8b /tmp/r.jsonl --json torch_serve.json
"""
import argparse
import json
import math
import os
import sys
import time

MASK64 = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def synthetic(n, seed, vocab):
    """examples/llama/run/requests.cc's synthetic_requests, value for value."""
    st, out = seed, []

    def length(lo, hi):
        nonlocal st
        st, a = splitmix64(st)
        st, b = splitmix64(st)
        return lo + min(a % (hi - lo + 1), b % (hi - lo + 1))

    for _ in range(n):
        p, m = length(50, 1000), length(50, 500)
        ids = []
        for _ in range(p):
            st, u = splitmix64(st)
            ids.append(u % vocab)
        out.append({"prompt_ids": ids, "max_new_tokens": m})
    return out


def read_requests(path):
    reqs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                reqs.append((r["prompt_ids"], r["max_new_tokens"], r.get("end_token")))
    return reqs


def pct(v, q):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def summary(name, reqs, outs, seconds, extra):
    """outs: per request (tokens, times since the start). The engine's summary's fields."""
    ttft = [t[0] for _, t in outs if t]
    itl = [b - a for _, t in outs for a, b in zip(t, t[1:])]
    ntok = sum(len(ids) for ids, _ in outs)
    s = dict(mode=name, served=len(reqs), output_tokens=ntok, prompt_tokens=sum(len(r[0]) for r in reqs),
             seconds=seconds, output_tokens_per_s=ntok / seconds if seconds > 0 else 0.0,
             ttft_ms_p50=1e3 * pct(ttft, 0.5), ttft_ms_p99=1e3 * pct(ttft, 0.99),
             itl_ms_p50=1e3 * pct(itl, 0.5), itl_ms_p99=1e3 * pct(itl, 0.99), **extra)
    print("torch_serve %s: %d requests, %d output tokens in %.2f s: %.0f output tokens/s; TTFT p50 %.1f ms p99 %.1f "
          "ms; ITL p50 %.2f ms p99 %.2f ms" % (name, s["served"], ntok, seconds, s["output_tokens_per_s"],
                                               s["ttft_ms_p50"], s["ttft_ms_p99"], s["itl_ms_p50"], s["itl_ms_p99"]),
          flush=True)
    print("torch-serve-json: " + json.dumps(s), flush=True)
    return s


def cmd_gen(a):
    with open(a.file, "w") as f:
        for r in synthetic(a.n, a.seed, a.vocab):
            f.write(json.dumps(r) + "\n")
    print("gen: %d requests (seed %d) in %s" % (a.n, a.seed, a.file))


def cmd_checkpoint(a):
    import torch
    import transformers
    cfg = transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                   intermediate_size=14336, num_hidden_layers=a.layers, vocab_size=a.vocab,
                                   rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=False,
                                   rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    torch.manual_seed(a.seed)
    t0 = time.time()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(a.dir, max_shard_size="4GB")
    print("checkpoint: %s: %d layers, vocab %d, %.1f GB, written in %.0f s" % (
        a.dir, a.layers, a.vocab, sum(p.numel() for p in model.parameters()) * 2 / 1e9, time.time() - t0))


def load(d, attn=None):
    import torch
    from transformers import AutoModelForCausalLM
    kw = {"dtype": torch.bfloat16, "device_map": "cuda"}
    if attn:
        kw["attn_implementation"] = attn
    return AutoModelForCausalLM.from_pretrained(d, **kw).eval()


def run_cb(d, reqs):
    """transformers' ContinuousBatchingManager, per-request lengths; None when this version has none."""
    import torch
    from transformers import GenerationConfig
    model, impl, errs = None, None, []
    for impl in ("sdpa_paged", "paged|sdpa", "sdpa"):
        try:
            model = load(d, impl)
            break
        except Exception as e:  # an implementation name this version does not know
            errs.append("%s: %s" % (impl, str(e).splitlines()[0][:120]))
    if model is None or not hasattr(model, "continuous_batching_context_manager"):
        print("torch_serve cb: unavailable (%s)" % ("; ".join(errs) or "no continuous_batching_context_manager"))
        return None
    gc = GenerationConfig(do_sample=False, max_new_tokens=max(r[1] for r in reqs), eos_token_id=-1, pad_token_id=0)
    t_warm = time.perf_counter()
    # no_grad, not inference_mode: the manager's generation thread updates in
    # place tensors made here, which inference mode would make read-only there.
    with torch.no_grad(), model.continuous_batching_context_manager(generation_config=gc, block=True, timeout=30,
                                                                    warmup=True) as m:
        warm = time.perf_counter() - t_warm
        t0 = time.perf_counter()
        for i, (p, n, e) in enumerate(reqs):
            m.add_request(input_ids=p, request_id="r%d" % i, max_new_tokens=n, record_timestamps=True,
                          eos_token_id=e if e is not None else -1)
        done = {}
        while len(done) < len(reqs):
            r = m.get_result(timeout=1)
            if r is not None and r.is_finished():
                done[r.request_id] = r
            elif r is None and not m.is_running():
                break
        seconds = time.perf_counter() - t0
    if len(done) < len(reqs):  # its generation loop stopped (the error is in its log above)
        raise RuntimeError("transformers' continuous batching stopped with %d of %d requests finished" %
                           (len(done), len(reqs)))
    outs = []
    for i in range(len(reqs)):
        r = done.get("r%d" % i)
        outs.append((list(r.generated_tokens), [t - t0 for t in (r.timestamps or [])]) if r else ([], []))
    del model
    torch.cuda.empty_cache()
    return summary("cb", reqs, outs, seconds, dict(attn_implementation=impl, warmup_s=warm,
                                                   finished=len(done)))


class Static:
    """The checkpoint's weights fused as bench/torch_llama.py fuses them, a
    static KV cache [B, kv, L, hd] per layer, per-row positions and a mask of
    the keys each row may see (its left padding excluded)."""

    def __init__(self, hf, B, L):
        import torch
        c = hf.config
        self.H, self.hq, self.hk, self.hd = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.eps, self.B, self.L = c.rms_norm_eps, B, L
        m, dev = hf.model, "cuda"
        self.layers = []
        for ly in m.layers:
            a, f = ly.self_attn, ly.mlp
            self.layers.append(dict(
                an=ly.input_layernorm.weight, mn=ly.post_attention_layernorm.weight,
                wqkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), wo=a.o_proj.weight,
                wgu=torch.cat([f.gate_proj.weight, f.up_proj.weight]), wd=f.down_proj.weight))
        self.emb, self.norm, self.lm = m.embed_tokens.weight, m.norm.weight, hf.lm_head.weight
        inv = 1.0 / (c.rope_parameters["rope_theta"] ** (torch.arange(0, self.hd, 2, device=dev).float() / self.hd))
        ang = torch.arange(L, device=dev).float()[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], -1)
        self.cos, self.sin = emb.cos().bfloat16(), emb.sin().bfloat16()
        self.k = [torch.zeros(B, self.hk, L, self.hd, device=dev, dtype=torch.bfloat16) for _ in self.layers]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.pos = torch.zeros(B, dtype=torch.long, device=dev)      # next position per row
        self.start = torch.zeros(B, dtype=torch.long, device=dev)    # first real key per row (left padding)
        self.tok = torch.zeros(B, dtype=torch.long, device=dev)      # the step's input token per row

    def rope(self, t, pos):
        import torch
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)  # [B, 1, S, hd]
        h = self.hd // 2
        return t * cos + torch.cat([-t[..., h:], t[..., :h]], -1) * sin

    def forward(self, tok, pos, write):
        """tok, pos [B, S]; keys written at pos; attends keys start..pos. Returns logits of the last column."""
        import torch
        import torch.nn.functional as F
        B, S = tok.shape
        x = F.embedding(tok, self.emb)
        keys = torch.arange(self.L, device=tok.device)[None, None, :]
        # Keys start..pos of the row; a padding row (pos < start) sees its own key only, so that no row is
        # all masked (a NaN there would reach the cache).
        mask = ((keys <= pos[:, :, None]) & (keys >= self.start[:, None, None])) | (keys == pos[:, :, None])
        for ly, kc, vc in zip(self.layers, self.k, self.v):
            h = F.rms_norm(x, (self.H,), ly["an"], self.eps)
            q, k, v = (h @ ly["wqkv"].t()).split([self.hq * self.hd, self.hk * self.hd, self.hk * self.hd], -1)
            q = self.rope(q.view(B, S, self.hq, self.hd).transpose(1, 2), pos)
            k = self.rope(k.view(B, S, self.hk, self.hd).transpose(1, 2), pos)
            idx = pos[:, None, :, None].expand(B, self.hk, S, self.hd)
            kc.scatter_(2, idx, k)
            vc.scatter_(2, idx, v.view(B, S, self.hk, self.hd).transpose(1, 2))
            if S == 1:  # decode: GQA in the kernel
                o = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask[:, None], enable_gqa=True)
            else:  # prefill: K/V repeated per query head, so a masked kernel (not the math one) runs it
                g = self.hq // self.hk
                o = F.scaled_dot_product_attention(q, kc.repeat_interleave(g, 1), vc.repeat_interleave(g, 1),
                                                   attn_mask=mask[:, None])
            x = x + o.transpose(1, 2).reshape(B, S, -1) @ ly["wo"].t()
            g, u = (F.rms_norm(x, (self.H,), ly["mn"], self.eps) @ ly["wgu"].t()).chunk(2, -1)
            x = x + (F.silu(g) * u) @ ly["wd"].t()
        return F.rms_norm(x[:, -1], (self.H,), self.norm, self.eps) @ self.lm.t()

    def decode(self):
        """One decode step of every row: the next token into self.tok, positions + 1 (graph-safe)."""
        logits = self.forward(self.tok[:, None], self.pos[:, None], True)
        self.tok.copy_(logits.argmax(-1))
        self.pos.add_(1)
        return self.tok


def static_batches(st, reqs, B, step_graph, t0):
    """Every batch: prefill, then graph replays until its longest request is done. Per request (tokens, times)."""
    import torch
    outs = []
    for b0 in range(0, len(reqs), B):
        batch = reqs[b0:b0 + B]
        rows = batch + [batch[-1]] * (B - len(batch))  # the last batch padded with copies
        P = max(len(r[0]) for r in rows)
        tok = torch.tensor([[0] * (P - len(r[0])) + list(r[0]) for r in rows], device="cuda")
        st.start.copy_(torch.tensor([P - len(r[0]) for r in rows], device="cuda"))
        pos = torch.arange(P, device="cuda")[None, :].expand(B, P).contiguous()
        st.tok.copy_(st.forward(tok, pos, True).argmax(-1))
        st.pos.fill_(P)
        torch.cuda.synchronize()
        toks, times = [st.tok.tolist()], [time.perf_counter() - t0]
        for _ in range(max(r[1] for r in batch) - 1):
            step_graph.replay()
            toks.append(st.tok.tolist())  # the host reads each token, as a server streams it
            times.append(time.perf_counter() - t0)
        for j, (p, n, e) in enumerate(batch):
            ids = []
            for s in range(n):
                ids.append(toks[s][j])
                if e is not None and ids[-1] == e:
                    break
            outs.append((ids, times[:len(ids)]))
    return outs


def run_static(d, reqs, B, compile_mode):
    import gc
    import torch
    from torch_timing import capture
    # No autograd (Dynamo traced the caches' scatter_ with grad on, and
    # failed in its backward); the checkpoint's own q/k/v and gate/up
    # weights go once Static holds their fused copies (with them both, the
    # 8B model, its cache and the prefill did not fit an 80 GB H100).
    with torch.no_grad():
        hf = load(d)
        # a batch's rows all run to its longest prompt plus its longest output
        L = max(max(len(p) for p, _, _ in reqs[b:b + B]) + max(n for _, n, _ in reqs[b:b + B])
                for b in range(0, len(reqs), B))
        L = (L + 63) // 64 * 64
        st = Static(hf, B, L)
        del hf
        gc.collect()
        torch.cuda.empty_cache()
        t_c = time.perf_counter()
        try:
            graph, _ = capture(torch.compile(st.decode, mode=compile_mode, fullgraph=True))
        except Exception as e:  # still a number, marked: the plain step captured
            print("torch_serve static: torch.compile failed (%s); the plain step captured instead" %
                  str(e).splitlines()[0][:200], flush=True)
            compile_mode = "none (compile failed)"
            torch._dynamo.reset()
            graph, _ = capture(st.decode)
        compile_s = time.perf_counter() - t_c
        t0 = time.perf_counter()
        outs = static_batches(st, reqs, B, graph, t0)
        seconds = time.perf_counter() - t0
    del st, graph
    torch.cuda.empty_cache()
    return summary("static", reqs, outs, seconds, dict(batch=B, cache_len=L, compile_mode=compile_mode or "default",
                                                       compile_and_capture_s=compile_s))


def run_mode(a, mode, reqs):
    """One baseline in this process: its summary, or {"error": ...}."""
    t = time.time()
    try:
        r = run_cb(a.dir, reqs) if mode == "cb" else run_static(a.dir, reqs, a.batch, a.compile_mode)
    except Exception as e:  # keep the other columns; say what failed
        print("torch_serve %s: FAILED: %s" % (mode, str(e).splitlines()[0][:300]), flush=True)
        r = {"error": str(e)[:1000]}
    print("torch_serve %s: %.0f s in all (load, warm-up, run)" % (mode, time.time() - t), flush=True)
    return r


def run_apart(a, mode):
    """One baseline in a process of its own, so that what the other left on
    the device (transformers' paged cache is sized to the free memory, and a
    failed run may keep it) cannot starve it."""
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        cmd = [sys.executable, os.path.abspath(__file__), "run", a.dir, a.requests, "--modes", mode,
               "--batch", str(a.batch), "--json", tmp.name]
        if a.compile_mode:
            cmd += ["--compile-mode", a.compile_mode]
        rc = subprocess.call(cmd)
        try:
            return json.load(open(tmp.name))[mode]
        except (OSError, ValueError, KeyError):
            return {"error": "the %s run ended with status %d and wrote no result" % (mode, rc)}


def cmd_run(a):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    reqs = read_requests(a.requests)
    res = {"requests": a.requests, "checkpoint": a.dir, "gpu": torch.cuda.get_device_name(0)}
    modes = a.modes.split(",")
    for mode in modes:
        res[mode] = run_mode(a, mode, reqs) if len(modes) == 1 else run_apart(a, mode)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("file")
    g.add_argument("--n", type=int, required=True)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--vocab", type=int, default=128256)
    c = sub.add_parser("checkpoint")
    c.add_argument("dir")
    c.add_argument("--layers", type=int, default=32)
    c.add_argument("--vocab", type=int, default=128256)
    c.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("requests")
    r.add_argument("--modes", default="cb,static")
    r.add_argument("--batch", type=int, default=64)
    r.add_argument("--compile-mode", default=None,
                   help="torch.compile mode of the static loop's step (default: Inductor's default; "
                        "max-autotune-no-cudagraphs times GEMM choices, minutes more at 32 layers)")
    r.add_argument("--json")
    a = p.parse_args()
    {"gen": cmd_gen, "checkpoint": cmd_checkpoint, "run": cmd_run}[a.cmd](a)


if __name__ == "__main__":
    main()
