/* tpg_test.h - a minimal check harness shared by tpgraph's C tests.
 *
 * CHECK keeps going after a failure (so one run reports every broken rule);
 * TPG_TEST_END prints "N passed, N failed" and gives the exit status.
 */
#ifndef TPG_TEST_H
#define TPG_TEST_H

#include <stdio.h>
#include <string.h>

#include "tpgraph.h"

static int tpg_t_pass __attribute__((unused)) = 0, tpg_t_fail __attribute__((unused)) = 0;

#define CHECK(cond)                                                               \
  do {                                                                            \
    if (cond) tpg_t_pass++;                                                       \
    else {                                                                        \
      tpg_t_fail++;                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
    }                                                                             \
  } while (0)

/* The call returns `want`; on TPG_SUCCESS no message; on failure the message
 * contains `needle` (the argument it must name). */
static inline int tpg_t_has(const char *hay, const char *needle) {
  return needle == NULL || strstr(hay, needle) != NULL;
}

#define CHECK_ST(call, want, needle)                                              \
  do {                                                                            \
    tpg_status st_ = (call);                                                      \
    const char *m_ = tpg_last_error();                                            \
    int ok_ = st_ == (want) && ((want) == TPG_SUCCESS || tpg_t_has(m_, needle)); \
    if (ok_) tpg_t_pass++;                                                        \
    else {                                                                        \
      tpg_t_fail++;                                                               \
      fprintf(stderr, "%s:%d: %s\n  returned %d (%s), wanted %d with \"%s\"\n",  \
              __FILE__, __LINE__, #call, (int)st_, m_, (int)(want),               \
              (needle) ? (const char *)(needle) : "");                            \
    }                                                                             \
  } while (0)

#define CHECK_OK(call) CHECK_ST(call, TPG_SUCCESS, NULL)

#define TPG_TEST_END()                                                            \
  (printf("%d passed, %d failed\n", tpg_t_pass, tpg_t_fail), tpg_t_fail ? 1 : 0)

#endif
