/* fake_clean.h - a test's check that the stand-in driver is left as it was:
 * no objects live beyond those already counted, no violation. */
#ifndef TPG_FAKE_CLEAN_H
#define TPG_FAKE_CLEAN_H

#include <stdio.h>

#include "tests/fake/tpgfake.h"

/* Objects live before the part being checked (a test sets it when it keeps
 * buffers across parts); each clean call moves it to what is live now. */
static long tpgfake_clean_base;

/* 1 when nothing new is live and no violation happened; else 0, with what
 * stayed live and the violations on stderr under `what`. */
static inline int tpgfake_clean(const char *what) {
  char why[512];
  const long live = tpgfake_live(why, sizeof why) - tpgfake_clean_base, v = tpgfake_violations();
  if (live || v)
    fprintf(stderr, "%s: %ld new live (%s), %ld violations\n%s", what, live, why, v, tpgfake_violation_text());
  tpgfake_clean_base += live;
  return !live && !v;
}

#endif
