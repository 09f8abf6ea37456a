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
#include "lib/module.h"
#include "lib/handle.h"
#include "tests/tpg_test.h"

static int nodes_of(const tpg_plan *p) {
  int n = -1;
  tpg_plan_get_stats(p, &n, NULL, NULL);
  return n;
}

static int dummy_cb(void *u, tpg_stream s, void *const *ptrs, int n) {
  (void)u, (void)s, (void)ptrs, (void)n;
  return 0;
}
static void dummy_host(void *u) { (void)u; }

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
  fat = UINT64_MAX - 8; /* header + body would wrap to 7, under the 32 bytes given */
  memcpy(fb + 8, &fat, 8);
  CHECK_ST(tpg_module_load(fb, sizeof fb, &m), TPG_ERROR_INVALID_ARGUMENT, "or more bytes, past its 32");
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

/* The plan calls: what they refuse (by name), that a refusal adds nothing,
 * and that what they accept no longer needs the caller's arrays. */
static void test_plan_kernel(void) {
  tpg_plan *p;
  tpg_slot x, y, h;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_F32, TPG_MEM_DEVICE, 1024, &x));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_SCRATCH, 1024, &y));
  CHECK_OK(tpg_plan_add_slot(p, "h", TPG_F32, TPG_MEM_HOST, 16, &h));
  /* A module handle needs the driver to load; the plan only checks that it is one. */
  static struct tpg_module mod = {TPG_MAGIC_MODULE, NULL};
  tpg_handle_add(&mod, TPG_MAGIC_MODULE); /* what tpg_module_load does for a loaded one */
  static struct tpg_module dead = {TPG_MAGIC_DEAD, NULL};
  int n = 1024;
  double a = 2;
  tpg_arg *args = malloc(4 * sizeof *args);
  args[0] = tpg_arg_view(y, 0);
  args[1] = tpg_arg_view(x, 512);
  args[2] = TPG_ARG_VALUE(n);
  args[3] = TPG_ARG_VALUE(a);
  char *name = malloc(16);
  strcpy(name, "my_axpy");
  tpg_kernel_desc d = TPG_KERNEL_DESC_INIT;
  d.module = &mod;
  d.name = name;
  d.grid[0] = 4;
  d.block[0] = 256;
  d.args = args;
  d.nargs = 4;
  tpg_node k = 0;
  CHECK_OK(tpg_plan_add_kernel(p, &d, NULL, 0, &k));
  CHECK(k != 0);
  /* Everything was copied: the caller's arrays may go. */
  free(args);
  strcpy(name, "XXXXXXX");
  free(name);
  char dot[4096];
  size_t need = 0;
  CHECK_OK(tpg_plan_dot(p, dot, sizeof dot, &need));
  CHECK(strstr(dot, "my_axpy#0") != NULL);
  CHECK(strstr(dot, "arg1=x+512") != NULL);
  CHECK_OK(tpg_plan_validate(p));

  int before = nodes_of(p);
  tpg_arg good[2] = {tpg_arg_view(y, 0), TPG_ARG_VALUE(n)};
  tpg_kernel_desc e = TPG_KERNEL_DESC_INIT;
  e.cu_function = (void *)0x1234; /* any handle: resolved only at tpg_graph_create */
  e.args = good;
  e.nargs = 2;
  tpg_node out = 77;
  CHECK_ST(tpg_plan_add_kernel(p, NULL, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc is NULL");
  CHECK(out == 0);
  tpg_kernel_desc f = e;
  f.size = 8;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->size is 8");
  f = e;
  f.cu_function = NULL;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc names no kernel");
  f = e;
  f.cu_kernel = (void *)0x99;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "more than one");
  f = e;
  f.cu_function = NULL;
  f.module = &mod;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "desc->module is set but desc->name is NULL");
  f = e;
  f.cu_function = NULL;
  f.name = "k";
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "desc->name is \"k\" but desc->module is NULL");
  f.module = &dead;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "desc->module is not a live tpg_module");
  f.module = &mod;
  f.name = "";
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->name is 0 bytes");
  /* Launch shapes. */
  f = e;
  f.grid[1] = 0;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->grid[1] is 0");
  f = e;
  f.grid[2] = 70000;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "at most 65535");
  f = e;
  f.block[0] = 0;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->block[0] is 0");
  f = e;
  f.block[0] = 512;
  f.block[1] = 4;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "= 2048 threads");
  f = e;
  f.grid[0] = 6;
  f.cluster[0] = 2;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->cluster[1] is 0");
  f.cluster[1] = f.cluster[2] = 1;
  f.cluster[0] = 4;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "desc->grid[0] = 6 is not a multiple of desc->cluster[0] = 4");
  f = e;
  f.pdl = 2;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->pdl is 2");
  /* Arguments. */
  f = e;
  f.nargs = -1;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "nargs is -1");
  f.args = NULL;
  f.nargs = 1;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "args is NULL");
  tpg_arg bad[2];
  memcpy(bad, good, sizeof bad);
  bad[1] = tpg_arg_bytes(NULL, 4);
  f = e;
  f.args = bad;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "args[1].bytes is NULL");
  bad[1] = tpg_arg_bytes(&n, 0);
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "args[1] has size 0");
  bad[1] = tpg_arg_bytes(&n, 5000);
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "args[1] has size 5000");
  /* Slot misuse: no such slot, a view past its slot. */
  memcpy(bad, good, sizeof bad);
  bad[0] = tpg_arg_view(0, 0);
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "desc->args[0].view.slot is 0: not a slot of this plan");
  bad[0] = tpg_arg_view(9, 0);
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "view.slot is 9");
  bad[0] = tpg_arg_view(x, 1024);
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "desc->args[0].view: elements [1024, 1024 + 1) fall outside slot \"x\"");
  bad[0] = tpg_arg_view(x, 0);
  bad[0].size = 4;
  CHECK_ST(tpg_plan_add_kernel(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "is a view with size 4");
  CHECK(out == 0);
  CHECK(nodes_of(p) == before);
  /* A host slot is a valid view (pinned memory the kernel reads), and deps work. */
  tpg_arg hv[1] = {tpg_arg_view(h, 15)};
  f = e;
  f.args = hv;
  f.nargs = 1;
  tpg_node k2 = 0;
  CHECK_OK(tpg_plan_add_kernel(p, &f, &k, 1, &k2));
  CHECK_ST(tpg_plan_add_kernel(p, &f, &k2, -1, &out), TPG_ERROR_INVALID_ARGUMENT, "ndeps is -1");
  /* No arguments at all. */
  f.args = NULL;
  f.nargs = 0;
  CHECK_OK(tpg_plan_add_kernel(p, &f, NULL, 0, NULL));
  CHECK(nodes_of(p) == before + 2);
  /* A plan copy (what a graph keeps) holds its own arguments: destroy both. */
  tpg_plan_destroy(p);
}

static void test_plan_captured(void) {
  tpg_plan *p;
  tpg_slot x, y;
  CHECK_OK(tpg_plan_create(&p));
  CHECK_OK(tpg_plan_add_slot(p, "x", TPG_BF16, TPG_MEM_DEVICE, 100, &x));
  CHECK_OK(tpg_plan_add_slot(p, "y", TPG_F32, TPG_MEM_DEVICE, 50, &y));
  tpg_view *v = malloc(2 * sizeof *v);
  v[0] = (tpg_view){x, 0, 10};
  v[1] = (tpg_view){y, 0, 0};
  tpg_captured_desc d = TPG_CAPTURED_DESC_INIT;
  d.fn = dummy_cb;
  d.views = v;
  d.nviews = 2;
  tpg_node c = 0, out = 5;
  CHECK_OK(tpg_plan_add_captured(p, &d, NULL, 0, &c));
  free(v);
  char dot[2048];
  size_t need;
  CHECK_OK(tpg_plan_dot(p, dot, sizeof dot, &need));
  CHECK(strstr(dot, "captured#0") != NULL && strstr(dot, "v0=x+10") != NULL);
  int before = nodes_of(p);
  tpg_view good[2] = {{x, 0, 0}, {y, 0, 40}};
  size_t counts[2] = {100, 10};
  tpg_captured_desc e = TPG_CAPTURED_DESC_INIT;
  e.fn = dummy_cb;
  e.views = good;
  e.counts = counts;
  e.nviews = 2;
  CHECK_OK(tpg_plan_add_captured(p, &e, &c, 1, &out));
  before++;
  tpg_captured_desc f = e;
  CHECK_ST(tpg_plan_add_captured(p, NULL, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc is NULL");
  f.size = 4;
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->size is 4");
  f = e;
  f.fn = NULL;
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->fn is NULL");
  f = e;
  f.nviews = -1;
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->nviews is -1");
  f.nviews = 65;
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "expected 0..64");
  f = e;
  f.views = NULL;
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->views is NULL");
  size_t over[2] = {100, 11};
  f = e;
  f.counts = over;
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "desc->views[1]: elements [40, 40 + 11) fall outside slot \"y\"");
  size_t zero[2] = {0, 1};
  f.counts = zero;
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "desc->counts[0] is 0");
  tpg_view badv[1] = {{7, 0, 0}};
  f = e;
  f.views = badv;
  f.counts = NULL;
  f.nviews = 1;
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT,
           "desc->views[0].slot is 7: not a slot of this plan");
  badv[0] = (tpg_view){x, 0, 100}; /* offset at the end: nothing left */
  CHECK_ST(tpg_plan_add_captured(p, &f, NULL, 0, &out), TPG_ERROR_INVALID_ARGUMENT, "fall outside slot \"x\"");
  CHECK(out == 0);
  CHECK(nodes_of(p) == before);
  /* No views: work that reads nothing of the plan. */
  f = e;
  f.views = NULL;
  f.counts = NULL;
  f.nviews = 0;
  CHECK_OK(tpg_plan_add_captured(p, &f, NULL, 0, NULL));

  /* Host and event nodes. */
  tpg_node hn = 0, rn = 0, wn = 0;
  CHECK_ST(tpg_plan_add_host(p, NULL, NULL, NULL, 0, &hn), TPG_ERROR_INVALID_ARGUMENT, "fn is NULL");
  CHECK_OK(tpg_plan_add_host(p, dummy_host, p, &c, 1, &hn));
  CHECK_ST(tpg_plan_add_event_record(p, NULL, NULL, 0, &rn), TPG_ERROR_INVALID_ARGUMENT, "event is NULL");
  CHECK_ST(tpg_plan_add_event_wait(p, NULL, NULL, 0, &wn), TPG_ERROR_INVALID_ARGUMENT, "event is NULL");
  tpg_event ev = (tpg_event)0x1000; /* the plan keeps the handle only */
  CHECK_OK(tpg_plan_add_event_record(p, ev, &hn, 1, &rn));
  CHECK_OK(tpg_plan_add_event_wait(p, ev, NULL, 0, &wn));
  /* out may be one of the deps ("prev = add(prev)"): read first, written last. */
  tpg_node prev = wn, was = wn;
  CHECK_OK(tpg_plan_add_host(p, dummy_host, NULL, &prev, 1, &prev));
  CHECK(prev != 0 && prev != was);
  was = prev;
  CHECK_OK(tpg_plan_add_captured(p, &e, &prev, 1, &prev));
  CHECK(prev != 0 && prev != was);
  tpg_node foreign = ((uint64_t)0xffff << 32) | 1;
  CHECK_ST(tpg_plan_add_event_wait(p, ev, &foreign, 1, &wn), TPG_ERROR_INVALID_ARGUMENT, "deps[0]");
  CHECK(wn == 0);
  CHECK_OK(tpg_plan_dot(p, dot, sizeof dot, &need));
  CHECK(strstr(dot, "host#") != NULL && strstr(dot, "event_record#") != NULL && strstr(dot, "event_wait#") != NULL);
  CHECK_OK(tpg_plan_validate(p));
  /* Without a driver a graph cannot be made, and the refusal says why. */
  tpg_graph_config cfg = TPG_GRAPH_CONFIG_INIT;
  tpg_binding b[2] = {{x, (void *)0x10000}, {y, (void *)0x20000}};
  cfg.bindings = b;
  cfg.nbindings = 2;
  tpg_graph *g = (tpg_graph *)1;
  tpg_status st = tpg_graph_create(p, &cfg, &g);
  CHECK(st != TPG_SUCCESS && g == NULL);
  tpg_plan_destroy(p);
}

int main(void) {
  test_check();
  test_plan_kernel();
  test_plan_captured();
  test_module();
  test_layout_known();
  test_layout_natural();
  return TPG_TEST_END();
}
