"""torch_smoke.py - the logic of torch_llama.py and torch_prefill.py on a CPU
(python3 with torch and transformers, no GPU): tiny widths, graph capture
and event timing stood in for by plain calls and a wall clock, the engine by
a stand-in that writes what --bench / --model print. What it checks is what
a GPU run would otherwise find first: the points, skips, compile classes,
the checks against eager and transformers, ours' rows, the JSON and tables;
and the decode step itself, judged by tests/gpu/llama_ref.py check as the
engine is. It times nothing.

    python3 bench/torch_smoke.py        # about a minute; ends "N passed, N failed"
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import types

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llama as tl  # noqa: E402
import torch_prefill as tp  # noqa: E402

# The engine's stand-in: `bench` writes bench.json rows for --sweep's grid
# (batch 64 skipped, as a point that does not fit); `prefill` prints --model's lines.
ENGINE = r'''
import json, os, sys
a = sys.argv[2:]
if sys.argv[1] == "bench":
    bs, cs = a[a.index("--sweep") + 1].split("x")
    rows = [dict(batch=int(b), ctx=int(c), skipped="needs too much") if b == "64" else
            dict(batch=int(b), ctx=int(c), median_us=100.0 + int(b), floor_us=90.0, peak_bw_measured=3e12)
            for c in cs.split(",") for b in bs.split(",")]
    json.dump(rows, open(os.path.join(a[a.index("--out") + 1], "bench.json"), "w"))
    print("bench: stand-in")
else:
    n = len(a[a.index("--prompt-ids") + 1].split(","))
    print("llama: prefill of %d tokens in 1 chunk(s) of up to 2048 rows (M-row graphs): 1.50 ms, device 1.40 ms" % n)
    print("new ids: 7")
'''


def stand_ins(mod):
    mod.capture = lambda fn: (types.SimpleNamespace(replay=fn), fn())

    def timed(fn, iters, warmup=0):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    mod.timed = timed
    mod.DEV = "cpu"


def main():
    for name in ("synchronize", "empty_cache"):
        setattr(torch.cuda, name, lambda *a: None)
    torch.cuda.mem_get_info = lambda *a: (80 << 30, 80 << 30)
    torch.cuda.get_device_name = lambda *a: "cpu (stand-in)"
    stand_ins(tl)
    stand_ins(tp)
    tl.nccl_version = lambda: "none"
    tl.datasheet_bandwidth = lambda: 0.0
    tp.gemm_rate = lambda: 1e15
    tl.CONFIGS["tiny"] = dict(hidden=256, heads=8, kv_heads=2, head_dim=64, ffn=512, layers=3)
    tp.CONFIGS["tiny"] = dict(hidden_size=256, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                              intermediate_size=512)
    d = tempfile.mkdtemp(prefix="torch_smoke.")
    eng = os.path.join(d, "engine.py")
    with open(eng, "w") as f:
        f.write(ENGINE)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "store"), rank=0, world_size=1)
    tl.compile_limits()
    fails, done = [], []

    def expect(what, ok):
        print("%s %s" % ("PASS" if ok else "FAIL", what), flush=True)
        (done if ok else fails).append(what)

    for whole, argv in ((False, ["--config", "tiny", "--layers", "2", "--batch", "1,8,64", "--ctx", "100,300"]),
                        (True, ["--whole", "--config", "tiny", "--vocab", "512", "--batch", "1", "--ctx", "100",
                                "--compile-shapes", "static"])):
        sys.argv = ["torch_llama.py"] + argv + ["--iters", "2", "--json", os.path.join(d, "llama.json"), "--ours",
                                                "%s %s bench --sweep {grid} --out {out}" % (sys.executable, eng)]
        args = tl.parse_args()
        args.tp = 1
        res = []
        tl.run_config("tiny", args, 0, 3e12, res, lambda r: tl.write_json(r, args, 3e12, 0.0))
        tl.report(res, args, 3e12, 0.0)
        rows = json.load(open(args.json))["results"]
        tag = "whole" if whole else "step"
        expect("%s: a row per point" % tag, len(rows) == len(args.batch) * len(args.ctx))
        expect("%s: every torch form matches eager" % tag, all(all(r["ok"].values()) and r["ok"] for r in rows))
        expect("%s: compile, both graph forms and ours timed" % tag, all(
            {"compile", "graph-gqa", "graph-fold"} <= set(r["us"]) and ("ours_us" in r) == (r["batch"] != 64)
            for r in rows))
        expect("%s: ours' skip carried" % tag, all(r.get("ours_skipped") for r in rows if r["batch"] == 64))
        if not whole:
            expect("step: two compiles per form at most (batch 1, batch > 1)",
                   max(r["graphs_compiled"] for r in rows) <= 4)
    sys.argv = ["torch_prefill.py", "--config", "tiny", "--layers", "2", "--vocab", "1000", "--prompts", "200,300",
                "--iters", "2", "--compile-shapes", "class", "--dir", d, "--json", os.path.join(d, "prefill.json"),
                "--ours", "%s %s prefill" % (sys.executable, eng)]
    tp.main()
    rows = json.load(open(os.path.join(d, "prefill.json")))["results"]
    expect("prefill: a row per prompt", [r["prompt"] for r in rows] == [200, 300])
    expect("prefill: the lean step (eager, graph, compiled) matches transformers",
           all(len(r["check"]) == 3 and all(v["ok"] for v in r["check"].values()) for r in rows))
    expect("prefill: ours' device time read", all(r["ours"]["2048"]["device_ms"] == 1.4 for r in rows))
    # The bf16 model keeps an fp32 RoPE table (a bf16 one drifts from position ~1000 on: rel 0.1-1.1 of
    # the logits at 512-2048 tokens on a GPU, more than the 3% check allows, once the widths are real).
    inv = tp.make_model(types.SimpleNamespace(layers=1, vocab=1000, seed=0), "tiny", os.path.join(d, "rope"))
    inv = inv.model.rotary_emb.inv_freq
    D = tp.CONFIGS["tiny"]["head_dim"]
    exact = 1.0 / (tp.THETA ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    expect("prefill: transformers' RoPE table stays fp32 in the bf16 model (%s)" % inv.dtype,
           inv.dtype == torch.float32 and torch.allclose(inv.double(), exact, rtol=1e-6, atol=0))
    # The decode step itself against transformers' layers: the engine's own
    # test (tests/gpu/llama_ref.py) judging this baseline's --weights run.
    ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu", "llama_ref.py")
    w, o = os.path.join(d, "w"), os.path.join(d, "o")
    rc = [subprocess.run(c, capture_output=True, text=True).returncode for c in (
        [sys.executable, ref, "gen", w, "--config", "tiny", "--layers", "2", "--batch", "2", "--ctx", "40",
         "--steps", "3", "--vocab", "512", "--device", "cpu"],
        [sys.executable, tl.__file__, "--weights", w, "--out", o, "--device", "cpu", "--tp", "2"],
        [sys.executable, ref, "check", w, o, "--tp", "2", "--device", "cpu"])]
    expect("the decode step at TP 2 passes llama_ref.py check (exit codes %s)" % rc, rc == [0, 0, 0])
    subprocess.run(["rm", "-rf", d])
    print("%d passed, %d failed" % (len(done), len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
