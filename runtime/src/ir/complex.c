/* ir/complex.c - IR builders for complex numbers and the FFT (see the
 * "complex numbers and FFT" section of tpu_ir.h).
 *
 * Node attributes:
 *   REAL, IMAG, CONJ  in[0]
 *   COMPLEX           in = {re, im}
 *   FFT               in[0], kind = tpuir_fft_type, a = fft_length, na
 */
#include <stdio.h>

#include "ir/internal.h"

/* New node of `op` with x's shape and dtype `dt` and operand x (and y
 * when y >= 0). */
static tpuir_val part_node(tpuir_graph *g, int op, tpuir_val x, tpuir_val y, int dt,
                           const char *nm) {
  const tpuir_node *xn = tpuir_get_node(g, x);
  int nd = xn->ndim;
  int64_t sizes[TPU_MAX_DIMS];
  for (int i = 0; i < nd; i++) sizes[i] = xn->sizes[i];
  tpuir_node *n = tpuir__new_node(g, op);
  if (!n) return tpu_error(TPU_E_OOM, "%s: out of host memory", nm);
  n->dtype = dt;
  n->ndim = nd;
  for (int i = 0; i < nd; i++) n->sizes[i] = sizes[i];
  n->nin = y >= 0 ? 2 : 1;
  n->in[0] = x;
  n->in[1] = y >= 0 ? y : 0;
  return tpuir__commit(g);
}

/* Real part (complex -> part dtype; real -> itself). */
tpuir_val tpuir_real(tpuir_graph *g, tpuir_val x) {
  int rc = tpuir__operand(g, x, "real", NULL);
  if (rc) return rc;
  int dt = tpuir_get_node(g, x)->dtype;
  return part_node(g, TPUIR_REAL, x, -1, tpu_dtype_complex_part(dt), "real");
}

/* Imaginary part (complex -> part dtype; real -> zeros). */
tpuir_val tpuir_imag(tpuir_graph *g, tpuir_val x) {
  int rc = tpuir__operand(g, x, "imag", NULL);
  if (rc) return rc;
  int dt = tpuir_get_node(g, x)->dtype;
  return part_node(g, TPUIR_IMAG, x, -1, tpu_dtype_complex_part(dt), "imag");
}

/* Complex conjugate. */
tpuir_val tpuir_conj(tpuir_graph *g, tpuir_val x) {
  int rc = tpuir__operand(g, x, "conj", NULL);
  if (rc) return rc;
  return part_node(g, TPUIR_CONJ, x, -1, tpuir_get_node(g, x)->dtype, "conj");
}

/* re + im*i. */
tpuir_val tpuir_complex(tpuir_graph *g, tpuir_val re, tpuir_val im) {
  int rc = tpuir__operand(g, re, "complex", NULL);
  if (rc) return rc;
  if ((rc = tpuir__operand(g, im, "complex", NULL))) return rc;
  const tpuir_node *a = tpuir_get_node(g, re), *b = tpuir_get_node(g, im);
  if (a->dtype != b->dtype)
    return tpu_error(TPU_E_TYPE, "complex: real and imaginary parts must have the "
                     "same dtype, got %s and %s", tpu_dtype_name(a->dtype),
                     tpu_dtype_name(b->dtype));
  if (a->dtype != TPU_F32 && a->dtype != TPU_F64)
    return tpu_error(TPU_E_TYPE, "complex: parts must be float32 or float64, got %s",
                     tpu_dtype_name(a->dtype));
  int same = a->ndim == b->ndim;
  for (int i = 0; same && i < a->ndim; i++) same = a->sizes[i] == b->sizes[i];
  if (!same)
    return tpu_error(TPU_E_INVALID, "complex: parts must have the same shape");
  return part_node(g, TPUIR_COMPLEX, re, im, tpu_dtype_to_complex(a->dtype), "complex");
}

/* StableHLO fft over the trailing nlen dims. */
tpuir_val tpuir_fft(tpuir_graph *g, tpuir_val x, int fft_type, int nlen,
                    const int64_t *fft_length) {
  int rc = tpuir__operand(g, x, "fft", NULL);
  if (rc) return rc;
  if (fft_type < TPUIR_FFT_FWD || fft_type > TPUIR_FFT_IRFFT)
    return tpu_error(TPU_E_INVALID, "fft: invalid fft_type %d", fft_type);
  const tpuir_node *xn = tpuir_get_node(g, x);
  if (nlen < 1 || nlen > 3 || nlen > xn->ndim || !fft_length)
    return tpu_error(TPU_E_INVALID, "fft: %d fft dims for a rank-%d operand "
                     "(expected 1..3, at most the rank)", nlen, (int)xn->ndim);
  for (int i = 0; i < nlen; i++)
    if (fft_length[i] < 1)
      return tpu_error(TPU_E_INVALID, "fft: fft_length[%d] = %lld must be >= 1", i,
                       (long long)fft_length[i]);
  int dt = xn->dtype, rdt;
  if (fft_type == TPUIR_FFT_RFFT) {
    if (dt != TPU_F32 && dt != TPU_F64)
      return tpu_error(TPU_E_TYPE, "fft: RFFT needs a float32/float64 operand, got %s",
                       tpu_dtype_name(dt));
    rdt = tpu_dtype_to_complex(dt);
  } else {
    if (!tpu_dtype_is_complex(dt))
      return tpu_error(TPU_E_TYPE, "fft: needs a complex operand, got %s",
                       tpu_dtype_name(dt));
    rdt = fft_type == TPUIR_FFT_IRFFT ? tpu_dtype_complex_part(dt) : dt;
  }
  int nd = xn->ndim;
  int64_t sizes[TPU_MAX_DIMS];
  for (int i = 0; i < nd; i++) sizes[i] = xn->sizes[i];
  for (int i = 0; i < nlen; i++) {
    int d = nd - nlen + i;
    int64_t want = fft_length[i];
    if (i == nlen - 1 && fft_type == TPUIR_FFT_IRFFT) want = fft_length[i] / 2 + 1;
    if (sizes[d] != want)
      return tpu_error(TPU_E_INVALID, "fft: operand dim %d has size %lld, expected "
                       "%lld for fft_length %lld", d, (long long)sizes[d],
                       (long long)want, (long long)fft_length[i]);
  }
  int64_t last = fft_length[nlen - 1];
  if (fft_type == TPUIR_FFT_RFFT) sizes[nd - 1] = last / 2 + 1;
  if (fft_type == TPUIR_FFT_IRFFT) sizes[nd - 1] = last;
  tpuir_node *n = tpuir__new_node(g, TPUIR_FFT);
  if (!n) return tpu_error(TPU_E_OOM, "fft: out of host memory");
  n->dtype = rdt;
  n->ndim = nd;
  for (int i = 0; i < nd; i++) n->sizes[i] = sizes[i];
  n->nin = 1;
  n->in[0] = x;
  n->kind = fft_type;
  n->na = nlen;
  for (int i = 0; i < nlen; i++) n->a[i] = fft_length[i];
  return tpuir__commit(g);
}

/* Complex dot_general through four real ones (see ir/internal.h). */
tpuir_val tpuir__dot_complex(tpuir_graph *g, tpuir_val lhs, tpuir_val rhs,
                             int nbatch, const int64_t *lhs_batch,
                             const int64_t *rhs_batch, int ncontract,
                             const int64_t *lhs_contract,
                             const int64_t *rhs_contract, int precision,
                             int out_dtype) {
  int pd = tpu_dtype_complex_part(out_dtype);
  tpuir_val a = tpuir_real(g, lhs), b = tpuir_imag(g, lhs);
  tpuir_val c = tpuir_real(g, rhs), d = tpuir_imag(g, rhs);
#define CDOT(x, y)                                                             \
  tpuir_dot_general(g, x, y, nbatch, lhs_batch, rhs_batch, ncontract,         \
                    lhs_contract, rhs_contract, precision, pd)
  tpuir_val ac = CDOT(a, c), bd = CDOT(b, d), ad = CDOT(a, d), bc = CDOT(b, c);
#undef CDOT
  tpuir_val re = tpuir_binary(g, TPUIR_SUB, ac, bd);
  tpuir_val im = tpuir_binary(g, TPUIR_ADD, ad, bc);
  return tpuir_complex(g, re, im);
}
