/* kit_test.c - the kit without a GPU: engine-kernel argument lists checked
 * and packed against a parameter layout (as the driver would report it),
 * module images refused before the driver reads them, and the plan calls
 * of the kit (tpg_plan_add_kernel / _captured / _host / _event_*) refusing
 * bad input by name and adding nothing when they refuse.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/kit_args.h"
#include "tests/tpg_test.h"

/* The layout nvcc gives `k(float *y, const float *x, int n, double a, char c, float4 v)`. */
static const size_t k_off[] = {0, 8, 16, 24, 32, 48};
static const size_t k_size[] = {8, 8, 4, 8, 1, 16};

static void test_check(void) {
  int n = 3;
  tpg_arg a[2] = {TPG_ARG_VALUE(n), tpg_arg_view(1, 0)};
  CHECK_OK(tpg_kit_args_check("f", "k#0", a, 2));
  CHECK_OK(tpg_kit_args_check("f", "k#0", NULL, 0));
  CHECK_ST(tpg_kit_args_check("f", "k#0", NULL, 2), TPG_ERROR_INVALID_ARGUMENT, "args is NULL with nargs = 2");
  CHECK_ST(tpg_kit_args_check("f", "k#0", a, -1), TPG_ERROR_INVALID_ARGUMENT, "nargs is -1");

  tpg_arg b = tpg_arg_bytes(&n, 0);
  CHECK_ST(tpg_kit_args_check("f", "k#0", &b, 1), TPG_ERROR_INVALID_ARGUMENT, "node k#0: args[0] has size 0");
  b = tpg_arg_bytes(&n, 4097);
  CHECK_ST(tpg_kit_args_check("f", "k#0", &b, 1), TPG_ERROR_INVALID_ARGUMENT, "args[0] has size 4097");
  b = tpg_arg_bytes(NULL, 4);
  CHECK_ST(tpg_kit_args_check("f", "k#0", &b, 1), TPG_ERROR_INVALID_ARGUMENT, "args[0].bytes is NULL");
  static unsigned char big[4096];
  b = tpg_arg_bytes(big, 4096);
  CHECK_OK(tpg_kit_args_check("f", NULL, &b, 1));

  tpg_arg v = tpg_arg_view(1, 0);
  v.size = 4;
  tpg_arg two[2] = {TPG_ARG_VALUE(n), v};
  CHECK_ST(tpg_kit_args_check("f", "k#0", two, 2), TPG_ERROR_INVALID_ARGUMENT, "args[1] is a view with size 4");
  v.size = 0; /* means 8 */
  CHECK_OK(tpg_kit_args_check("f", "k#0", &v, 1));
  tpg_arg bad = v;
  bad.kind = (tpg_arg_kind)7;
  CHECK_ST(tpg_kit_args_check("f", "k#0", &bad, 1), TPG_ERROR_INVALID_ARGUMENT, "args[0].kind is 7");

  /* 9 arguments of 4096 bytes pass the per-argument rule but not the total. */
  tpg_arg many[9];
  for (int i = 0; i < 9; i++) many[i] = tpg_arg_bytes(big, 4096);
  CHECK_ST(tpg_kit_args_check("f", "k#0", many, 9), TPG_ERROR_INVALID_ARGUMENT, "at most 32764 bytes");
  CHECK_OK(tpg_kit_args_check("f", "k#0", many, 7));
  /* No label: no "node" prefix. */
  CHECK_ST(tpg_kit_args_check("f", NULL, &bad, 1), TPG_ERROR_INVALID_ARGUMENT, "f: args[0].kind");
}

static void test_layout_known(void) {
  float *y = NULL;
  int n = 77;
  double a = 2.5;
  char c = 'q';
  struct { float x, y, z, w; } f4 = {1, 2, 3, 4};
  tpg_arg args[6] = {tpg_arg_view(1, 0), tpg_arg_view(2, 4), TPG_ARG_VALUE(n), TPG_ARG_VALUE(a), TPG_ARG_VALUE(c),
                     TPG_ARG_VALUE(f4)};
  (void)y;
  tpg_param_layout L = {6, k_off, k_size};
  tpg_kit_args *k = NULL;
  CHECK_OK(tpg_kit_args_layout("f", "k#0", args, 6, &L, &k));
  CHECK(k != NULL);
  if (!k) return;
  CHECK(k->nargs == 6 && k->bytes == 64);
  CHECK(((uintptr_t)k->buf & 15) == 0);
  for (int i = 0; i < 6; i++) CHECK(k->offset[i] == k_off[i] && k->params[i] == k->buf + k_off[i]);
  int n2;
  double a2;
  memcpy(&n2, k->buf + 16, 4);
  memcpy(&a2, k->buf + 24, 8);
  CHECK(n2 == 77 && a2 == 2.5 && k->buf[32] == 'q');
  CHECK(memcmp(k->buf + 48, &f4, 16) == 0);
  uint64_t z = 1;
  memcpy(&z, k->buf + 0, 8);
  CHECK(z == 0); /* views are 0 until set */
  tpg_kit_args_set_ptr(k, 1, 0x7f0000001230ull);
  memcpy(&z, k->buf + 8, 8);
  CHECK(z == 0x7f0000001230ull);
  /* The value was copied: changing the source does not change the buffer. */
  n = 5;
  memcpy(&n2, k->buf + 16, 4);
  CHECK(n2 == 77);
  tpg_kit_args_free(k);

  /* Arity. */
  k = (tpg_kit_args *)1;
  CHECK_ST(tpg_kit_args_layout("f", "attn", args, 5, &L, &k), TPG_ERROR_INVALID_ARGUMENT,
           "node attn: 5 arguments given; the kernel takes 6 parameters");
  CHECK(k == NULL);
  tpg_param_layout L1 = {1, k_off, k_size};
  CHECK_ST(tpg_kit_args_layout("f", "attn", args, 0, &L1, &k), TPG_ERROR_INVALID_ARGUMENT,
           "0 arguments given; the kernel takes 1 parameter");
  tpg_param_layout L0 = {0, NULL, NULL};
  CHECK_OK(tpg_kit_args_layout("f", "attn", NULL, 0, &L0, &k));
  CHECK(k && k->nargs == 0 && k->bytes == 0);
  tpg_kit_args_free(k);

  /* Wrong sizes: a 4-byte int where the kernel has a double; a view where it has an int. */
  tpg_arg w[6];
  memcpy(w, args, sizeof w);
  w[3] = TPG_ARG_VALUE(n);
  CHECK_ST(tpg_kit_args_layout("f", "rope", w, 6, &L, &k), TPG_ERROR_INVALID_ARGUMENT,
           "node rope: args[3] is 4 bytes; the kernel's parameter 3 is 8 bytes at offset 24");
  memcpy(w, args, sizeof w);
  w[2] = tpg_arg_view(3, 0);
  CHECK_ST(tpg_kit_args_layout("f", "rope", w, 6, &L, &k), TPG_ERROR_INVALID_ARGUMENT,
           "args[2] is a view (an 8-byte device address); the kernel's parameter 2 is 4 bytes at offset 16");
  memcpy(w, args, sizeof w);
  w[5] = tpg_arg_bytes(&f4, 12);
  CHECK_ST(tpg_kit_args_layout("f", "rope", w, 6, &L, &k), TPG_ERROR_INVALID_ARGUMENT,
           "args[5] is 12 bytes; the kernel's parameter 5 is 16 bytes at offset 48");
  /* The plan-level rules still apply with a layout. */
  w[5] = tpg_arg_bytes(NULL, 16);
  CHECK_ST(tpg_kit_args_layout("f", "rope", w, 6, &L, &k), TPG_ERROR_INVALID_ARGUMENT, "args[5].bytes is NULL");
  CHECK(k == NULL);

  /* A layout the driver could not mean is an internal error, never a write out of bounds. */
  static const size_t off_bad[] = {40000};
  static const size_t size_bad[] = {4};
  tpg_param_layout Lb = {1, off_bad, size_bad};
  CHECK_ST(tpg_kit_args_layout("f", "x", &args[2], 1, &Lb, &k), TPG_ERROR_INTERNAL, "offset 40000");
}

static void test_layout_natural(void) {
  /* No layout from the driver: natural alignment, each at the largest power
   * of two <= 16 dividing its size. */
  char c = 1;
  int i = 2;
  double d = 3;
  struct { char b[12]; } s12 = {{0}};
  struct { double a, b; } s16 = {4, 5};
  short h = 6;
  tpg_arg args[7] = {TPG_ARG_VALUE(c), TPG_ARG_VALUE(i), tpg_arg_view(1, 0), TPG_ARG_VALUE(c),
                     TPG_ARG_VALUE(s12), TPG_ARG_VALUE(s16), TPG_ARG_VALUE(h)};
  (void)d;
  tpg_kit_args *k = NULL;
  tpg_param_layout unknown = {-1, NULL, NULL};
  CHECK_OK(tpg_kit_args_layout("f", "k", args, 7, &unknown, &k));
  if (!k) return;
  /* c@0, i@4, view@8, c@16, s12 (align 4)@20, s16 (align 16)@32, h@48 -> 50 */
  static const size_t want[7] = {0, 4, 8, 16, 20, 32, 48};
  for (int j = 0; j < 7; j++) CHECK(k->offset[j] == want[j]);
  CHECK(k->bytes == 50);
  CHECK(memcmp(k->buf + 32, &s16, 16) == 0);
  tpg_kit_args_free(k);
  /* NULL layout means the same. */
  CHECK_OK(tpg_kit_args_layout("f", "k", args, 7, NULL, &k));
  CHECK(k && k->offset[5] == 32);
  tpg_kit_args_free(k);
}

static void test_module(void) {
  tpg_module *m = (tpg_module *)1;
  CHECK_ST(tpg_module_load(NULL, 10, &m), TPG_ERROR_INVALID_ARGUMENT, "image is NULL");
  CHECK(m == NULL);
  static const char ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n";
  CHECK_ST(tpg_module_load(ptx, 0, &m), TPG_ERROR_INVALID_ARGUMENT, "bytes is 0");
  CHECK_ST(tpg_module_load(ptx, sizeof ptx, NULL), TPG_ERROR_INVALID_ARGUMENT, "out is NULL");
  /* PTX whose NUL lies beyond `bytes`: the driver would read past the end. */
  CHECK_ST(tpg_module_load(ptx, sizeof ptx - 1, &m), TPG_ERROR_INVALID_ARGUMENT, "no NUL within its");
  /* A cubin cut short: its section table lies past the end. */
  unsigned char elf[64] = {0x7f, 'E', 'L', 'F', 2};
  uint64_t shoff = 4096;
  memcpy(elf + 0x28, &shoff, 8);
  elf[0x3a] = 64;
  elf[0x3c] = 10;
  CHECK_ST(tpg_module_load(elf, sizeof elf, &m), TPG_ERROR_INVALID_ARGUMENT, "section table ends at byte 4736");
  elf[4] = 1;
  CHECK_ST(tpg_module_load(elf, sizeof elf, &m), TPG_ERROR_INVALID_ARGUMENT, "not a 64-bit cubin");
  /* A fatbin whose header claims more than given. */
  unsigned char fb[32] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0};
  uint64_t fat = 1000;
  memcpy(fb + 8, &fat, 8);
  CHECK_ST(tpg_module_load(fb, sizeof fb, &m), TPG_ERROR_INVALID_ARGUMENT, "header says 1016 bytes, past its 32");
  CHECK_ST(tpg_module_load(fb, 8, &m), TPG_ERROR_INVALID_ARGUMENT, "fatbin header is 16 bytes");
  CHECK_ST(tpg_module_load_file("/nonexistent/k.cubin", &m), TPG_ERROR_INVALID_ARGUMENT,
           "tpg_module_load_file: path \"/nonexistent/k.cubin\" cannot be opened");
  CHECK_ST(tpg_module_load_file(NULL, &m), TPG_ERROR_INVALID_ARGUMENT, "path is NULL");
  CHECK_ST(tpg_module_load_file("/dev/null", &m), TPG_ERROR_INVALID_ARGUMENT, "empty or not a regular file");
  CHECK(m == NULL);
  CHECK_OK(tpg_module_destroy(NULL));
  /* A good image gets as far as the driver: here none (CI), or a module. */
  tpg_status st = tpg_module_load(ptx, sizeof ptx, &m);
  CHECK(st == TPG_SUCCESS || st == TPG_ERROR_NO_DRIVER || st == TPG_ERROR_NO_DEVICE);
  CHECK((st == TPG_SUCCESS) == (m != NULL));
  CHECK_OK(tpg_module_destroy(m));
}

int main(void) {
  test_check();
  test_module();
  test_layout_known();
  test_layout_natural();
  return TPG_TEST_END();
}
