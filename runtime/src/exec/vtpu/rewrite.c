/* exec/vtpu/rewrite.c - the plan's graph rewrite (prefix tpux_): bf16
 * operands for f32 matmuls at DEFAULT precision.
 *
 * DEFAULT multiplies bf16(x) by bf16(w) with f32 accumulation. Left to the
 * matrix unit, every dot rounds (and, for a transposed operand, gathers)
 * its f32 operands itself, so a value read by several dots (an activation
 * by the forward dot and the weight-gradient dot, a weight by the forward
 * and the input-gradient dot) is rounded once per dot. The rewrite
 * rounds each such value once, where it is produced:
 *
 *   dot(view..(x), view..(w)) -> dot(view..(convert(x, bf16)), ...)
 *
 * The convert is placed right after x's node, so an elementwise producer
 * computes it in its fused region (written once, half the bytes; x itself
 * is no longer stored when nothing else reads it), a dot producer runs it
 * as its GEMM epilogue, and a parameter is converted alone, in its own
 * memory order (a transposed weight stays transposed: one flat pass). The
 * view chain between x and the dot (transpose, broadcast, slice, reshape,
 * reverse) is replayed on the bf16 value, and the dot multiplies bf16
 * operands into its f32 result (tpumxu_gemm_io), reading transposed ones
 * in place. Products are the same; the f32 accumulation order may differ
 * where the matrix unit now reads an operand transposed.
 *
 * Only dots of at least REWRITE_MIN_MACS multiply-adds are rewritten (a
 * tiny dot gains nothing and its program would gain regions), and only
 * where bf16 is native to the host (tpumxu_bf16_native: elsewhere the
 * matrix unit would widen the bf16 copies back to f32). Switch:
 * TPUX_FUSE_BF16_OPERANDS (env TORCH_TPU_NO_BF16_OPERANDS=1), read when a
 * program is planned. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "exec/vtpu/internal.h"
#include "tpu_mxu.h"

#define REWRITE_MIN_MACS ((int64_t)1 << 21)

static atomic_int g_mode = -1; /* -1: environment decides */
static atomic_llong g_dots;    /* dots rewritten (process-wide) */

int tpux__bf16_operands_enabled(void) {
  int m = atomic_load(&g_mode);
  if (m >= 0) return m;
  const char *s = getenv("TORCH_TPU_NO_BF16_OPERANDS");
  return !(s && *s && strcmp(s, "0") != 0);
}

void tpux__set_bf16_operands(int mode) {
  atomic_store(&g_mode, mode < 0 ? -1 : mode != 0);
}

int64_t tpux__bf16_operand_dots(void) { return atomic_load(&g_dots); }

/* The value a dot operand is a view chain of (itself when it is no view). */
static int chain_source(const tpuir_graph *g, int v) {
  for (;;) {
    const tpuir_node *n = tpuir_get_node(g, v);
    if (!tpux__is_view_op(n->op)) return v;
    v = n->in[0];
  }
}

/* Multiply-adds of dot node n: its result's elements times the
 * contracted sizes. */
static int64_t dot_macs(const tpuir_graph *g, const tpuir_node *n) {
  int64_t macs = 1;
  for (int i = 0; i < n->ndim; i++) macs *= n->sizes[i];
  const tpuir_node *l = tpuir_get_node(g, n->in[0]);
  for (int i = 0; i < n->nb; i++) macs *= l->sizes[n->c[i]];
  return macs;
}

static int candidate(const tpuir_graph *g, const tpuir_node *n) {
  if (n->op != TPUIR_DOT_GENERAL || n->dtype != TPU_F32 || n->kind != TPU_PREC_DEFAULT)
    return 0;
  for (int k = 0; k < 2; k++)
    if (tpuir_get_node(g, n->in[k])->dtype != TPU_F32) return 0;
  return dot_macs(g, n) >= REWRITE_MIN_MACS;
}

/* Node s copied with operands `ops` (nin of them) and result dtype dt. */
static tpuir_val copy_with(tpuir_graph *h, const tpuir_node *s, int nin,
                           const tpuir_val *ops, int dt) {
  tpuir_node c = *s;
  tpuir_val map[4];
  for (int k = 0; k < nin; k++) {
    c.in[k] = k;
    map[k] = ops[k];
  }
  c.dtype = dt;
  return tpuir_copy_node(h, &c, map);
}

/* The bf16 counterpart (in h) of dot operand v of g: v's view chain
 * replayed on the converted source. */
static tpuir_val bf16_operand(const tpuir_graph *g, tpuir_graph *h, int v,
                              const tpuir_val *shadow) {
  const tpuir_node *n = tpuir_get_node(g, v);
  if (!tpux__is_view_op(n->op)) return shadow[v];
  tpuir_val x = bf16_operand(g, h, n->in[0], shadow);
  return x < 0 ? x : copy_with(h, n, 1, &x, TPU_BF16);
}

int tpux__rewrite_dots(const tpuir_graph *g, tpuir_graph **out, char **alone) {
  *out = NULL;
  *alone = NULL;
  int nn = tpuir_num_nodes(g), ndots = 0;
  if (!tpux__bf16_operands_enabled() || !tpumxu_bf16_native()) return TPU_OK;
  for (int t = 0; t < nn && !ndots; t++) ndots = candidate(g, tpuir_get_node(g, t));
  if (!ndots) return TPU_OK;
  /* uses[x]: candidate-dot operands whose source is x (capped at 2);
   * dot[t]: dot t is rewritten; need[x]: x gets a bf16 counterpart */
  char *uses = calloc(3 * (size_t)nn, 1), *dot = uses + nn, *need = dot + nn;
  tpuir_val *map = malloc(2 * (size_t)nn * sizeof *map), *shadow = map + nn;
  tpuir_graph *h = tpuir_graph_new();
  int rc = uses && map && h ? TPU_OK : tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
  for (int t = 0; t < nn && rc == TPU_OK; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    for (int k = 0; k < 2 && candidate(g, n); k++) {
      char *u = &uses[chain_source(g, n->in[k])];
      *u += *u < 2;
    }
  }
  /* A dot gains when an operand is produced inside the program (rounded
   * by its producer) or is a parameter other dots read too (rounded
   * once). Two parameters read by this dot alone (Strict Eager's lone
   * matmul) stay with the matrix unit, which rounds them as it packs them
   * in their memory order. */
  ndots = 0;
  for (int t = 0; t < nn && rc == TPU_OK; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (!candidate(g, n)) continue;
    for (int k = 0; k < 2; k++) {
      int x = chain_source(g, n->in[k]);
      dot[t] |= tpuir_get_node(g, x)->op != TPUIR_PARAM || uses[x] > 1;
    }
    for (int k = 0; k < 2 && dot[t]; k++) need[chain_source(g, n->in[k])] = 1;
    ndots += dot[t];
  }
  for (int t = 0; t < nn && rc == TPU_OK; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (dot[t]) { /* (values below 0 are error codes) */
      tpuir_val ops[2] = {bf16_operand(g, h, n->in[0], shadow), -1};
      if (ops[0] >= 0) ops[1] = bf16_operand(g, h, n->in[1], shadow);
      map[t] = ops[0] < 0 ? ops[0] : ops[1] < 0 ? ops[1] : copy_with(h, n, 2, ops, n->dtype);
    } else {
      map[t] = tpuir_copy_node(h, n, map);
    }
    if (map[t] >= 0 && need[t]) shadow[t] = tpuir_convert(h, map[t], TPU_BF16);
    rc = map[t] < 0 ? map[t] : need[t] && shadow[t] < 0 ? shadow[t] : TPU_OK;
    if (rc == TPU_OK && need[t] && n->op == TPUIR_PARAM) need[t] = 2; /* alone */
  }
  int nh = rc == TPU_OK ? tpuir_num_nodes(h) : 0;
  char *al = rc == TPU_OK ? calloc((size_t)(nh ? nh : 1), 1) : NULL;
  if (rc == TPU_OK && !al) rc = tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
  for (int t = 0; t < nn && al; t++)
    if (need[t] == 2) al[shadow[t]] = 1;
  if (rc == TPU_OK) {
    int no = tpuir_num_outputs(g);
    tpuir_val *outs = malloc((size_t)(no ? no : 1) * sizeof *outs);
    if (!outs) rc = tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
    for (int i = 0; i < no && outs; i++) outs[i] = map[tpuir_output(g, i)];
    if (outs) rc = tpuir_set_outputs(h, no, outs);
    free(outs);
  }
  free(uses);
  free(map);
  if (rc != TPU_OK || !ndots) {
    tpuir_graph_free(h);
    free(al);
    return rc;
  }
  *alone = al;
  atomic_fetch_add(&g_dots, ndots);
  *out = h;
  return TPU_OK;
}
