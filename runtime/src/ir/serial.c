/* ir/serial.c - a graph to and from bytes (tpuir_write / tpuir_read), the
 * format of the compilation cache's disk tier.
 *
 * Versioned by field, not by struct image: a header ("TPIR", format
 * version, node/param/output counts), then per node a field count and
 * fields (u8 tag, u32 byte length, payload), then the outputs. The reader
 * skips tags it does not know, leaves missing fields zero and rebuilds every
 * node through the builder hooks, so the operand ranges, the op table and
 * the arity checks apply to what comes from disk as to what a lowering
 * builds. Host byte order (the cache is per host). */
#include <stdlib.h>
#include <string.h>

#include "ir/internal.h"

#define SER_VERSION 1u

enum { F_OP = 1, F_DTYPE, F_SIZES, F_IN, F_LIST, F_KIND, F_DIM, F_A, F_B, F_C, F_D,
       F_NA, F_NB, F_FVAL, F_IVAL, F_SEED, F_OFFSET };

typedef struct hdr {
  char magic[4];
  uint32_t version;
  int32_t nnodes, nparams, nouts;
} hdr;

static int put(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, n, 1, f) == 1; }

static int field(FILE *f, uint8_t tag, const void *p, size_t n) {
  uint32_t len = (uint32_t)n;
  return put(f, &tag, 1) && put(f, &len, sizeof len) && put(f, p, n);
}

/* an attribute array without its trailing zeros */
static size_t used(const int64_t *v) {
  size_t n = TPU_MAX_DIMS;
  while (n > 0 && v[n - 1] == 0) n--;
  return n * sizeof(int64_t);
}

int tpuir_write(const tpuir_graph *g, FILE *f) {
  hdr h = {{'T', 'P', 'I', 'R'}, SER_VERSION, tpuir_num_nodes(g), tpuir_num_params(g),
           tpuir_num_outputs(g)};
  int ok = put(f, &h, sizeof h);
  for (int t = 0; ok && t < h.nnodes; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    uint32_t nf = 17;
    ok = put(f, &nf, sizeof nf) && field(f, F_OP, &n->op, 4) && field(f, F_DTYPE, &n->dtype, 4) &&
         field(f, F_SIZES, n->sizes, (size_t)n->ndim * 8) &&
         field(f, F_IN, n->in, (size_t)n->nin * 4) &&
         field(f, F_LIST, n->list, (size_t)n->nlist * 4) && field(f, F_KIND, &n->kind, 4) &&
         field(f, F_DIM, &n->dim, 4) && field(f, F_A, n->a, used(n->a)) &&
         field(f, F_B, n->b, used(n->b)) && field(f, F_C, n->c, used(n->c)) &&
         field(f, F_D, n->d, used(n->d)) && field(f, F_NA, &n->na, 4) &&
         field(f, F_NB, &n->nb, 4) && field(f, F_FVAL, &n->fval, 8) &&
         field(f, F_IVAL, &n->ival, 8) && field(f, F_SEED, &n->seed, 8) &&
         field(f, F_OFFSET, &n->offset, 8);
  }
  for (int i = 0; ok && i < h.nouts; i++) {
    tpuir_val v = tpuir_output(g, i);
    ok = put(f, &v, sizeof v);
  }
  return ok ? TPU_OK : tpu_error(TPU_E_INTERNAL, "tpuir_write: write failed");
}

static int bad(const char *why) {
  return tpu_error(TPU_E_INVALID, "tpuir_read: corrupt graph (%s)", why);
}

/* one node's fields into s (list: allocated, caller frees) */
static int read_node(FILE *f, tpuir_node *s, tpuir_val **list) {
  uint32_t nf;
  if (fread(&nf, sizeof nf, 1, f) != 1 || nf > 64) return bad("field count");
  memset(s, 0, sizeof *s);
  *list = NULL;
  s->op = -1;
  for (uint32_t k = 0; k < nf; k++) {
    uint8_t tag;
    uint32_t len;
    union { int64_t i64[TPU_MAX_DIMS]; int32_t i32[2 * TPU_MAX_DIMS]; double d; uint64_t u; } b;
    if (fread(&tag, 1, 1, f) != 1 || fread(&len, sizeof len, 1, f) != 1) return bad("truncated");
    if (tag == F_LIST) { /* any length */
      if (len % 4 || len / 4 > (1u << 24)) return bad("list");
      s->nlist = (int32_t)(len / 4);
      *list = malloc(len ? len : 1);
      if (!*list) return tpu_error(TPU_E_OOM, "tpuir_read: out of host memory");
      if (len && fread(*list, len, 1, f) != 1) return bad("truncated");
      continue;
    }
    if (len > sizeof b || (len && fread(&b, len, 1, f) != 1)) return bad("field");
    switch (tag) {
    case F_OP: s->op = b.i32[0]; break;
    case F_DTYPE: s->dtype = b.i32[0]; break;
    case F_SIZES: s->ndim = (int32_t)(len / 8); memcpy(s->sizes, b.i64, len); break;
    case F_IN:
      if (len > sizeof s->in) return bad("operands");
      s->nin = (int32_t)(len / 4);
      memcpy(s->in, b.i32, len);
      break;
    case F_KIND: s->kind = b.i32[0]; break;
    case F_DIM: s->dim = b.i32[0]; break;
    case F_A: memcpy(s->a, b.i64, len); break;
    case F_B: memcpy(s->b, b.i64, len); break;
    case F_C: memcpy(s->c, b.i64, len); break;
    case F_D: memcpy(s->d, b.i64, len); break;
    case F_NA: s->na = b.i32[0]; break;
    case F_NB: s->nb = b.i32[0]; break;
    case F_FVAL: s->fval = b.d; break;
    case F_IVAL: memcpy(&s->ival, &b.u, 8); break;
    case F_SEED: s->seed = b.u; break;
    case F_OFFSET: s->offset = b.u; break;
    default: break; /* a field of a newer writer */
    }
  }
  return TPU_OK;
}

tpuir_graph *tpuir_read(FILE *f) {
  hdr h;
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, "TPIR", 4) != 0) {
    bad("not a graph");
    return NULL;
  }
  if (h.version != SER_VERSION || h.nnodes < 0 || h.nnodes > (1 << 24) || h.nouts < 0 ||
      h.nouts > (1 << 24)) {
    bad("version or counts");
    return NULL;
  }
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val *outs = calloc((size_t)h.nouts + 1, sizeof *outs);
  if (!g || !outs) goto fail;
  for (int t = 0; t < h.nnodes; t++) {
    tpuir_node s;
    tpuir_val *list = NULL;
    if (read_node(f, &s, &list) != TPU_OK) goto fail;
    int ok = s.op >= 0 && s.op < TPUIR_NUM_OPS && s.ndim <= TPU_MAX_DIMS;
    for (int k = 0; ok && k < s.nin; k++) ok = s.in[k] >= 0 && s.in[k] < t;
    for (int k = 0; ok && k < s.nlist; k++) ok = list[k] >= 0 && list[k] < t;
    if (!ok) {
      free(list);
      bad("node");
      goto fail;
    }
    if (s.op == TPUIR_PARAM) { /* the builder numbers the parameters */
      free(list);
      if (tpuir_param(g, s.dtype, s.ndim, s.sizes) != t) goto fail;
      continue;
    }
    tpuir_node *d = tpuir__new_node(g, s.op);
    if (!d) {
      free(list);
      goto fail;
    }
    *d = s;
    d->list = list;
    if (tpuir__commit(g) != t) { /* arity check failed: the node is not kept */
      free(list);
      goto fail;
    }
  }
  if (fread(outs, sizeof *outs, (size_t)h.nouts, f) != (size_t)h.nouts ||
      tpuir_num_params(g) != h.nparams || tpuir_set_outputs(g, h.nouts, outs) != TPU_OK) {
    bad("outputs");
    goto fail;
  }
  free(outs);
  return g;
fail:
  free(outs);
  tpuir_graph_free(g);
  return NULL;
}
