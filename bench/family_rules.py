#!/usr/bin/env python3
"""family_rules.py - refit the rule between the GEMM families from a zoo run.

    gemm_bench --zoo --cutlass --json Z.json          (on the GPU; tools/gpu_suite.sh cutlass)
    python3 bench/family_rules.py Z.json              per-M table, the fitted rule's prediction
    python3 bench/family_rules.py Z.json [Z2.json ...] --emit lib/gemm/family_table.inc
    python3 bench/family_rules.py --selftest          (no data: checks this script)

The rule (lib/gemm/select.c) is a table of shape classes: tokens M, W rows
(2N with SwiGLU) and K, each cut at fixed bounds (M_CUTS, W_CUTS, K_CUTS
below). Per class the fit picks, by the geometric mean of time / cuBLASLt
over the zoo shapes in the class:
  - for TPG_GEMM_FAMILY=cutlass: the CUTLASS option (a kernel of
    kernels/gemm/sm90_cutlass_list.h with a mode: data-parallel, stream-K,
    or split-K whose S the library computes per shape) with the lowest mean;
  - for AUTO (what ships): the option of any library family (a CUTLASS one,
    or cuBLASLt: its heuristic's first algorithm, "cublaslt_us" of the
    family's own node when the zoo timed it, else the zoo's cuBLASLt
    baseline, the same call) with the lowest mean, if it beats our kernels
    (the rule's pick, "us" in the JSON) by at least MIN_GAIN over the
    class, else ours.
An option counts a shape it cannot run (SwiGLU for both libraries, M <= 16
for CUTLASS) at our time: in the emitted table a library's row is followed
by an ours row of the same class, so such a shape stops there. Split-K
candidates of one kernel are one option (their S follows the shape). The
prediction it prints is the geomean the fitted table would give on this
zoo, next to ours alone and the best option per shape (what tuning could
reach).

Why classes and not a cost model: we have no model of the libraries'
kernels, and a table is what one zoo run can decide in one step; a class
with few shapes says little, so a class with fewer than MIN_SHAPES shapes
takes its M row's choice (the same M bucket over all W rows and K).
"""
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

M_CUTS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]   # then any M
# W cuts and MIN_SHAPES chosen by the held-out estimate below (two runs of
# 744 shapes, nvidia-h200): with [4096, 8192, 16384] and 3, a table fitted
# on one run was 1.4% faster than ours alone in-sample but 0.3% on the
# model shapes it had not seen.
W_CUTS = [3072, 4096, 6144, 8192, 16384, 32768]          # then any W rows
K_CUTS = [2048, 4096, 8192]                              # then any K
MIN_GAIN = 0.02    # AUTO takes a library in a class only when it is this much faster there
MIN_SHAPES = 2     # fewer shapes in a class: its M row decides
TABLE_ARCH = 90    # the zoo runs on Hopper: the table is for sm_90 only

ROOT = Path(__file__).resolve().parent.parent
LIST_H = ROOT / "kernels/gemm/sm90_cutlass_list.h"
MODES = {"dp": "TPG_CUTLASS_DP", "sk": "TPG_CUTLASS_SK", "k": "TPG_CUTLASS_SPLIT"}
LT = ("cublaslt", "heuristic")   # the cuBLASLt option (its heuristic's first answer)
EPI_LT = {"none", "bias", "bias_gelu", "residual", "f32_partial"}  # the epilogues cuBLASLt fuses


def kernel_names(path=LIST_H):
    """Row index by name, from sm90_cutlass_list.h."""
    names = {}
    for m in re.finditer(r"#define TPG_CUTLASS_ROW(\d+)\(X\) X\((\d+), (\w+),", path.read_text()):
        names[m.group(3)] = int(m.group(2))
    return names


def option_of(cand, names):
    """("kernel index", "mode") of a CUTLASS candidate name, None for others."""
    if not cand.startswith("cutlass_"):
        return None
    rest = cand[len("cutlass_"):]
    for name, idx in sorted(names.items(), key=lambda kv: -len(kv[0])):
        if rest == name:
            return (idx, "dp")
        if rest == name + "_sk":
            return (idx, "sk")
        if re.fullmatch(re.escape(name) + r"_k\d+", rest):
            return (idx, "k")
    return None


def bucket(v, cuts):
    for i, c in enumerate(cuts):
        if v <= c:
            return i
    return len(cuts)


def wrows(r):
    return 2 * r["N"] if r["epi"] == "swiglu" else r["N"]


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def load(path, names):
    z = json.load(open(path))
    rows = []
    for r in z["rows"]:
        cb = r.get("cublas_us", -1)
        if not cb or cb <= 0 or r["us"] <= 0:
            continue
        opts = {}
        for c in r.get("cand", []):
            o = option_of(c["kernel"], names)
            if o and c["us"] > 0:
                opts[o] = min(opts.get(o, float("inf")), c["us"])
        lt = r.get("cublaslt_us", -1)
        if r["epi"] in EPI_LT:
            opts[LT] = lt if lt and lt > 0 else cb
        rows.append({"M": r["M"], "N": r["N"], "K": r["K"], "epi": r["epi"], "ours": r["us"], "cublas": cb,
                     "opts": opts, "sep": min([c["us"] for c in r.get("cand", []) if c["kernel"].startswith("sep:")]
                                              or [float("inf")]),
                     "chosen": r.get("chosen_us", -1), "cutlass_rule": r.get("cutlass_rule_us", -1)})
    return z, rows


def cls(r):
    return (bucket(r["M"], M_CUTS), bucket(wrows(r), W_CUTS), bucket(r["K"], K_CUTS))


def fit(rows):
    """Per class: (cutlass option or None, auto option or None); an option is
    (CUTLASS kernel index, mode) or LT."""
    by = defaultdict(list)
    by_m = defaultdict(list)
    for r in rows:
        by[cls(r)].append(r)
        by_m[cls(r)[0]].append(r)

    def best_of(group, opts):
        # the option with the lowest geomean (ours on the shapes it does not run)
        best, best_l = None, None
        for o in sorted(opts, key=str):
            l = sum(math.log(r["opts"].get(o, r["ours"]) / r["cublas"]) for r in group)
            if best_l is None or l < best_l:
                best, best_l = o, l
        return best, best_l

    def choose(group):
        opts = set(o for r in group for o in r["opts"])
        cut, _ = best_of(group, [o for o in opts if o != LT])
        lib, lib_l = best_of(group, opts)
        ours_l = sum(math.log(r["ours"] / r["cublas"]) for r in group)
        auto = lib if lib is not None and lib_l < ours_l + len(group) * math.log(1 - MIN_GAIN) else None
        return cut, auto

    m_choice = {m: choose(g) for m, g in by_m.items()}
    table = {}
    for c, g in by.items():
        table[c] = choose(g) if len(g) >= MIN_SHAPES else m_choice[c[0]]
    return table


def predict(rows, table, which):
    """time / cuBLASLt of each row under the table (which: 0 CUTLASS rule, 1 auto)."""
    out = []
    for r in rows:
        o = table.get(cls(r), (None, None))[which]
        t = r["opts"].get(o, r["ours"]) if o else r["ours"]
        out.append(t / r["cublas"])
    return out


def held_out(rows):
    """time / cuBLASLt under AUTO for shapes the fit did not see: each model
    shape (N, K, epilogue, at every M) predicted by the table fitted on all
    the others. What a refit can promise for a model outside the zoo."""
    keys = sorted(set((r["N"], r["K"], r["epi"]) for r in rows))
    out = []
    for key in keys:
        test = [r for r in rows if (r["N"], r["K"], r["epi"]) == key]
        out += predict(test, fit([r for r in rows if (r["N"], r["K"], r["epi"]) != key]), 1)
    return out


def report(z, rows, table):
    print(f"zoo: {len(rows)} shapes, device {z.get('device')}, mode {z.get('mode')}")
    per_m = defaultdict(list)
    for r in rows:
        per_m[r["M"]].append(r)
    print(f"{'M':>6} {'shapes':>6} {'ours':>7} {'CUTLASS':>8} {'cuBLASLt':>9} {'best':>7} {'measured':>9} "
          f"{'fit auto':>9} {'fit cutl':>9}")
    allr = []
    for m in sorted(per_m) + ["all"]:
        g = rows if m == "all" else per_m[m]
        ours = gmean([r["ours"] / r["cublas"] for r in g])
        cuts = [[v for o, v in r["opts"].items() if o != LT] + ([r["sep"]] if r["sep"] < float("inf") else []) for r in g]
        cut = [min(c) / r["cublas"] for c, r in zip(cuts, g) if c]
        lt = gmean([r["opts"][LT] / r["cublas"] for r in g if LT in r["opts"]])
        best = gmean([min([r["ours"], r["sep"]] + list(r["opts"].values())) / r["cublas"] for r in g])
        meas = gmean([(r["chosen"] if r["chosen"] > 0 else r["ours"]) / r["cublas"] for r in g])
        fa, fc = gmean(predict(g, table, 1)), gmean(predict(g, table, 0))
        print(f"{m:>6} {len(g):>6} {ours:7.3f} {gmean(cut):8.3f} {lt:9.3f} {best:7.3f} {meas:9.3f} {fa:9.3f} {fc:9.3f}")
        allr = g
    fa = predict(allr, table, 1)
    best_fused = [min([r["ours"]] + list(r["opts"].values())) / r["cublas"] for r in allr]
    print(f"held out (each model shape predicted by the table fitted on the others): AUTO {gmean(held_out(allr)):.3f} "
          f"of cuBLASLt, ours alone {gmean([r['ours'] / r['cublas'] for r in allr]):.3f}")
    print(f"fitted AUTO: geomean {gmean(fa):.3f} of cuBLASLt, {sum(x > 1.10 for x in fa)} shapes over 1.10x, "
          f"{gmean(fa) / gmean(best_fused):.3f} of the best option per shape "
          f"(targets: <= 0.97 overall, <= 1.00 per M)")


def nearest_m(table, mi, wi, ki):
    """The CUTLASS table's pick for an M class the zoo did not run: that of
    the nearest M class with the same W and K cuts that it did (the smaller
    one on a tie), so TPG_GEMM_FAMILY=cutlass stays CUTLASS wherever a
    CUTLASS kernel can run (an A/B switch), not ours by absence of data.
    AUTO keeps ours there: what ships changes only on data."""
    for d in range(1, len(M_CUTS) + 1):
        for mj in (mi - d, mi + d):
            if mj >= 1 and table.get((mj, wi, ki), (None, None))[0] is not None:
                return table[(mj, wi, ki)][0]
    return None


FAMILY = {None: "TPG_GEMM_FAMILY_OURS", "cutlass": "TPG_GEMM_FAMILY_CUTLASS", LT: "TPG_GEMM_FAMILY_CUBLASLT"}


def row_of(o):
    """(family, kernel, mode) of a row for option o (None: ours)."""
    if o is None:
        return FAMILY[None], "0", "0"
    if o == LT:
        return FAMILY[LT], "0", "0"
    return FAMILY["cutlass"], str(o[0] + 1), MODES[o[1]]


def emit(table, path, source):
    """lib/gemm/family_table.inc from the fit: a library's row is followed by
    an ours row of the same class (a shape the library cannot run stops there,
    as the fit counted it)."""
    def bound(cuts, i, anyv):
        return str(cuts[i]) if i < len(cuts) else anyv

    lines = []
    for which, name in ((1, "kFamilyAuto"), (0, "kFamilyCutlass")):
        lines.append(f"static const tpg_family_row {name}[] = {{")
        lines.append("    {16, TPG_FR_ANY_W, TPG_FR_ANY_K, TPG_GEMM_FAMILY_OURS, 0, 0},")
        for mi in range(1, len(M_CUTS) + 1):  # M <= 16: decode, ours (the row above)
            for wi in range(len(W_CUTS) + 1):
                for ki in range(len(K_CUTS) + 1):
                    o = table.get((mi, wi, ki), (None, None))[which]
                    if o is None and which == 0:
                        o = nearest_m(table, mi, wi, ki)
                    cls_ = f"{bound(M_CUTS, mi, 'TPG_FR_ANY_M')}, {bound(W_CUTS, wi, 'TPG_FR_ANY_W')}, " \
                           f"{bound(K_CUTS, ki, 'TPG_FR_ANY_K')}"
                    lines.append("    {%s, %s, %s, %s}," % ((cls_,) + row_of(o)))
                    if o is not None:
                        lines.append("    {%s, %s, %s, %s}," % ((cls_,) + row_of(None)))
        lines.append("};")
        lines.append("")
    head = f"""/* family_table.inc - the rule between the GEMM families, per shape class
 * (lib/gemm/select.c). Written by bench/family_rules.py from a zoo run
 * ({source}); edit by hand only to state a decision the data does not make.
 *
 * Rows: {{m_max, wrows_max, k_max, family, kernel, mode}}: the first row
 * whose m <= m_max, W rows (2N with SwiGLU) <= wrows_max and k <= k_max hold
 * and whose family can run the shape decides. family TPG_GEMM_FAMILY_OURS
 * (tpg_gemm_select_tma), _CUBLASLT (its heuristic's first algorithm), or
 * _CUTLASS with kernel i + 1 of kernels/gemm/sm90_cutlass_list.h and mode
 * TPG_CUTLASS_DP / _SK / _SPLIT (split-K's S from the shape: cutlass.c).
 * AUTO takes a library in a class only when it was {MIN_GAIN:.0%} faster there.
 * The table was fitted on sm_{TABLE_ARCH}: elsewhere AUTO runs ours. */
#define TPG_FAMILY_TABLE_SOURCE "fitted by bench/family_rules.py on {source}"
#define TPG_FAMILY_TABLE_ARCH {TABLE_ARCH}

"""
    Path(path).write_text(head + "\n".join(lines))


def selftest():
    names = kernel_names()
    assert names and all(isinstance(v, int) for v in names.values()), names
    n0 = min(names, key=names.get)
    assert option_of(f"cutlass_{n0}", names) == (names[n0], "dp")
    assert option_of(f"cutlass_{n0}_sk", names) == (names[n0], "sk")
    assert option_of(f"cutlass_{n0}_k4", names) == (names[n0], "k")
    assert option_of("tma_m128_n256", names) is None
    # a zoo where the first CUTLASS kernel is 10% faster than ours from M = 256: AUTO takes it there only
    # a zoo where the first CUTLASS kernel is 10% faster than ours from M = 256 and cuBLASLt 20% faster at
    # M = 1024 (not with SwiGLU, which it cannot run): AUTO takes CUTLASS at 256, cuBLASLt at 1024, ours at 64
    rows = []
    for m in (64, 256, 1024):
        for n, k in ((4096, 4096), (1280, 8192), (14336, 4096)):
            for epi in ("none", "swiglu"):
                ours = 10.0
                opts = {(names[n0], "sk"): ours * (0.9 if m >= 256 else 1.1)}
                if epi != "swiglu":
                    opts[LT] = ours * (0.8 if m == 1024 else 1.2)
                rows.append({"M": m, "N": n, "K": k, "epi": epi, "ours": ours, "cublas": 10.0, "sep": float("inf"),
                             "opts": opts, "chosen": -1, "cutlass_rule": -1})
    t = fit(rows)
    assert all(t[cls(r)][1] is None for r in rows if r["M"] == 64)
    assert all(t[cls(r)][1] == (names[n0], "sk") for r in rows if r["M"] == 256)
    assert all(t[cls(r)][1] == LT and t[cls(r)][0] == (names[n0], "sk") for r in rows if r["M"] == 1024)
    out = Path("/tmp/family_table_selftest.inc")
    emit(t, out, "selftest")
    text = out.read_text()
    assert "kFamilyAuto" in text and "kFamilyCutlass" in text
    assert f"TPG_GEMM_FAMILY_CUTLASS, {names[n0] + 1}, TPG_CUTLASS_SK" in text and "TPG_GEMM_FAMILY_CUBLASLT, 0, 0" in text
    # every library row is followed by ours for the same class
    lib = [i for i, l in enumerate(text.splitlines()) if "FAMILY_CUTLASS," in l or "FAMILY_CUBLASLT," in l]
    lines = text.splitlines()
    assert all("FAMILY_OURS" in lines[i + 1] and lines[i + 1].split("TPG_GEMM")[0] == lines[i].split("TPG_GEMM")[0]
               for i in lib)
    print("family_rules.py: selftest ok")


def main(argv):
    if "--selftest" in argv:
        selftest()
        return 0
    if len(argv) < 2:
        print(__doc__)
        return 2
    names = kernel_names()
    # several zoo runs (same kernels) fit as one: each shape counts once per run
    inputs = [a for a in argv[1:argv.index("--emit") if "--emit" in argv else len(argv)]]
    z, rows = load(inputs[0], names)
    for extra in inputs[1:]:
        rows += load(extra, names)[1]
    if not rows:
        print("no rows with cuBLASLt times")
        return 1
    table = fit(rows)
    report(z, rows, table)
    if "--emit" in argv:
        path = argv[argv.index("--emit") + 1]
        emit(table, path, f"{' + '.join(Path(a).name for a in inputs)}, {z.get('device')}, {len(rows)} timed shapes")
        print(f"wrote {path}: rebuild, run tests/cpu:gemm_rule_test and gemm_cutlass_test, then the zoo again to "
              "confirm (tests/gpu/gemm_check.sh)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
