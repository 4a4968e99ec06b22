/* mxu/conv.c - vTPU convolutions on oneDNN's convolution primitives
 * (forward, backward-data, backward-weights) with TPU numerics.
 *
 * Operands the primitive reads are in the compute type: bf16 (RNE) for
 * f32 at DEFAULT and for bf16 storage, f32 for FP32 precision; the
 * primitive accumulates in f32 and writes the storage type. Where oneDNN
 * has no native bf16 kernel (no AVX-512) the primitive is an f32 one and
 * the bf16 operands are bf16 values stored as f32 (f32 data at DEFAULT is
 * rounded to bf16 in the primitive's buffer after its reorder): bf16 x
 * bf16 products are exact in f32, so only the accumulation order differs;
 * a bf16 result is written as f32 and rounded once by its reorder. Every tensor
 * goes in oneDNN's preferred (blocked) layout, chosen by the primitive
 * (format_tag any): a user tensor in another layout or type is converted
 * by a cached reorder primitive, once per call, into a workspace buffer
 * (or back from one, for the written operand). Weights are first gathered
 * by our own loop into a dense plain buffer, so reversed/transposed weight
 * views (the input-gradient form of a convolution) need no copy by the
 * caller. The convolution and its reorders are cached by problem (kind,
 * types, sizes, user strides); creating them costs up to milliseconds (JIT),
 * a cache hit a mutex and a compare; problems oneDNN has no kernel for are
 * cached as such and reported TPU_E_UNSUPPORTED.
 *
 * A window stride that leaves the last input positions unreached (e.g. a
 * 1x1 stride-2 convolution over an even size) would need negative right
 * padding, which oneDNN rejects: the convolution is given the reached part
 * of the input only; for backward-data the unreached part of the result is
 * zeroed. */
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mxu/internal.h"
#include "tpu_rt.h"

#define SP 3

typedef struct ckey {
  int kind, dtype, prec, nsp;
  int64_t N, C, O, G;
  int64_t in[SP], k[SP], out[SP], st[SP], dil[SP], pl[SP], pr[SP];
  int64_t xs[5], ys[5], ws[6]; /* ws: written weights only (else 0) */
} ckey;

typedef struct centry {
  ckey k;
  int valid; /* the slot holds a problem */
  int ok;    /* 0: no oneDNN kernel for the problem (cached refusal) */
  dnnl_primitive_t conv;
  /* user <-> primitive reorders, NULL where the layouts and types match;
   * direction: into the primitive for read operands, out of it for the
   * written one */
  dnnl_primitive_t rx, ry, rw;
  dnnl_memory_desc_t ux, uy, uw;           /* user layouts; owned */
  const_dnnl_memory_desc_t px, py, pw, spd; /* the primitive's; owned by conv */
  size_t scratch;
  int refs, used;
} centry;

#define CCACHE_N 64
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static centry g_cache[CCACHE_N];
static int g_next;

static dnnl_data_type_t dt_of(int bf16) { return bf16 ? dnnl_bf16 : dnnl_f32; }

/* dims of x/y ([N, ch, sp..]) and w ([G, Og, Cg, k..] or [O, C, k..]) */
static int act_dims(const ckey *k, int64_t ch, const int64_t *sp, dnnl_dims_t d) {
  d[0] = k->N;
  d[1] = ch;
  for (int i = 0; i < k->nsp; i++) d[2 + i] = sp[SP - k->nsp + i];
  return 2 + k->nsp;
}
static int wei_dims(const ckey *k, dnnl_dims_t d) {
  int n = 0;
  if (k->G > 1) d[n++] = k->G;
  d[n++] = k->O / k->G;
  d[n++] = k->C / k->G;
  for (int i = 0; i < k->nsp; i++) d[n++] = k->k[SP - k->nsp + i];
  return n;
}

/* oneDNN wants plain strides it can order: a size-1 dim gets the stride
 * of an outermost dim. */
static void fix_strides(int nd, const dnnl_dims_t d, dnnl_dims_t s) {
  int64_t outer = 1;
  for (int i = 0; i < nd; i++)
    if (d[i] > 1 && s[i] * d[i] > outer) outer = s[i] * d[i];
  for (int i = 0; i < nd; i++)
    if (d[i] == 1) s[i] = outer;
}

static dnnl_status_t user_md(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t d,
                             const int64_t *st, int bf16) {
  dnnl_dims_t s;
  for (int i = 0; i < nd; i++) s[i] = st[i];
  fix_strides(nd, d, s);
  return dnnl_memory_desc_create_with_strides(md, nd, d, dt_of(bf16), s);
}

/* The reorder from -> to, NULL where they match unless `always`. */
static dnnl_status_t reorder(dnnl_engine_t eng, const_dnnl_memory_desc_t from,
                             const_dnnl_memory_desc_t to, int always,
                             dnnl_primitive_t *out) {
  *out = NULL;
  if (!always && dnnl_memory_desc_equal(from, to)) return dnnl_success;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL);
  if (!s) s = dnnl_primitive_create(out, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  return s;
}

static void destroy(centry *e) {
  if (e->conv) dnnl_primitive_destroy(e->conv);
  if (e->rx) dnnl_primitive_destroy(e->rx);
  if (e->ry) dnnl_primitive_destroy(e->ry);
  if (e->rw) dnnl_primitive_destroy(e->rw);
  e->conv = e->rx = e->ry = e->rw = NULL;
  e->px = e->py = e->pw = e->spd = NULL;
  dnnl_memory_desc_t *mds[3] = {&e->ux, &e->uy, &e->uw};
  for (int i = 0; i < 3; i++) {
    if (*mds[i]) dnnl_memory_desc_destroy(*mds[i]);
    *mds[i] = NULL;
  }
}

/* Whether f32 data at DEFAULT is rounded to bf16 by us (no native bf16
 * kernel: the primitive computes in f32 on bf16-valued operands). */
static int round_f32(const ckey *k) {
  return k->dtype == TPU_F32 && k->prec == TPU_PREC_DEFAULT && !tpumxu__dnnl_bf16_native();
}

/* Create the primitives of k into e. dnnl_unimplemented -> e->ok = 0. */
static dnnl_status_t create(dnnl_engine_t eng, const ckey *k, centry *e) {
  const int native = tpumxu__dnnl_bf16_native();
  /* compute type of the primitive (bf16 only where oneDNN has a kernel) */
  const int cbf = (k->dtype == TPU_BF16 || k->prec == TPU_PREC_DEFAULT) && native;
  const int obf = k->dtype == TPU_BF16; /* storage */
  const int rnd = round_f32(k);
  const int fwd = k->kind == TPUMXU_CONV_FWD, bwd_d = k->kind == TPUMXU_CONV_BWD_DATA;
  dnnl_dims_t dx, dy, dw, st, dil, pl, pr;
  int ndx = act_dims(k, k->C, k->in, dx), ndy = act_dims(k, k->O, k->out, dy);
  int ndw = wei_dims(k, dw);
  for (int i = 0; i < k->nsp; i++) {
    int j = SP - k->nsp + i;
    st[i] = k->st[j];
    dil[i] = k->dil[j] - 1;
    pl[i] = k->pl[j];
    pr[i] = k->pr[j];
  }
  /* user descriptors; read weights are gathered into a dense plain buffer */
  dnnl_memory_desc_t ax = NULL, ay = NULL, aw = NULL, hx = NULL, hy = NULL, hw = NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t hint = NULL, pd = NULL;
  dnnl_status_t s;
  if ((s = user_md(&e->ux, ndx, dx, k->xs, obf)) || (s = user_md(&e->uy, ndy, dy, k->ys, obf)))
    goto done;
  if (k->kind == TPUMXU_CONV_BWD_WEIGHTS) {
    int64_t ws[6];
    int n = 0;
    if (k->G > 1) ws[n++] = k->ws[0];
    for (int i = 1; i < 3 + k->nsp; i++) ws[n++] = k->ws[i];
    s = user_md(&e->uw, ndw, dw, ws, obf);
  } else {
    dnnl_dims_t ws;
    int64_t acc = 1;
    for (int i = ndw - 1; i >= 0; i--) {
      ws[i] = acc;
      acc *= dw[i];
    }
    s = dnnl_memory_desc_create_with_strides(&e->uw, ndw, dw, dt_of(obf || cbf), ws);
  }
  if (s) goto done;
  /* the primitive's operands: any layout; types per role */
  int xbf = bwd_d ? obf && native : cbf, ybf = fwd ? obf && native : cbf,
      wbf = k->kind == TPUMXU_CONV_BWD_WEIGHTS ? obf && native : cbf;
  if ((s = dnnl_memory_desc_create_with_tag(&ax, ndx, dx, dt_of(xbf), dnnl_format_tag_any)) ||
      (s = dnnl_memory_desc_create_with_tag(&ay, ndy, dy, dt_of(ybf), dnnl_format_tag_any)) ||
      (s = dnnl_memory_desc_create_with_tag(&aw, ndw, dw, dt_of(wbf), dnnl_format_tag_any)))
    goto done;
  if ((s = dnnl_primitive_attr_create(&attr)) ||
      (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)))
    goto done;
  if (fwd) {
    if ((s = dnnl_convolution_forward_primitive_desc_create(
             &pd, eng, dnnl_forward_inference, dnnl_convolution_direct, ax, aw, NULL, ay, st,
             dil, pl, pr, attr)))
      goto done;
  } else {
    /* backward primitives take a forward one as a hint (its layouts) */
    if ((s = dnnl_memory_desc_create_with_tag(&hx, ndx, dx, dt_of(cbf), dnnl_format_tag_any)) ||
        (s = dnnl_memory_desc_create_with_tag(&hy, ndy, dy, dt_of(cbf), dnnl_format_tag_any)) ||
        (s = dnnl_memory_desc_create_with_tag(&hw, ndw, dw, dt_of(cbf), dnnl_format_tag_any)) ||
        (s = dnnl_convolution_forward_primitive_desc_create(
             &hint, eng, dnnl_forward_training, dnnl_convolution_direct, hx, hw, NULL, hy, st,
             dil, pl, pr, NULL)))
      goto done;
    if (bwd_d)
      s = dnnl_convolution_backward_data_primitive_desc_create(
          &pd, eng, dnnl_convolution_direct, ax, aw, ay, st, dil, pl, pr, hint, attr);
    else
      s = dnnl_convolution_backward_weights_primitive_desc_create(
          &pd, eng, dnnl_convolution_direct, ax, aw, NULL, ay, st, dil, pl, pr, hint, attr);
    if (s) goto done;
  }
  /* a reference (scalar) kernel is no better than the caller's own path */
  const char *impl = NULL;
  if (!dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) && impl &&
      !strncmp(impl, "ref", 3)) {
    s = dnnl_unimplemented;
    goto done;
  }
  dnnl_query_t qx = bwd_d ? dnnl_query_diff_src_md : dnnl_query_src_md;
  dnnl_query_t qy = fwd ? dnnl_query_dst_md : dnnl_query_diff_dst_md;
  dnnl_query_t qw = k->kind == TPUMXU_CONV_BWD_WEIGHTS ? dnnl_query_diff_weights_md
                                                       : dnnl_query_weights_md;
  if ((s = dnnl_primitive_create(&e->conv, pd))) goto done;
  const_dnnl_primitive_desc_t cpd = NULL;
  if ((s = dnnl_primitive_get_primitive_desc(e->conv, &cpd))) goto done;
  e->px = dnnl_primitive_desc_query_md(cpd, qx, 0);
  e->py = dnnl_primitive_desc_query_md(cpd, qy, 0);
  e->pw = dnnl_primitive_desc_query_md(cpd, qw, 0);
  e->spd = dnnl_primitive_desc_query_md(cpd, dnnl_query_scratchpad_md, 0);
  e->scratch = e->spd ? dnnl_memory_desc_get_size(e->spd) : 0;
  /* read activations rounded by us go through a buffer (a reorder, a
   * copy where the layouts match) */
  if (bwd_d) s = reorder(eng, e->px, e->ux, 0, &e->rx);
  else s = reorder(eng, e->ux, e->px, rnd, &e->rx);
  if (s) goto done;
  if (fwd) s = reorder(eng, e->py, e->uy, 0, &e->ry);
  else s = reorder(eng, e->uy, e->py, rnd, &e->ry);
  if (s) goto done;
  if (k->kind == TPUMXU_CONV_BWD_WEIGHTS) s = reorder(eng, e->pw, e->uw, 0, &e->rw);
  else s = reorder(eng, e->uw, e->pw, 0, &e->rw);
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (hint) dnnl_primitive_desc_destroy(hint);
  if (attr) dnnl_primitive_attr_destroy(attr);
  dnnl_memory_desc_t tmp[6] = {ax, ay, aw, hx, hy, hw};
  for (int i = 0; i < 6; i++)
    if (tmp[i]) dnnl_memory_desc_destroy(tmp[i]);
  if (s) destroy(e);
  e->ok = !s;
  return s;
}

/* The cached entry for k (a reference taken), created when missing. */
static int acquire(dnnl_engine_t eng, const ckey *k, centry **out) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < CCACHE_N; i++) {
    centry *e = &g_cache[i];
    if (e->valid && !memcmp(&e->k, k, sizeof *k)) {
      e->refs++;
      e->used = 1;
      *out = e;
      pthread_mutex_unlock(&g_mu);
      return TPU_OK;
    }
  }
  pthread_mutex_unlock(&g_mu);
  centry fresh;
  memset(&fresh, 0, sizeof fresh);
  fresh.k = *k;
  fresh.valid = 1;
  dnnl_status_t s = create(eng, k, &fresh);
  if (s == dnnl_out_of_memory)
    return tpu_error(TPU_E_OOM, "tpumxu: oneDNN out of memory creating a convolution");
  if (s && s != dnnl_unimplemented && s != dnnl_invalid_arguments)
    return tpu_error(TPU_E_INTERNAL, "tpumxu: oneDNN convolution not created (status %d)",
                     (int)s);
  pthread_mutex_lock(&g_mu);
  int slot = -1;
  for (int i = 0; i < CCACHE_N && slot < 0; i++)
    if (!g_cache[i].valid) slot = i;
  for (int pass = 0; pass < 2 * CCACHE_N && slot < 0; pass++) {
    centry *e = &g_cache[g_next];
    g_next = (g_next + 1) % CCACHE_N;
    if (e->refs) continue;
    if (e->used) e->used = 0;
    else slot = (int)(e - g_cache);
  }
  centry *e;
  if (slot < 0) { /* every entry busy: run uncached */
    pthread_mutex_unlock(&g_mu);
    if (!(e = malloc(sizeof *e))) {
      destroy(&fresh);
      return tpu_error(TPU_E_OOM, "tpumxu: out of host memory");
    }
    *e = fresh;
    e->refs = -1;
    *out = e;
    return TPU_OK;
  }
  e = &g_cache[slot];
  destroy(e);
  *e = fresh;
  e->refs = 1;
  e->used = 1;
  *out = e;
  pthread_mutex_unlock(&g_mu);
  return TPU_OK;
}

static void release(centry *e) {
  if (e->refs < 0) {
    destroy(e);
    free(e);
    return;
  }
  pthread_mutex_lock(&g_mu);
  e->refs--;
  pthread_mutex_unlock(&g_mu);
}

/* ---- execution ---------------------------------------------------------- */

/* Dense plain copy of the read weights [G, Og, Cg, k0, k1, k2]: bf16
 * storage as is; f32 as bf16 (RNE) bits (cbf), as bf16 values in f32
 * (rnd) or as is; rows (g, o, c) in parallel. */
typedef struct gather_job {
  const tpumxu_conv_args *a;
  const ckey *k;
  int cbf, rnd;
  void *dst;
} gather_job;

static void gather_rows(void *ctx, int64_t r0, int64_t r1) {
  const gather_job *J = ctx;
  const tpumxu_conv_args *a = J->a;
  const ckey *k = J->k;
  const int64_t Og = a->O / a->G, Cg = a->C / a->G, *w = a->ws;
  const int64_t K = k->k[0] * k->k[1] * k->k[2];
  for (int64_t r = r0; r < r1; r++) {
    int64_t c = r % Cg, o = (r / Cg) % Og, g = r / (Cg * Og);
    int64_t base = g * w[0] + o * w[1] + c * w[2], i = r * K;
    for (int64_t t0 = 0; t0 < k->k[0]; t0++)
      for (int64_t t1 = 0; t1 < k->k[1]; t1++) {
        int64_t off = base + t0 * w[3] + t1 * w[4];
        if (a->dtype == TPU_BF16) {
          const uint16_t *s = (const uint16_t *)a->w + off;
          uint16_t *d = (uint16_t *)J->dst + i;
          for (int64_t t2 = 0; t2 < k->k[2]; t2++) d[t2] = s[t2 * w[5]];
        } else if (J->cbf) {
          const float *s = (const float *)a->w + off;
          uint16_t *d = (uint16_t *)J->dst + i;
          for (int64_t t2 = 0; t2 < k->k[2]; t2++)
            d[t2] = (uint16_t)(tpumxu__rne_bits(tpumxu__f2u(s[t2 * w[5]])) >> 16);
        } else if (J->rnd) {
          const float *s = (const float *)a->w + off;
          uint32_t *d = (uint32_t *)J->dst + i;
          for (int64_t t2 = 0; t2 < k->k[2]; t2++)
            d[t2] = tpumxu__rne_bits(tpumxu__f2u(s[t2 * w[5]]));
        } else {
          const float *s = (const float *)a->w + off;
          float *d = (float *)J->dst + i;
          for (int64_t t2 = 0; t2 < k->k[2]; t2++) d[t2] = s[t2 * w[5]];
        }
        i += k->k[2];
      }
  }
}

static void gather_w(const tpumxu_conv_args *a, const ckey *k, int cbf, int rnd, void *dst) {
  gather_job J = {a, k, cbf, rnd, dst};
  int64_t K = k->k[0] * k->k[1] * k->k[2];
  tpurt_parallel_for(a->O * (a->C / a->G), 1 + 16384 / K, gather_rows, &J);
}

/* Zero the part of the (written) input gradient past the reached input. */
static void zero_tail(const tpumxu_conv_args *a, const int64_t *full, const int64_t *reach,
                      const int64_t *xs) {
  const int64_t es = a->dtype == TPU_BF16 ? 2 : 4;
  for (int64_t n = 0; n < a->N; n++)
    for (int64_t c = 0; c < a->C; c++)
      for (int64_t i0 = 0; i0 < full[0]; i0++)
        for (int64_t i1 = 0; i1 < full[1]; i1++) {
          int64_t from = (i0 >= reach[0] || i1 >= reach[1]) ? 0 : reach[2];
          char *p = (char *)a->x + (n * xs[0] + c * xs[1] + i0 * xs[2] + i1 * xs[3]) * es;
          for (int64_t i2 = from; i2 < full[2]; i2++) memset(p + i2 * xs[4] * es, 0, (size_t)es);
        }
}

typedef struct buf {
  void *p;
  size_t cap;
} buf;

static dnnl_status_t mem(dnnl_engine_t eng, const_dnnl_memory_desc_t md, void *p,
                         dnnl_memory_t *m) {
  return dnnl_memory_create(m, md, eng, p);
}

/* run a reorder from (md_from, p_from) to (md_to, p_to) */
static dnnl_status_t run_reorder(dnnl_engine_t eng, dnnl_stream_t st, dnnl_primitive_t r,
                                 const_dnnl_memory_desc_t mf, void *pf,
                                 const_dnnl_memory_desc_t mt, void *pt) {
  dnnl_memory_t a = NULL, b = NULL;
  dnnl_status_t s;
  if (!(s = mem(eng, mf, pf, &a)) && !(s = mem(eng, mt, pt, &b))) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
    s = dnnl_primitive_execute(r, st, 2, args);
  }
  if (b) dnnl_memory_destroy(b);
  if (a) dnnl_memory_destroy(a);
  return s;
}

/* f32 values (bit patterns) rounded to bf16 values (RNE) in place. */
static void round_fn(void *ctx, int64_t i0, int64_t i1) {
  uint32_t *u = ctx;
  for (int64_t i = i0; i < i1; i++) {
    uint32_t v = u[i];
    uint32_t r = (v + 0x7fffu + ((v >> 16) & 1u)) & 0xffff0000u;
    uint32_t q = (v | 0x00400000u) & 0xffff0000u;
    u[i] = (v & 0x7fffffffu) > 0x7f800000u ? q : r; /* NaN stays quiet NaN */
  }
}

/* Round the f32 buffer of md (the primitive's copy of an operand). */
static void round_buf(const_dnnl_memory_desc_t md, void *p) {
  tpurt_parallel_for((int64_t)(dnnl_memory_desc_get_size(md) / 4), 1 << 15, round_fn, p);
}

/* A workspace buffer of md's size into *b (NULL when out of memory). */
static void *ws(const_dnnl_memory_desc_t md, buf *b) {
  b->p = tpumxu__ws_get(dnnl_memory_desc_get_size(md), &b->cap);
  return b->p;
}

/* Execute the cached problem e: reorders into the primitive's layouts, the
 * convolution, the reorder of the written operand back to the user's. */
static int run(dnnl_engine_t eng, const centry *e, const tpumxu_conv_args *a, const ckey *k,
               int cbf, int rnd) {
  const int fwd = a->kind == TPUMXU_CONV_FWD, bwd_d = a->kind == TPUMXU_CONV_BWD_DATA,
            bwd_w = a->kind == TPUMXU_CONV_BWD_WEIGHTS;
  buf bx = {0}, by = {0}, bw = {0}, bp = {0}, bs = {0};
  dnnl_stream_t st = NULL;
  dnnl_memory_t mx = NULL, my = NULL, mw = NULL, ms = NULL;
  dnnl_status_t s = dnnl_success;
  int oom = 0;
  void *px = a->x, *py = a->y, *pw = a->w;
  if ((s = dnnl_stream_create(&st, eng, dnnl_stream_default_flags))) goto done;
  if (!bwd_w) { /* read weights: gather, then reorder */
    if (!(pw = ws(e->uw, &bp))) goto oom;
    gather_w(a, k, cbf, rnd, bp.p);
    if (e->rw) {
      if (!(pw = ws(e->pw, &bw))) goto oom;
      if ((s = run_reorder(eng, st, e->rw, e->uw, bp.p, e->pw, bw.p))) goto done;
    }
  } else if (e->rw && !(pw = ws(e->pw, &bw))) {
    goto oom;
  }
  if (e->rx) {
    if (!(px = ws(e->px, &bx))) goto oom;
    if (!bwd_d) {
      if ((s = run_reorder(eng, st, e->rx, e->ux, a->x, e->px, px))) goto done;
      if (rnd) {
        if ((s = dnnl_stream_wait(st))) goto done;
        round_buf(e->px, px);
      }
    }
  }
  if (e->ry) {
    if (!(py = ws(e->py, &by))) goto oom;
    if (!fwd) {
      if ((s = run_reorder(eng, st, e->ry, e->uy, a->y, e->py, py))) goto done;
      if (rnd) {
        if ((s = dnnl_stream_wait(st))) goto done;
        round_buf(e->py, py);
      }
    }
  }
  dnnl_exec_arg_t args[4];
  int na = 0;
  if ((s = mem(eng, e->px, px, &mx)) || (s = mem(eng, e->py, py, &my)) ||
      (s = mem(eng, e->pw, pw, &mw)))
    goto done;
  args[na++] = (dnnl_exec_arg_t){bwd_d ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC, mx};
  args[na++] = (dnnl_exec_arg_t){fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST, my};
  args[na++] = (dnnl_exec_arg_t){bwd_w ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS, mw};
  if (e->scratch) {
    if (!ws(e->spd, &bs)) goto oom;
    if ((s = mem(eng, e->spd, bs.p, &ms))) goto done;
    args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ms};
  }
  if ((s = dnnl_primitive_execute(e->conv, st, na, args))) goto done;
  if (bwd_d && e->rx) s = run_reorder(eng, st, e->rx, e->px, px, e->ux, a->x);
  else if (fwd && e->ry) s = run_reorder(eng, st, e->ry, e->py, py, e->uy, a->y);
  else if (bwd_w && e->rw) s = run_reorder(eng, st, e->rw, e->pw, pw, e->uw, a->w);
  if (!s) s = dnnl_stream_wait(st);
  goto done;
oom:
  oom = 1;
done:
  if (ms) dnnl_memory_destroy(ms);
  if (mw) dnnl_memory_destroy(mw);
  if (my) dnnl_memory_destroy(my);
  if (mx) dnnl_memory_destroy(mx);
  if (st) dnnl_stream_destroy(st);
  tpumxu__ws_put(bs.p, bs.cap);
  tpumxu__ws_put(bp.p, bp.cap);
  tpumxu__ws_put(bw.p, bw.cap);
  tpumxu__ws_put(by.p, by.cap);
  tpumxu__ws_put(bx.p, bx.cap);
  if (oom || s == dnnl_out_of_memory)
    return tpu_error(TPU_E_OOM, "tpumxu: out of host memory (convolution)");
  if (s) return tpu_error(TPU_E_INTERNAL, "tpumxu: oneDNN convolution failed (status %d)", (int)s);
  return TPU_OK;
}

static int pos_strides(int nd, const int64_t *sz, const int64_t *st) {
  for (int i = 0; i < nd; i++)
    if (sz[i] > 1 && st[i] <= 0) return 0;
  return 1;
}

int tpumxu_conv(const tpumxu_conv_args *a) {
  if (a->dtype == TPU_F32) {
    if (a->precision != TPU_PREC_DEFAULT && a->precision != TPU_PREC_FP32)
      return TPU_E_UNSUPPORTED;
  } else if (a->dtype != TPU_BF16) {
    return TPU_E_UNSUPPORTED;
  }
  if (a->nsp < 1 || a->nsp > SP || a->G < 1 || a->C % a->G || a->O % a->G ||
      a->kind < TPUMXU_CONV_FWD || a->kind > TPUMXU_CONV_BWD_WEIGHTS)
    return TPU_E_UNSUPPORTED;
  dnnl_engine_t eng = tpumxu__dnnl_engine();
  if (!eng) return TPU_E_INTERNAL;
  const int native = tpumxu__dnnl_bf16_native();
  const int cbf = (a->dtype == TPU_BF16 || a->precision == TPU_PREC_DEFAULT) && native;
  ckey k;
  memset(&k, 0, sizeof k);
  k.kind = a->kind;
  k.dtype = a->dtype;
  k.prec = a->dtype == TPU_F32 ? a->precision : TPU_PREC_DEFAULT;
  k.nsp = a->nsp;
  k.N = a->N;
  k.C = a->C;
  k.O = a->O;
  k.G = a->G;
  int64_t full[SP], xs[5] = {a->xs[0], a->xs[1], 0, 0, 0};
  int cut = 0;
  for (int j = 0; j < SP; j++) { /* spatial dims right-aligned, padded with 1 */
    int i = j - (SP - a->nsp);
    int64_t in = i >= 0 ? a->in[i] : 1, kk = i >= 0 ? a->k[i] : 1, out = i >= 0 ? a->out[i] : 1;
    int64_t st = i >= 0 ? a->stride[i] : 1, dil = i >= 0 ? a->dil[i] : 1;
    int64_t pl = i >= 0 ? a->pad_l[i] : 0;
    if (in < 1 || kk < 1 || out < 1 || st < 1 || dil < 1 || pl < 0) return TPU_E_UNSUPPORTED;
    int64_t pr = (out - 1) * st + (kk - 1) * dil + 1 - in - pl;
    full[j] = in;
    if (pr < 0) { /* the last -pr input positions are never reached */
      in += pr;
      pr = 0;
      cut = 1;
      if (in < 1) return TPU_E_UNSUPPORTED;
    }
    k.in[j] = in;
    k.k[j] = kk;
    k.out[j] = out;
    k.st[j] = st;
    k.dil[j] = dil;
    k.pl[j] = pl;
    k.pr[j] = pr;
    xs[2 + j] = i >= 0 ? a->xs[2 + i] : 0;
  }
  int nd = 2 + a->nsp;
  int64_t xsz[5] = {a->N, a->C}, ysz[5] = {a->N, a->O};
  for (int i = 0; i < a->nsp; i++) {
    xsz[2 + i] = a->in[i];
    ysz[2 + i] = a->out[i];
  }
  if (!pos_strides(nd, xsz, a->xs) || !pos_strides(nd, ysz, a->ys)) return TPU_E_UNSUPPORTED;
  memcpy(k.xs, a->xs, sizeof(int64_t) * (size_t)nd);
  memcpy(k.ys, a->ys, sizeof(int64_t) * (size_t)nd);
  if (a->kind == TPUMXU_CONV_BWD_WEIGHTS) {
    int64_t wsz[6] = {a->G, a->O / a->G, a->C / a->G};
    for (int i = 0; i < a->nsp; i++) wsz[3 + i] = a->k[i];
    if (!pos_strides(3 + a->nsp, wsz, a->ws)) return TPU_E_UNSUPPORTED;
    memcpy(k.ws, a->ws, sizeof(int64_t) * (size_t)(3 + a->nsp));
  }
  centry *e = NULL;
  int rc = acquire(eng, &k, &e);
  if (rc) return rc;
  if (!e->ok) {
    release(e);
    return TPU_E_UNSUPPORTED;
  }
  /* weights read with any strides: index them as [G, Og, Cg, k0, k1, k2] */
  tpumxu_conv_args aw = *a;
  if (a->kind != TPUMXU_CONV_BWD_WEIGHTS)
    for (int j = 0; j < SP; j++) {
      int i = j - (SP - a->nsp);
      aw.ws[3 + j] = i >= 0 ? a->ws[3 + i] : 0;
    }
  rc = run(eng, e, &aw, &k, cbf, round_f32(&k));
  release(e);
  if (!rc && cut && a->kind == TPUMXU_CONV_BWD_DATA) zero_tail(a, full, k.in, xs);
  return rc;
}
