/* gemm_tune_test.c - the GEMM tuner with a fake timer: the pick, the process
 * cache, the cache file's format, corrupt files (ignored, never a crash), and
 * concurrent writers (processes and threads) never leaving a torn file or
 * losing an entry. */
#define _GNU_SOURCE /* mkdtemp */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/tpg_kargs.h"
#include "lib/gemm/ours.h"
#include "lib/gemm/tune.h"
#include "tests/cpu/gemm_test.h"
#include "tests/tpg_test.h"

/* Fake device: a time per variant name; calls counted. */
typedef struct fake {
  int calls;
  const char *fast;   /* this variant gets fast_us, everything else 100 us */
  double fast_us;
  int fail;           /* every call fails */
} fake;
static int fake_time(void *ctx, const tpg_gemm_problem *p, const tpg_gemm_variant *v, const tpg_kernel_launch *L,
                     const tpg_tma_encode *xm, const tpg_tma_encode *wm, double *us) {
  fake *f = (fake *)ctx;
  char name[32];
  (void)p;
  (void)xm;
  (void)wm;
  __atomic_add_fetch(&f->calls, 1, __ATOMIC_RELAXED);
  if (f->fail || !L || !L->kernel) return 1;
  tpg_gemm_variant_name(v, name, sizeof name);
  *us = f->fast && !strcmp(name, f->fast) ? f->fast_us : 100.0;
  return 0;
}

/* A bf16 GEMM on 132 SMs of sm_90, dense rows; its cache key. */
static tpg_gemm_problem prob_of(int m, int n, int k, int epi) {
  return tpg_gemm_problem_make(m, n, k, TPG_KDT_BF16, epi, 90, 132);
}
static const tpg_gemm_key *key_of(const tpg_gemm_problem *p) {
  static _Thread_local tpg_gemm_key k;
  k.m = p->m, k.n = p->n, k.k = p->k, k.dtype = p->dtype, k.epilogue = p->epilogue, k.sm_count = p->sms;
  k.arch = p->arch;
  return &k;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) { fputs(text, f); fclose(f); }
}
static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  char *b;
  long n;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  b = (char *)calloc((size_t)n + 1, 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) b[0] = '\0';
  fclose(f);
  return b;
}

typedef struct thr { const char *path; int base; int ok; } thr;
static void *thread_body(void *p) {
  thr *t = (thr *)p;
  fake f = {0, "tma_m64_n128", 10.0, 0};
  tpg_gemm_tune_cfg c = TPG_GEMM_TUNE_CFG_INIT;
  int i;
  c.mode = TPG_GEMM_TUNE_ON;
  c.cache_path = t->path;
  c.time_fn = fake_time;
  c.time_ctx = &f;
  t->ok = 1;
  for (i = 0; i < 10; ++i) {
    tpg_gemm_problem k = prob_of(17 + t->base + i, 4096, 4096, TPG_EPI_NONE);
    tpg_kernel_launch L;
    tpg_tma_encode xm, wm;
    if (tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, NULL) != TPG_SUCCESS) t->ok = 0;
  }
  return NULL;
}

/* The graph builder's policy (tpg_gemm_tune_graph_pick): times only while
 * allowed and within the graph's budget, counts timed and cached picks, and
 * outside creation (an update) takes the cache or the heuristic, never the
 * timer. */
static void graph_policy(const char *path) {
  fake f = {0, "tma_m64_n256", 10.0, 0}; /* not the heuristic's tile */
  tpg_gemm_tune_graph s;
  tpg_gemm_tune_cfg c = TPG_GEMM_TUNE_CFG_INIT;
  tpg_kernel_launch L, H;
  tpg_tma_encode xm, wm, hx, hw;
  tpg_gemm_variant v;
  char why[200];
  const tpg_gemm_problem a = prob_of(48, 5120, 1024, TPG_EPI_NONE), b = prob_of(96, 5120, 1024, TPG_EPI_NONE),
                         d = prob_of(200, 5120, 1024, TPG_EPI_NONE);
  unlink(path);
  tpg_gemm_tune_reset();
  c.mode = TPG_GEMM_TUNE_ON;
  c.cache_path = path;
  c.time_fn = fake_time;
  c.time_ctx = &f;
  memset(&s, 0, sizeof s);
  s.cfg = c;
  s.budget_us = 1e9;
  s.may_time = 1;
  CHECK_ST(tpg_gemm_tune_graph_pick(NULL, &a, 1, &L, &xm, &wm), TPG_ERROR_INVALID_ARGUMENT, "s");
  /* creation: a is timed, a second node of a's shape hits the process cache */
  CHECK_OK(tpg_gemm_tune_graph_pick(&s, &a, 1, &L, &xm, &wm));
  CHECK(s.timed == 1 && s.cached == 0 && f.calls > 1 && s.spent_us > 0);
  CHECK(tpg_gemm_tune_lookup(key_of(&a), &v, NULL) == 0 && v.kind == TPG_GEMM_VAR_TMA && v.bm == 64 && v.bn == 256);
  {
    const int calls = f.calls;
    CHECK_OK(tpg_gemm_tune_graph_pick(&s, &a, 1, &H, &hx, &hw));
    CHECK(s.timed == 1 && s.cached == 1 && f.calls == calls && memcmp(&L, &H, sizeof L) == 0);
    /* uncounted picks (fill) change no count */
    CHECK_OK(tpg_gemm_tune_graph_pick(&s, &a, 0, &H, &hx, &hw));
    CHECK(s.timed == 1 && s.cached == 1 && f.calls == calls);
    /* past creation (update): b is not cached -> the heuristic, not timed */
    s.may_time = 0;
    CHECK_OK(tpg_gemm_tune_graph_pick(&s, &b, 1, &L, &xm, &wm));
    /* the heuristic is the family rule (family_table.inc: ours or CUTLASS) */
    CHECK(tpg_gemm_select_rule(&b, c.family, &H, &hx, &hw, why, sizeof why) == 0);
    CHECK(memcmp(&L, &H, sizeof L) == 0 && f.calls == calls && s.timed == 1 && s.cached == 1);
    CHECK(tpg_gemm_tune_lookup(key_of(&b), NULL, NULL) != 0);
    /* ... and a still comes from the cache */
    CHECK_OK(tpg_gemm_tune_graph_pick(&s, &a, 1, &L, &xm, &wm));
    CHECK(s.cached == 2 && f.calls == calls && strcmp(L.kernel, "tpg_gemm_sm90tma_bf16_m64") == 0);
    /* the graph's budget spent: no timing either */
    s.may_time = 1;
    s.budget_us = s.spent_us;
    CHECK_OK(tpg_gemm_tune_graph_pick(&s, &d, 1, &L, &xm, &wm));
    CHECK(f.calls == calls && s.timed == 1 && tpg_gemm_tune_lookup(key_of(&d), NULL, NULL) != 0);
  }
  /* another process (empty process cache) finds a in the file without timing */
  tpg_gemm_tune_reset();
  memset(&s, 0, sizeof s);
  s.cfg = c;
  s.budget_us = 1e9;
  f.calls = 0;
  CHECK_OK(tpg_gemm_tune_graph_pick(&s, &a, 1, &L, &xm, &wm));
  CHECK(f.calls == 0 && s.cached == 1 && s.timed == 0 && strcmp(L.kernel, "tpg_gemm_sm90tma_bf16_m64") == 0);
  /* tuning off: the heuristic, nothing counted */
  memset(&s, 0, sizeof s);
  s.cfg = c;
  s.cfg.mode = TPG_GEMM_TUNE_OFF;
  s.may_time = 1;
  s.budget_us = 1e9;
  CHECK_OK(tpg_gemm_tune_graph_pick(&s, &b, 1, &L, &xm, &wm));
  CHECK(f.calls == 0 && s.cached == 0 && s.timed == 0);
  unlink(path);
  tpg_gemm_tune_reset();
}

int main(void) {
  gemm_test_without_cublaslt();
  char dir[] = "/tmp/tpg_tune_XXXXXX";
  char path[256], other[256];
  tpg_kernel_launch L, H;
  tpg_tma_encode xm, wm, hx, hw;
  tpg_gemm_tune_info info;
  tpg_gemm_tune_cfg c = TPG_GEMM_TUNE_CFG_INIT;
  fake f = {0, "tma_m64_n64", 10.0, 0};
  tpg_gemm_problem k = prob_of(32, 7168, 4096, TPG_EPI_NONE);
  char why[200];
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  snprintf(path, sizeof path, "%s/tune.txt", dir);
  snprintf(other, sizeof other, "%s/other.txt", dir);

  /* Off: exactly the heuristic, nothing timed. */
  c.time_fn = fake_time;
  c.time_ctx = &f;
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
  CHECK(tpg_gemm_select_tma(&k, &H, &hx, &hw, why, sizeof why) == 0);
  CHECK(memcmp(&L, &H, sizeof L) == 0 && memcmp(&xm, &hx, sizeof xm) == 0 && f.calls == 0);
  CHECK(info.source == TPG_GEMM_TUNE_FROM_HEURISTIC && strcmp(info.variant, "heuristic") == 0);

  /* Bad arguments name themselves. */
  CHECK_ST(tpg_gemm_tune_pick(NULL, &k, &L, &xm, &wm, NULL), TPG_ERROR_INVALID_ARGUMENT, "cfg");
  CHECK_ST(tpg_gemm_tune_pick(&c, NULL, &L, &xm, &wm, NULL), TPG_ERROR_INVALID_ARGUMENT, "problem");
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, NULL, &xm, &wm, NULL), TPG_ERROR_INVALID_ARGUMENT, "out");
  {
    tpg_gemm_problem bad = prob_of(32, 7168, 4100, TPG_EPI_NONE);
    CHECK_ST(tpg_gemm_tune_pick(&c, &bad, &L, &xm, &wm, NULL), TPG_ERROR_INVALID_ARGUMENT, "k=4100");
  }
  c.mode = TPG_GEMM_TUNE_ON;
  c.time_fn = NULL;
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, NULL), TPG_ERROR_INVALID_ARGUMENT, "time_fn");
  c.time_fn = fake_time;
  /* A budget no run can reach: the default (50 ms of wall time) can run out
   * before the fast candidate under valgrind on a loaded 2-core machine, so
   * these cases would test the machine's speed. The budget itself is tested
   * below (0: only the heuristic). */
  c.budget_us = 1e12;

  /* On, process cache only: the fast candidate wins, the second pick is a hit. */
  tpg_gemm_tune_reset();
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
  CHECK(info.source == TPG_GEMM_TUNE_FROM_TIMING && strcmp(info.variant, "tma_m64_n64") == 0);
  CHECK(strcmp(L.kernel, "tpg_gemm_sm90tma_bf16_m64_n64") == 0 && xm.box[1] == 64 && info.best_us == 10.0);
  CHECK(info.timed >= 3 && f.calls == info.timed && info.heuristic_us == 100.0);
  f.calls = 0;
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
  CHECK(info.source == TPG_GEMM_TUNE_FROM_PROCESS && f.calls == 0 && strcmp(L.kernel, "tpg_gemm_sm90tma_bf16_m64_n64") == 0);

  /* Not clearly faster (2% < min_gain 3%): the heuristic stays. */
  tpg_gemm_tune_reset();
  f.fast_us = 98.0;
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
  CHECK(strcmp(info.variant, "heuristic") == 0 && memcmp(&L, &H, sizeof L) == 0);
  f.fast_us = 10.0;

  /* No budget: only the heuristic is timed. */
  tpg_gemm_tune_reset();
  c.budget_us = 0;
  f.calls = 0;
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
  CHECK(info.timed == 1 && f.calls == 1 && strcmp(info.variant, "heuristic") == 0);
  c.budget_us = 1e12;

  /* A timer that always fails: the heuristic, and nothing cached. */
  tpg_gemm_tune_reset();
  f.fail = 1;
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
  CHECK(info.source == TPG_GEMM_TUNE_FROM_HEURISTIC && memcmp(&L, &H, sizeof L) == 0);
  CHECK(tpg_gemm_tune_lookup(key_of(&k), NULL, NULL) != 0);
  f.fail = 0;

  /* The file: written after tuning, read back by a fresh process cache. */
  tpg_gemm_tune_reset();
  c.cache_path = path;
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
  {
    char *txt = read_all(path);
    CHECK(txt && strncmp(txt, "tpgraph-gemm-tune 1\n32 7168 4096 2 0 132 90 tma_m64_n64 10.000\nend 1\n", 200) == 0);
    free(txt);
  }
  tpg_gemm_tune_reset();
  f.calls = 0;
  CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
  CHECK(info.source == TPG_GEMM_TUNE_FROM_FILE && f.calls == 0 && strcmp(L.kernel, "tpg_gemm_sm90tma_bf16_m64_n64") == 0);

  /* Corrupt files: each is ignored (load -1) with a warning, the pick times
   * anew, and the store replaces the file with a valid one. */
  {
    static const char *const bad[] = {
        "",                                                                   /* empty */
        "not a cache\n",                                                      /* foreign */
        "tpgraph-gemm-tune 2\nend 0\n",                                       /* other version */
        "tpgraph-gemm-tune 1\n32 7168 4096 2 0 132 90 tma_m64_n128 10.0\n",   /* truncated: no end */
        "tpgraph-gemm-tune 1\n32 7168 4096 2 0 132 90 tma_m64_n128 10.0\nend 2\n", /* count mismatch */
        "tpgraph-gemm-tune 1\n32 7168 4096 2 0 132 90 tma_m64_n96 10.0\nend 1\n",  /* unknown variant */
        "tpgraph-gemm-tune 1\n32 7168 4100 2 0 132 90 tma_m64_n128 10.0\nend 1\n", /* k not a multiple of 8 */
        "tpgraph-gemm-tune 1\n32 7168 4096 2 9 132 90 tma_m64_n128 10.0\nend 1\n", /* epilogue out of range */
        "tpgraph-gemm-tune 1\n32 7168 4096 2 0 132 90 tma_m64_n128 nan\nend 1\n",  /* time not a number */
        "tpgraph-gemm-tune 1\n32 7168 4096 2 0 132 90 tma_m64_n128 10.0 x\nend 1\n", /* extra field */
        "tpgraph-gemm-tune 1\n32 7168\nend 1\n",                              /* short line */
        "tpgraph-gemm-tune 1\nend 0\n32 7168 4096 2 0 132 90 gemv 1.0\n",     /* data after end */
        "tpgraph-gemm-tune 1\n32 7168 4096 2 0 132 90 tma_m64_n128 10.0",     /* last line cut */
        "tpgraph-gemm-tune 1\n\x01\x02\xff\xfe garbage\nend 1\n",            /* binary */
    };
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
      char *txt;
      write_file(path, bad[i]);
      tpg_gemm_tune_reset();
      CHECK(tpg_gemm_tune_load(path) == -1);
      f.calls = 0;
      CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
      CHECK(info.source == TPG_GEMM_TUNE_FROM_TIMING && f.calls > 0);
      txt = read_all(path);
      CHECK(txt && strstr(txt, "tpgraph-gemm-tune 1\n") == txt && strstr(txt, "\nend 1\n") != NULL);
      free(txt);
    }
    /* a very long line */
    {
      char *big = (char *)malloc(100000);
      memset(big, '7', 99999);
      big[99999] = '\0';
      write_file(path, "tpgraph-gemm-tune 1\n");
      {
        FILE *fp = fopen(path, "a");
        if (fp) { fputs(big, fp); fputs("\nend 1\n", fp); fclose(fp); }
      }
      tpg_gemm_tune_reset();
      CHECK(tpg_gemm_tune_load(path) == -1);
      free(big);
    }
    /* a directory where the file should be: no crash, the pick still works */
    tpg_gemm_tune_reset();
    c.cache_path = dir;
    CHECK_ST(tpg_gemm_tune_pick(&c, &k, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
    CHECK(info.source == TPG_GEMM_TUNE_FROM_TIMING);
    c.cache_path = path;
    {
      char lock[300];
      snprintf(lock, sizeof lock, "%s.lock", dir);
      unlink(lock);
    }
  }

  /* Entries of other processes survive a store: load merges, store keeps the file's. */
  tpg_gemm_tune_reset();
  write_file(other, "tpgraph-gemm-tune 1\n1 14336 8192 2 0 132 90 gemv_sk 55.5\nend 1\n");
  CHECK(tpg_gemm_tune_load(other) == 1);
  tpg_gemm_tune_reset();
  {
    tpg_gemm_problem k2 = prob_of(64, 1024, 4096, TPG_EPI_BIAS);
    c.cache_path = other;
    CHECK_ST(tpg_gemm_tune_pick(&c, &k2, &L, &xm, &wm, &info), TPG_SUCCESS, NULL);
    tpg_gemm_tune_reset();
    CHECK(tpg_gemm_tune_load(other) == 2);
    {
      tpg_gemm_problem k1 = prob_of(1, 14336, 8192, TPG_EPI_NONE);
      tpg_gemm_variant v;
      double us = 0;
      CHECK(tpg_gemm_tune_lookup(key_of(&k1), &v, &us) == 0 && v.kind == TPG_GEMM_VAR_GEMV_SK && us == 55.5);
    }
    c.cache_path = path;
  }

  /* Concurrent writers, 6 processes x 10 keys each into one file, plus a
   * reader that must only ever see valid files: afterwards all 60 entries. */
  {
    const int nproc = 6;
    pid_t pids[6], reader;
    int i, status, bad_reads = 0;
    unlink(path);
    reader = fork();
    if (reader == 0) {
      int r, torn = 0;
      for (r = 0; r < 2000; ++r) {
        char *txt = read_all(path);
        if (txt && txt[0] && (strncmp(txt, "tpgraph-gemm-tune 1\n", 20) || !strstr(txt, "\nend "))) ++torn;
        free(txt);
      }
      _exit(torn ? 1 : 0);
    }
    for (i = 0; i < nproc; ++i) {
      pids[i] = fork();
      if (pids[i] == 0) {
        thr t = {path, 100 * i, 0};
        tpg_gemm_tune_reset();
        thread_body(&t);
        _exit(t.ok ? 0 : 1);
      }
    }
    for (i = 0; i < nproc; ++i) {
      CHECK(waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(waitpid(reader, &status, 0) == reader && WIFEXITED(status));
    bad_reads = WEXITSTATUS(status);
    CHECK(bad_reads == 0);
    tpg_gemm_tune_reset();
    CHECK(tpg_gemm_tune_load(path) == nproc * 10);
  }

  /* Threads of one process: 4 x 10 keys, one file. */
  {
    pthread_t th[4];
    thr t[4];
    int i;
    unlink(path);
    tpg_gemm_tune_reset();
    for (i = 0; i < 4; ++i) {
      t[i].path = path;
      t[i].base = 1000 + 100 * i;
      t[i].ok = 0;
      pthread_create(&th[i], NULL, thread_body, &t[i]);
    }
    for (i = 0; i < 4; ++i) {
      pthread_join(th[i], NULL);
      CHECK(t[i].ok);
    }
    tpg_gemm_tune_reset();
    CHECK(tpg_gemm_tune_load(path) == 40);
  }

  graph_policy(path);

  /* no temporary or stray files left behind besides the lock files */
  {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp > /dev/null", dir);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
  tpg_gemm_tune_reset();
  return TPG_TEST_END();
}
