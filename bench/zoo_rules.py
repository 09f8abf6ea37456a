#!/usr/bin/env python3
"""zoo_rules.py - our GEMM kernels' Hopper rule, derived from a gemm_bench zoo run.

Usage: python3 bench/zoo_rules.py ZOO.json [--tree] [--fit | --fit-from-rule] [--cv] [--summary | --picks]

ZOO.json: `gemm_bench --zoo --cand --json` output (every shape of the model
zoo with ours, cuBLASLt, and every forced candidate's time). Prints, per M
and overall, the geometric mean of time / cuBLAS for
  heuristic  what the selector of that run picked (the "kernel" column),
  rule       rule() below, i.e. what lib/gemm/ours_rule.c picks now (it must
             stay a transcription of this function),
  best       the fastest candidate of each shape (what tuning could reach),
and the shapes where the rule loses most to the best candidate.
--cv refits leaving out each model's own shapes and judges the rule on them.
--picks prints tests/cpu/gemm_rule_picks.txt (the rule's pick per shape, for
gemm_rule_test). --summary prints the rule's Markdown tables (docs/gemm.md).
--tree prints, per M, a depth-2 tree on (W rows, K) minimizing the summed
log(time / best): the M <= 16 thresholds of rule() are its M = 16 tree,
rounded. --fit re-runs the coordinate descent that sets the cost model's
constants (EFF_*, SK_FIX, SK_K, K_FIX where a class has it) over the grids
in FIT_GRID from FIT_START and prints what it finds; --fit-from-rule starts
it from the constants below. The file keeps the constants the fits chose;
SK_P and KC_FIX were set by scans with every other constant kept. Which
runs fitted which constant, and what each bought: docs/gemm.md, "Our
Hopper rule". A fit needs a run that timed every kernel the tables name.
"""
import collections
import json
import math
import sys


# Cost model for m > 16 (relative units): a tile's k-step costs
# bm * bn * EFF[(bm, bn)]; whole tiles pay ceil(tiles / SMS) waves of K;
# stream-K pays its exact share of all k-steps plus a fix-up of SK_FIX * bm * bn
# and, when the tiles alone would not fill the SMs, SK_K of a tile's K again.
# m <= 64 is weight streaming (64-row tiles only), m > 64 compute; m <= 32 has
# its own table (EFF_TINY: with 64-row tiles half of X is zero fill, and the
# m <= 64 constants picked 64 x 64 tiles where 64 x 128 won most M = 32 shapes).
# Fitted on the zoo by coordinate descent over FIT_GRID (--fit).
SMS = 132
# The _c2 kernels are considered stream-K only: whole-tile _c2 was rarely the
# best candidate, and letting the rule take it fitted worse.
C2_SK_ONLY = True
EFF_TINY = {(64, 256): 0.6, (64, 128): 0.6, (64, 64): 1.4}
EFF_SMALL = {(64, 256): 0.6, (64, 128): 0.6, (64, 64): 0.8}
EFF_LARGE = {(128, 256): 1.0, (128, 128): 1.15, (128, 64): 1.4, (64, 256): 1.3, (64, 128): 1.5,
             (128, 256, 2): 0.95, (128, 128, 2): 1.05, (128, 192): 1.0, (128, 192, 2): 0.9}
# 64 < m <= 128 ("mid") has its own table, where the 64-row _c2 pairs and the
# _cn2 pairs (N-tiles sharing X) are candidates; 9.0 = never picked. It stops
# at M = 128: fitted over M = 128 and 256 it helped 128 and hurt 256, so
# M = 256 keeps the large table. The _cn2 pairs never paid, here or at M <= 64.
EFF_MID = dict(list(EFF_LARGE.items()) + [((64, 128, 2), 1.3), ((64, 64, 2), 2.0), ((128, 128, "n2"), 9.0),
                                            ((128, 64, "n2"), 9.0)])
EFF_MID[(128, 128)] = 1.1
EFF_MID[(128, 128, 2)] = 1.0
EFF_TINY.update({(64, 128, "n2"): 9.0, (64, 64, "n2"): 9.0})
EFF_SMALL.update({(64, 128, "n2"): 9.0, (64, 64, "n2"): 9.0})
# The swapped tiles ("sw": bm tokens x bn W rows; "sw2": pairs of token tiles
# sharing W), candidates at M <= 128.
SW_TINY = [(32, 64, "sw"), (32, 128, "sw"), (32, 256, "sw")]
SW_SMALL = SW_TINY + [(64, 64, "sw"), (64, 128, "sw"), (64, 256, "sw"), (32, 64, "sw2"), (32, 128, "sw2")]
SW_MID = [(64, 64, "sw"), (64, 128, "sw"), (64, 256, "sw"), (64, 64, "sw2"), (64, 128, "sw2"), (32, 64, "sw2"),
          (32, 128, "sw2")]
# 8 < M <= 16 ("dec"): the GEMV below DEC_SW_W W rows, the 16-token swapped
# tiles from there (they stream wide W faster than the GEMV's split-K). 8192,
# not the zoo fit's 7168: in tpbench's graph the 7168-row GeLU up-projection
# of the 4096 / 14336 layer at 16 tokens ran slower with the swapped tile.
DEC_SW_W = 8192
EFF_DEC = {(16, 64, "sw"): 1.2, (16, 128, "sw"): 1.0}
for _t, _keys in ((EFF_TINY, SW_TINY), (EFF_SMALL, SW_SMALL), (EFF_MID, SW_MID)):
    for _k in _keys:
        _t.setdefault(_k, 9.0)
# Fitted with --fit-from-rule on a zoo run that timed the swapped tiles; the
# mid table's other entries moved in the same fit.
EFF_TINY.update({(32, 64, "sw"): 1.2, (32, 128, "sw"): 1.0})
EFF_SMALL.update({(32, 64, "sw"): 1.4, (64, 64, "sw"): 0.7})
EFF_MID.update({(64, 64, "sw"): 1.7, (64, 128, "sw"): 1.2, (128, 128): 1.05, (64, 128): 1.3, (64, 128, 2): 1.1})
# mid: 30, not the fit's 20: it keeps 128 x 128 whole tiles instead of 64-row
# _c2 stream-K on tpbench's 14336 x 8192 up-projection at 128 tokens, which
# ran slower per layer that way (and the same _c2 ran slower stream-K than
# whole on the zoo's 8192 x 28672).
SK_FIX = {"dec": 40.0, "tiny": 40.0, "small": 20.0, "mid": 30.0, "large": 40.0}
SK_K = {"dec": 0.1, "tiny": 0.1, "small": 0.1, "mid": 0.05, "large": 0.0}
# Aligned split-K ("_k<S>", 128-row unswapped tiles and their _c2, m > 64): a
# grid of units x S, S = min(resident units // units, K blocks, 16) >= 2, each
# CTA one K range of one unit; its cost is that range's k-steps at the tile's
# whole-tile eff plus a fix-up of K_FIX * bm * bn (None: not considered).
# Fitted alone, every other constant kept.
K_FIX = {"dec": None, "tiny": None, "small": None, "mid": 15.0, "large": 20.0}
# Stream-K's k-steps cost SK_P more than whole tiles' (m > 128): its CTAs
# read X and W at scattered K offsets (the loop runs a smaller share of the
# tensor pipe than whole tiles'), which the model's wave arithmetic did not
# see. Scanned alone after K_FIX.
SK_P = {"dec": 0.0, "tiny": 0.0, "small": 0.0, "mid": 0.0, "large": 0.1}
# K over a cluster ("_kc<S>", 128-row unswapped one-CTA tiles, m > 64): the S K
# ranges of a tile are a launch-time cluster summed through distributed
# shared memory; S = the most (<= 8, <= K blocks) whose clusters all fit at
# once (KC_CLUSTERS: cudaOccupancyMaxActiveClusters with 132 SMs); cost = that
# range's k-steps at the tile's whole-tile eff plus KC_FIX * bm * bn (None:
# not considered). Scanned alone over 0..40; 15 or more is never picked.
KC_FIX = {"dec": None, "tiny": None, "small": None, "mid": 10.0, "large": 10.0}
KC_CLUSTERS = {2: 66, 3: 39, 4: 30, 5: 22, 6: 17, 7: 15, 8: 15}


# Where the descent starts: a first guess (the old rule's 1.15 for BN 128).
FIT_START = {
    "dec": ({(16, 64, "sw"): 1.0, (16, 128, "sw"): 1.0}, 20.0, 0.1),
    "tiny": ({(64, 256): 1.0, (64, 128): 1.0, (64, 64): 1.0}, 10.0, 0.0),
    "small": ({(64, 256): 1.0, (64, 128): 1.0, (64, 64): 1.0}, 10.0, 0.0),
    "mid": (dict(EFF_MID), 40.0, 0.0),
    "large": ({(128, 256): 1.0, (128, 128): 1.15, (128, 64): 1.4, (64, 256): 1.3, (64, 128): 1.5,
               (128, 256, 2): 1.0, (128, 128, 2): 1.2, (128, 192): 1.1, (128, 192, 2): 1.1}, 10.0, 0.0),
}
FIT_GRID = {
    "dec": {(16, 64, "sw"): [0.6, 0.8, 1.0, 1.2, 1.4, 1.7, 2.0], (16, 128, "sw"): [0.6, 0.8, 1.0, 1.2, 1.4, 1.7, 2.0],
            "fix": [0, 2, 5, 10, 20, 40, 80, 160], "kk": [0, 0.05, 0.1, 0.2, 0.4]},
    "tiny": {(64, 256): [0.6, 0.8, 1.0, 1.2], (64, 128): [0.6, 0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.5],
             (64, 64): [0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.5, 3.0, 4.0], "fix": [0, 2, 5, 10, 20, 40, 80, 160],
             (64, 128, "n2"): [0.4, 0.5, 0.6, 0.8, 1.0, 1.2, 9.0], (64, 64, "n2"): [0.6, 0.8, 1.0, 1.2, 1.4, 1.7, 9.0],
             "kk": [0, 0.05, 0.1, 0.2, 0.4]},
    "small": {(64, 256): [0.6, 0.8, 1.0, 1.2], (64, 128): [0.6, 0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.5],
              (64, 64): [0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.5, 3.0, 4.0], "fix": [0, 2, 5, 10, 20, 40, 80, 160],
              (64, 128, "n2"): [0.4, 0.5, 0.6, 0.8, 1.0, 1.2, 9.0], (64, 64, "n2"): [0.6, 0.8, 1.0, 1.2, 1.4, 1.7, 9.0],
              "kk": [0, 0.05, 0.1, 0.2, 0.4]},
    "mid": {(128, 128): [1.0, 1.05, 1.1, 1.15, 1.2, 1.3], (128, 64): [1.1, 1.2, 1.3, 1.4, 1.6, 1.8],
            (64, 256): [1.0, 1.1, 1.2, 1.3, 1.4, 1.6], (64, 128): [1.1, 1.2, 1.3, 1.4, 1.5, 1.7, 2.0],
            (128, 256, 2): [0.8, 0.9, 0.95, 1.0, 1.1, 9.0], (128, 128, 2): [0.9, 1.0, 1.05, 1.1, 1.2, 9.0],
            (128, 192): [0.9, 1.0, 1.1, 1.2, 9.0], (128, 192, 2): [0.9, 1.0, 1.1, 1.2, 9.0],
            (64, 128, 2): [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 9.0], (64, 64, 2): [0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 9.0],
            (128, 128, "n2"): [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 9.0], (128, 64, "n2"): [0.9, 1.0, 1.1, 1.2, 1.4, 1.6, 9.0],
            "fix": [0, 2, 5, 10, 20, 40, 80], "kk": [0, 0.05, 0.1, 0.2], "kfix": [0, 2, 5, 10, 20, 40, 80, 1e9],
            "kcfix": [0, 2, 5, 10, 15, 20, 40, 80, 1e9]},
    "large": {(128, 128): [1.0, 1.05, 1.1, 1.15, 1.2, 1.3], (128, 64): [1.1, 1.2, 1.3, 1.4, 1.6, 1.8],
              (64, 256): [1.0, 1.1, 1.2, 1.3, 1.4, 1.6], (64, 128): [1.1, 1.2, 1.3, 1.4, 1.5, 1.7, 2.0],
              (128, 256, 2): [0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 9.0],
              (128, 128, 2): [0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.5, 9.0],
              (128, 192): [0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.5, 9.0],
              (128, 192, 2): [0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.5, 9.0],
              "fix": [0, 2, 5, 10, 20, 40, 80], "kk": [0, 0.05, 0.1, 0.2], "kfix": [0, 2, 5, 10, 20, 40, 80, 1e9],
            "kcfix": [0, 2, 5, 10, 15, 20, 40, 80, 1e9]},
}
_SW_GRID = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 1.7, 2.0, 9.0]
for _size, _keys in (("tiny", SW_TINY), ("small", SW_SMALL), ("mid", SW_MID)):
    for _k in _keys:
        FIT_GRID[_size][_k] = _SW_GRID


def cdiv(a, b):
    return -(-a // b)


def tiles_of(m, w, bm, bn):
    return cdiv(m, bm) * cdiv(w, bn)


def cost(m, w, k, key, sk, eff, fix, kk, skp=0.0):
    """key: (bm, bn), or (bm, bn, 2) for the _c2 kernels: clusters of two CTAs
    on M-tile pairs, so the units are (2 bm) x bn and SMS / 2 of them run at
    once; each CTA still does a bm x bn tile's k-steps."""
    bm, bn = key[0], key[1]
    along_n = len(key) > 2 and key[2] == "n2"  # _cn2: pairs of N-tiles (2 bn W rows a unit)
    # "sw": swapped tiles (bm tokens x bn W rows, one CTA); "sw2": their _c2 pairs of token tiles
    cl = 2 if len(key) > 2 and key[2] != "sw" else 1
    tiles = tiles_of(m, w, bm, bn * cl) if along_n else tiles_of(m, w, bm * cl, bn)
    slots = SMS // cl
    kb = cdiv(k, 64)
    e = eff[key]
    if sk == 2:  # aligned split-K: fix is K_FIX
        s = ranges_of(tiles, slots, kb)
        return cdiv(kb, s) * bm * bn * e + fix * bm * bn if s >= 2 else float("inf")
    if sk == 3:  # K over a cluster: fix is KC_FIX
        s = kc_ranges_of(tiles, kb)
        return cdiv(kb, s) * bm * bn * e + fix * bm * bn if s >= 2 else float("inf")
    if sk:
        return (tiles * kb / slots * bm * bn * e * (1 + skp) + fix * bm * bn +
                (kk * kb * bm * bn * e if tiles < slots else 0))
    return cdiv(tiles, slots) * kb * bm * bn * e


def ranges_of(units, slots, kb):
    """S of the "_k<S>" candidate (lib/gemm/ours_rule.c tpg_ours_ranges_of): as many K ranges a
    unit as the resident units allow, at most the K blocks and 16."""
    return min(slots // units if units else 0, kb, 16)


def kc_ranges_of(tiles, kb):
    """S of the "_kc<S>" candidate (lib/gemm/ours_rule.c tpg_ours_kc_ranges_of): the most K
    ranges (<= 8, <= the K blocks) whose clusters all fit at once; 0: none."""
    for s in range(min(8, kb), 1, -1):
        if tiles <= KC_CLUSTERS[s] * SMS // 132:
            return s
    return 0


def rule(m, n, k, epi, sms=SMS):
    """The candidate the selector picks on sm_90: a variant name. n: output
    columns; W has 2n rows with swiglu (gate and up)."""
    w = 2 * n if epi == "swiglu" else n  # W rows: what the tiles cover
    # the decode GEMV, split-K with its own rule for the number of K ranges
    # (lib/gemm/ours_launch.c gemv_splits: a launch detail of the "gemv" variant)
    gemv = "gemv"
    # M <= 16: the GEMV beat nearly every TMA candidate at M = 16; M <= 32
    # with few W rows and K < 8192 too (at K = 8192 TMA 64 x 64 stream-K wins)
    if m <= 8 or (m <= 16 and w < DEC_SW_W) or (16 < m <= 32 and w <= 4096 and k < 8192):
        return gemv
    size = "dec" if m <= 16 else "tiny" if m <= 32 else "small" if m <= 64 else "mid" if m <= 128 else "large"
    eff = {"dec": EFF_DEC, "tiny": EFF_TINY, "small": EFF_SMALL, "mid": EFF_MID, "large": EFF_LARGE}[size]
    best = None
    for key in eff:  # table order breaks ties: the first listed wins
        bm, bn = key[0], key[1]
        if eff[key] >= 9.0:  # "never": the fixed cost alone would otherwise pick a small tile
            continue
        cn2 = len(key) > 2 and key[2] == "n2"
        sw = len(key) > 2 and key[2] in ("sw", "sw2")
        c2 = len(key) > 2 and key[2] in (2, "sw2")
        if bm == 64 and m > 256:
            continue
        if sw and ((bm == 16 and m > 16) or (bm == 32 and m > 64 and not c2) or (bm == 64 and m <= 32)):
            continue  # the swapped candidates by M (lib/gemm/ours_variant.c add_swapped)
        if sw and c2 and epi == "swiglu":  # not offered, as the 64-row _c2
            continue
        if c2 and m <= bm:  # one M-tile: the pair's second CTA would idle (no such candidate)
            continue
        if c2 and bm == 64 and epi == "swiglu":  # not offered (a GPU check failure, lib/gemm/ours_variant.c)
            continue
        ranges = K_FIX[size] is not None and bm == 128 and not sw and not cn2
        kcl = KC_FIX[size] is not None and bm == 128 and not sw and not cn2 and not c2
        for sk in (0, 1, 2, 3) if ranges or kcl else (0, 1):
            if (sk == 2 and not ranges) or (sk == 3 and not kcl):
                continue
            if c2 and bm == 128 and not sw and not sk and C2_SK_ONLY:  # the rule takes _c2 stream-K only (C2_SK_ONLY)
                continue
            c = cost(m, w, k, key, sk, eff, K_FIX[size] if sk == 2 else KC_FIX[size] if sk == 3 else SK_FIX[size],
                     SK_K[size], SK_P[size])
            if best is None or c < best[0]:
                if sk == 3:
                    tail = "_kc%d" % kc_ranges_of(tiles_of(m, w, bm, bn), cdiv(k, 64))
                elif sk == 2:
                    cl = 2 if c2 else 1
                    tail = "_k%d" % ranges_of(tiles_of(m, w, bm * cl, bn), SMS // cl, cdiv(k, 64))
                else:
                    tail = "_sk" if sk else ""
                best = (c, "tma_m%d_n%d%s%s%s" % (bm, bn, "_sw" if sw else "", "_c2" if c2 else "_cn2" if cn2 else "",
                                                   tail))
    return best[1]


def cand_time(row, name):
    c = {x["kernel"]: x["us"] for x in row["cand"]}
    if name in c:
        return c[name]
    # a stream-K twin is only listed where the last wave is partial; else it
    # is the whole-tile kernel
    if name.endswith("_sk") and name[:-3] in c:
        return c[name[:-3]]
    return None


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def tree(rows, depth):
    """Depth-limited tree on (w, k) minimizing summed log(time / best)."""
    names = sorted({x["kernel"] for r in rows for x in r["cand"]})
    names = [c for c in names if all(cand_time(r, c) for r in rows)]

    def leaf(rs):
        return min((sum(math.log(cand_time(r, c) / r["_best"]) for r in rs), c) for c in names)

    def grow(rs, d):
        loss, c = leaf(rs)
        best = (loss, c)
        if d == 0:
            return best
        for f in ("_w", "K"):
            vals = sorted({r[f] for r in rs})
            for th in vals[1:]:
                a = [r for r in rs if r[f] < th]
                b = [r for r in rs if r[f] >= th]
                if len(a) < 6 or len(b) < 6:
                    continue
                ta, tb = grow(a, d - 1), grow(b, d - 1)
                if ta[0] + tb[0] < best[0] - 0.5:
                    best = (ta[0] + tb[0], "if %s < %d: (%s) else (%s)" % (f.strip("_"), th, ta[1], tb[1]))
        return best

    return grow(rows, depth)


def fit(rows, quiet=False, from_rule=False):
    """Coordinate descent of the cost model's constants per size class;
    returns {size: (eff, fix, kk)} and leaves the module's constants as they were.
    from_rule: start from the constants in this file instead of FIT_START
    (--fit-from-rule: how the _c2 / BN 192 entries were added to a fitted rule)."""
    found = {}
    for size, eff_name, sel in (("dec", "EFF_DEC", lambda m: 8 < m <= 16),
                                ("tiny", "EFF_TINY", lambda m: 16 < m <= 32),
                                ("small", "EFF_SMALL", lambda m: 32 < m <= 64),
                                ("mid", "EFF_MID", lambda m: 64 < m <= 128),
                                ("large", "EFF_LARGE", lambda m: m > 256)):
        rs = [r for r in rows if sel(r["M"])]
        if not rs:  # a zoo run without this M range (e.g. --m 128,...): keep its constants
            found[size] = (dict(globals()[eff_name]), SK_FIX[size], SK_K[size])
            continue
        keep = (dict(globals()[eff_name]), SK_FIX[size], SK_K[size], K_FIX[size], KC_FIX[size])
        eff, fix, kk = dict(FIT_START[size][0]), FIT_START[size][1], FIT_START[size][2]
        if from_rule:
            eff, fix, kk = dict(keep[0]), keep[1], keep[2]

        def score(eff_, fix_, kk_):
            globals()[eff_name] = eff_
            SK_FIX[size], SK_K[size] = fix_, kk_
            ts = [cand_time(r, rule(r["M"], r["N"], r["K"], r["epi"])) for r in rs]
            if None in ts:  # picks a kernel this run did not time: not a candidate setting
                return float("inf")
            return gmean([t / r["cublas_us"] for t, r in zip(ts, rs)])

        best = score(eff, fix, kk)
        for _ in range(4):
            for key, vals in FIT_GRID[size].items():
                for v in vals:
                    e2, f2, k2 = dict(eff), fix, kk
                    kf, kcf = K_FIX[size], KC_FIX[size]
                    if key == "fix":
                        f2 = v
                    elif key == "kk":
                        k2 = v
                    elif key == "kfix":
                        if kf is None:
                            continue
                        K_FIX[size] = v
                    elif key == "kcfix":
                        if kcf is None:
                            continue
                        KC_FIX[size] = v
                    else:
                        e2[key] = v
                    sc = score(e2, f2, k2)
                    if sc < best:
                        best, eff, fix, kk = sc, e2, f2, k2
                    else:
                        K_FIX[size], KC_FIX[size] = kf, kcf
        if not quiet:
            print("fit %s (%d shapes): geomean %.3f, eff %s, fix %g, kk %g, kfix %s, kcfix %s" % (
                size, len(rs), best, eff, fix, kk, K_FIX[size], KC_FIX[size]))
        found[size] = (eff, fix, kk, K_FIX[size])
        globals()[eff_name] = keep[0]
        SK_FIX[size], SK_K[size], K_FIX[size], KC_FIX[size] = keep[1], keep[2], keep[3], keep[4]
    return found


def cross_validate(rows):
    """Leave one model out: refit without the shapes only that model uses,
    judge the refitted rule on them (does the fit carry to other models?)."""
    global EFF_DEC, EFF_TINY, EFF_SMALL, EFF_MID, EFF_LARGE
    models = sorted({u.split("/")[0] for r in rows for u in r["users"].split()})
    for model in models:
        own = [r for r in rows if all(u.split("/")[0] == model for u in r["users"].split())]
        if not own:
            print("%-22s no shapes of its own" % model)
            continue
        rest = [r for r in rows if not any(u.split("/")[0] == model for u in r["users"].split())]

        def score():
            return gmean([cand_time(r, rule(r["M"], r["N"], r["K"], r["epi"])) / r["cublas_us"] for r in own])

        base = score()
        found = fit(rest, quiet=True)
        keep = (EFF_SMALL, EFF_LARGE, dict(SK_FIX), dict(SK_K), EFF_TINY, EFF_MID, EFF_DEC)
        EFF_TINY, EFF_SMALL, EFF_MID, EFF_LARGE = found["tiny"][0], found["small"][0], found["mid"][0], found["large"][0]
        EFF_DEC = found["dec"][0]
        for size in found:
            SK_FIX[size], SK_K[size] = found[size][1], found[size][2]
        held = score()
        EFF_SMALL, EFF_LARGE, EFF_TINY, EFF_MID, EFF_DEC = keep[0], keep[1], keep[4], keep[5], keep[6]
        SK_FIX.update(keep[2])
        SK_K.update(keep[3])
        print("%-22s %4d own shapes: rule %.3f, refit without them %.3f, best %.3f" % (
            model, len(own), base, held, gmean([r["_best"] / r["cublas_us"] for r in own])))


def summary(rows):
    """Markdown tables (docs/gemm.md): per model x TP, per role x M
    range (measured selector | rule | best candidate), and the worst shapes."""
    groups = collections.defaultdict(list)
    for r in rows:
        for u in r["users"].split():
            model, tp, role = u.split("/")
            groups[("mt", model, tp)].append(r)
            groups[("role", role, mrange(r["M"]))].append(r)

    def g3(rs):
        return "%.3f | %.3f | %.3f" % (gmean([r["us"] / r["cublas_us"] for r in rs]),
                                       gmean([r["_rule"] / r["cublas_us"] for r in rs]),
                                       gmean([r["_best"] / r["cublas_us"] for r in rs]))

    models = sorted({k[1] for k in groups if k[0] == "mt"})
    tps = sorted({k[2] for k in groups if k[0] == "mt"}, key=lambda t: int(t[2:]))
    print("| model | " + " | ".join(tps) + " |")
    print("|---|" + "---|" * len(tps))
    for m in models:
        cells = []
        for tp in tps:
            rs = groups.get(("mt", m, tp))
            cells.append("%.2f / %.2f" % (gmean([r["us"] / r["cublas_us"] for r in rs]),
                                          gmean([r["_rule"] / r["cublas_us"] for r in rs])) if rs else "-")
        print("| %s | %s |" % (m, " | ".join(cells)))
    print()
    print("| role | M | shapes | measured | rule | best |")
    print("|---|---|---:|---:|---:|---:|")
    for role in ("qkv", "o", "gate_up", "up", "down"):
        for mr in MRANGES:
            rs = groups.get(("role", role, mr))
            if rs:
                print("| %s | %s | %d | %s |" % (role, mr, len(rs), g3(rs)))
    print()
    print("| M | shapes | measured | rule | best | rule > 1.05x |")
    print("|---|---:|---:|---:|---:|---:|")
    for mr in MRANGES:
        rs = [r for r in rows if mrange(r["M"]) == mr]
        print("| %s | %d | %s | %d |" % (mr, len(rs), g3(rs), sum(r["_rule"] > 1.05 * r["cublas_us"] for r in rs)))
    print()
    print("| M | N | K | epi | rule picks | us | cuBLAS us | rule/cuBLAS | best candidate |")
    print("|---:|---:|---:|---|---|---:|---:|---:|---|")
    for r in sorted(rows, key=lambda r: -r["_rule"] / r["cublas_us"])[:12]:
        b = min(r["cand"], key=lambda x: x["us"])
        print("| %d | %d | %d | %s | %s | %.1f | %.1f | %.2f | %s %.1f |" % (
            r["M"], r["N"], r["K"], r["epi"], rule(r["M"], r["N"], r["K"], r["epi"]), r["_rule"], r["cublas_us"],
            r["_rule"] / r["cublas_us"], b["kernel"], b["us"]))


MRANGES = ("1-8", "16", "32-64", "128-512", "1024-8192")


def mrange(m):
    return "1-8" if m <= 8 else "16" if m <= 16 else "32-64" if m <= 64 else "128-512" if m <= 512 else "1024-8192"


EPI_CODES = {"none": 0, "bias": 1, "bias_gelu": 2, "bias_silu": 3, "swiglu": 4, "residual": 5}  # TPG_EPI_*


def picks(rows):
    """`m n k epilogue variant` for the zoo's shapes and a grid around them:
    tests/cpu/gemm_rule_picks.txt, which gemm_rule_test checks lib/gemm/ours_rule.c
    against (so the C transcription cannot drift from rule())."""
    shapes = sorted({(r["M"], r["N"], r["K"], r["epi"]) for r in rows})
    shapes += [(m, n, k, e) for m in (1, 3, 9, 12, 16, 17, 24, 40, 48, 64, 65, 100, 128, 200, 256, 257, 300, 700,
                                      1500, 3000, 5000, 9000)
               for n in (128, 256, 1024, 4096, 14336, 30000) for k in (512, 4096, 12288) for e in ("none", "swiglu")]
    print("# m n k epilogue variant: bench/zoo_rules.py --picks (sm_90, %d SMs)" % SMS)
    for (m, n, k, e) in shapes:
        print(m, n, k, EPI_CODES[e], rule(m, n, k, e))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    zoo = json.load(open(sys.argv[1]))
    rows = zoo["rows"]
    if "--picks" in sys.argv:
        picks(rows)
        return
    by_m = collections.defaultdict(list)
    for r in rows:
        r["_best"] = min(x["us"] for x in r["cand"]) if r["cand"] else r["us"]
        r["_w"] = 2 * r["N"] if r["epi"] == "swiglu" else r["N"]
        t = cand_time(r, rule(r["M"], r["N"], r["K"], r["epi"]))
        if t is None:
            sys.exit("rule picks %s for M=%d N=%d K=%d: not a timed candidate" %
                     (rule(r["M"], r["N"], r["K"], r["epi"]), r["M"], r["N"], r["K"]))
        r["_rule"] = t
        by_m[r["M"]].append(r)
    if "--fit" in sys.argv:
        fit(rows)
    if "--fit-from-rule" in sys.argv:
        fit(rows, from_rule=True)
    if "--cv" in sys.argv:
        cross_validate(rows)
    print("device %s, %d SMs, %d shapes" % (zoo.get("device"), zoo.get("sms", 0), len(rows)))
    print("%6s %6s %10s %8s %8s" % ("M", "shapes", "heuristic", "rule", "best"))
    for m in sorted(by_m):
        rs = by_m[m]
        print("%6d %6d %10.3f %8.3f %8.3f" % (m, len(rs), gmean([r["us"] / r["cublas_us"] for r in rs]),
                                             gmean([r["_rule"] / r["cublas_us"] for r in rs]),
                                             gmean([r["_best"] / r["cublas_us"] for r in rs])))
        if "--tree" in sys.argv:
            print("        tree:", tree(rs, 2)[1])
    print("%6s %6d %10.3f %8.3f %8.3f" % ("all", len(rows), gmean([r["us"] / r["cublas_us"] for r in rows]),
                                         gmean([r["_rule"] / r["cublas_us"] for r in rows]),
                                         gmean([r["_best"] / r["cublas_us"] for r in rows])))
    print("shapes > 1.05x cuBLAS: heuristic %d, rule %d, best %d" % (
        sum(r["us"] > 1.05 * r["cublas_us"] for r in rows), sum(r["_rule"] > 1.05 * r["cublas_us"] for r in rows),
        sum(r["_best"] > 1.05 * r["cublas_us"] for r in rows)))
    if "--summary" in sys.argv:
        summary(rows)
        return
    print("rule vs best, worst 10:")
    for r in sorted(rows, key=lambda r: -r["_rule"] / r["_best"])[:10]:
        print("  M=%d N=%d K=%d %s: %s %.1f us, best %.1f us (%.2fx)" % (
            r["M"], r["N"], r["K"], r["epi"], rule(r["M"], r["N"], r["K"], r["epi"]), r["_rule"], r["_best"],
            r["_rule"] / r["_best"]))


if __name__ == "__main__":
    main()
