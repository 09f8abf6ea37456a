// plan_test.cc - the Llama step's plan, checked on a CPU (no GPU, no driver).
//
// Builds the decode step's plan (step.cc) for both model shapes, TP 1..8,
// batch 1..64, with and without the LM head, and requires that tpgraph
// accepts it (every node's own checks, then tpg_plan_validate) with the node
// and collective counts the design gives: 2 + 7 per layer (+ the LM head and,
// at TP > 1, its all-gather), 2 all-reduces per layer. The engine's kernels
// are named by a stand-in CUfunction (Rank::stub_function): resolving them
// and checking their parameter lists needs the GPU (tpg_graph_create).
// Also: groups 1..16 and head dims 64 / 128 are accepted, others refused
// with a message. The
// prefill (prefill.h): the prompt's chunks, and its plan at M rows for both
// shapes at TP 1..8, with and without the last chunk's tail (LM head on one
// row, argmax, pick), accepted with the counts its design gives.
//
//   bazel test //examples/llama:plan_test
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "examples/llama/kernels/kernels.h"
#include "examples/llama/llama.h"
#include "examples/llama/graphs/prefill.h"
#include "examples/llama/graphs/serve_step.h"
extern "C" const tpg_embedded_blob llama_kernels[];  // //examples/llama:device_code

using namespace llama;

namespace {

int g_pass = 0, g_fail = 0;

void expect(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  (ok ? g_pass : g_fail)++;
}

// With TPG_PLAN_DUMP=DIR, each plan's DOT goes to DIR/NAME.dot, so that a
// change that must not alter the plans (a move, a refactor) can be diffed.
void dump(const tpg_plan *plan, const std::string &name) {
  const char *dir = std::getenv("TPG_PLAN_DUMP");
  if (!dir || !plan) return;
  size_t need = 0;
  tpg_plan_dot(plan, nullptr, 0, &need);
  std::string dot(need, '\0');
  tpg_plan_dot(plan, &dot[0], need, &need);
  std::string file = std::string(dir) + "/" + name + ".dot";
  for (size_t i = std::strlen(dir) + 1; i < file.size(); i++)
    if (file[i] == ' ' || file[i] == '/') file[i] = '_';
  if (FILE *f = std::fopen(file.c_str(), "w")) {
    std::fputs(dot.c_str(), f);
    std::fclose(f);
  }
}

// The norms a plan of `rows` rows folds into its GEMVs (PlanBuilder::folds:
// fold on, one rank, at most 16 rows): every layer's o and down but the
// last down, each one node and one all-reduce fewer. fold: the Rank's
// setting (its default unless a test sets it).
int folded(int R, int rows, const Config &c, bool fold = Rank().fold_norm) {
  return fold && R == 1 && rows <= TPG_NORM_FOLD_MAX_ROWS ? 2 * c.layers - 1 : 0;
}

Config model(bool big) {
  Config c;
  if (big) c.hidden = 8192, c.heads = 64, c.kv_heads = 8, c.ffn = 28672;
  return c;
}

// 0 and the plan's counts, or 1 and the message.
int plan(const Config &c, int R, std::string *err, int *nodes, int *colls, size_t *binds, std::string *dot,
         Rank::Attn attn = Rank::ATTN_FUSED, bool rope_table = false, bool qkv_bias = false,
         bool fold = Rank().fold_norm) {
  Rank r;
  r.attn = attn;
  r.fold_norm = fold;
  r.rank = R - 1;
  r.nranks = R;
  r.sm_count = 132;
  r.stub_function = reinterpret_cast<void *>(0x1000);
  Weights w;
  w.layers.resize(c.layers);
  if (rope_table) w.rope_inv_freq = reinterpret_cast<float *>(0x2000);  // stand-ins: never read on a CPU
  if (qkv_bias)
    for (auto &l : w.layers) l.bqkv = reinterpret_cast<void *>(0x3000);
  Caches k;
  k.k.assign(c.layers, nullptr);
  k.v.assign(c.layers, nullptr);
  Step s;
  LmHead lm{};
  int rc = build_step(c, r, w, k, c.ctx + c.steps, &lm, &s, err);
  if (!rc) {
    tpg_plan_get_stats(s.plan, nodes, nullptr, colls);
    *binds = s.bindings.size();
    size_t need = 0;
    tpg_plan_dot(s.plan, nullptr, 0, &need);
    dot->assign(need, '\0');
    tpg_plan_dot(s.plan, &(*dot)[0], need, &need);
  }
  dump(s.plan, "step R" + std::to_string(R) + " h" + std::to_string(c.hidden) + " B" + std::to_string(c.batch) + " V" +
                   std::to_string(c.vocab) + " attn" + std::to_string(attn) + (rope_table ? " rope" : "") +
                   (qkv_bias ? " bias" : "") + (fold ? "" : " nofold") + " hd" + std::to_string(c.head_dim) + " kv" +
                   std::to_string(c.kv_heads));
  tpg_plan_destroy(s.plan);
  return rc;
}

}  // namespace

namespace {

// The blobs the engine loads by name are in its embedded fatbin (names come
// from the kernels/*.cu stems, so a renamed file must rename its blob).
void check_blobs() {
  std::string have;
  bool step = false, prefill = false, paged = false;
  for (const tpg_embedded_blob *b = llama_kernels; b->name; b++) {
    have += std::string(" ") + b->name;
    step |= !std::strcmp(b->name, LLAMA_BLOB_STEP) && b->end > b->start;
    prefill |= !std::strcmp(b->name, LLAMA_BLOB_PREFILL) && b->end > b->start;
    paged |= !std::strcmp(b->name, LLAMA_BLOB_PAGED) && b->end > b->start;
  }
  expect(step && prefill && paged,
         std::string("embedded blobs '" LLAMA_BLOB_STEP "', '" LLAMA_BLOB_PREFILL "', '" LLAMA_BLOB_PAGED
                     "' present:") + have);
}

// The decode step at every shape: both models, TP 1..8, batch 1..64, with
// and without the LM head: 2 + 7 nodes per layer, 2 all-reduces per layer.
void check_steps() {
  for (int big = 0; big < 2; big++)
    for (int R : {1, 2, 4, 8})
      for (int B : {1, 3, 64})
        for (int vocab : {0, 128256}) {
          Config c = model(big);
          c.layers = 3;
          c.batch = B;
          c.ctx = 4095;
          c.steps = 3;
          c.max_ctx = c.ctx + c.steps;
          c.vocab = vocab;
          std::string err, dot;
          int nodes = 0, colls = 0;
          size_t binds = 0;
          char what[160];
          std::snprintf(what, sizeof what, "%s TP %d batch %d vocab %d", big ? "70b" : "8b", R, B, vocab);
          if (plan(c, R, &err, &nodes, &colls, &binds, &dot)) {
            expect(false, std::string(what) + ": " + err);
            continue;
          }
          const int want_nodes = 2 + 7 * c.layers + (vocab ? (R > 1 ? 2 : 1) : 0) - folded(R, B, c);
          const int want_colls = 2 * c.layers + (vocab && R > 1 ? 1 : 0) - folded(R, B, c);
          // x, pos_host, final_norm, the attention's counters; per layer 2 norms, 4 weights, 2 caches;
          // lm_head and the logits.
          const size_t want_binds = 4 + 8 * (size_t)c.layers + (vocab ? 2 : 0);
          const bool fold_named = !folded(R, B, c) || (dot.find("y_ssq=ssq") != std::string::npos &&
                                                       dot.find("x_norm.weight=l1.attn_norm") != std::string::npos);
          const bool named = dot.find("l0.attn") != std::string::npos && fold_named &&
                             dot.find("l2.down.all_reduce") != std::string::npos &&
                             (!vocab || dot.find("lm_head") != std::string::npos);
          std::snprintf(what + std::strlen(what), sizeof what - std::strlen(what),
                        ": %d nodes (%d), %d collectives (%d), %zu bindings (%zu)", nodes, want_nodes, colls,
                        want_colls, binds, want_binds);
          expect(nodes == want_nodes && colls == want_colls && binds == want_binds && named, what);
        }
}

// The attention split's wave rule (step.cc, attn_split) at the points it
// was fitted on (132 SMs, 8 KV heads at TP 1): batch 1 / 8 / 32 x ctx 512 /
// 4096 -> 9, 5, 1 and 33, 6, 3 splits; --attn-bps 4 is the old rule.
void check_split_rule() {
  {
    const int heads[3] = {8, 64, 256}, lens[2] = {513, 4097}, want[2][3] = {{9, 5, 1}, {33, 6, 3}};
    bool ok = true;
    std::string got;
    for (int l = 0; l < 2; l++)
      for (int h = 0; h < 3; h++) {
        const int sp = attn_split(heads[h], lens[l], 132, 0), n = (lens[l] + sp - 1) / sp;
        ok &= n == want[l][h] && sp % LLAMA_ATTN_TILE == 0;
        got += " " + std::to_string(n);
      }
    ok &= attn_split(256, 4097, 132, 4) == 1408 && attn_split(8, 4097, 132, 4) == 64;
    expect(ok, "attention split rule: splits" + got + " (want 9 5 1 33 6 3), --attn-bps 4 as before");
  }
}

// --attn tc / fma: RoPE, the first pass and the combine as three nodes.
void check_attn_forms() {
  for (Rank::Attn a : {Rank::ATTN_TC, Rank::ATTN_FMA}) {
    Config c = model(false);
    c.layers = 3;
    c.max_ctx = c.ctx + c.steps;
    std::string err, dot;
    int nodes = 0, colls = 0;
    size_t binds = 0;
    const int rc = plan(c, 2, &err, &nodes, &colls, &binds, &dot, a);
    char what[200];
    std::snprintf(what, sizeof what, "--attn %s TP 2: %d nodes (%d)%s%s", a == Rank::ATTN_TC ? "tc" : "fma", nodes,
                  2 + 9 * c.layers, rc ? ": " : "", err.c_str());
    expect(!rc && nodes == 2 + 9 * c.layers && dot.find("l2.attn_combine") != std::string::npos, what);
  }
}

// A scaled RoPE (Llama 3.1): its inverse-frequency table is one more
// bound slot, read by the fused attention or by RoPE + append.
void check_rope_table() {
  for (Rank::Attn a : {Rank::ATTN_FUSED, Rank::ATTN_TC}) {
    Config c = model(false);
    c.layers = 2;
    c.max_ctx = c.ctx + c.steps;
    std::string err, dot;
    int nodes = 0, colls = 0;
    size_t binds = 0;
    const int rc = plan(c, 2, &err, &nodes, &colls, &binds, &dot, a, true);
    char what[200];
    std::snprintf(what, sizeof what, "RoPE table, --attn %s TP 2: %zu bindings (%zu)%s%s",
                  a == Rank::ATTN_TC ? "tc" : "fused", binds, (size_t)4 + 8 * c.layers + 1, rc ? ": " : "",
                  err.c_str());
    expect(!rc && binds == (size_t)4 + 8 * c.layers + 1 && dot.find("rope_inv_freq") != std::string::npos, what);
  }
}

// --fold-norm / --no-fold-norm at TP 1, batch 1: with the fold the o
// all-reduces are gone and the last down's stays (its norm feeds the LM
// head); without it every norm is its own node.
void check_fold_off() {
  Config c = model(false);
  c.layers = 3;
  c.max_ctx = c.ctx + c.steps;
  std::string err, dot, dot_off;
  int nodes = 0, colls = 0, nodes_off = 0, colls_off = 0;
  size_t binds = 0;
  const int rc = plan(c, 1, &err, &nodes, &colls, &binds, &dot, Rank::ATTN_FUSED, false, false, true) ||
                 plan(c, 1, &err, &nodes_off, &colls_off, &binds, &dot_off, Rank::ATTN_FUSED, false, false, false);
  char what[200];
  std::snprintf(what, sizeof what, "fold on / off at TP 1: %d / %d nodes (%d / %d), %d / %d collectives%s%s", nodes,
                nodes_off, 2 + 7 * c.layers - folded(1, 1, c, true), 2 + 7 * c.layers, colls, colls_off, rc ? ": " : "",
                err.c_str());
  expect(!rc && nodes == 2 + 7 * c.layers - folded(1, 1, c, true) && nodes_off == 2 + 7 * c.layers &&
             colls_off == 2 * c.layers && dot.find("l0.o.all_reduce") == std::string::npos &&
             dot_off.find("l0.o.all_reduce") != std::string::npos && dot.find("l2.down.all_reduce") != std::string::npos,
         what);
}

// Qwen2's q/k/v biases: one bound slot per layer, the QKV linear's bias
// (tpgraph's GEMM bias epilogue), accepted at every TP degree.
void check_qkv_bias() {
  for (int R : {1, 2, 4}) {
    Config c = model(false);
    c.layers = 2;
    c.max_ctx = c.ctx + c.steps;
    std::string err, dot;
    int nodes = 0, colls = 0;
    size_t binds = 0;
    const int rc = plan(c, R, &err, &nodes, &colls, &binds, &dot, Rank::ATTN_FUSED, false, true);
    const size_t want = (size_t)4 + 8 * c.layers + c.layers;
    char what[200];
    const int want_nodes = 2 + 7 * c.layers - folded(R, c.batch, c);
    std::snprintf(what, sizeof what, "q/k/v biases TP %d: %d nodes (%d), %zu bindings (%zu)%s%s", R, nodes,
                  want_nodes, binds, want, rc ? ": " : "", err.c_str());
    expect(!rc && nodes == want_nodes && binds == want, what);
  }
}

// decode.cc's device loop: the step built with device_loop (positions in
// device memory, no memcpy node; no all-gather) goes into a WHILE body as
// it is; the ordinary step's NCCL all-gather is refused there.
void check_device_loop() {
  for (int R : {1, 2, 8})
    for (int loop = 0; loop < 2; loop++) {
      Config c = model(false);
      c.layers = 2;
      c.batch = 8;
      c.ctx = 512;
      c.steps = 128;
      c.max_ctx = c.ctx + c.steps;
      c.vocab = 128256;
      Rank r;
      r.rank = 0;
      r.nranks = R;
      r.sm_count = 132;
      r.stub_function = reinterpret_cast<void *>(0x1000);
      Weights w;
      w.layers.resize(c.layers);
      Caches k;
      k.k.assign(c.layers, nullptr);
      k.v.assign(c.layers, nullptr);
      Step s;
      s.device_loop = loop != 0;
      LmHead lm{};
      std::string err;
      char what[160];
      std::snprintf(what, sizeof what, "decode %s loop TP %d", loop ? "device" : "host-style", R);
      if (build_step(c, r, w, k, c.ctx + c.steps, &lm, &s, &err)) {
        expect(false, std::string(what) + ": " + err);
        continue;
      }
      int nodes = 0, colls = 0, nslots = 0;
      dump(s.plan, what);
      tpg_plan_get_stats(s.plan, &nodes, &nslots, &colls);
      const int want_nodes = (loop ? 1 + 7 * c.layers + 1 : 2 + 7 * c.layers + (R > 1 ? 2 : 1)) - folded(R, c.batch, c);
      tpg_plan *p = nullptr;
      tpg_plan_create(&p);
      tpg_plan_copy_slots(p, s.plan, nullptr);
      tpg_cond cond;
      tpg_node wn;
      tpg_plan_add_cond(p, 1, 1, &cond);
      tpg_conditional_desc cd = TPG_CONDITIONAL_DESC_INIT;
      cd.type = TPG_COND_WHILE;
      cd.cond = cond;
      tpg_plan_add_conditional(p, &cd, nullptr, 0, &wn);
      tpg_plan_body_begin(p, wn, 0);
      const tpg_status st = tpg_plan_append(p, s.plan, nullptr);
      const std::string msg = st == TPG_SUCCESS ? "" : tpg_last_error();
      const bool want_ok = loop || R == 1;
      std::snprintf(what + std::strlen(what), sizeof what - std::strlen(what), ": %d nodes (%d), into a WHILE body: %s",
                    nodes, want_nodes, st == TPG_SUCCESS ? "taken" : msg.c_str());
      expect(nodes == want_nodes && colls == 2 * c.layers + (!loop && R > 1) - folded(R, c.batch, c) &&
                 (want_ok ? st == TPG_SUCCESS && tpg_plan_validate(p) == TPG_SUCCESS
                          : msg.find("only an all-reduce may sit") != std::string::npos),
             what);
      tpg_plan_destroy(p);
      tpg_plan_destroy(s.plan);
    }
}

// The prompt's chunks: whole chunks, then the rest.
void check_prefill_chunks() {
  {
    auto str = [](const std::vector<PrefillChunk> &v) {
      std::string s;
      for (const PrefillChunk &c : v) s += " " + std::to_string(c.p0) + "+" + std::to_string(c.rows);
      return s;
    };
    const std::string a = str(prefill_chunks(1, 256)), b = str(prefill_chunks(256, 256)),
                      d = str(prefill_chunks(257, 256)), e = str(prefill_chunks(600, 256)),
                      f = str(prefill_chunks(2048, 512));
    expect(a == " 0+1" && b == " 0+256" && d == " 0+256 256+1" && e == " 0+256 256+256 512+88" &&
               f == " 0+512 512+512 1024+512 1536+512" && prefill_chunks(0, 256).empty() &&
               prefill_chunks(5, 0).empty(),
           "prefill chunks:" + a + " |" + b + " |" + d + " |" + e + " |" + f);
  }
}

// The prefill's plan: 2 + 8 per layer (+ LM head, all-gather at TP > 1,
// argmax, pick on the last chunk), 2 all-reduces per layer.
void check_prefill_plans() {
  for (int big = 0; big < 2; big++)
    for (int R : {1, 2, 4, 8})
      for (int rows : {1, 63, 256, 512})
        for (int tail = 0; tail < 2; tail++) {
          Config c = model(big);
          c.layers = 2;
          c.batch = 1;
          c.max_ctx = 8192;
          c.vocab = 128256;
          Rank r;
          r.rank = R - 1;
          r.nranks = R;
          r.sm_count = 132;
          r.stub_function = reinterpret_cast<void *>(0x1000);
          Weights w;
          w.layers.resize(c.layers);
          w.lm_head = reinterpret_cast<void *>(0x4000);  // stand-ins: never read on a CPU
          Caches k;
          k.k.assign(c.layers, nullptr);
          k.v.assign(c.layers, nullptr);
          PrefillTail t;
          Prefill p;
          std::string err;
          char what[200];
          std::snprintf(what, sizeof what, "prefill %s TP %d rows %d%s", big ? "70b" : "8b", R, rows,
                        tail ? " last chunk" : "");
          if (build_prefill(c, r, w, k, rows, nullptr, nullptr, nullptr, tail ? &t : nullptr, &p, &err)) {
            expect(false, std::string(what) + ": " + err);
            tpg_plan_destroy(p.plan);
            continue;
          }
          int nodes = 0, colls = 0;
          dump(p.plan, what);
          tpg_plan_get_stats(p.plan, &nodes, nullptr, &colls);
          const int want_nodes = 2 + 8 * c.layers + (tail ? (R > 1 ? 4 : 3) : 0) - folded(R, rows, c);
          const int want_colls = 2 * c.layers + (tail && R > 1 ? 1 : 0) - folded(R, rows, c);
          const size_t want_binds = 4 + 8 * (size_t)c.layers + (tail ? 8 : 0);
          std::snprintf(what + std::strlen(what), sizeof what - std::strlen(what),
                        ": %d nodes (%d), %d collectives (%d), %zu bindings (%zu)", nodes, want_nodes, colls,
                        want_colls, p.bindings.size(), want_binds);
          expect(nodes == want_nodes && colls == want_colls && p.bindings.size() == want_binds, what);
          tpg_plan_destroy(p.plan);
        }
}

void check_prefill_refusals() {
  {  // Refused: two sequences; a group without a kernel; a tail without the LM head.
    Config c = model(false);
    c.layers = 1;
    c.max_ctx = 1024;
    c.vocab = 128256;
    Rank r;
    r.sm_count = 132;
    r.stub_function = reinterpret_cast<void *>(0x1000);
    Weights w;
    w.layers.resize(1);
    Caches k;
    k.k.assign(1, nullptr);
    k.v.assign(1, nullptr);
    PrefillTail t;
    std::string e1, e2, e3;
    Prefill p1, p2, p3;
    c.batch = 2;
    const int r1 = build_prefill(c, r, w, k, 64, nullptr, nullptr, nullptr, nullptr, &p1, &e1);
    c.batch = 1;
    c.heads = 32;
    c.kv_heads = 1;  // a group of 32
    const int r2 = build_prefill(c, r, w, k, 64, nullptr, nullptr, nullptr, nullptr, &p2, &e2);
    c.kv_heads = 8;
    const int r3 = build_prefill(c, r, w, k, 64, nullptr, nullptr, nullptr, &t, &p3, &e3);
    for (Prefill *p : {&p1, &p2, &p3}) tpg_plan_destroy(p->plan);
    expect(r1 && e1.find("batch 2") != std::string::npos && r2 && e2.find("heads/kv_heads 32") != std::string::npos &&
               r3 && e3.find("LM head") != std::string::npos,
           "prefill refusals: " + e1 + " | " + e2 + " | " + e3);
  }
}

void check_groups() {
  {  // Groups 1..16 and head dims 64 and 128 have kernels; others are refused,
     // and so is the scalar attention (--attn fma) at head dim 64.
    struct Shape {
      int heads, kv, head_dim;
      Rank::Attn attn;
      bool ok;
      const char *what, *want;
    };
    const Shape shapes[] = {
        {24, 8, 128, Rank::ATTN_FUSED, true, "group 3 (24 over 8)", ""},
        {40, 8, 128, Rank::ATTN_TC, true, "group 5 (40 over 8), tc", ""},
        {28, 4, 128, Rank::ATTN_FMA, true, "group 7 (28 over 4), fma", ""},
        {32, 8, 64, Rank::ATTN_FUSED, true, "head_dim 64, group 4", ""},
        {14, 2, 64, Rank::ATTN_TC, true, "head_dim 64, group 7, tc", ""},
        {32, 1, 128, Rank::ATTN_FUSED, false, "group 32 (32 over 1)", "heads/kv_heads 32"},
        {32, 8, 96, Rank::ATTN_FUSED, false, "head_dim 96", "head_dim 96"},
        {32, 8, 64, Rank::ATTN_FMA, false, "head_dim 64 with fma", "128 with --attn fma"},
    };
    for (const Shape &sh : shapes) {
      Config c = model(false);
      c.heads = sh.heads;
      c.kv_heads = sh.kv;
      c.head_dim = sh.head_dim;
      c.layers = 2;
      c.ctx = 300;
      c.steps = 3;
      c.max_ctx = c.ctx + c.steps;
      std::string err, dot;
      int nodes = 0, colls = 0;
      size_t binds = 0;
      const int rc = plan(c, 1, &err, &nodes, &colls, &binds, &dot, sh.attn);
      if (sh.ok)
        expect(rc == 0 && nodes == 2 + (sh.attn == Rank::ATTN_FUSED ? 7 : 9) * c.layers - folded(1, c.batch, c),
               std::string(sh.what) + ": accepted, " + std::to_string(nodes) + " nodes " + err);
      else
        expect(rc != 0 && err.find(sh.want) != std::string::npos, std::string(sh.what) + " refused: " + err);
    }
  }
}
// A rank and stand-in weights for the serving step's plans (pointers never
// read on a CPU).
Rank stub_rank(int R) {
  Rank r;
  r.rank = R - 1;
  r.nranks = R;
  r.sm_count = 132;
  r.stub_function = reinterpret_cast<void *>(0x1000);
  return r;
}
Weights stub_weights(const Config &c) {
  Weights w;
  w.layers.resize(c.layers);
  w.lm_head = reinterpret_cast<void *>(0x4000);
  return w;
}

// The serving step (serve_step.h) at decode and prefill sizes, both models,
// both head dims, TP 1..8: 3 + 8 nodes per layer + gather, LM head, argmax,
// pick (+ the candidates' all-reduce at TP > 1); 2 all-reduces per layer;
// bindings: inputs, tables, embedding, counters, final norm, LM head and
// tokens, and per layer 2 norms, 4 weights, 2 pools. Its GEMM list has the
// plan's 4 per layer + the LM head.
void check_serve_plans() {
  for (int big = 0; big < 2; big++)
    for (int hd : {128, 64})
      for (int R : {1, 2, 8})
        for (int T : {1, 8, 64, 257, 512}) {
          Config c = model(big);
          c.head_dim = hd;
          c.layers = 2;
          c.vocab = 128256;
          const Rank r = stub_rank(R);
          const Weights w = stub_weights(c);
          ServeShape sh;
          sh.nblocks = 4096;
          ServeBuffers b;
          tpg_plan *p = nullptr;
          std::vector<tpg_binding> bind;
          std::string err;
          char what[200];
          std::snprintf(what, sizeof what, "serve step %s hd %d TP %d rows %d", big ? "70b" : "8b", hd, R, T);
          if (build_serve_step(c, r, w, sh, b, T, &p, &bind, &err)) {
            expect(false, std::string(what) + ": " + err);
            continue;
          }
          int nodes = 0, colls = 0;
          dump(p, what);
          tpg_plan_get_stats(p, &nodes, nullptr, &colls);
          std::string dot;
          size_t need = 0;
          tpg_plan_dot(p, nullptr, 0, &need);
          dot.assign(need, '\0');
          tpg_plan_dot(p, &dot[0], need, &need);
          const int want_nodes = 3 + 8 * c.layers + 4 + (R > 1) - folded(R, T, c);
          const int want_colls = 2 * c.layers + (R > 1) - folded(R, T, c);
          const size_t want_binds = 7 + 8 * (size_t)c.layers, gemms = serve_step_gemms(c, r, w, sh, T).size();
          const bool named = dot.find("l1.prefill_attn") != std::string::npos && dot.find("pick") != std::string::npos;
          std::snprintf(what + std::strlen(what), sizeof what - std::strlen(what),
                        ": %d nodes (%d), %d collectives (%d), %zu bindings (%zu), %zu GEMMs", nodes, want_nodes,
                        colls, want_colls, bind.size(), want_binds, gemms);
          expect(nodes == want_nodes && colls == want_colls && bind.size() == want_binds && named &&
                     gemms == 4 * (size_t)c.layers + 1,
                 what);
          tpg_plan_destroy(p);
        }
}

// The step inputs' layout: every array 16-byte aligned, room for the work
// items of any mix of prompts, the LM head's rows min(T, max_seqs).
void check_serve_layout() {
  ServeShape sh;
  bool ok = true;
  std::string got;
  for (int G : {1, 4, 5, 16})
    for (int T : {1, 7, 256, 512}) {
      const StepLayout l = step_layout(sh, T, G);
      const int per = LLAMA_PREFILL_POSITIONS(G);
      ok &= l.ids % 4 == 0 && l.pos % 4 == 0 && l.seq % 4 == 0 && l.work % 4 == 0 && l.sample % 4 == 0 &&
            l.pos >= l.ids + T && l.seq >= l.pos + T && l.work >= l.seq + T && l.sample >= l.work + 2 * l.W &&
            l.total >= l.sample + l.L && l.L == std::min(T, sh.max_seqs) &&
            l.W >= (T + per - 1) / per + std::min(T, sh.max_prompts);
      got += " " + std::to_string(l.total);
    }
  expect(ok, "serve step inputs' layout: aligned, disjoint, room for every work item; totals" + got);
}

// Refused, with a message: a size of 0 or above the largest, a head dim
// without kernels, a split that is not whole blocks, no LM head.
void check_serve_refusals() {
  Config c = model(false);
  c.layers = 1;
  c.vocab = 128256;
  const Rank r = stub_rank(1);
  Weights w = stub_weights(c);
  ServeShape sh;
  sh.nblocks = 64;
  ServeBuffers b;
  struct Case {
    int T, head_dim, split;
    bool lm;
    const char *want;
  };
  const Case cases[] = {{0, 128, 0, true, "rows 0: expected 1..512"}, {513, 128, 0, true, "rows 513"},
                        {8, 96, 0, true, "head_dim 96"}, {8, 128, 100, true, "split 100: expected a multiple of 64"},
                        {8, 128, 0, false, "no LM head"}};
  for (const Case &k : cases) {
    Config cc = c;
    cc.head_dim = k.head_dim;
    ServeShape s2 = sh;
    s2.split_len = k.split;
    w.lm_head = k.lm ? reinterpret_cast<void *>(0x4000) : nullptr;
    tpg_plan *p = reinterpret_cast<tpg_plan *>(0x1);
    std::vector<tpg_binding> bind;
    std::string err;
    const int rc = build_serve_step(cc, r, w, s2, b, k.T, &p, &bind, &err);
    expect(rc != 0 && p == nullptr && err.find(k.want) != std::string::npos, "serve step refused: " + err);
  }
}

}  // namespace

int main() {
  check_blobs();
  check_steps();
  check_split_rule();
  check_attn_forms();
  check_rope_table();
  check_qkv_bias();
  check_fold_off();
  check_device_loop();
  check_prefill_chunks();
  check_prefill_plans();
  check_prefill_refusals();
  check_groups();
  check_serve_plans();
  check_serve_layout();
  check_serve_refusals();
  std::printf("plan_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
