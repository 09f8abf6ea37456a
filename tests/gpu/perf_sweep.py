"""perf_sweep.py - the table of tests/gpu/perf_sweep.sh and its targets
against torch.compile + CUDA graph, from the JSON its parts write
(bench/torch_llama.py's decode.json and whole.json, bench/torch_prefill.py's
prefill.json). Needs only python3:
the files of a GPU run can be judged anywhere.

    python3 tests/gpu/perf_sweep.py DIR        # DIR holds the JSON files

Per point: ours, torch.compile + torch.cuda.graph (the strongest PyTorch
form), ours / torch (< 1: ours is faster) and the floor; then every target
as MET or NOT MET (a point without data is NOT MET, with the reason), and
last "N met, N not met". The targets are goals to report against: the exit
code is 0 whenever the files could be read.

Targets:
  decode   the 4-layer step faster than torch.compile + graph at batch
           1/8/32/64/128/256 x ctx 512/4096, 8b and 70b widths: torch / ours
           >= 1.10 at batch 1-8, >= 1.05 from 32 up
  floor    batch 1: 8b <= 1.10x its floor, 70b <= 1.03x (the floor: the bytes
           a step reads at the device-to-device copy bandwidth measured in
           the same run)
  whole    the whole model at batch 1: 8b >= 85% of that bandwidth per
           token, the 1b shape >= 78%
  prefill  lean step under torch.compile + graph / ours >= 1.10 at 512 and
           2048 tokens, 1b, 8b, 14b and 70b widths
"""
import json
import math
import os
import sys

DECODE_BATCH, DECODE_CTX = (1, 8, 32, 64, 128, 256), (512, 4096)
FLOOR = {"8b": 1.10, "70b": 1.03}
WHOLE = {"8b": 85.0, "1b": 78.0}
PREFILL_CFG, PREFILL_P = ("1b", "8b", "14b", "70b"), (512, 2048)
NAN = float("nan")


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None, "%s: missing" % name
    try:
        with open(p) as f:
            return json.load(f), None
    except ValueError as e:
        return None, "%s: unreadable (%s)" % (name, e)


def num(x):
    return x if isinstance(x, (int, float)) and not math.isnan(x) else NAN


def decode_rows(doc):
    """{(config, batch, ctx): (ours us, compile us, floor us, row)} of a torch_llama.py file."""
    out = {}
    for r in (doc or {}).get("results", []):
        ours = num(r.get("ours_us", NAN))
        cp = num(r.get("us", {}).get("compile", NAN))
        out[(r["config"], r["batch"], r["ctx"])] = (ours, cp, num(r.get("ours_floor_us", r.get("floor_us", NAN))), r)
    return out


def why_missing(r, ours, cp):
    if r is None:
        return "not measured"
    if r.get("skipped"):
        return "skipped: " + r["skipped"]
    bits = []
    if math.isnan(ours):
        bits.append("no ours" + (" (" + r["ours_skipped"] + ")" if r.get("ours_skipped") else ""))
    if math.isnan(cp):
        bits.append("no torch.compile" + ("; " + "; ".join(r.get("notes", [])) if r.get("notes") else ""))
    bad = [k for k, v in r.get("ok", {}).items() if not v]
    if bad:
        bits.append("torch outputs differ from eager: " + ", ".join(bad))
    return ", ".join(bits)


class Targets:
    def __init__(self):
        self.lines, self.met, self.not_met = [], 0, 0

    def add(self, name, value, ok, missing=""):
        if missing:
            ok, value = False, "no data (%s)" % missing
        self.lines.append("%-7s %-44s %s" % ("MET" if ok else "NOT MET", name, value))
        if ok:
            self.met += 1
        else:
            self.not_met += 1


def table_decode(rows, title, unit_ms=False):
    if not rows:
        return
    print(title)
    print("  %-22s %11s %11s %9s %11s %9s" % ("point", "ours", "compile", "ours/cmp", "floor", "ours/flr"))
    order = ("1b", "8b", "14b", "70b")
    for (cfg, b, ctx), (ours, cp, fl, r) in sorted(
            rows.items(), key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order else 9, kv[0][2], kv[0][1])):
        s = 1e-3 if unit_ms else 1.0
        u = "ms" if unit_ms else "us"
        if r.get("skipped"):
            print("  %-22s skipped: %s" % ("%s b%d c%d" % (cfg, b, ctx), r["skipped"]))
            continue
        print("  %-22s %8.3f %s %8.3f %s %9.3f %8.3f %s %9.3f" % (
            "%s b%d c%d" % (cfg, b, ctx), ours * s, u, cp * s, u, ours / cp, fl * s, u, ours / fl))


def judge_decode(rows, t):
    for cfg in ("8b", "70b"):
        for ctx in DECODE_CTX:
            for b in DECODE_BATCH:
                ours, cp, fl, r = rows.get((cfg, b, ctx), (NAN, NAN, NAN, None))
                need = 1.10 if b <= 8 else 1.05
                miss = why_missing(r, ours, cp)
                t.add("decode %s b%d c%d torch/ours >= %.2f" % (cfg, b, ctx, need),
                      "%.3f (ours %.1f us, torch.compile+graph %.1f us)" % (cp / ours, ours, cp),
                      cp / ours >= need, miss)
    for cfg, lim in FLOOR.items():
        for ctx in DECODE_CTX:
            ours, cp, fl, r = rows.get((cfg, 1, ctx), (NAN, NAN, NAN, None))
            miss = "not measured" if r is None else ("skipped: " + r["skipped"]) if r.get("skipped") else (
                "no ours" if math.isnan(ours) else "")
            t.add("floor %s b1 c%d ours/floor <= %.2f" % (cfg, ctx, lim),
                  "%.3f (ours %.1f us, floor %.1f us)" % (ours / fl, ours, fl), ours / fl <= lim, miss)


def judge_whole(rows, meta, t):
    for cfg, pct_min in WHOLE.items():
        hits = [(k, v) for k, v in rows.items() if k[0] == cfg and k[1] == 1]
        if not hits:
            t.add("whole %s b1 >= %.0f%% of the copy peak" % (cfg, pct_min), "", False, "not measured")
            continue
        for (c, b, ctx), (ours, cp, fl, r) in sorted(hits):
            peak = r.get("ours_peak_bw") or (meta or {}).get("peak_bw_measured") or NAN
            sheet = r.get("ours_peak_bw_datasheet") or (meta or {}).get("peak_bw_datasheet") or 0
            pct = 100 * r.get("bytes_per_step", NAN) / (ours * 1e-6) / peak
            miss = "not measured" if r is None else ("skipped: " + r["skipped"]) if r.get("skipped") else (
                "no ours" if math.isnan(ours) else "")
            t.add("whole %s b1 c%d >= %.0f%% of the copy peak" % (cfg, ctx, pct_min),
                  "%.1f%% (%.3f ms/token, %.1f tokens/s; copy peak %.2f TB/s%s; torch.compile+graph %.3f ms)" % (
                      pct, ours / 1e3, 1e6 / ours, peak / 1e12,
                      ", %.1f%% of the datasheet's %.2f" % (pct * peak / sheet, sheet / 1e12) if sheet else "",
                      cp / 1e3), pct >= pct_min, miss)


def prefill_rows(doc):
    out = {}
    for r in (doc or {}).get("results", []):
        ours = min((v["device_ms"] for v in r.get("ours", {}).values()), default=NAN)
        lc = num(r.get("torch_ms", {}).get("lean compile", NAN))
        out[(r["config"], r["prompt"])] = (ours, lc, r)
    return out


def judge_prefill(rows, t):
    if rows:
        print("prefill (ms, device time; one GPU)")
        print("  %-14s %10s %14s %9s %10s %9s %8s" % ("point", "ours", "lean compile", "ours/lean", "hf eager",
                                                      "floor", "check"))
        for (cfg, P), (ours, lc, r) in sorted(rows.items()):
            ok = all(v.get("ok") for v in r.get("check", {}).values())
            print("  %-14s %10.3f %14.3f %9.3f %10.3f %9.3f %8s" % (
                "%s P%d" % (cfg, P), ours, lc, ours / lc, num(r.get("torch_ms", {}).get("hf eager", NAN)),
                r["floor_ms"], "ok" if ok else "MISMATCH"))
    for cfg in PREFILL_CFG:
        for P in PREFILL_P:
            ours, lc, r = rows.get((cfg, P), (NAN, NAN, None))
            miss = ""
            if r is None:
                miss = "not measured"
            elif math.isnan(ours) or math.isnan(lc):
                miss = ("no ours" if math.isnan(ours) else "no lean compile") + (
                    " (" + "; ".join(r.get("notes", [])) + ")" if r.get("notes") else "")
            elif not all(v.get("ok") for v in r.get("check", {}).values()):
                miss = "the lean step differs from transformers"
            t.add("prefill %s P%d lean/ours >= 1.10" % (cfg, P),
                  "%.3f (ours %.2f ms, lean compile+graph %.2f ms)" % (lc / ours, ours, lc), lc / ours >= 1.10, miss)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.stderr.write(__doc__)
        return 2
    d = sys.argv[1]
    problems = []
    dec, e1 = load(d, "decode.json")
    whole, e2 = load(d, "whole.json")
    pre, e3 = load(d, "prefill.json")
    problems += [e for e in (e1, e2, e3) if e]
    drows, wrows, prows = decode_rows(dec), decode_rows(whole), prefill_rows(pre)
    meta = (dec or whole or {}).get("meta", {})
    if meta:
        print("%s, torch %s, copy peak %.3f TB/s (datasheet %.3f)" % (
            meta.get("gpu"), meta.get("torch"), meta.get("peak_bw_measured", 0) / 1e12,
            meta.get("peak_bw_datasheet", 0) / 1e12))
    table_decode(drows, "decode step, %s layers, TP 1 (us a step)" % (dec or {}).get("meta", {}).get("layers", "?"))
    table_decode(wrows, "whole model, batch x ctx (ms a token)", unit_ms=True)
    t = Targets()
    judge_decode(drows, t)
    judge_whole(wrows, (whole or {}).get("meta"), t)
    judge_prefill(prows, t)
    static, _ = load(d, "static.json")
    if static:
        srows = decode_rows(static)
        print("class against static compile (ours / compile, each in its own run; ours the common yardstick):")
        for k, (ours, cp, fl, r) in sorted(srows.items()):
            o2, c2, _, _ = drows.get(k, (NAN, NAN, NAN, None))
            print("  %-16s class %.3f  static %.3f  (static compile %.1f us, class %.1f us)" % (
                "%s b%d c%d" % k, o2 / c2, ours / cp, cp, c2))
    for p in problems:
        print("note: " + p)
    print("targets:")
    for line in t.lines:
        print("  " + line)
    print("%d met, %d not met" % (t.met, t.not_met))
    return 0


if __name__ == "__main__":
    sys.exit(main())
