/* mxu_driver.c - blocked, multithreaded GEMM driver for the vTPU matrix
 * unit: picks a micro-kernel for (ISA, dtype, precision), packs B blocks
 * (shared by all threads) and A blocks (per task or shared, see below)
 * with the bf16 split done while packing, runs the micro-kernel over the
 * plane pairs of each pass
 * and applies the pass order (small terms, zero if non-finite, + hi*hi)
 * and alpha/beta in the epilogue.
 *
 * Loop nest per batch item:
 *   superblock (rows m0..m1, cols n0..n1)
 *     k block (kc)           pack B (its NR panels) and, when A is shared,
 *                            A (all MR panels of the superblock's rows;
 *                            once per row range when there is one k block),
 *                            in parallel: panels with contiguous rows (a
 *                            transposed read) are split by k ranges, each
 *                            covering all panels, so source rows stream;
 *                            others by panel ranges
 *       task (MC rows x a share of the superblock's NR panels), parallel:
 *         A not shared (k-steps contiguous, one task per row block): pack
 *         this task's MC x kc block, hot in L2 for its use right after;
 *         for each NR panel, for each MR panel:
 *           prefetch the C tile (last k block), small-term pairs -> S
 *           tile, hi*hi -> H tile, epilogue on the last k block.
 * With one k block the S/H tiles live on the stack; with several they are
 * kept in per-superblock buffers so the non-finite test sees the full sum.
 *
 * Blocking (measured on Zen 4, 1 MB L2): one k block up to 8192 k-steps
 * per bf16 plane (4096 for f32 panels) - separate k blocks cost more than
 * they save here; the MC rows of a task are sized so its packed A block
 * stays within ~384 KB of L2 (so a long K gives short MC), at most 8 MR
 * panels; a single-k superblock spans as many rows as keep the shared
 * packed A under 32 MB and as many columns as keep the shared packed B
 * under 16 MB (L3); a multi-k one is 1024 x 1024. Batched products of up
 * to 2^24 multiply-adds per item run one item per thread.
 * Packed-panel buffers come from a small workspace cache (no page faults
 * per call).
 * Environment overrides, for tuning only: TPUMXU_KC, TPUMXU_A2, TPUMXU_MC,
 * TPUMXU_NC, TPUMXU_MCH.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mxu_internal.h"
#include "tpu_rt.h"

/* small-term plane pairs (A part, B part); hi*hi = (0, 0) is added last */
static const int8_t k_small_high[2][2] = {{0, 1}, {1, 0}};
static const int8_t k_small_highest[5][2] = {{1, 1}, {2, 0}, {0, 2}, {1, 0}, {0, 1}};

typedef struct job {
  const tpumxu_kernel *kd;
  int isa, fmt, nplanes, nsmall, dtype;
  const int8_t (*small)[2];
  float alpha, beta;
  int64_t m, n, k;
  tpumxu_src A, B; /* A: m rows x k; B: n rows x k (its transpose) */
  char *c;
  int64_t scm, scn;
  int64_t kc_max, mc_max, nc_max, mch_max, a2_bytes;
  /* current superblock / k block */
  int64_t m0, m1, n0, n1, kb0, kbv, kbc;
  int first, last, multi_k;
  int64_t mc, nsplit, npn; /* rows per task, column splits, NR panels */
  char *bpack, *apack;
  int64_t b_panel, b_plane; /* bytes per B panel (one plane), per plane */
  int64_t a_panel, a_plane; /* same for A */
  int64_t npm;              /* MR panels of the superblock */
  int64_t pk_a, pk_b;       /* pack units of A (0: A not packed) and B */
  int ksplit_a, ksplit_b;   /* units are k ranges (else panel ranges) */
  int a_shared;             /* A packed per superblock (else per task) */
  int oom;
  float *acc_s, *acc_h;
  int64_t bi;             /* batch item */
  tpumxu_epilogue_fn epi; /* optional per-block callback */
  void *epi_ctx;
} job;

/* columns of C handed to the epilogue at once (at least; or a task's
 * share): wide blocks keep the region's tiles long (per-tile overhead)
 * while MC rows x 1024 columns still sit in L2 */
#define EPI_COLS 1024

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t rup(int64_t a, int64_t b) { return cdiv(a, b) * b; }

/* Tuning overrides (TPUMXU_KC/A2/MC/NC/MCH), read once: getenv on the
 * worker threads would race with the host program changing its environment.
 * -1 = not set. */
enum { ENV_KC, ENV_A2, ENV_MC, ENV_NC, ENV_MCH, ENV_N };
static int64_t g_env[ENV_N];
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static void env_init(void) {
  static const char *const names[ENV_N] = {"TPUMXU_KC", "TPUMXU_A2", "TPUMXU_MC",
                                           "TPUMXU_NC", "TPUMXU_MCH"};
  for (int i = 0; i < ENV_N; i++) {
    const char *s = getenv(names[i]);
    g_env[i] = s && *s ? strtoll(s, NULL, 10) : -1;
  }
}
static int64_t env_i64(int which, int64_t dflt) {
  pthread_once(&g_env_once, env_init);
  return g_env[which] >= 0 ? g_env[which] : dflt;
}

/* Workspace cache: the packed panels are large, short-lived buffers, and
 * fresh pages from the OS cost a fault and a clear per 4 KB (several % of a
 * GEMM), so a few freed buffers (at most WS_MAX_BYTES together) are kept
 * for the next call. Buffers are 64-byte aligned. */
#define WS_SLOTS 8
#define WS_MAX_BYTES ((size_t)64 << 20)
static pthread_mutex_t g_ws_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *p;
  size_t n;
} g_ws[WS_SLOTS];
static size_t g_ws_total;

/* A buffer of at least n bytes (*cap: its size), or NULL. */
static void *ws_get(size_t n, size_t *cap) {
  void *p = NULL;
  pthread_mutex_lock(&g_ws_mu);
  int best = -1;
  for (int i = 0; i < WS_SLOTS; i++)
    if (g_ws[i].p && g_ws[i].n >= n && (best < 0 || g_ws[i].n < g_ws[best].n)) best = i;
  if (best >= 0) {
    p = g_ws[best].p;
    *cap = g_ws[best].n;
    g_ws_total -= *cap;
    g_ws[best].p = NULL;
  }
  pthread_mutex_unlock(&g_ws_mu);
  if (!p) {
    *cap = (n + 4095) & ~(size_t)4095;
    p = aligned_alloc(64, *cap);
  }
  return p;
}

/* Give back a buffer from ws_get: kept (evicting smaller ones) or freed. */
static void ws_put(void *p, size_t cap) {
  if (!p) return;
  pthread_mutex_lock(&g_ws_mu);
  for (;;) {
    int empty = -1, small = -1;
    for (int i = 0; i < WS_SLOTS; i++) {
      if (!g_ws[i].p) empty = i;
      else if (small < 0 || g_ws[i].n < g_ws[small].n) small = i;
    }
    if (empty >= 0 && g_ws_total + cap <= WS_MAX_BYTES) {
      g_ws[empty].p = p;
      g_ws[empty].n = cap;
      g_ws_total += cap;
      p = NULL;
      break;
    }
    if (small < 0 || g_ws[small].n >= cap || cap > WS_MAX_BYTES) break;
    free(g_ws[small].p); /* evict a smaller buffer */
    g_ws_total -= g_ws[small].n;
    g_ws[small].p = NULL;
  }
  pthread_mutex_unlock(&g_ws_mu);
  free(p);
}

/* bytes per k-step of one packed row */
static int64_t kstep_bytes(int fmt) { return fmt == TPUMXU_FMT_F32 ? 4 : 2; }

/* k-steps per pack unit when splitting by k, and panels per unit else */
#define PK_KSTEPS 64
#define PK_PANELS 4

/* Source rows contiguous (a transposed read): split the packing by k. */
static int pack_by_k(const job *J, const tpumxu_src *s, int64_t rows) {
  return J->isa >= TPUMXU_ISA_AVX512 && s->rs == 1 && rows > 1;
}

/* Units to pack `npan` panels of one k block. */
static int64_t pack_units(const job *J, int by_k, int64_t npan) {
  return by_k ? cdiv(J->kbc, PK_KSTEPS) : cdiv(npan, PK_PANELS);
}

/* Pack unit u of an operand: rows [r0, r1), R rows per panel, npan
 * panels at dst (panel / plane bytes). */
static void pack_unit(const job *J, const tpumxu_src *s, int by_k, int64_t u,
                      int64_t r0, int64_t r1, int R, int64_t npan, char *dst,
                      int64_t panel, int64_t plane) {
  if (by_k) { /* k-steps [la, lb) of every panel */
    int64_t la = u * PK_KSTEPS, lb = la + PK_KSTEPS < J->kbc ? la + PK_KSTEPS : J->kbc;
    int64_t kv = J->kbv - la;
    if (kv > lb - la) kv = lb - la;
    if (kv < 0) kv = 0;
    tpumxu_pack_panels(J->isa, s, r0, r1 - r0, R, npan, J->kb0 + la, kv,
                       lb - la, J->fmt, J->nplanes,
                       dst + la * R * kstep_bytes(J->fmt), panel, plane);
    return;
  }
  int64_t p0 = u * PK_PANELS, p1 = p0 + PK_PANELS < npan ? p0 + PK_PANELS : npan;
  tpumxu_pack_panels(J->isa, s, r0 + p0 * R, r1 - r0 - p0 * R, R, p1 - p0,
                     J->kb0, J->kbv, J->kbc, J->fmt, J->nplanes,
                     dst + p0 * panel, panel, plane);
}

/* Pack units [u0, u1): A's first (pk_a of them), then B's. */
static void pack_fn(void *ctx, int64_t u0, int64_t u1) {
  job *J = ctx;
  for (int64_t u = u0; u < u1; u++) {
    if (u < J->pk_a)
      pack_unit(J, &J->A, J->ksplit_a, u, J->m0, J->m1, J->kd->mr, J->npm,
                J->apack, J->a_panel, J->a_plane);
    else
      pack_unit(J, &J->B, J->ksplit_b, u - J->pk_a, J->n0, J->n1, J->kd->nr,
                J->npn, J->bpack, J->b_panel, J->b_plane);
  }
}

static void compute_fn(void *ctx, int64_t t0, int64_t t1) {
  job *J = ctx;
  const tpumxu_kernel *kd = J->kd;
  const int MR = kd->mr, NR = kd->nr;
  const int64_t a_panel = J->a_panel;
  /* per-task A: packed right before use, so it is hot in L2 */
  const int64_t a_plane = J->a_shared ? J->a_plane : a_panel * (J->mc / MR);
  char *own = NULL;
  size_t own_cap = 0;
  if (!J->a_shared) {
    own = ws_get((size_t)(a_plane * (J->nplanes ? J->nplanes : 1)), &own_cap);
    if (!own) {
      __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED);
      return;
    }
  }
  float tile_s[TPUMXU_MAX_TILE] __attribute__((aligned(64)));
  float tile_h[TPUMXU_MAX_TILE] __attribute__((aligned(64)));
  const int64_t es = J->dtype == TPU_F32 ? 4 : 2;
  for (int64_t t = t0; t < t1; t++) {
    int64_t mb = t / J->nsplit, sp = t % J->nsplit;
    int64_t i0 = J->m0 + mb * J->mc;
    int64_t i1 = i0 + J->mc < J->m1 ? i0 + J->mc : J->m1;
    int64_t jp0 = J->npn * sp / J->nsplit, jp1 = J->npn * (sp + 1) / J->nsplit;
    int64_t nip = cdiv(i1 - i0, MR);
    const char *apack = own;
    if (J->a_shared)
      apack = J->apack + ((i0 - J->m0) / MR) * a_panel;
    else
      tpumxu_pack_panels(J->isa, &J->A, i0, i1 - i0, MR, nip, J->kb0, J->kbv,
                         J->kbc, J->fmt, J->nplanes, own, a_panel, a_plane);
    int64_t g0 = jp0; /* first panel not yet given to the epilogue */
    for (int64_t jp = jp0; jp < jp1; jp++) {
      int64_t cj = J->n0 + jp * NR;
      int nr_eff = (int)(J->n1 - cj < NR ? J->n1 - cj : NR);
      const char *bpl = J->bpack + jp * J->b_panel;
      for (int64_t ii = 0; ii < nip; ii++) {
        int64_t ci = i0 + ii * MR;
        int mr_eff = (int)(i1 - ci < MR ? i1 - ci : MR);
        const char *apl = apack + ii * a_panel;
        if (J->last && J->scn == 1) {
          /* the C tile's lines, fetched while the kernel runs: the
           * epilogue's stores then hit cache instead of stalling on
           * misses (short k: the tile is written soon after) */
          const char *cr = J->c + (ci * J->scm + cj) * es;
          int64_t lines = (nr_eff * es + 63) / 64;
          for (int i = 0; i < mr_eff; i++, cr += J->scm * es)
            for (int64_t q = 0; q < lines; q++) __builtin_prefetch(cr + q * 64, 1, 3);
        }
        float *S = tile_s, *H = tile_h;
        if (J->multi_k) {
          int64_t tix = ((ci - J->m0) / MR) * J->npn + jp;
          H = J->acc_h + tix * MR * NR;
          if (J->acc_s) S = J->acc_s + tix * MR * NR;
        }
        if (J->nsmall) {
          const void *ap[5], *bp[5];
          for (int q = 0; q < J->nsmall; q++) {
            ap[q] = apl + J->small[q][0] * a_plane;
            bp[q] = bpl + J->small[q][1] * J->b_plane;
          }
          kd->fn(J->nsmall, ap, bp, J->kbc, S, !J->first);
        }
        const void *ah = apl, *bh = bpl;
        kd->fn(1, &ah, &bh, J->kbc, H, !J->first);
        if (J->last)
          kd->epi(H, J->nsmall ? S : NULL, NR, mr_eff, nr_eff, J->alpha,
                  J->beta, J->dtype, J->c + (ci * J->scm + cj * J->scn) * es,
                  J->scm, J->scn);
      }
      if (J->last && J->epi) { /* finished columns, while they are hot */
        int64_t cs = J->n0 + g0 * NR, ce = cj + nr_eff;
        if (ce - cs >= EPI_COLS || jp + 1 == jp1) {
          J->epi(J->epi_ctx, J->bi, i0, i1, cs, ce);
          g0 = jp + 1;
        }
      }
    }
  }
  ws_put(own, own_cap);
}

/* One batch item: superblocks x k blocks. */
static int run_item(job *J) {
  const tpumxu_kernel *kd = J->kd;
  const int MR = kd->mr, NR = kd->nr;
  const int np = J->nplanes ? J->nplanes : 1;
  const int kalign = J->fmt == TPUMXU_FMT_BF16P ? 2 : 1;
  int64_t nkc = cdiv(J->k, J->kc_max);
  if (nkc < 1) nkc = 1;
  int64_t kcb = rup(cdiv(J->k, nkc), kalign); /* balanced k block */
  if (kcb < kalign) kcb = kalign;
  J->multi_k = nkc > 1;
  int64_t nch = J->multi_k ? (J->nc_max < J->n ? J->nc_max : J->n) : J->n;
  if (!J->multi_k) { /* bound the packed B block to ~16 MB */
    int64_t lim = ((int64_t)16 << 20) / (kcb * kstep_bytes(J->fmt) * np);
    lim = lim / NR * NR;
    if (lim < NR) lim = NR;
    if (nch > lim) nch = lim;
  }
  nch = rup(cdiv(J->n, cdiv(J->n, nch)), NR); /* balance superblocks */
  int64_t mch = J->multi_k ? J->mch_max : J->m;
  if (!J->multi_k) { /* bound the packed A block to ~32 MB */
    int64_t lim = ((int64_t)32 << 20) / (kcb * kstep_bytes(J->fmt) * np);
    lim = lim / MR * MR;
    if (lim < MR) lim = MR;
    if (mch > lim) mch = lim;
  }
  if (mch > J->m) mch = J->m;
  mch = rup(cdiv(J->m, cdiv(J->m, mch)), MR); /* balance superblocks */
  int64_t npn_max = cdiv(nch, NR), npm_max = cdiv(mch, MR);
  J->b_panel = rup(kcb * NR * kstep_bytes(J->fmt), 64);
  J->b_plane = J->b_panel * npn_max;
  size_t bcap = 0, acap = 0;
  J->bpack = ws_get((size_t)(J->b_plane * np), &bcap);
  J->a_panel = rup(kcb * MR * kstep_bytes(J->fmt), 64);
  J->a_plane = J->a_panel * npm_max;
  J->apack = NULL;
  J->acc_s = J->acc_h = NULL;
  size_t accn = J->multi_k ? (size_t)(rup(mch, MR) * rup(nch, NR)) : 0;
  if (accn) {
    J->acc_h = aligned_alloc(64, accn * sizeof(float));
    if (J->nsmall) J->acc_s = aligned_alloc(64, accn * sizeof(float));
  }
  int rc = TPU_OK;
  if (!J->bpack || (accn && (!J->acc_h || (J->nsmall && !J->acc_s)))) {
    rc = tpu_error(TPU_E_OOM, "tpumxu_gemm: cannot allocate workspace");
    goto done;
  }
  int T = tpurt_num_threads();
  for (J->m0 = 0; J->m0 < J->m; J->m0 += mch) {
    J->m1 = J->m0 + mch < J->m ? J->m0 + mch : J->m;
    int64_t rows = J->m1 - J->m0;
    J->npm = cdiv(rows, MR);
    J->ksplit_a = pack_by_k(J, &J->A, rows);
    int a_valid = 0; /* shared packed A holds these rows (one k block) */
    for (J->n0 = 0; J->n0 < J->n; J->n0 += nch) {
      J->n1 = J->n0 + nch < J->n ? J->n0 + nch : J->n;
      J->npn = cdiv(J->n1 - J->n0, NR);
      J->ksplit_b = pack_by_k(J, &J->B, J->n1 - J->n0);
      /* tasks: MC-row blocks (the packed A block of a task stays within
       * ~a2_bytes of L2), columns split until there are enough */
      int64_t mcap = J->a2_bytes / (kcb * kstep_bytes(J->fmt) * np) / MR * MR;
      if (mcap > J->mc_max) mcap = J->mc_max;
      if (mcap < MR) mcap = MR;
      int64_t mb = cdiv(rows, mcap);
      J->mc = rup(cdiv(rows, mb), MR);
      mb = cdiv(rows, J->mc);
      J->nsplit = 1;
      if (T > 1 && mb % T) {
        int64_t want = cdiv(4 * T, mb);
        J->nsplit = want < J->npn ? want : J->npn;
        if (J->nsplit < 1) J->nsplit = 1;
      }
      /* A shared when each task would pack it with strided page-hopping
       * reads (contiguous rows), or several tasks would pack the same rows;
       * else each task packs its rows right before use (hot in L2) */
      J->a_shared = J->ksplit_a || J->nsplit > 1;
      if (J->a_shared && !J->apack) {
        J->apack = ws_get((size_t)(J->a_plane * np), &acap);
        if (!J->apack) {
          rc = tpu_error(TPU_E_OOM, "tpumxu_gemm: cannot allocate workspace");
          goto done;
        }
      }
      for (int64_t kb = 0; kb < nkc; kb++) {
        J->kb0 = kb * kcb;
        J->kbv = J->k - J->kb0 < kcb ? J->k - J->kb0 : kcb;
        J->kbc = rup(J->kbv, kalign);
        J->first = kb == 0;
        J->last = kb == nkc - 1;
        /* one k block: the packed A of these rows serves every column
         * superblock */
        J->pk_a = J->a_shared && (J->multi_k || !a_valid)
                      ? pack_units(J, J->ksplit_a, J->npm) : 0;
        a_valid = J->a_shared;
        J->pk_b = pack_units(J, J->ksplit_b, J->npn);
        tpurt_parallel_for(J->pk_a + J->pk_b, 1, pack_fn, J);
        tpurt_parallel_for(mb * J->nsplit, 1, compute_fn, J);
        if (J->oom) {
          rc = tpu_error(TPU_E_OOM, "tpumxu_gemm: cannot allocate workspace");
          goto done;
        }
      }
    }
  }
done:
  ws_put(J->bpack, bcap);
  ws_put(J->apack, acap);
  free(J->acc_s);
  free(J->acc_h);
  return rc;
}

typedef struct batch_ctx {
  const tpumxu_problem *p;
  const job *tmpl;
  int rc;
} batch_ctx;

static void item_at(const tpumxu_problem *p, const job *tmpl, int64_t b,
                    job *J) {
  *J = *tmpl;
  int64_t es = p->dtype == TPU_F32 ? 4 : 2;
  J->A.base = p->a + b * p->sab * es;
  J->B.base = p->b + b * p->sbb * es;
  J->c = p->c + b * p->sbc * es;
  J->bi = b;
}

static void batch_fn(void *ctx, int64_t b0, int64_t b1) {
  batch_ctx *bc = ctx;
  for (int64_t b = b0; b < b1; b++) {
    job J;
    item_at(bc->p, bc->tmpl, b, &J);
    int rc = run_item(&J);
    if (rc) __atomic_store_n(&bc->rc, rc, __ATOMIC_RELAXED);
  }
}

/* Run a validated problem (see mxu_internal.h). */
int tpumxu_run(const tpumxu_problem *p) {
  job T;
  memset(&T, 0, sizeof T);
  T.isa = p->isa;
  T.dtype = p->dtype;
  T.alpha = p->alpha;
  T.beta = p->beta;
  T.m = p->m;
  T.n = p->n;
  T.k = p->k;
  T.A = (tpumxu_src){p->a, p->sam, p->sak, p->dtype};
  T.B = (tpumxu_src){p->b, p->sbn, p->sbk, p->dtype};
  T.scm = p->scm;
  T.scn = p->scn;
  T.epi = p->epi;
  T.epi_ctx = p->epi_ctx;
  /* raw f32 values: FP32 precision, or f16 storage (f16 x f16 products are
   * exact in f32); bf16 parts: the split precisions and bf16 storage */
  int raw = p->dtype == TPU_F16 || (p->dtype == TPU_F32 && p->prec == TPU_PREC_FP32);
  if (raw)
    T.nplanes = 0;
  else if (p->dtype == TPU_BF16)
    T.nplanes = 1;
  else
    T.nplanes = p->prec == TPU_PREC_HIGHEST ? 3 : p->prec == TPU_PREC_HIGH ? 2 : 1;
  if (p->dtype == TPU_F32 && p->prec == TPU_PREC_HIGH)
    T.small = k_small_high, T.nsmall = 2;
  if (p->dtype == TPU_F32 && p->prec == TPU_PREC_HIGHEST)
    T.small = k_small_highest, T.nsmall = 5;
  switch (p->isa) {
  case TPUMXU_ISA_AVX512BF16:
    T.kd = raw ? &tpumxu_kern_avx512_f32 : &tpumxu_kern_avx512bf16_bf16p;
    break;
  case TPUMXU_ISA_AVX512: T.kd = &tpumxu_kern_avx512_f32; break;
  case TPUMXU_ISA_AVX2: T.kd = &tpumxu_kern_avx2_f32; break;
  default: T.kd = &tpumxu_kern_scalar_f32; break;
  }
  T.fmt = T.kd->fmt;
  /* blocking (k steps / rows / cols); env overrides are for tuning */
  int np = T.nplanes ? T.nplanes : 1;
  T.kc_max = env_i64(ENV_KC, T.fmt == TPUMXU_FMT_BF16P ? 8192 / np : 4096 / np);
  T.a2_bytes = env_i64(ENV_A2, 384 << 10);
  T.mc_max = env_i64(ENV_MC, 8 * T.kd->mr);
  T.nc_max = env_i64(ENV_NC, 1024);
  T.mch_max = env_i64(ENV_MCH, 1024);
  if (T.kc_max < 2) T.kc_max = 2;
  if (T.mc_max < T.kd->mr) T.mc_max = T.kd->mr;
  if (T.nc_max < T.kd->nr) T.nc_max = T.kd->nr;
  if (T.mch_max < T.mc_max) T.mch_max = T.mc_max;

  double work = (double)p->m * (double)p->n * (double)p->k;
  if (p->batch > 1 && work * p->batch >= 1 << 18 &&
      (work < (double)(1 << 22) ||
       (work <= (double)(1 << 24) && p->batch >= 2 * tpurt_num_threads()))) {
    batch_ctx bc = {p, &T, TPU_OK};
    tpurt_parallel_for(p->batch, 1, batch_fn, &bc);
    return bc.rc ? tpu_error(bc.rc, "tpumxu_gemm: cannot allocate workspace") : TPU_OK;
  }
  for (int64_t b = 0; b < p->batch; b++) {
    job J;
    item_at(p, &T, b, &J);
    int rc = run_item(&J);
    if (rc) return rc;
  }
  return TPU_OK;
}
