"""Render tpbench / allreduce_bench / rebind_bench JSON as the Markdown tables
in docs/performance.md, so the document shows exactly what a run produced.

    python3 bench/report.py tpbench.json allreduce.json rebind.json

Each table is preceded by the run's metadata line (GPU, driver, NCCL,
commit, date) when the JSON has it (tpbench and allreduce_bench write it).
"""
import json
import sys

MODES = ["eager", "captured", "nccl", "explicit", "pdl", "overlap", "compute"]
TARGETS = {  # (hidden, ffn, tokens): (torch eager, torch graph, floor, goal) from issue 4
    (8192, 28672, 1): "<= 118",
    (4096, 14336, 1): "<= 33",
    (8192, 28672, 128): "<= 125",
    (8192, 28672, 1024): "<= 660, exposed comm <= 20% of the all-reduce alone",
}


def fmt(v):
    return "-" if v is None or v < 0 else "%.1f" % v


def tpbench(d):
    out = ["| hidden/ffn | tokens | " + " | ".join(MODES) + " | exposed | floor | torch eager | torch graph | best / floor | best / torch graph |",
           "|" + "---|" * (len(MODES) + 8)]
    targets = ["| case | ours (best tpgraph mode) | torch eager | torch graph | floor | goal | met |", "|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        best = min(r[m] for m in ("eager", "captured", "nccl", "explicit", "pdl", "overlap") if m in r)
        ex = [r[m] for m in ("explicit", "pdl", "overlap") if m in r]
        exposed = min(ex) - r["compute"] if ex and "compute" in r else None
        tg = r.get("torch_graph")
        out.append("| %d/%d | %d | %s | %s | %.1f | %s | %s | %.2fx | %s |" % (
            r["hidden"], r["ffn"], r["tokens"], " | ".join(fmt(r.get(m)) for m in MODES), fmt(exposed), r["floor"],
            fmt(r.get("torch_eager")), fmt(tg), best / r["floor"], "%.2fx" % (best / tg) if tg else "-"))
        key = (r["hidden"], r["ffn"], r["tokens"])
        if key in TARGETS:
            goal = TARGETS[key]
            lim = float(goal.split()[1].rstrip(","))
            targets.append("| %d/%d, M=%d | %.1f | %s | %s | %.1f | %s | %s |" % (
                key[0], key[1], key[2], best, fmt(r.get("torch_eager")), fmt(tg), r["floor"], goal,
                "yes" if best <= lim else "no (%.0f%% over)" % (100 * (best / lim - 1))))
    return "\n".join(out), "\n".join(targets)


def meta(d):
    m = d.get("meta")
    if not m:
        return ""
    return "%s x %d (sm_%d), driver %d, NCCL %d, tpgraph %d, commit %s, %s\n\n" % (
        m["gpu"], m["gpus"], m["sm_arch"], m["driver"], m["nccl"], m["tpgraph"], m["commit"], m["date"])


def allreduce(d):
    """us per op (median) and busbw (nccl-tests: bytes * 2(n-1)/n / time) per
    algorithm; "-" where an algorithm did not run or cannot serve the size."""
    n = d["gpus"]
    f = 2.0 * (n - 1) / n
    algos = [a for a in ("nccl", "oneshot", "twoshot", "auto") if any(r.get(a + "_us", -1) > 0 for r in d["rows"])]
    out = ["| bytes | " + " | ".join("%s us | %s busbw GB/s" % (a, a) for a in algos) + " | NCCL / best of ours |",
           "|---|" + "---|---|" * len(algos) + "---|"]
    for r in d["rows"]:
        cells = []
        for a in algos:
            t = r.get(a + "_us", -1)
            cells.append("%.2f | %.1f" % (t, r["bytes"] * f / t / 1e3) if t > 0 else "- | -")
        ours = [r[a + "_us"] for a in ("oneshot", "twoshot", "auto") if r.get(a + "_us", -1) > 0]
        nc = r.get("nccl_us", -1)
        out.append("| %d | %s | %s |" % (r["bytes"], " | ".join(cells), "%.2fx" % (nc / min(ours)) if nc > 0 and ours else "-"))
    return "\n".join(out)


def rebind(d):
    out = ["| rank | nodes | create us | instantiate us | rebind kernel slot us | rebind all-reduce slot us | whole-graph update us | launch, host us | launch, device us | instantiate / kernel rebind |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in d["ranks"]:
        out.append("| %d | %d | %.0f | %.0f | %.1f | %.1f | %.0f | %.1f | %.1f | %.0fx |" % (
            r["rank"], r["nodes"], r["create_us"], r["instantiate_us"], r["rebind_kernel_us"], r["rebind_nccl_us"],
            r["update_us"], r["launch_host_us"], r["launch_dev_us"], r["instantiate_us"] / r["rebind_kernel_us"]))
    return "\n".join(out)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        d = json.load(open(path))
        if "rows" in d and "floor" in d["rows"][0]:
            t, g = tpbench(d)
            print(meta(d) + t + "\n\n" + g + "\n")
        elif "rows" in d:
            print(meta(d) + allreduce(d) + "\n")
        else:
            print(rebind(d) + "\n")
