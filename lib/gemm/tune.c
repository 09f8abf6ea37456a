/* tune.c - the GEMM tuner: process cache, cache file, and the pick
 * (see tune.h for the why and the file format).
 *
 * Decisions:
 *  - One process-wide cache (a mutex and a growing array; a model has tens of
 *    distinct GEMMs, so a linear search costs nothing next to a graph build).
 *    Timing runs outside the mutex: two threads tuning the same key both time
 *    it and the later store wins, which is harmless.
 *  - The heuristic is timed first and wins ties within cfg->min_gain, so a
 *    noisy run cannot move a GEMM to a kernel that is not clearly faster.
 *  - The file is validated as a whole: one bad line (a torn or foreign file)
 *    and nothing in it is trusted; the next store rewrites it.
 */
#define _GNU_SOURCE
#include "lib/gemm/tune.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/tpg_kargs.h"
#include "lib/internal.h"

#define TUNE_MAGIC "tpgraph-gemm-tune 1"
#define TUNE_MAX_ENTRIES 1000000
#define TUNE_MAX_LINE 256

typedef struct entry {
  tpg_gemm_key key;
  tpg_gemm_variant v;
  double us;
  int from_file; /* loaded from a file and not re-timed here */
} entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static entry *g_e;
static size_t g_n, g_cap;

static int key_eq(const tpg_gemm_key *a, const tpg_gemm_key *b) {
  return a->m == b->m && a->n == b->n && a->k == b->k && a->dtype == b->dtype && a->epilogue == b->epilogue &&
         a->sm_count == b->sm_count && a->arch == b->arch;
}

/* With g_mu held. */
static entry *find_locked(const tpg_gemm_key *k) {
  size_t i;
  for (i = 0; i < g_n; ++i)
    if (key_eq(&g_e[i].key, k)) return &g_e[i];
  return NULL;
}
/* With g_mu held; overwrite: replace an existing entry. 0 on success. */
static int put_locked(const tpg_gemm_key *k, const tpg_gemm_variant *v, double us, int from_file, int overwrite) {
  entry *e = find_locked(k);
  if (e) {
    if (overwrite) { e->v = *v; e->us = us; e->from_file = from_file; }
    return 0;
  }
  if (g_n == g_cap) {
    const size_t cap = g_cap ? 2 * g_cap : 64;
    entry *ne = (entry *)realloc(g_e, cap * sizeof *ne);
    if (!ne) return 1;
    g_e = ne;
    g_cap = cap;
  }
  g_e[g_n].key = *k;
  g_e[g_n].v = *v;
  g_e[g_n].us = us;
  g_e[g_n].from_file = from_file;
  ++g_n;
  return 0;
}

void tpg_gemm_tune_reset(void) {
  pthread_mutex_lock(&g_mu);
  free(g_e);
  g_e = NULL;
  g_n = g_cap = 0;
  pthread_mutex_unlock(&g_mu);
}

int tpg_gemm_tune_lookup(const tpg_gemm_key *key, tpg_gemm_variant *v, double *us) {
  entry *e;
  int rc = 1;
  if (!key) return 1;
  pthread_mutex_lock(&g_mu);
  e = find_locked(key);
  if (e) {
    if (v) *v = e->v;
    if (us) *us = e->us;
    rc = 0;
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

/* ---- the file ---------------------------------------------------------- */

static void warn(const char *path, const char *what, long line) {
  if (line > 0) fprintf(stderr, "tpgraph: warning: GEMM tuning cache %s: %s at line %ld; file ignored\n", path, what, line);
  else fprintf(stderr, "tpgraph: warning: GEMM tuning cache %s: %s; file ignored\n", path, what);
}

static int key_valid(const tpg_gemm_key *k) {
  return k->m >= 1 && k->n >= 8 && k->n % 8 == 0 && k->k >= 8 && k->k % 8 == 0 &&
         (k->dtype == TPG_KDT_F16 || k->dtype == TPG_KDT_BF16) && k->epilogue >= 0 && k->epilogue < TPG_EPI_COUNT &&
         k->sm_count >= 1 && k->sm_count <= 65536 && k->arch >= 80 && k->arch <= 1000;
}

/* Reads and validates the whole file into a fresh array. Returns the count,
 * -1 when absent, -2 when invalid (warned). */
static long read_file(const char *path, entry **out) {
  FILE *f = fopen(path, "r");
  char line[TUNE_MAX_LINE];
  entry *e = NULL;
  size_t n = 0, cap = 0;
  long ln = 0, want = -1;
  *out = NULL;
  if (!f) {
    if (errno != ENOENT) warn(path, strerror(errno), 0);
    return errno == ENOENT ? -1 : -2;
  }
  while (fgets(line, sizeof line, f)) {
    const size_t len = strlen(line);
    ++ln;
    if (len == 0 || line[len - 1] != '\n') { warn(path, "line too long or not terminated", ln); goto bad; }
    line[len - 1] = '\0';
    if (ln == 1) {
      if (strcmp(line, TUNE_MAGIC)) { warn(path, "not a tpgraph GEMM tuning cache (or another version)", ln); goto bad; }
      continue;
    }
    if (want >= 0) { warn(path, "data after the end line", ln); goto bad; }
    if (!strncmp(line, "end ", 4)) {
      char *endp;
      want = strtol(line + 4, &endp, 10);
      if (*endp || want < 0) { warn(path, "malformed end line", ln); goto bad; }
      continue;
    }
    {
      tpg_gemm_key k;
      char vname[40];
      double us;
      int used = 0;
      memset(&k, 0, sizeof k);
      if (sscanf(line, "%d %d %d %d %d %d %d %39s %lf%n", &k.m, &k.n, &k.k, &k.dtype, &k.epilogue, &k.sm_count,
                 &k.arch, vname, &us, &used) != 9 || line[used] != '\0') {
        warn(path, "malformed entry", ln);
        goto bad;
      }
      if (!key_valid(&k) || !(us >= 0 && us < 1e12)) { warn(path, "entry out of range", ln); goto bad; }
      if (n == cap) {
        entry *ne;
        if (cap >= TUNE_MAX_ENTRIES) { warn(path, "too many entries", ln); goto bad; }
        cap = cap ? 2 * cap : 64;
        ne = (entry *)realloc(e, cap * sizeof *ne);
        if (!ne) { warn(path, "out of memory", ln); goto bad; }
        e = ne;
      }
      e[n].key = k;
      e[n].us = us;
      e[n].from_file = 1;
      if (tpg_gemm_variant_parse(vname, &e[n].v)) { warn(path, "unknown variant name", ln); goto bad; }
      ++n;
    }
  }
  if (ferror(f)) { warn(path, "read error", 0); goto bad; }
  if (ln == 0) { warn(path, "empty file", 0); goto bad; }
  if (want != (long)n) { warn(path, "truncated (no end line, or a count that does not match)", 0); goto bad; }
  fclose(f);
  *out = e;
  return (long)n;
bad:
  fclose(f);
  free(e);
  return -2;
}

int tpg_gemm_tune_load(const char *path) {
  entry *e;
  long n, i;
  int merged = 0;
  if (!path) return -1;
  n = read_file(path, &e);
  if (n < 0) return -1;
  pthread_mutex_lock(&g_mu);
  for (i = 0; i < n; ++i)
    if (!find_locked(&e[i].key) && !put_locked(&e[i].key, &e[i].v, e[i].us, 1, 0)) ++merged;
  pthread_mutex_unlock(&g_mu);
  free(e);
  return merged;
}

int tpg_gemm_tune_store(const char *path) {
  char lock[4096], tmp[4096];
  static unsigned long seq;
  int lfd = -1, rc = 1, fd;
  entry *fe = NULL, *all = NULL;
  long nf, i;
  size_t n = 0, j;
  FILE *f = NULL;
  if (!path || strlen(path) + 40 > sizeof lock) return 1;
  snprintf(lock, sizeof lock, "%s.lock", path);
  /* One writer at a time, so entries another process adds between our read
   * and our rename are not lost. Without the lock (read-only directory for
   * the lock, no flock) the rename still keeps the file whole. */
  lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd >= 0 && flock(lfd, LOCK_EX) != 0) { close(lfd); lfd = -1; }
  nf = read_file(path, &fe);
  if (nf < 0) nf = 0;
  pthread_mutex_lock(&g_mu);
  all = (entry *)malloc((g_n + (size_t)nf + 1) * sizeof *all);
  if (all) {
    /* this process's entries first (they win), then the file's others */
    for (j = 0; j < g_n; ++j) all[n++] = g_e[j];
    for (i = 0; i < nf; ++i) {
      size_t q;
      int dup = 0;
      for (q = 0; q < g_n && !dup; ++q) dup = key_eq(&g_e[q].key, &fe[i].key);
      if (!dup) all[n++] = fe[i];
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (!all) goto done;
  {
    /* unique per process and call: concurrent writers never share a temp file */
    unsigned long s = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), s);
  }
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) goto done;
  f = fdopen(fd, "w");
  if (!f) { close(fd); unlink(tmp); goto done; }
  fprintf(f, "%s\n", TUNE_MAGIC);
  for (j = 0; j < n; ++j) {
    char vname[40];
    const tpg_gemm_key *k = &all[j].key;
    if (tpg_gemm_variant_name(&all[j].v, vname, sizeof vname)) continue;
    fprintf(f, "%d %d %d %d %d %d %d %s %.3f\n", k->m, k->n, k->k, k->dtype, k->epilogue, k->sm_count, k->arch, vname,
            all[j].us);
  }
  fprintf(f, "end %zu\n", n);
  if (fflush(f) != 0 || fsync(fileno(f)) != 0) { fclose(f); unlink(tmp); goto done; }
  if (fclose(f) != 0) { unlink(tmp); goto done; }
  if (rename(tmp, path) != 0) { unlink(tmp); goto done; }
  rc = 0;
done:
  free(fe);
  free(all);
  if (lfd >= 0) close(lfd); /* releases the flock */
  return rc;
}

/* ---- the pick ---------------------------------------------------------- */

static void set_info(tpg_gemm_tune_info *info, int source, const tpg_gemm_variant *v) {
  if (!info) return;
  info->source = source;
  if (v) tpg_gemm_variant_name(v, info->variant, sizeof info->variant);
}

static tpg_gemm_key key_of(const tpg_gemm_problem *p) {
  tpg_gemm_key k;
  memset(&k, 0, sizeof k);
  k.m = p->m, k.n = p->n, k.k = p->k, k.dtype = p->dtype, k.epilogue = p->epilogue, k.sm_count = p->sms;
  k.arch = p->arch;
  return k;
}

/* A variant the family setting lets run: the heuristic always (it is the
 * family's own rule); under OURS ours only; under a forced family its own
 * and ours (where it has none). */
static int family_allows(int family, const tpg_gemm_variant *v) {
  const int f = tpg_gemm_variant_family(v);
  if (v->kind == TPG_GEMM_VAR_HEURISTIC || family == TPG_GEMM_FAMILY_AUTO) return 1;
  return f == TPG_GEMM_FAMILY_OURS || (family != TPG_GEMM_FAMILY_OURS && f == family);
}

/* The heuristic's launch: the rule with the configured family. */
static int heuristic(const tpg_gemm_tune_cfg *cfg, const tpg_gemm_problem *p, tpg_kernel_launch *out,
                     tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  return tpg_gemm_select_rule(p, cfg->family, out, x_map, w_map, why, whylen);
}

/* The launch of a variant (the heuristic's own, or a forced one). */
static int launch_of(const tpg_gemm_tune_cfg *cfg, const tpg_gemm_problem *p, const tpg_gemm_variant *v,
                     tpg_kernel_launch *out, tpg_tma_encode *x_map, tpg_tma_encode *w_map, char *why, size_t whylen) {
  if (v->kind == TPG_GEMM_VAR_HEURISTIC) return heuristic(cfg, p, out, x_map, w_map, why, whylen);
  return tpg_gemm_select_variant(p, v, out, x_map, w_map, why, whylen);
}

/* The process cache, then the file: 1 when a usable entry served the pick
 * (out, maps and info set), 0 to time (out holds the heuristic then). */
static int pick_cached(const tpg_gemm_tune_cfg *cfg, const tpg_gemm_problem *p, tpg_kernel_launch *out,
                       tpg_tma_encode *x_map, tpg_tma_encode *w_map, tpg_gemm_tune_info *info) {
  const tpg_gemm_key key = key_of(p);
  char why[200];
  int source = TPG_GEMM_TUNE_FROM_PROCESS;
  for (int tries = 0; tries < 2; ++tries) {
    tpg_gemm_variant v;
    double us = 0;
    int hit = 0, ff = 0;
    pthread_mutex_lock(&g_mu);
    entry *e = find_locked(&key);
    if (e) v = e->v, us = e->us, ff = e->from_file, hit = 1;
    pthread_mutex_unlock(&g_mu);
    if (hit) {
      if (family_allows(cfg->family, &v) && !launch_of(cfg, p, &v, out, x_map, w_map, why, sizeof why)) {
        set_info(info, ff ? TPG_GEMM_TUNE_FROM_FILE : source, &v);
        if (info) info->best_us = us;
        return 1;
      }
      /* a cached variant this shape cannot run (leading dims) or of a family
       * not allowed now: time anew */
      heuristic(cfg, p, out, x_map, w_map, why, sizeof why);
      return 0;
    }
    if (tries > 0 || !cfg->cache_path || tpg_gemm_tune_load(cfg->cache_path) <= 0) return 0;
    source = TPG_GEMM_TUNE_FROM_FILE;
  }
  return 0;
}

/* Whether the candidate list holds a variant of `family`. */
static int has_family(const tpg_gemm_variant *cand, int nc, int family) {
  for (int i = 0; i < nc; ++i)
    if (tpg_gemm_variant_family(&cand[i]) == family) return 1;
  return 0;
}

/* The same launch under another name (e.g. the heuristic's own tile) is timed once. */
static int seen_before(const tpg_kernel_launch *seen, int nseen, const tpg_kernel_launch *L) {
  for (int s = 0; s < nseen; ++s)
    if (!strcmp(seen[s].kernel, L->kernel) && seen[s].grid[0] == L->grid[0] && seen[s].split_k == L->split_k &&
        seen[s].cluster == L->cluster && seen[s].cutlass_mode == L->cutlass_mode &&
        seen[s].cutlass_splits == L->cutlass_splits && seen[s].family == L->family && seen[s].lt_algo == L->lt_algo)
      return 1;
  return 0;
}

/* What timing found: the index of the fastest candidate (-1: none ran),
 * its time and the heuristic's. */
typedef struct timed {
  int best, count;
  double best_us, heur_us;
} timed;

/* Times the heuristic, then the candidates while the budget lasts. */
static void time_candidates(const tpg_gemm_tune_cfg *cfg, const tpg_gemm_problem *p, const tpg_gemm_variant *cand,
                            int nc, timed *r) {
  tpg_kernel_launch L, seen[TPG_GEMM_MAX_CANDIDATES];
  tpg_tma_encode xm, wm;
  char why[200];
  const double t0 = tpg_now_us();
  /* a forced family's kernels replace our TMA kernels where it has any */
  const int forced = cfg->family != TPG_GEMM_FAMILY_AUTO && cfg->family != TPG_GEMM_FAMILY_OURS;
  const int has_forced = forced && has_family(cand, nc, cfg->family);
  int nseen = 0;
  r->best = -1, r->count = 0, r->best_us = 0, r->heur_us = 0;
  tpg_err_clear(); /* so that a message after the loop is the timer's */
  for (int i = 0; i < nc; ++i) {
    double t;
    if (i > 0 && tpg_now_us() - t0 > cfg->budget_us) break;
    if (!family_allows(cfg->family, &cand[i]) || (has_forced && cand[i].kind == TPG_GEMM_VAR_TMA)) continue;
    if (launch_of(cfg, p, &cand[i], &L, &xm, &wm, why, sizeof why)) continue;
    if (seen_before(seen, nseen, &L)) continue;
    seen[nseen++] = L;
    if (cfg->time_fn(cfg->time_ctx, p, &cand[i], &L, &xm, &wm, &t) || !(t > 0) || !isfinite(t)) continue;
    ++r->count;
    if (cand[i].kind == TPG_GEMM_VAR_HEURISTIC) r->heur_us = t;
    if (r->best < 0 || t < r->best_us) r->best = i, r->best_us = t;
  }
}

/* Keeps the heuristic unless the winner is clearly faster, caches the
 * winner (and writes the file), and sets out to its launch. */
static void settle(const tpg_gemm_tune_cfg *cfg, const tpg_gemm_problem *p, const tpg_gemm_variant *cand, timed *r,
                   tpg_kernel_launch *out, tpg_tma_encode *x_map, tpg_tma_encode *w_map, tpg_gemm_tune_info *info) {
  const tpg_gemm_key key = key_of(p);
  char why[200];
  if (r->heur_us > 0 && r->best_us > r->heur_us * (1.0 - cfg->min_gain)) {
    r->best = 0;
    r->best_us = r->heur_us;
  }
  const tpg_gemm_variant v = cand[r->best];
  launch_of(cfg, p, &v, out, x_map, w_map, why, sizeof why);
  pthread_mutex_lock(&g_mu);
  put_locked(&key, &v, r->best_us, 0, 1); /* out of memory: simply not cached */
  pthread_mutex_unlock(&g_mu);
  if (cfg->cache_path && tpg_gemm_tune_store(cfg->cache_path))
    fprintf(stderr, "tpgraph: warning: GEMM tuning cache %s: could not be written; kept in this process\n",
            cfg->cache_path);
  set_info(info, TPG_GEMM_TUNE_FROM_TIMING, &v);
  if (info) info->best_us = r->best_us;
}

tpg_status tpg_gemm_tune_pick(const tpg_gemm_tune_cfg *cfg, const tpg_gemm_problem *p, tpg_kernel_launch *out,
                              tpg_tma_encode *x_map, tpg_tma_encode *w_map, tpg_gemm_tune_info *info) {
  char why[200];
  tpg_gemm_variant heur, cand[TPG_GEMM_MAX_CANDIDATES];
  timed r;
  TPG_CHECK_ARG(cfg != NULL, "cfg is NULL");
  TPG_CHECK_ARG(p != NULL, "problem is NULL");
  TPG_CHECK_ARG(out != NULL, "out is NULL");
  TPG_CHECK_ARG(x_map != NULL && w_map != NULL, "x_map/w_map are NULL");
  TPG_CHECK_ARG(cfg->mode == TPG_GEMM_TUNE_OFF || cfg->mode == TPG_GEMM_TUNE_ON,
                "cfg->mode=%d: must be TPG_GEMM_TUNE_OFF or TPG_GEMM_TUNE_ON", cfg->mode);
  TPG_CHECK_ARG(cfg->mode == TPG_GEMM_TUNE_OFF || cfg->time_fn != NULL, "cfg->time_fn is NULL with tuning on");
  TPG_CHECK_ARG(cfg->family >= TPG_GEMM_FAMILY_AUTO && cfg->family < TPG_GEMM_FAMILY_COUNT,
                "cfg->family=%d: must be TPG_GEMM_FAMILY_AUTO, _OURS, _CUTLASS or _CUBLASLT", cfg->family);
  if (info) memset(info, 0, sizeof *info);
  memset(&heur, 0, sizeof heur);
  heur.kind = TPG_GEMM_VAR_HEURISTIC;
  /* the heuristic first: it also checks the shape, with the rule's message */
  if (heuristic(cfg, p, out, x_map, w_map, why, sizeof why))
    return TPG_ARG_FAIL("GEMM %dx%dx%d: %s", p->m, p->n, p->k, why);
  if (cfg->mode == TPG_GEMM_TUNE_OFF) {
    set_info(info, TPG_GEMM_TUNE_FROM_HEURISTIC, &heur);
    return TPG_SUCCESS;
  }
  if (pick_cached(cfg, p, out, x_map, w_map, info)) return TPG_SUCCESS;
  const double t0 = tpg_now_us();
  time_candidates(cfg, p, cand, tpg_gemm_candidates(p, cand, TPG_GEMM_MAX_CANDIDATES), &r);
  if (info) {
    info->timed = r.count;
    info->tune_us = tpg_now_us() - t0;
    info->heuristic_us = r.heur_us;
  }
  if (r.best < 0) { /* nothing ran: the heuristic, not cached; said once so it is not silent */
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      fprintf(stderr, "tpgraph: warning: GEMM tuning: no candidate of %dx%dx%d could be timed (%s); using the "
              "heuristic\n", p->m, p->n, p->k, tpg_last_error()[0] ? tpg_last_error() : "the timer gave no reason");
    set_info(info, TPG_GEMM_TUNE_FROM_HEURISTIC, &heur);
    return TPG_SUCCESS;
  }
  settle(cfg, p, cand, &r, out, x_map, w_map, info);
  return TPG_SUCCESS;
}

/* ---- one graph's policy ------------------------------------------------- */
tpg_status tpg_gemm_tune_graph_pick(tpg_gemm_tune_graph *s, const tpg_gemm_problem *p, int count,
                                    tpg_kernel_launch *out, tpg_tma_encode *x_map, tpg_tma_encode *w_map) {
  tpg_gemm_tune_cfg c;
  tpg_gemm_tune_info info;
  TPG_CHECK_ARG(s != NULL, "s is NULL");
  TPG_CHECK_ARG(p != NULL, "problem is NULL");
  c = s->cfg;
  if (p->fold) c.mode = TPG_GEMM_TUNE_OFF; /* one kernel folds a norm: nothing to time */
  if (c.mode == TPG_GEMM_TUNE_ON) {
    /* the file once per graph, so that a graph past its budget (or an
     * update) still finds what other processes timed */
    if (c.cache_path && !s->file_loaded) {
      s->file_loaded = 1;
      (void)tpg_gemm_tune_load(c.cache_path);
    }
    const tpg_gemm_key key = key_of(p);
    if (tpg_gemm_tune_lookup(&key, NULL, NULL) != 0) {
      if (!s->may_time || s->spent_us >= s->budget_us) {
        c.mode = TPG_GEMM_TUNE_OFF; /* not cached and no time: the heuristic */
      } else if (s->budget_us - s->spent_us < c.budget_us) {
        c.budget_us = s->budget_us - s->spent_us;
      }
    }
  }
  TPG_TRY(tpg_gemm_tune_pick(&c, p, out, x_map, w_map, &info));
  if (count) {
    s->spent_us += info.tune_us;
    if (info.source == TPG_GEMM_TUNE_FROM_TIMING) s->timed++;
    if (info.source == TPG_GEMM_TUNE_FROM_PROCESS || info.source == TPG_GEMM_TUNE_FROM_FILE) s->cached++;
  }
  return TPG_SUCCESS;
}
