/* exec/vtpu/epilogue.c - vTPU GEMM epilogues: an elementwise region that reads
 * a DOT_GENERAL's value (bias add, activation, scaling, residual add, ...)
 * runs on each finished block of the GEMM's result, on the pool worker that
 * produced the block, while it is hot in cache, instead of in a separate
 * pass over the whole result afterwards.
 *
 * The region's program is built once (tpux__region_prog: same register
 * allocation, same instructions, same stores as the unfused region), with
 * its arrays re-expressed in the GEMM's [batch, M, N] coordinates; each
 * block (batch b, rows m0..m1, cols n0..n1) runs the program serially over
 * that 2-D window. Every element goes through the same operations in the
 * same order as in the unfused evaluation, so results are bit-identical;
 * only the tiling differs. The dot's value is still stored in full (the
 * region reads it from there), so other users of it are unaffected.
 *
 * The executor (exec/vtpu/exec.c) decides which regions qualify; here the fusion
 * still falls back to "dot, then region" when the dot takes a path without
 * a GEMM (integers, converted results, empty or k == 0 products) or when an
 * array of the region cannot be seen as [batch, M, N] with strides.
 *
 * Switch: TORCH_TPU_NO_EPILOGUE=1 (read once) or tpux__set_epilogue(0)
 * turns the fusion off (tests compare both).
 */
#include <pthread.h>
#include <stdlib.h>

#include "exec/vtpu/internal.h"
#include "tpu_mxu.h"

static atomic_int g_mode = -1; /* -1: environment decides */
static atomic_llong g_runs;      /* dots whose GEMM ran an epilogue */
static int g_env_on = 1;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

static void env_init(void) {
  const char *s = getenv("TORCH_TPU_NO_EPILOGUE");
  g_env_on = !(s && *s && strcmp(s, "0") != 0);
}

/* Whether epilogue fusion is on (see exec/vtpu/internal.h). */
int tpux__epilogue_enabled(void) {
  int m = atomic_load(&g_mode);
  if (m >= 0) return m;
  pthread_once(&g_env_once, env_init);
  return g_env_on;
}

/* Force epilogue fusion on (1) / off (0), or back to the environment (-1). */
void tpux__set_epilogue(int mode) {
  atomic_store(&g_mode, mode < 0 ? -1 : mode != 0);
}

/* Number of dots whose GEMM ran a region in its epilogue (process-wide). */
int64_t tpux__epilogue_runs(void) { return atomic_load(&g_runs); }

typedef struct epi_job {
  xk_prog *p;
  int64_t st[XK_MAX_ARR][3]; /* array strides over [batch, M, N] */
} epi_job;

/* GEMM callback: run the region over one finished block. */
static void epi_block(void *ctx, int64_t b, int64_t m0, int64_t m1,
                      int64_t n0, int64_t n1) {
  epi_job *J = ctx;
  const xk_space *full = &J->p->sp;
  xk_space s;
  s.nd = 2;
  s.sz[0] = m1 - m0;
  s.sz[1] = n1 - n0;
  s.narr = full->narr;
  for (int a = 0; a < s.narr; a++) {
    const xk_arr *fa = &full->arr[a];
    xk_arr *x = &s.arr[a];
    const int64_t *st = J->st[a];
    tpux__arr_at(x, fa, b * st[0] + m0 * st[1] + n0 * st[2]);
    x->st[0] = st[1];
    x->st[1] = st[2];
  }
  tpux__prog_run_serial(J->p, &s);
}

/* DOT_GENERAL t with the region members[0..n) in its epilogue (see
 * exec/vtpu/internal.h). */
int tpux__eval_dot_fused(xctx *c, int t, int n, const int32_t *members,
                         const char *store, const tpu_view *const *dst) {
  const tpuir_graph *g = c->g;
  const tpuir_node *d = tpuir_get_node(g, t);
  int rc = tpux__dot_value(c, t); /* the region's program reads it */
  if (rc) return rc;
  xk_prog *p;
  rc = tpux__region_prog(c, n, members, store, dst, &p);
  if (rc) return rc;
  /* the GEMM's [batch, M, N]: batch dims, lhs free dims, rhs free dims */
  const tpuir_node *ln = tpuir_get_node(g, d->in[0]);
  int nb = d->na, nlf = ln->ndim - d->na - d->nb;
  int64_t sz3[3] = {1, 1, 1};
  for (int i = 0; i < d->ndim; i++) sz3[i < nb ? 0 : i < nb + nlf ? 1 : 2] *= d->sizes[i];
  int ok = p->sp.nd == d->ndim;
  for (int i = 0; ok && i < d->ndim; i++) ok = p->sp.sz[i] == d->sizes[i];
  epi_job *J = ok ? malloc(sizeof *J) : NULL;
  if (J) {
    J->p = p;
    for (int a = 0; a < p->sp.narr && ok; a++)
      ok = tpux__reshape_strides(p->sp.nd, p->sp.sz, p->sp.arr[a].st, 3, sz3,
                                 J->st[a]);
  }
  atomic_store(&p->err, TPU_OK);
  p->err_val = 0;
  int applied = 0;
  rc = tpux__eval_dot_ex(c, t, J && ok ? epi_block : NULL, J, &applied);
  if (!rc && applied) atomic_fetch_add(&g_runs, 1);
  if (!rc) rc = applied ? tpux__prog_status(p) : tpux__prog_run(p);
  free(J);
  free(p);
  return rc;
}
