"""Render tpbench / allreduce_bench / rebind_bench JSON as the Markdown tables
in docs/performance.md, so the document shows exactly what a run produced.

    python3 bench/report.py tpbench.json allreduce.json rebind.json
    python3 bench/report.py --png tpbench.svg [tpbench.png]

--png rasterizes tpbench's SVG with Pillow (which torchvision brings along),
for machines without rsvg-convert or ImageMagick: it draws exactly the
elements tpbench writes (rect, line, polyline with dashes, text), so the PNG
is the SVG and there is one plot to maintain.

Each table is preceded by the run's metadata line (GPU, driver, NCCL,
commit, date) when the JSON has it (tpbench and allreduce_bench write it).
"""
import json
import sys

MODES = ["eager", "captured", "nccl", "explicit", "pdl", "overlap", "compute"]
TARGETS = {  # (hidden, ffn, tokens): the best mode's goal in us, shown beside torch eager, torch graph, floor
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


def svg_to_png(svg_path, png_path, scale=2):
    """Rasterizes the SVG subset tpbench writes; returns the PNG's path."""
    import re
    import xml.etree.ElementTree as ET
    from PIL import Image, ImageDraw, ImageFont

    root = ET.parse(svg_path).getroot()
    tag = lambda e: e.tag.split("}")[-1]
    W, H = int(float(root.get("width"))), int(float(root.get("height")))
    img = Image.new("RGB", (W * scale, H * scale), "white")
    dr = ImageDraw.Draw(img)
    fonts = {}

    def font(size):
        if size not in fonts:
            try:
                fonts[size] = ImageFont.load_default(size=size * scale)  # Pillow >= 10.1 with FreeType
            except TypeError:
                fonts[size] = ImageFont.load_default()
        return fonts[size]

    def dashed(pts, dash, color, width):
        on, off = dash
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            n = max(1, int(((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5 / (on + off)))
            for i in range(n):
                a, b = i / n, (i + on / (on + off)) / n
                dr.line([(x0 + (x1 - x0) * a, y0 + (y1 - y0) * a), (x0 + (x1 - x0) * b, y0 + (y1 - y0) * b)],
                        fill=color, width=width)

    base = int(root.get("font-size", "11"))
    for e in root.iter():
        t = tag(e)
        color = e.get("stroke") or e.get("fill") or "black"
        width = int(float(e.get("stroke-width", "1")) * scale)
        dash = e.get("stroke-dasharray")
        dash = tuple(float(v) * scale for v in dash.split(",")) if dash else None
        if t == "line":
            pts = [(float(e.get("x1")) * scale, float(e.get("y1")) * scale),
                   (float(e.get("x2")) * scale, float(e.get("y2")) * scale)]
        elif t == "polyline":
            pts = [tuple(float(v) * scale for v in p.split(",")) for p in e.get("points").split()]
        elif t == "text":
            size = int(e.get("font-size", base))
            anchor = {"start": "ls", "middle": "ms", "end": "rs"}[e.get("text-anchor", "start")]
            dr.text((float(e.get("x")) * scale, float(e.get("y")) * scale), e.text or "", fill="black",
                    font=font(size), anchor=anchor)
            continue
        else:
            continue
        if len(pts) < 2:
            continue
        if dash:
            dashed(pts, dash, color, width)
        else:
            dr.line(pts, fill=color, width=width, joint="curve")
    png_path = png_path or re.sub(r"\.svg$", "", svg_path) + ".png"
    img.save(png_path)
    return png_path


if __name__ == "__main__":
    if sys.argv[1:2] == ["--png"]:
        if len(sys.argv) not in (3, 4):
            sys.exit("usage: report.py --png PLOT.svg [PLOT.png]")
        print("wrote %s" % svg_to_png(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None))
        sys.exit(0)
    for path in sys.argv[1:]:
        d = json.load(open(path))
        if "rows" in d and "floor" in d["rows"][0]:
            t, g = tpbench(d)
            print(meta(d) + t + "\n\n" + g + "\n")
        elif "rows" in d:
            print(meta(d) + allreduce(d) + "\n")
        else:
            print(rebind(d) + "\n")
