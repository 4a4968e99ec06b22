/* exec/vtpu/internal.h - private interfaces of the vTPU executor (exec/vtpu/).
 *
 * Values are strided views (tpu_view). Elementwise work runs as a small
 * "program" over tiles of XK_TILE elements: operands are gathered into
 * compute-class buffers (float for f16/bf16/f32, double for f64, int64 for
 * ints and bool), instructions run on whole buffers, results are scattered
 * to the destination with the final dtype conversion.
 */
#ifndef TPU_EXEC_INTERNAL_H
#define TPU_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "tpu_exec.h"
#include "tpu_ir.h"
#include "tpu_rt.h"

/* ---- compute classes --------------------------------------------------- */
enum { XK_F32 = 0, XK_F64 = 1, XK_I64 = 2 };
/* Compute class of a dtype. */
static inline int xk_cls(int dt) {
  if (dt == TPU_F64) return XK_F64;
  if (dt == TPU_F16 || dt == TPU_BF16 || dt == TPU_F32) return XK_F32;
  return XK_I64;
}
/* The dtype stored natively by a class (no conversion on load/store). */
static inline int xk_native(int cls) {
  return cls == XK_F32 ? TPU_F32 : cls == XK_F64 ? TPU_F64 : TPU_I64;
}

#define XK_TILE 1024
#define XK_GRAIN 32768 /* elements per parallel chunk (at least) */

/* Element-wise loads/stores of n elements at p (stride in elements) between
 * dtype `dt` and its compute class buffer. */
void tpux__load(int dt, const char *p, int64_t stride, int64_t n, void *dst);
void tpux__store(int dt, char *p, int64_t stride, int64_t n, const void *src);

/* Float-class transcendental kernels through SLEEF (exec/vtpu/vmath.c): exp,
 * expm1, log, log1p, sin, cos, tan, tanh, asin, acos, atan, sinh, cosh,
 * asinh, acosh, atanh, erf, logistic (r = op(a)) and pow, atan2
 * (r = op(a, b)) over [0, n); r may equal a or b. Returns 1 if done, 0 if
 * the op is not covered (the caller uses the portable kernel). */
int tpux__vmath_f32(int op, int64_t n, float *r, const float *a, const float *b);
/* The same at a given vector width (16: AVX-512, 8: AVX2+FMA, 4: SSE2), for
 * tests and benchmarks of the narrower paths; returns 0 also when this CPU
 * lacks that width. */
int tpux__vmath_f32_width(int width, int op, int64_t n, float *r, const float *a,
                          const float *b);

/* Vector width (lanes) tpux__vmath_f32 and native kernels run at: 16, 8 or
 * 4, the CPU's widest unless TORCH_TPU_VTPU_VECTOR_WIDTH (8 or 4) narrows
 * it (read once). */
int tpux__vmath_width(void);
/* The vector function tpux__vmath_f32 applies per `width` lanes for op
 * (width 16: __m512 f(__m512) or, for pow/atan2, f(__m512, __m512); 8: the
 * __m256 ones), NULL when op is not covered or the CPU lacks the width. Lanes
 * are independent (a lane's result depends on that lane only), so native
 * kernels calling it match tpux__vmath_f32 bit for bit. Static functions. */
void (*tpux__vmath_f32_vec(int op, int width))(void);
/* The name of that function in exec/vtpu/vkern.h when it is one of that
 * file's kernels (native kernels embed vkern.h and inline it), else NULL.
 * Static string. */
const char *tpux__vmath_f32_src(int op, int width);
/* s[0, n) = exp(s - m) (tpux__vmath_f32's exp, the same bits), returning
 * their sum in one pass (a softmax row's numerator and denominator; summed
 * in the width's lanes, so the last bits of the sum depend on the width);
 * NaN for m = -inf with every s = -inf, as softmax. */
float tpux__vmath_exp_sum(float *s, int64_t n, float m);
/* The same at a given vector width (as tpux__vmath_f32_width); returns
 * NaN without touching s when this CPU lacks that width. */
float tpux__vmath_exp_sum_width(int width, float *s, int64_t n, float m);

/* Round a float to bf16 / f16 precision (RNE), as stored. */
static inline float xk_round_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  uint32_t q = (u | 0x00400000u) & 0xffff0000u;
  r = ((u & 0x7fffffffu) > 0x7f800000u) ? q : r;
  float o;
  memcpy(&o, &r, 4);
  return o;
}
static inline uint16_t xk_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t q = (u >> 16) | 0x40u;
  return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? q : r);
}
static inline float xk_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* float/double -> int64 with x86 semantics (out of range/NaN -> INT64_MIN). */
static inline int64_t xk_f2i64(double v) {
  return (v >= -9223372036854775808.0 && v < 9223372036854775808.0)
             ? (int64_t)v
             : INT64_MIN;
}
/* float/double -> int32 with x86 semantics (out of range/NaN -> INT32_MIN). */
static inline int64_t xk_f2i32(double v) {
  return (v > -2147483649.0 && v < 2147483648.0) ? (int64_t)(int32_t)v
                                                  : (int64_t)INT32_MIN;
}
/* Wrap an int64 to dtype dt's range (bool: != 0). */
static inline int64_t xk_wrap(int dt, int64_t v) {
  switch (dt) {
  case TPU_BOOL: return v != 0;
  case TPU_U8: return (uint8_t)v;
  case TPU_I8: return (int8_t)v;
  case TPU_I16: return (int16_t)v;
  case TPU_I32: return (int32_t)v;
  default: return v;
  }
}

/* ---- iteration space --------------------------------------------------- */
#define XK_MAX_ARR 96

typedef struct xk_arr {
  char *p;                     /* element (0,...,0) */
  int32_t dt;
  int32_t iota;                /* 1: no memory, a fused IOTA: the value of
                                  an element is io + its element offset */
  int64_t io;
  int64_t st[TPU_MAX_DIMS];    /* element strides */
} xk_arr;

typedef struct xk_space {
  int32_t nd;
  int64_t sz[TPU_MAX_DIMS];
  int32_t narr;
  xk_arr arr[XK_MAX_ARR];
} xk_space;

/* Initialise a space of the given shape (no arrays yet). */
void tpux__space_init(xk_space *s, int ndim, const int64_t *sizes);
/* Add a view (its sizes must equal the space's); returns the array index. */
int tpux__space_add(xk_space *s, const tpu_view *v);
/* Add the values of an IOTA of dtype dt along dim of the space's shape,
 * computed as they are loaded (never in memory); returns the array index. */
int tpux__space_add_iota(xk_space *s, int dt, int dim);
/* a's element offset off as the array of a window: x takes a's dtype and
 * kind and the address (or, for an IOTA, the value) of that element; the
 * caller sets x's strides. */
static inline void tpux__arr_at(xk_arr *x, const xk_arr *a, int64_t off) {
  x->dt = a->dt;
  x->iota = a->iota;
  if (a->iota) {
    x->p = NULL;
    x->io = a->io + off;
  } else {
    x->p = a->p + off * (int64_t)tpu_dtype_size(a->dt);
  }
}
/* Merge adjacent dims where every array allows it, drop size-1 dims. */
void tpux__space_coalesce(xk_space *s);
/* Reorder the dims of an elementwise space for memory order, then coalesce
 * (see elementwise.c); written[a]: array a is stored into. */
void tpux__space_order(xk_space *s, const char *written);
int64_t tpux__space_numel(const xk_space *s);

/* ---- elementwise programs --------------------------------------------- */
#define XK_MAX_INS 64
#define XK_MAX_BUF (XK_MAX_INS + XK_MAX_ARR)
/* limits of a fused elementwise region (leave room for stores) */
#define XK_REGION_MAX_NODES XK_MAX_INS
#define XK_REGION_MAX_INPUTS 15
/* one-element broadcast inputs (held in a buffer filled once per thread) */
#define XK_REGION_MAX_SCALARS 32
enum { XK_OP_COPY = TPUIR_NUM_OPS }; /* class conversion (CONVERT) */

typedef struct xk_ins {
  int16_t op;         /* tpuir_op (elementwise), TPUIR_CONVERT */
  int16_t dt;         /* result dtype */
  int16_t in_dt;      /* operand dtype (values of SELECT) */
  int16_t r, a, b, c; /* buffers (-1: unused) */
  int16_t norm;       /* round/wrap the result buffer to dt */
} xk_ins;

/* a float-class kernel over n elements: r = op(a, b, c) with s the value of
 * a broadcast scalar operand (see tpux__prog_finish) */
typedef void (*xk_fast_fn)(int64_t n, float *r, const void *a, const void *b,
                           const void *c, float s);

/* a native kernel of a whole program (exec/vtpu/jit.c): n elements, in[k]
 * load k's tile (a broadcast-scalar load: its value at [0]), out[k] store
 * k's destination (float or, for bool values, int64 0/1), fns: see
 * tpux__jit_fns */
typedef void (*xk_jit_fn)(int64_t n, void *const *in, void *const *out,
                          void (*const *fns)(void));

typedef struct xk_prog {
  xk_space sp;
  int32_t nload, nins, nstore, nbuf;
  struct { int16_t arr, buf; } load[XK_MAX_ARR], store[XK_MAX_ARR];
  xk_ins ins[XK_MAX_INS];
  int8_t bufcls[XK_MAX_BUF];
  int8_t direct_ok[XK_MAX_ARR]; /* store array may be written in place */
  /* ... by a native kernel (which reads a vector step's loads before it
   * writes its stores): the array overlaps no load but identical views */
  int8_t direct_jit[XK_MAX_ARR];
  int8_t load_const[XK_MAX_ARR]; /* all strides 0: filled once per thread */
  int8_t buf_const[XK_MAX_BUF];  /* the buffer of such a load (never reused) */
  /* set during tpux__prog_run only: a row-broadcast f32 load that the tile
   * engine's kernels read in place as a per-tile scalar (row mode) */
  int8_t load_row[XK_MAX_ARR];
  /* set by tpux__prog_finish: the scratch a run needs (scratch_bytes: the
   * tile buffers, float-class ones 4 bytes an element, at boff[], then the
   * run's instruction plan at moff, see tpux__prog_fill_consts), the
   * direct kernel of each instruction (NULL: generic dispatch) with its
   * operand buffers (fs: broadcast scalar operand, -1: none; a kernel may
   * also compute the previous instruction, see merged), each store's
   * producer */
  int32_t scratch_bytes, moff, pt; /* pt: elements per tile */
  int32_t boff[XK_MAX_BUF];
  xk_fast_fn fn[XK_MAX_INS];
  int16_t fa[XK_MAX_INS], fb[XK_MAX_INS], fc[XK_MAX_INS], fs[XK_MAX_INS];
  int16_t store_prod[XK_MAX_ARR];
  int8_t merged[XK_MAX_INS]; /* computed by the next instruction's kernel */
  xk_jit_fn jit; /* the whole program as one native kernel, or NULL */
  int32_t jit_soff; /* its stores' tiles (8 bytes an element, each pt long) */
  /* run-time error raised by a kernel (first wins) */
  _Atomic int err;
  int64_t err_val;
} xk_prog;

/* Whether p's native kernel reads load k as bytes: a bool load that is
 * not a broadcast scalar (a mask), read in place or gathered as bytes, not
 * widened to the tile engine's 8-byte class buffer. */
static inline int xk_load_bytes(const xk_prog *p, int k) {
  const xk_arr *a = &p->sp.arr[p->load[k].arr];
  return a->dt == TPU_BOOL && !a->iota && !p->load_const[k];
}

/* Complete a built program (buffer layout, direct kernels, store
 * producers): every builder calls it once, after the last field is set
 * and before the program first runs. */
void tpux__prog_finish(xk_prog *p);
/* The native kernel of p's signature (exec/vtpu/jit.c) when one is ready,
 * else NULL (the signature is counted, and compiled in the background once
 * hot; see jit.c for what is covered). Called by tpux__prog_finish once the
 * instructions, loads, stores and store producers are set. Thread-safe. */
xk_jit_fn tpux__jit_bind(const xk_prog *p);
/* The function table native kernels take (tpux__vmath_f32_vec per op at
 * the kernels' width; static). */
void (*const *tpux__jit_fns(void))(void);
/* Run a program over its space (parallel). Returns TPU_OK or an error
 * (message set on the calling thread). */
int tpux__prog_run(xk_prog *p);
/* Run a program on the calling thread only (no parallel_for) over space s:
 * p's arrays re-based/re-shaped (same array order; s is coalesced in
 * place). Errors are recorded in p->err (see tpux__prog_status). Used by
 * GEMM epilogues on pool workers. */
void tpux__prog_run_serial(xk_prog *p, xk_space *s);
/* The two halves of tpux__prog_run_serial, for callers that run a program
 * over many small windows with tile buffers of their own (fused
 * reductions): fill the buffers of p's broadcast-scalar loads (their
 * arrays taken from s) into scratch (p->scratch_bytes, once per scratch;
 * this also plans which instructions the run needs: a SELECT whose
 * predicate is such a scalar becomes a copy of the chosen operand, and
 * what only fed the other one is skipped; a program with a native kernel
 * gets element 0 of each and no plan), then run p serially over each
 * window s (arrays re-based and re-shaped as for tpux__prog_run_serial; s
 * is coalesced in place). Errors are recorded in p->err. */
void tpux__prog_fill_consts(const xk_prog *p, const xk_space *s, char *scratch);
void tpux__prog_run_window(xk_prog *p, xk_space *s, char *scratch);
/* TPU_OK, or the error recorded in p->err with its message set. */
int tpux__prog_status(xk_prog *p);
/* Run one elementwise instruction on class buffers (n elements). Returns
 * TPU_OK or an error code (TPU_E_INVALID for integer /0 and negative int
 * powers); *bad receives the offending value. */
int tpux__ew_apply(const xk_ins *in, int64_t n, void *r, const void *a,
                   const void *b, const void *c, int64_t *bad);
/* Special-function ops (TPUIR_SPECIAL_FIRST .. TPUIR_SPECIAL_LAST) on class
 * buffers: operands of dtype in_dt (float class for f16/bf16/f32, double,
 * int64 for GCD/LCM), n elements, result in the class of the node's
 * dtype (FREXP_EXP: int64). r may alias a. Defined in exec/vtpu/special.c. */
int tpux__special_apply(int op, int in_dt, int64_t n, void *r, const void *a,
                        const void *b);

/* ---- copies ------------------------------------------------------------ */
/* dst = convert(src) elementwise; views of equal sizes; no overlap check. */
int tpux__copy_nocheck(const tpu_view *dst, const tpu_view *src);
/* 1 if the memory spans of two views may overlap. */
int tpux__views_overlap(const tpu_view *a, const tpu_view *b);
/* 1 if identical element mapping (base, offset, dtype, sizes, strides). */
int tpux__views_same(const tpu_view *a, const tpu_view *b);
/* Fill a view with a value given as a one-element class buffer. */
int tpux__fill(const tpu_view *dst, const void *cls_val);

/* ---- executor context -------------------------------------------------- */
typedef struct xv {
  tpu_view v;   /* the value as a view */
  void *mem;    /* owned temporary (freed at last use), or NULL */
} xv;

typedef struct xctx {
  const tpuir_graph *g;
  xv *vals;
  const char *virt; /* the plan's virt (IOTA nodes regions compute as they
                       load them), or NULL; borrowed */
  const tpu_view *node_out; /* where node node_t (the step's node) writes
                               its value (a contiguous output of its shape
                               and dtype; NULL: a temporary) */
  int node_t;
} xctx;

/* Node t's value: the output c->node_out when t is c->node_t (see
 * tpux__writes_whole_value), else a new contiguous temporary, into
 * c->vals[t]. Write it through its view (base + offset), not vals[t].mem. */
int tpux__alloc_value(xctx *c, int t);
/* Element 0 of value t (its view's base + offset). */
static inline char *tpux__value_data(const xctx *c, int t) {
  const tpu_view *v = &c->vals[t].v;
  return (char *)v->base + v->offset * (int64_t)tpu_dtype_size(v->dtype);
}
/* Whether op's evaluation (not in a region) allocates its value with
 * tpux__alloc_value and writes all of it, reading its operands only, so
 * that it may be written straight into an output (exec/vtpu/plan.c). */
int tpux__writes_whole_value(int op);
/* Dot t's value: tpux__alloc_value, unless one is there already
 * (exec/vtpu/dot.c). */
int tpux__dot_value(xctx *c, int t);
/* CONVERT node t evaluated alone, its value in the operand's memory order
 * when the operand is dense (exec/vtpu/copy.c). */
int tpux__eval_convert(xctx *c, int t);
/* 64-byte aligned host allocation (never NULL for 0 bytes); release with
 * tpux__free (large blocks are cached for reuse across runs). */
void *tpux__alloc(size_t bytes);
void tpux__free(void *p);

/* Evaluate a fused elementwise region: members[0..n) (node ids in order,
 * all unary/binary/select/convert of one shape). Member k's value is
 * materialised when store[k] (into *dst[k] when non-NULL, else a new
 * temporary); other members live only in tile buffers. */
int tpux__eval_region(xctx *c, int n, const int32_t *members, const char *store,
                      const tpu_view *const *dst);

/* Build the program of a region without running it (same arguments as
 * tpux__eval_region; stored members get their memory now). Its space is the
 * region's shape, arrays in the order: loads, then stores. Caller frees
 * *out (free). */
int tpux__region_prog(xctx *c, int n, const int32_t *members, const char *store,
                      const tpu_view *const *dst, xk_prog **out);

/* ---- GEMM epilogues (exec/vtpu/epilogue.c) ---------------------------------- */
/* 1 unless epilogue fusion is disabled (env TORCH_TPU_NO_EPILOGUE=1, read
 * once, or tpux__set_epilogue(0)). */
int tpux__epilogue_enabled(void);
/* Override: 1 on, 0 off, -1 back to the environment. Process-wide; for
 * tests. */
void tpux__set_epilogue(int mode);
/* Number of dots whose GEMM ran a region in its epilogue so far. */
int64_t tpux__epilogue_runs(void);
/* DOT_GENERAL node t followed by the region members[0..n) (same arguments
 * as tpux__eval_region), which must read t's value only directly, have
 * t's shape and cannot fail: runs the region on each finished GEMM block
 * when possible, else right after the dot. */
int tpux__eval_dot_fused(xctx *c, int t, int n, const int32_t *members,
                         const char *store, const tpu_view *const *dst);
/* tpux__eval_dot with a GEMM epilogue (fn may be NULL); *applied = 1 when
 * fn ran on every block of the result, 0 when the dot took a path without
 * epilogues (integers, converted results, empty). If c->vals[t].mem is
 * already set, the result goes there. */
int tpux__eval_dot_ex(xctx *c, int t, void (*fn)(void *, int64_t, int64_t,
                                                 int64_t, int64_t, int64_t),
                      void *ctx, int *applied);

/* ---- bf16 operands of f32 DEFAULT dots (exec/vtpu/rewrite.c) --------------- */
/* 1 unless disabled (env TORCH_TPU_NO_BF16_OPERANDS=1, or
 * tpux__set_bf16_operands(0)); read when a program is planned. */
int tpux__bf16_operands_enabled(void);
void tpux__set_bf16_operands(int mode);
/* Dots planned with bf16 operands since the process started. */
int64_t tpux__bf16_operand_dots(void);
/* g rewritten so f32 DEFAULT dots read bf16 operands rounded where they
 * are produced, head-split dots multiply in place, identical views are
 * shared and index cones run first (exec/vtpu/rewrite.c): *out = the new
 * graph (caller frees), or NULL when nothing is rewritten; *alone = a
 * flag per node of *out (caller frees; NULL with it): the converts of
 * parameters, to be evaluated alone. Returns TPU_OK or an error code
 * (OOM). Borrowed: g. */
int tpux__rewrite_graph(const tpuir_graph *g, tpuir_graph **out, char **alone);

/* ---- reductions fused with their producer (exec/vtpu/reduce.c) ------------- */
/* 1 unless reduction fusion is disabled (env TORCH_TPU_NO_REDUCE_FUSION=1,
 * read once, or tpux__set_reduce_fusion(0)). */
int tpux__reduce_fusion_enabled(void);
/* Override: 1 on, 0 off, -1 back to the environment. Process-wide; for
 * tests. */
void tpux__set_reduce_fusion(int mode);
/* Number of REDUCE nodes evaluated tile by tile from their region so far. */
int64_t tpux__reduce_fusion_runs(void);
/* The region members[0..n) (same arguments as tpux__eval_region) whose
 * member k is the operand of REDUCE node t; the region cannot fail.
 * Evaluates the region window by window inside the reduction's loops and
 * t's value into c->vals[t]. store[k] == 0: member k has no other user and
 * is never materialised (its windows go to a scratch); else it is stored
 * (into *dst[k] when set) and folded from there while hot. Other members
 * are stored as usual. Results are bit-identical to running the region and
 * then t; falls back to exactly that when there is nothing to fuse (empty,
 * nothing reduced) or the windows would be short (under 256 elements:
 * runs split by broadcasts or strides, e.g. per-channel sums over 7x7). */
int tpux__eval_region_reduce(xctx *c, int n, const int32_t *members,
                             const char *store, const tpu_view *const *dst,
                             int k, int t);

/* Node evaluators (result into c->vals[t]). */
int tpux__eval_const(xctx *c, int t);
/* A user kernel call node (exec/vtpu/kernel.c). */
int tpux__eval_custom(xctx *c, int t);
/* TPUIR_ATTENTION / TPUIR_ATTENTION_GRAD (exec/vtpu/attention.c). */
int tpux__eval_attention(xctx *c, int t);
int tpux__eval_iota(xctx *c, int t);
int tpux__eval_rng(xctx *c, int t);
int tpux__eval_concat(xctx *c, int t);
int tpux__eval_pad(xctx *c, int t);
int tpux__eval_reduce(xctx *c, int t);
int tpux__eval_argreduce(xctx *c, int t);
int tpux__eval_dot(xctx *c, int t);
int tpux__eval_gather(xctx *c, int t);
int tpux__eval_index_select(xctx *c, int t);
int tpux__eval_scatter_add(xctx *c, int t);
int tpux__eval_index_add(xctx *c, int t);
/* The range check of INDEX-class node t's indices alone (XS_CHECK), on
 * their source (tpux__index_source). */
int tpux__check_index(xctx *c, int t);
/* Index value v through the views that keep its set of values (reshape,
 * transpose, broadcast): the node whose value holds them all. */
int tpux__index_source(const tpuir_graph *g, int v);
/* CONVOLUTION, REDUCE_WINDOW, WINDOW_ARGMAX (exec/vtpu/conv.c). */
int tpux__eval_conv(xctx *c, int t);
/* SORT (exec/vtpu/sort.c). */
int tpux__eval_sort(xctx *c, int t);
/* EIGH, SVD (exec/vtpu/spectral.c). */
int tpux__eval_spectral(xctx *c, int t);
/* CHOLESKY, TRIANGULAR_SOLVE, LU, LU_PIVOTS_TO_PERM, GEQRF,
 * HOUSEHOLDER_PRODUCT (exec/vtpu/linalg.c). */
int tpux__eval_linalg(xctx *c, int t);

/* Complex values (exec/vtpu/complex.c). */
/* 1 if node n has a complex operand or result (or is REAL/IMAG/COMPLEX/
 * CONJ/FFT) and is not pure data movement: it runs through
 * tpux__eval_complex, never in a fused region. */
int tpux__is_complex_node(const tpuir_graph *g, const tpuir_node *n);
int tpux__eval_complex(xctx *c, int t);
/* dst = convert(src) when either dtype is complex (no overlap check). */
int tpux__copy_complex(const tpu_view *dst, const tpu_view *src);
/* Fill dst with re + im*i converted to its dtype. */
int tpux__fill_complex(const tpu_view *dst, double re, double im);

/* Philox4x32-10 block for a 128-bit counter (ctr[0] least significant). */
void tpux__philox(const uint32_t ctr[4], uint64_t seed, uint32_t out[4]);

/* Strides of a reshape of (sizes, strides) to new sizes without copying;
 * returns 1 and fills new_strides if possible (torch computeStride). */
int tpux__reshape_strides(int ndim, const int64_t *sizes,
                          const int64_t *strides, int new_ndim,
                          const int64_t *new_sizes, int64_t *new_strides);


/* ---- plans (exec/vtpu/plan.c, variant.c; run: exec.c) --------------------
 * A plan is what running graph g needs that depends on g alone; a variant
 * adds what depends on how the bindings alias (which outputs overlap which
 * parameters) and on the fusion switches; a run adds the bindings. */

/* One unit of work of a variant, in execution order. */
enum {
  XS_NODE,          /* eval node t (also early, for a GEMM epilogue) */
  XS_REGION,        /* fused region: members (ending at t; early ones store nothing direct) */
  XS_REGION_REDUCE, /* region whose member k feeds REDUCE node t */
  XS_DOT_EPI,       /* DOT_GENERAL t with the region members in its epilogue */
  XS_CHECK,         /* range check of INDEX-class node t's indices (before t) */
  XS_FREE           /* nothing to evaluate at this position, only frees */
};
typedef struct xstep {
  int32_t kind, t;
  int32_t m0, nm; /* regions: members[m0..m0+nm) with store[] and dout[] */
  int32_t l0, nl; /* their external operands (alias check of direct stores) */
  int32_t k;      /* XS_REGION_REDUCE: index of the REDUCE's operand in the members;
                     a DOT_GENERAL's XS_NODE / XS_DOT_EPI: 1 + the output its GEMM
                     writes directly (when that view is contiguous), 0: none */
  int32_t f0, nf; /* temporaries to free after the step: frees[f0..f0+nf) */
} xstep;

/* Step profile (exec/vtpu/profile.c; tpux_profile_enable): whether it is
 * on, a monotonic clock in seconds, and adding time under a label or under
 * step kind/node t with its region members (nm of them, may be 0; copied:
 * a view node that materialised). */
int tpux__profile_on(void);
double tpux__profile_now(void);
void tpux__profile_add(const char *label, double seconds);
void tpux__profile_step(const tpuir_graph *g, int kind, int t, int nm, const int32_t *members,
                        int copied, double seconds);
void tpux__profile_output(const tpuir_graph *g, int v, double seconds); /* copy of output value v */

/* A variant: immutable once published (readers take no lock). Owned by its
 * plan (one malloc'd block), freed with it. */
typedef struct xvar {
  struct xvar *next;
  int32_t flags;      /* key: fusion switches (1 epilogue, 2 reduce) */
  int32_t npairs;     /* key: aliasing pattern, pairs[2 * npairs] */
  int32_t *pairs;     /*   (candidate c, live parameter k): outs[cand[c]] overlaps ins of lp[k] */
  int32_t nsteps;
  xstep *steps;
  int32_t *members, *dout; /* dout: output index a member stores into directly, or -1 */
  int32_t *loads, *frees;
  char *store;             /* member is materialised */
} xvar;

/* Per-run scratch (exec/vtpu/exec.c): checked out of the plan by one run
 * at a time; a concurrent run of the same plan gets a fresh one. */
typedef struct xscratch xscratch;

struct tpux_plan {
  const tpuir_graph *g; /* the planned graph: the caller's (borrowed, outlives
                           the plan) or own */
  tpuir_graph *own;     /* owned rewrite of the caller's graph, or NULL */
  char *alone;          /* with own: nodes kept out of regions (evaluated
                           alone: tpux__eval_convert), or NULL; owned */
  int32_t nn, nout;
  int32_t last_fail;    /* no node fails from position last_fail + 1 on */
  int32_t nparam, nlp, ncand;
  int32_t *outv;        /* output node of each output index */
  int32_t *pnode;       /* PARAM nodes in node order (binding checks) */
  int32_t *lp;          /* live PARAM nodes (aliasing pattern) */
  int32_t *cand;        /* direct-write candidates: output indexes */
  int32_t *dcand;       /* candidate index of a candidate's output node */
  char *live, *rfail, *ext;
  char *virt;           /* IOTA nodes read only by regions: never evaluated,
                           each region computes their values as it loads
                           them (tpux__space_add_iota) */
  int32_t *reg;         /* region id (the region's first id) or -1 */
  int32_t *rfirst, *rlast; /* per region id: first and last member */
  int32_t *last;        /* position of the last use (nn: an output) */
  int32_t *root;        /* storage root of a view chain */
  int32_t *users;       /* users outside the value's region */
  int32_t *head, *next; /* free list per position */
  int32_t *chead, *cnext; /* per position: INDEX-class nodes whose indices
                           are range-checked right after it (XS_CHECK), as
                           soon as they exist: only the check can fail */
  pthread_mutex_t mu;   /* serialises variant building */
  int32_t nvars;        /* under mu */
  _Atomic(xvar *) vars; /* published variants (push-front under mu) */
  _Atomic(xscratch *) spare; /* one idle run scratch, or NULL */
};

/* operand list of a node (CONCAT, CUSTOM_CALL: the list) */
static inline int tpux__node_operands(const tpuir_node *n, const tpuir_val **ops) {
  if (n->nlist) {
    *ops = n->list;
    return n->nlist;
  }
  *ops = n->in;
  return n->nin;
}
static inline int tpux__is_view_op(int op) {
  return tpuir_op_info(op)->cls == TPUIR_CLASS_VIEW;
}
/* The variant of plan p for fusion flags and an aliasing pattern (pairs as
 * in xvar): found, or planned and published (at most XVAR_MAX per plan;
 * past that *tmp = 1: the caller frees it with tpux__variants_free after
 * the run). */
#define XVAR_MAX 8
int tpux__variant_get(tpux_plan *p, int flags, int npairs, const int32_t *pairs,
                      const xvar **out, int *tmp);
/* Free a list of variants. */
void tpux__variants_free(xvar *v);
/* Free a run scratch (NULL allowed). */
void tpux__run_scratch_free(xscratch *s);

#endif /* TPU_EXEC_INTERNAL_H */
