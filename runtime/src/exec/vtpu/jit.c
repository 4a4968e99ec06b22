/* exec/vtpu/jit.c - native kernels for hot elementwise programs.
 *
 * The tile engine (elementwise.c) runs a program one instruction at a time
 * over tile buffers: every value of a fused region goes through L1 once per
 * instruction. For a program that keeps running (a Fused Eager region of a
 * training step, an optimizer update, a GEMM epilogue), this file writes
 * the whole instruction list as one C function over vectors of the lanes
 * tpux__vmath_f32 uses (16 on AVX-512, 8 on AVX2), compiles it with the
 * system C compiler into a shared object and binds it to the program, so
 * every value of a tile stays in registers: loads at the top of a vector
 * step, stores at the bottom.
 *
 * Same results, bit for bit: the expressions are those of the tile
 * kernels (+ - * / sqrt and comparisons are IEEE-exact per lane; max/min
 * keep the engine's NaN rule; bf16 rounding is xk_round_bf16's integer
 * recipe), contraction is off (-ffp-contract=off, as the runtime's own
 * -std=c17 build), and transcendentals call the very vector functions
 * tpux__vmath_f32 uses (passed in as pointers; lanes are independent, so a
 * zero-padded tail vector matches too). The vTPU's own kernels
 * (exec/vtpu/vkern.h: exp at 16 lanes, sin, tanh, erf at 16 and 8) are not
 * called but inlined: the kernel source embeds vkern.h's text and links
 * SLEEF for the lanes those fall back on.
 *
 * Covered: float-class programs (f32, bf16; f16 rounding is not covered) of
 * + - * / max min neg abs sqrt rsqrt, SLEEF's functions, comparisons,
 * selects, converts between float classes and bool, and not/and/or/xor of
 * bools; loads of float-class or bool arrays; at least two instructions.
 * Anything else keeps the tile engine.
 *
 * When: a program signature (its instructions, buffers, loads and stores)
 * is compiled once it has been built TORCH_TPU_VTPU_JIT_HOT times (default
 * 3), on a background thread (the program runs on the tile engine until
 * the kernel is ready; results do not change when it switches). Kernels
 * are kept as k<hash>.so under $TORCH_TPU_COMPILATION_CACHE_DIR/vtpu_jit
 * (default ~/.cache/torch_tpu/vtpu_jit; each embeds its signature, checked
 * at load), so a second process binds them without compiling.
 * TORCH_TPU_VTPU_JIT=0 turns this off, =sync compiles on the calling
 * thread (tests). Compiler: $CC (first word) or cc; none, or a failed
 * compile, leaves the program on the tile engine (counted in
 * tpux_jit_get_stats, the compiler's message kept in k<hash>.err). Each
 * kernel's source stays beside it (k<hash>.c).
 *
 * State: one table of signatures and a compile queue behind a mutex (also
 * held across fork, whose child drops in-flight compiles).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/vtpu/internal.h"

extern char **environ;

#define JIT_VERSION 13
#define JIT_SIG_MAX 2048 /* int16 words */

enum { J_COUNT, J_QUEUED, J_BUSY, J_READY, J_FAILED };

typedef struct jent {
  uint64_t h;
  int32_t len;          /* signature words */
  int16_t *sig;         /* owned */
  char *src;            /* generated source while queued (owned) */
  int vk;               /* src embeds vkern.h (links SLEEF) */
  int state, seen;
  xk_jit_fn fn;
  struct jent *next;    /* hash chain */
  struct jent *qnext;   /* compile queue */
} jent;

#define JIT_BUCKETS 1024
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv, idle;
  jent *tab[JIT_BUCKETS];
  jent *qhead, *qtail;
  int thread_on, busy;
  _Atomic int mode; /* read unlocked by tpux__jit_bind */
  int hot, width;
  void (*fns[TPUIR_NUM_OPS])(void);
  const char *vk[TPUIR_NUM_OPS]; /* the vkern.h kernel inlined for an op */
  tpux_jit_stats st;
} J = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER,
       .idle = PTHREAD_COND_INITIALIZER};
static pthread_once_t j_once = PTHREAD_ONCE_INIT;

static void at_prepare(void) { pthread_mutex_lock(&J.mu); }
static void at_parent(void) { pthread_mutex_unlock(&J.mu); }
static void at_child(void) {
  /* the compile thread does not exist here: queued and in-flight
   * signatures start counting again */
  for (int b = 0; b < JIT_BUCKETS; b++)
    for (jent *e = J.tab[b]; e; e = e->next)
      if (e->state == J_QUEUED || e->state == J_BUSY) e->state = J_COUNT, e->seen = 0;
  J.qhead = J.qtail = NULL;
  J.thread_on = J.busy = 0;
  pthread_mutex_unlock(&J.mu);
}

static void j_init(void) {
  const char *m = getenv("TORCH_TPU_VTPU_JIT");
  J.mode = !m || !*m ? 1 : !strcmp(m, "sync") ? 2 : atoi(m) ? 1 : 0;
  const char *h = getenv("TORCH_TPU_VTPU_JIT_HOT");
  J.hot = h && atoi(h) > 0 ? atoi(h) : 3;
  J.width = tpux__vmath_width();
  if (J.width != 16 && J.width != 8) J.mode = 0; /* SSE2-only host */
  for (int op = 0; op < TPUIR_NUM_OPS; op++) {
    J.fns[op] = tpux__vmath_f32_vec(op, J.width);
    J.vk[op] = tpux__vmath_f32_src(op, J.width);
  }
  pthread_atfork(at_prepare, at_parent, at_child);
}

/* ---- signatures ----------------------------------------------------------- */

/* kinds of values in a kernel: float vector, bool mask */
enum { VK_F = 1, VK_M = 2 };

static int load_kind(int dt) {
  if (xk_cls(dt) == XK_F32) return VK_F;
  return dt == TPU_BOOL ? VK_M : 0;
}

/* The kind an instruction produces from operands of the kinds given, 0 if
 * the kernel writer does not cover it. */
static int ins_kind(const xk_ins *in, int ka, int kb, int kc) {
  int fin = xk_cls(in->in_dt) == XK_F32, fout = xk_cls(in->dt) == XK_F32;
  int bout = in->dt == TPU_BOOL;
  if (in->op < 0 || in->op >= TPUIR_NUM_OPS) return 0; /* XK_OP_COPY */
  if (in->norm && fout && in->dt != TPU_BF16 && in->dt != TPU_F32) return 0; /* f16 */
  switch (in->op) {
  case TPUIR_ADD: case TPUIR_SUB: case TPUIR_MUL: case TPUIR_DIV:
  case TPUIR_MAX: case TPUIR_MIN:
    return fin && fout && ka == VK_F && kb == VK_F ? VK_F : 0;
  case TPUIR_NEG: case TPUIR_ABS: case TPUIR_SQRT: case TPUIR_RSQRT:
    return fin && fout && ka == VK_F ? VK_F : 0;
  case TPUIR_EQ: case TPUIR_NE: case TPUIR_LT: case TPUIR_LE: case TPUIR_GT: case TPUIR_GE:
    return fin && bout && ka == VK_F && kb == VK_F ? VK_M : 0;
  case TPUIR_SELECT:
    return fin && fout && ka == VK_M && kb == VK_F && kc == VK_F ? VK_F : 0;
  case TPUIR_CONVERT:
    if (fout && ka == VK_F && fin) return VK_F;
    if (fout && ka == VK_M && in->in_dt == TPU_BOOL) return VK_F;
    if (bout && ka == VK_F && fin) return VK_M;
    if (bout && ka == VK_M && in->in_dt == TPU_BOOL) return VK_M;
    return 0;
  case TPUIR_NOT:
    return bout && in->in_dt == TPU_BOOL && ka == VK_M ? VK_M : 0;
  case TPUIR_AND: case TPUIR_OR: case TPUIR_XOR:
    return bout && in->in_dt == TPU_BOOL && ka == VK_M && kb == VK_M ? VK_M : 0;
  default:
    if (!fin || !fout || !J.fns[in->op]) return 0;
    if (in->b >= 0) return ka == VK_F && kb == VK_F ? VK_F : 0; /* pow, atan2 */
    return ka == VK_F ? VK_F : 0;
  }
}

/* The signature of p (what its kernel depends on), or 0 words when p is not
 * covered. kind[] receives each value's kind: loads 0..nload-1, then
 * instructions. */
static int32_t signature(const xk_prog *p, int16_t *sig, int8_t *kind) {
  int32_t n = 0;
  int8_t cur[XK_MAX_BUF];
  if (p->nins < 2) return 0;
  sig[n++] = JIT_VERSION;
  sig[n++] = (int16_t)J.width;
  sig[n++] = (int16_t)p->nload;
  for (int k = 0; k < p->nload; k++) {
    int kd = load_kind(p->sp.arr[p->load[k].arr].dt);
    if (!kd) return 0;
    kind[k] = (int8_t)kd;
    cur[p->load[k].buf] = (int8_t)kd;
    sig[n++] = p->load[k].buf;
    sig[n++] = (int16_t)(kd | p->load_const[k] << 4 | xk_load_bytes(p, k) << 5);
  }
  sig[n++] = (int16_t)p->nins;
  for (int j = 0; j < p->nins; j++) {
    const xk_ins *in = &p->ins[j];
    int kd = ins_kind(in, in->a >= 0 ? cur[in->a] : 0, in->b >= 0 ? cur[in->b] : 0,
                      in->c >= 0 ? cur[in->c] : 0);
    if (!kd) return 0;
    kind[p->nload + j] = (int8_t)kd;
    cur[in->r] = (int8_t)kd;
    int16_t w[8] = {in->op, in->dt, in->in_dt, in->r, in->a, in->b, in->c, in->norm};
    memcpy(sig + n, w, sizeof w);
    n += 8;
  }
  sig[n++] = (int16_t)p->nstore;
  for (int k = 0; k < p->nstore; k++) {
    if (p->store_prod[k] < 0) return 0;
    sig[n++] = p->store[k].buf;
  }
  return n;
}

static uint64_t sig_hash(const int16_t *sig, int32_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  const unsigned char *b = (const unsigned char *)sig;
  for (size_t i = 0; i < (size_t)n * 2; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* ---- the kernel writer ------------------------------------------------------ */

typedef struct sbuf {
  char *s;
  size_t len, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (b->s && b->len + (size_t)k < b->cap) {
      b->len += (size_t)k;
      return;
    }
    size_t cap = (b->cap + (size_t)k + 1) * 2;
    char *ns = realloc(b->s, cap);
    if (!ns) return; /* the source is incomplete: the compile fails, counted */
    b->s = ns, b->cap = cap;
  }
}

static const char *binop(int op) {
  switch (op) {
  case TPUIR_ADD: return "+";
  case TPUIR_SUB: return "-";
  case TPUIR_MUL: return "*";
  case TPUIR_DIV: return "/";
  case TPUIR_EQ: return "==";
  case TPUIR_NE: return "!=";
  case TPUIR_LT: return "<";
  case TPUIR_LE: return "<=";
  case TPUIR_GT: return ">";
  case TPUIR_GE: return ">=";
  case TPUIR_AND: return "&";
  case TPUIR_OR: return "|";
  case TPUIR_XOR: return "^";
  default: return NULL;
  }
}

/* One vector step `name` over U vectors of W lanes from element i: every
 * load, each instruction for the U vectors in turn, every store. Value v of
 * vector u is v<v>_<u> (a broadcast scalar load: the same in each). */
static void emit_step(sbuf *b, const xk_prog *p, const int8_t *kind, int U, const char *name) {
  put(b, "static inline __attribute__((always_inline)) void %s(void *const *in, "
         "void *const *out, const any_fn *fns, const float *cf, const long long *cm, "
         "int64_t i) {\n  (void)fns, (void)cf, (void)cm;\n", name);
  int16_t cur[XK_MAX_BUF]; /* the value a buffer holds */
  for (int k = 0; k < p->nload; k++) {
    int cst = p->load_const[k];
    for (int u = 0; u < U; u++) {
      if (kind[k] == VK_F)
        put(b, cst ? "  vf v%d_%d = bcf(cf[%d]);\n"
                   : "  vf v%d_%d = *(const vfu *)((const float *)in[%d] + i + %d * W);\n",
            k, u, k, u);
      else if (xk_load_bytes(p, k)) /* the bool bytes themselves */
        put(b, "  vi v%d_%d = ldm((const unsigned char *)in[%d] + i + %d * W);\n", k, u, k, u);
      else
        put(b, cst ? "  vi v%d_%d = bcm(cm[%d]);\n"
                   : "  vi v%d_%d = __builtin_convertvector(*(const vlu *)((const long long *)"
                     "in[%d] + i + %d * W) != 0, vi);\n", k, u, k, u);
    }
    cur[p->load[k].buf] = (int16_t)k;
  }
  for (int j = 0; j < p->nins; j++) {
    const xk_ins *in = &p->ins[j];
    int v = p->nload + j, a = in->a >= 0 ? cur[in->a] : -1;
    int bb = in->b >= 0 ? cur[in->b] : -1, c = in->c >= 0 ? cur[in->c] : -1;
    const char *ty = kind[v] == VK_F ? "vf" : "vi", *bo = binop(in->op);
    for (int u = 0; u < U; u++) {
      char A[32], B[32], C[32];
      snprintf(A, sizeof A, "v%d_%d", a, u);
      snprintf(B, sizeof B, "v%d_%d", bb, u);
      snprintf(C, sizeof C, "v%d_%d", c, u);
      put(b, "  %s v%d_%d = ", ty, v, u);
      switch (in->op) {
      case TPUIR_MAX: put(b, "sel((%s > %s) | (%s != %s), %s, %s)", A, B, A, A, A, B); break;
      case TPUIR_MIN: put(b, "sel((%s < %s) | (%s != %s), %s, %s)", A, B, A, A, A, B); break;
      case TPUIR_NEG: put(b, "-%s", A); break;
      case TPUIR_ABS: put(b, "(vf)((vi)%s & 0x7fffffff)", A); break;
      case TPUIR_SQRT: put(b, "vsqrt(%s)", A); break;
      case TPUIR_RSQRT: put(b, "bcf(1.0f) / vsqrt(%s)", A); break;
      case TPUIR_SELECT: put(b, "sel(%s, %s, %s)", A, B, C); break;
      case TPUIR_NOT: put(b, "~%s", A); break;
      case TPUIR_CONVERT:
        if (kind[v] == kind[a]) put(b, "%s", A);
        else if (kind[v] == VK_F) put(b, "sel(%s, bcf(1.0f), bcf(0.0f))", A);
        else put(b, "%s != bcf(0.0f)", A);
        break;
      default:
        if (bo) put(b, "%s %s %s", A, bo, B);
        else if (in->b >= 0) put(b, "((bin_fn)fns[%d])(%s, %s)", in->op, A, B);
        else if (J.vk[in->op])
          put(b, "(vf)%s((%s)%s)", J.vk[in->op], J.width == 16 ? "__m512" : "__m256", A);
        else put(b, "((un_fn)fns[%d])(%s)", in->op, A);
        break;
      }
      put(b, ";\n");
      if (in->norm && in->dt == TPU_BF16) put(b, "  v%d_%d = rbf(v%d_%d);\n", v, u, v, u);
    }
    cur[in->r] = (int16_t)v;
  }
  for (int k = 0; k < p->nstore; k++) {
    int v = p->nload + p->store_prod[k]; /* the buffer's last writer */
    for (int u = 0; u < U; u++) {
      if (kind[v] == VK_F)
        put(b, "  *(vfu *)((float *)out[%d] + i + %d * W) = v%d_%d;\n", k, u, v, u);
      else
        put(b, "  *(vlu *)((long long *)out[%d] + i + %d * W) = "
               "__builtin_convertvector(v%d_%d, vl) & 1;\n", k, u, v, u);
    }
  }
  put(b, "}\n\n");
}

/* exec/vtpu/vkern.h's text (build/.../vkern.inc, made by the Makefile) */
static const char VKERN_SRC[] =
#include "vkern.inc"
    ;

/* C source of p's kernel (caller frees), NULL when out of memory; *vk:
 * whether it embeds vkern.h. */
static char *write_kernel(const xk_prog *p, const int8_t *kind, const int16_t *sig,
                          int32_t nsig, int *vk) {
  sbuf b = {0};
  int W = J.width;
  int calls = 0; /* transcendentals (called or inlined) */
  *vk = 0;
  for (int j = 0; j < p->nins; j++) {
    calls |= J.fns[p->ins[j].op] != NULL;
    *vk |= J.vk[p->ins[j].op] != NULL;
  }
  put(&b, "/* torch_tpu vTPU native kernel (exec/vtpu/jit.c) */\n"
          "#include <stdint.h>\n#include <string.h>\n%s"
          "#define W %d\n"
          "typedef float vf __attribute__((vector_size(W * 4)));\n"
          "typedef int vi __attribute__((vector_size(W * 4)));\n"
          "typedef unsigned vu __attribute__((vector_size(W * 4)));\n"
          "typedef long long vl __attribute__((vector_size(W * 8)));\n"
          "typedef float vfu __attribute__((vector_size(W * 4), aligned(4)));\n"
          "typedef long long vlu __attribute__((vector_size(W * 8), aligned(8)));\n"
          "typedef char vc16 __attribute__((vector_size(16)));\n"
          "typedef long long v2ll __attribute__((vector_size(16)));\n"
          "typedef vf (*un_fn)(vf);\ntypedef vf (*bin_fn)(vf, vf);\n"
          "typedef void (*any_fn)(void);\n"
          "static inline vf bcf(float s) { vf v; for (int j = 0; j < W; j++) v[j] = s; return v; }\n"
          "static inline vi bcm(long long s) { vi v; for (int j = 0; j < W; j++) v[j] = s ? -1 : 0; return v; }\n"
          "static inline vf sel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }\n"
          /* W bool bytes to a mask (vpmovzxbd: the generic conversion
           * is a byte at a time) */
          "static inline vi ldm(const unsigned char *p) {\n"
          "#if W == 16\n"
          "  vc16 b; memcpy(&b, p, 16);\n"
          "  return __builtin_ia32_pmovzxbd512_mask(b, (vi){0}, (unsigned short)-1) != 0;\n"
          "#else\n"
          "  long long x; memcpy(&x, p, 8);\n"
          "  return (vi)__builtin_ia32_pmovzxbd256((vc16)(v2ll){x, 0}) != 0;\n"
          "#endif\n}\n"
          /* the instruction itself: <immintrin.h> (vkern.h's) only where
           * needed, parsing it is most of a compile (0.1 -> 0.34 s) */
          "static inline vf vsqrt(vf x) { vf r; __asm__(\"vsqrtps %%1, %%0\" : \"=v\"(r) : \"v\"(x)); return r; }\n"
          "static inline vf rbf(vf f) {\n"
          "  vu u = (vu)f, r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;\n"
          "  vu q = (u | 0x00400000u) & 0xffff0000u;\n"
          "  vi nan = (vi)((u & 0x7fffffffu) > 0x7f800000u);\n"
          "  return (vf)(((vi)q & nan) | ((vi)r & ~nan));\n}\n",
      *vk ? VKERN_SRC : "", W);
  /* the vector steps: U independent vectors (transcendentals are long
   * dependency chains; interleaved vectors keep the core busy) and one */
  int U = calls ? 4 : 2;
  emit_step(&b, p, kind, U, "blkU");
  emit_step(&b, p, kind, 1, "blk1");
  put(&b, "void tpu_jit_kernel(int64_t n, void *const *in, void *const *out, "
          "const any_fn *fns);\n"
          "void tpu_jit_kernel(int64_t n, void *const *in, void *const *out, "
          "const any_fn *fns) {\n"
          "  int64_t i = 0;\n");
  /* broadcast scalars read once, into locals: read through in[] inside the
   * loop they would be reloaded every step (a store through out[] may
   * alias them as far as the compiler knows) */
  put(&b, "  float cf[%d];\n  long long cm[%d];\n", p->nload, p->nload);
  for (int k = 0; k < p->nload; k++)
    if (p->load_const[k])
      put(&b, kind[k] == VK_F ? "  cf[%d] = *(const float *)in[%d];\n"
                              : "  cm[%d] = *(const long long *)in[%d];\n", k, k);
  put(&b, "  for (; i + %d * W <= n; i += %d * W) blkU(in, out, fns, cf, cm, i);\n"
          "  for (; i + W <= n; i += W) blk1(in, out, fns, cf, cm, i);\n"
          "  if (i == n) return;\n  size_t m = (size_t)(n - i);\n", U, U);
  /* the tail: one zero-padded vector step through local copies */
  put(&b, "  void *tin[%d], *tout[%d];\n", p->nload + 1, p->nstore + 1);
  for (int k = 0; k < p->nload; k++) {
    if (p->load_const[k]) continue; /* read from cf / cm */
    const char *t = kind[k] == VK_F ? "float" : xk_load_bytes(p, k) ? "unsigned char" : "long long";
    put(&b, "  %s x%d[W] = {0};\n  memcpy(x%d, (const %s *)in[%d] + i, m * sizeof(%s));\n"
            "  tin[%d] = x%d;\n", t, k, k, t, k, t, k, k);
  }
  for (int k = 0; k < p->nstore; k++) {
    int v = p->nload + p->store_prod[k];
    put(&b, "  %s y%d[W];\n  tout[%d] = y%d;\n", kind[v] == VK_F ? "float" : "long long", k, k, k);
  }
  put(&b, "  blk1(tin, tout, fns, cf, cm, 0);\n");
  for (int k = 0; k < p->nstore; k++) {
    int v = p->nload + p->store_prod[k];
    const char *t = kind[v] == VK_F ? "float" : "long long";
    put(&b, "  memcpy((%s *)out[%d] + i, y%d, m * sizeof(%s));\n", t, k, k, t);
  }
  put(&b, "}\n\nconst int tpu_jit_sig_len = %d;\nconst short tpu_jit_sig[] = {", (int)nsig);
  for (int32_t k = 0; k < nsig; k++) put(&b, "%s%d", !k ? "\n  " : k % 16 ? ", " : ",\n  ", sig[k]);
  put(&b, "};\n");
  return b.s;
}

/* ---- compiling and loading ---------------------------------------------------- */

static void cache_dir(char *buf, size_t cap) {
  const char *d = getenv("TORCH_TPU_COMPILATION_CACHE_DIR");
  if (d && *d) {
    snprintf(buf, cap, "%s/vtpu_jit", d);
  } else {
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (x && *x) snprintf(buf, cap, "%s/torch_tpu/vtpu_jit", x);
    else snprintf(buf, cap, "%s/.cache/torch_tpu/vtpu_jit", home && *home ? home : "/tmp");
  }
}

static void mkdirs(const char *dir) {
  char t[1024];
  snprintf(t, sizeof t, "%s", dir);
  for (char *s = t + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(t, 0777);
      *s = '/';
    }
  mkdir(t, 0777);
}

/* dlopen a kernel and check it is the one for sig; NULL if not. */
static xk_jit_fn load_so(const char *path, const int16_t *sig, int32_t n) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return NULL;
  const int *len = dlsym(h, "tpu_jit_sig_len");
  const int16_t *s = dlsym(h, "tpu_jit_sig");
  void *fn = dlsym(h, "tpu_jit_kernel");
  if (!len || !s || !fn || *len != n || memcmp(s, sig, (size_t)n * 2)) {
    dlclose(h);
    return NULL;
  }
  xk_jit_fn f;
  memcpy(&f, &fn, sizeof f); /* kept loaded for the life of the process */
  return f;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Compile e's source into the cache directory and load it; NULL on any
 * failure (the compiler's output stays in k<hash>.err). Called without
 * the lock. */
static xk_jit_fn compile(const jent *e, double *secs) {
  char dir[900], so[1024], c[1024], tmp[1024], err[1024];
  cache_dir(dir, sizeof dir);
  mkdirs(dir);
  snprintf(so, sizeof so, "%s/k%016llx.so", dir, (unsigned long long)e->h);
  snprintf(err, sizeof err, "%s/k%016llx.err", dir, (unsigned long long)e->h);
  snprintf(c, sizeof c, "%s/k%016llx-%d.c", dir, (unsigned long long)e->h, (int)getpid());
  snprintf(tmp, sizeof tmp, "%s/k%016llx-%d.so", dir, (unsigned long long)e->h, (int)getpid());
  FILE *f = fopen(c, "w");
  if (!f) return NULL;
  int ok = fputs(e->src, f) >= 0;
  ok &= fclose(f) == 0;
  char cc[256] = "cc";
  const char *env_cc = getenv("CC");
  if (env_cc && *env_cc) sscanf(env_cc, "%255s", cc);
  /* exactly the extensions the width was picked by (tpux__vmath_width) */
  char *argv[] = {cc, "-std=c17", "-O2", "-fPIC", "-shared", "-ffp-contract=off",
                  "-mavx2", "-mfma", J.width == 16 ? "-mavx512f" : "-mno-avx512f",
                  c, "-o", tmp, e->vk ? "-l:libsleef.so.3" : NULL, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, err, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  double t0 = now_s();
  int st = 1;
  if (ok && posix_spawnp(&pid, cc, &fa, NULL, argv, environ) == 0)
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  posix_spawn_file_actions_destroy(&fa);
  xk_jit_fn fn = NULL;
  if (ok && WIFEXITED(st) && WEXITSTATUS(st) == 0 && rename(tmp, so) == 0) {
    unlink(err);
    fn = load_so(so, e->sig, e->len);
  }
  char keep[1024]; /* the source stays beside its kernel (or the error) */
  snprintf(keep, sizeof keep, "%s/k%016llx.c", dir, (unsigned long long)e->h);
  rename(c, keep);
  unlink(tmp);
  *secs = now_s() - t0;
  return fn;
}

/* Record a compile's outcome (lock held). */
static void settle(jent *e, xk_jit_fn fn, double secs) {
  J.st.compile_seconds += secs;
  e->fn = fn;
  e->state = fn ? J_READY : J_FAILED;
  if (fn) J.st.compiles++;
  else J.st.failures++;
  free(e->src);
  e->src = NULL;
}

static void *compile_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&J.mu);
  for (;;) {
    while (!J.qhead) {
      J.busy = 0;
      pthread_cond_broadcast(&J.idle);
      pthread_cond_wait(&J.cv, &J.mu);
    }
    J.busy = 1;
    jent *e = J.qhead;
    J.qhead = e->qnext;
    if (!J.qhead) J.qtail = NULL;
    e->state = J_BUSY;
    pthread_mutex_unlock(&J.mu);
    double secs = 0;
    xk_jit_fn fn = compile(e, &secs);
    pthread_mutex_lock(&J.mu);
    if (e->state == J_BUSY) settle(e, fn, secs); /* else dropped by a fork */
  }
  return NULL;
}

/* ---- binding ------------------------------------------------------------------ */

/* Queue e for the compile thread, started on first use (lock held). */
static void enqueue(jent *e) {
  e->state = J_QUEUED;
  e->qnext = NULL;
  if (J.qtail) J.qtail->qnext = e;
  else J.qhead = e;
  J.qtail = e;
  J.busy = 1;
  if (!J.thread_on) {
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    J.thread_on = pthread_create(&t, &at, compile_thread, NULL) == 0;
    pthread_attr_destroy(&at);
    if (!J.thread_on) { /* no thread: stay on the engine */
      J.mode = 0;
      J.busy = 0;
    }
  }
  pthread_cond_signal(&J.cv);
}

/* e's signature just became hot: its kernel from the cache directory, or
 * compiled (now in sync mode, else queued). Lock held. */
static void make_hot(jent *e, const xk_prog *p, const int8_t *kind) {
  char dir[900], so[1024];
  cache_dir(dir, sizeof dir);
  snprintf(so, sizeof so, "%s/k%016llx.so", dir, (unsigned long long)e->h);
  xk_jit_fn fn = access(so, R_OK) == 0 ? load_so(so, e->sig, e->len) : NULL;
  if (fn) {
    e->fn = fn;
    e->state = J_READY;
    J.st.disk_loads++;
    return;
  }
  free(e->src); /* a source left by a fork's reset */
  e->src = write_kernel(p, kind, e->sig, e->len, &e->vk);
  if (!e->src) {
    e->state = J_FAILED;
    J.st.failures++;
  } else if (J.mode == 2) { /* sync: compile here, other binds wait */
    double secs = 0;
    e->state = J_BUSY;
    fn = compile(e, &secs);
    settle(e, fn, secs);
  } else {
    enqueue(e);
  }
}

/* See exec/vtpu/internal.h. */
xk_jit_fn tpux__jit_bind(const xk_prog *p) {
  pthread_once(&j_once, j_init);
  if (!J.mode) return NULL;
  int16_t sig[JIT_SIG_MAX];
  int8_t kind[XK_MAX_ARR + XK_MAX_INS];
  int32_t n = signature(p, sig, kind);
  if (!n) return NULL;
  uint64_t h = sig_hash(sig, n);
  pthread_mutex_lock(&J.mu);
  jent *e = J.tab[h % JIT_BUCKETS];
  while (e && (e->h != h || e->len != n || memcmp(e->sig, sig, (size_t)n * 2))) e = e->next;
  if (!e) {
    e = calloc(1, sizeof *e);
    int16_t *s = malloc((size_t)n * 2);
    if (!e || !s) {
      free(e);
      free(s);
      pthread_mutex_unlock(&J.mu);
      return NULL;
    }
    memcpy(s, sig, (size_t)n * 2);
    *e = (jent){.h = h, .len = n, .sig = s, .state = J_COUNT, .next = J.tab[h % JIT_BUCKETS]};
    J.tab[h % JIT_BUCKETS] = e;
  }
  if (e->state == J_COUNT && ++e->seen >= J.hot) make_hot(e, p, kind);
  xk_jit_fn fn = e->fn;
  if (fn) J.st.bound++;
  pthread_mutex_unlock(&J.mu);
  return fn;
}

/* See exec/vtpu/internal.h. */
void (*const *tpux__jit_fns(void))(void) { return J.fns; }

/* See tpu_exec.h. */
int tpux_jit_configure(int mode, int hot) {
  pthread_once(&j_once, j_init);
  pthread_mutex_lock(&J.mu);
  int old = J.mode;
  if (J.width == 16 || J.width == 8) J.mode = mode;
  if (hot > 0) J.hot = hot;
  pthread_mutex_unlock(&J.mu);
  return old;
}

/* See tpu_exec.h. */
void tpux_jit_get_stats(tpux_jit_stats *out) {
  pthread_once(&j_once, j_init);
  pthread_mutex_lock(&J.mu);
  *out = J.st;
  out->pending = 0;
  for (int b = 0; b < JIT_BUCKETS; b++)
    for (jent *e = J.tab[b]; e; e = e->next)
      out->pending += e->state == J_QUEUED || e->state == J_BUSY;
  pthread_mutex_unlock(&J.mu);
}

/* See tpu_exec.h. */
void tpux_jit_wait(void) {
  pthread_once(&j_once, j_init);
  pthread_mutex_lock(&J.mu);
  while (J.thread_on && (J.qhead || J.busy)) pthread_cond_wait(&J.idle, &J.mu);
  pthread_mutex_unlock(&J.mu);
}
