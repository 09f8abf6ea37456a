"""step_budget.py - the decode step's time budget per kernel, from
bench/step_budget.sh's logs: per point (model, batch, ctx), each kernel of one
layer (the mean over the step's layers) with its time, its DRAM bytes, the
rate it reached and the time those bytes take at the copy bandwidth the
bench measured (4.3 TB/s where its bench.json predates that); then the sum
of the kernels, the step's own time per layer without the profiler (`llama
--bench --sweep small` of the same build), and the difference: the idle
time between kernels (launch gaps, dependency waits, non-kernel nodes).

    python3 bench/step_budget.py LOGDIR [--md]

ncu runs each kernel alone (serialized, clocks as found, caches not
flushed), so the kernel times are those of kernels that do not overlap; a
graph with programmatic edges (--pdl) overlaps a kernel's launch with the
one before, which shows as a smaller gap, never as a shorter kernel.
"""
import collections
import csv
import glob
import json
import os
import re
import sys

BW = 4.3e12
GEMM_ROLES = ["qkv", "o", "gate_up", "down"]
ROLE_ORDER = ["qkv", "rope_append", "attn", "attn_combine", "o", "o.allreduce", "gate_up", "gate_up.swiglu", "down",
              "down.allreduce",
              "nccl", "head (rmsnorm / L)", "other"]


def kernels(path):
    """[(name, us, bytes)] in launch order, from an ncu --csv --print-units base log."""
    rows = [l for l in open(path, errors="replace") if l.startswith('"')]
    by_id = collections.OrderedDict()
    for r in csv.DictReader(rows):
        try:
            k = by_id.setdefault(int(r["ID"]), {"name": r["Kernel Name"].split("(")[0].strip()})
            k[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            pass
    out = []
    for k in by_id.values():
        b = k.get("dram__bytes_read.sum", 0.0) + k.get("dram__bytes_write.sum", 0.0)
        out.append((k["name"], k.get("gpu__time_duration.sum", 0.0) / 1e3, b))
    return out


# cuBLASLt's kernels (nvjet_*, *xmma_gemm*, cutlass*) are GEMMs too; its
# split-K reduction and our SwiGLU ending belong to the GEMM before them.
LT_GEMM = ("gemv", "gemm", "nvjet", "cutlass")


def role(name, gi, ei):
    if "splitKreduce" in name or "reduce_kernel" in name:
        return GEMM_ROLES[(gi - 1) % 4], gi, ei
    if "lt_swiglu" in name:
        return "gate_up.swiglu", gi, ei
    if any(s in name for s in LT_GEMM):
        return GEMM_ROLES[gi % 4], gi + 1, ei
    if "epilogue" in name or "allreduce" in name:
        return ("o.allreduce", "down.allreduce")[ei % 2], gi, ei + 1
    if name.startswith("nccl") or "Nccl" in name:
        return "nccl", gi, ei
    for r in ("rope_append", "attn_combine"):
        if r in name:
            return r, gi, ei
    if name.startswith("llama_attn"):
        return "attn", gi, ei
    return "other", gi, ei


def budget(path, layers):
    ks = kernels(path)
    heads = [i for i, k in enumerate(ks) if k[0] == "llama_rmsnorm"]
    if not heads:
        return None
    last = ks[heads[-1]:]          # the last launch of the step graph
    per = collections.OrderedDict()
    names = {}
    gi = ei = 0
    per["head (rmsnorm / L)"] = [last[0][1] / layers, last[0][2] / layers]
    names["head (rmsnorm / L)"] = "llama_rmsnorm"
    for name, us, by in last[1:]:
        r, gi, ei = role(name, gi, ei)
        e = per.setdefault(r, [0.0, 0.0])
        e[0] += us / layers
        e[1] += by / layers
        names[r] = re.sub(r"^tpg_", "", name)[:34]
    return per, names


def main():
    d = sys.argv[1]
    md = "--md" in sys.argv
    sweep = {}
    for f in glob.glob(os.path.join(d, "sweep_*", "bench.json")):
        cfg = f.split("sweep_")[1].split("/")[0]
        for row in json.load(open(f)):
            sweep[(cfg, row["batch"], row["ctx"])] = row
    pts = []
    for f in sorted(glob.glob(os.path.join(d, "ncu_*.csv"))):
        m = re.match(r"ncu_(\w+?)_b(\d+)_c(\d+)\.csv", os.path.basename(f))
        if m:
            pts.append(((m.group(1), int(m.group(2)), int(m.group(3))), f))
    pts.sort(key=lambda p: (p[0][0] != "8b", p[0][2], p[0][1]))
    cols, res = [], {}
    for key, f in pts:
        layers = sweep.get(key, {}).get("layers", 4)
        b = budget(f, layers)
        if b:
            cols.append(key)
            res[key] = b
    if not cols:
        print("step_budget: no ncu logs with the step's kernels in %s" % d)
        return 1
    sep = " | " if md else " "
    head = ["kernel (us per layer; TB/s)"] + ["%s b%d c%d" % k for k in cols]
    print(("| " if md else "") + sep.join("%-26s" % head[0] if i == 0 else "%14s" % h for i, h in enumerate(head))
          + (" |" if md else ""))
    if md:
        print("|" + "---|" * len(head))
    for r in ROLE_ORDER:
        if not any(r in res[k][0] for k in cols):
            continue
        cells = []
        for k in cols:
            e = res[k][0].get(r)
            cells.append("%14s" % ("-" if not e else "%.1f; %.2f" % (e[0], e[1] / (e[0] * 1e-6) / 1e12 if e[0] else 0)))
        print(("| " if md else "") + sep.join(["%-26s" % r] + cells) + (" |" if md else ""))
    rows = collections.OrderedDict()
    for k in cols:
        per = res[k][0]
        s = sum(e[0] for e in per.values())
        sw = sweep.get(k)
        byf = sum(e[1] for e in per.values()) / ((sw or {}).get("peak_bw_measured") or BW) * 1e6
        g = sw["us_per_layer"] if sw else float("nan")
        rows.setdefault("kernels, sum", []).append(s)
        rows.setdefault("their DRAM bytes at peak", []).append(byf)
        rows.setdefault("step per layer (no profiler)", []).append(g)
        rows.setdefault("gaps = step - kernels", []).append(g - s)
        rows.setdefault("floor (weights + KV)", []).append(sw["floor_us_per_layer"] if sw else float("nan"))
        rows.setdefault("step / floor", []).append(g / sw["floor_us_per_layer"] if sw else float("nan"))
    for name, v in rows.items():
        fmt = "%14.2f" if "/" in name and "floor" in name and name.startswith("step /") else "%14.1f"
        print(("| " if md else "") + sep.join(["%-26s" % name] + [fmt % x for x in v]) + (" |" if md else ""))
    print()
    for k in cols:
        print("kernels %s b%d c%d: " % k + "; ".join("%s = %s" % (r, n) for r, n in res[k][1].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
