/* lower/kernel.c - lowering of torch_tpu::c_kernel (a user C kernel call,
 * see torch_tpu/kernels): checks the call against the kernel's signature
 * (tpux_kernel_infer), makes its tensors parameters and its scalars
 * constants (Fused Eager lifts constants into run-time parameters, so a
 * changed scalar does not make a new program), and emits one
 * TPUIR_CUSTOM_CALL node per kernel output.
 *
 * Schema: c_kernel(int key, Tensor[] inputs, float[] fscalars,
 * int[] iscalars) -> Tensor[]. The kernel's arguments are taken in
 * signature order: a tensor from `inputs`, a float/double scalar from
 * `fscalars`, an int/bool scalar from `iscalars`.
 */
#include <stdlib.h>
#include <string.h>

#include "lower/internal.h"
#include "tpu_exec.h"

static int lower_c_kernel(tpulw__b *b) {
  const tpulw_arg *ka = tpulw__arg(b, "key"), *ta = tpulw__arg(b, "inputs"),
                  *fa = tpulw__arg(b, "fscalars"), *ia = tpulw__arg(b, "iscalars");
  if (!ka || !ta || !fa || !ia || ka->kind != TPULW_INT || ta->kind != TPULW_TENSORS ||
      fa->kind != TPULW_FLOATS || ia->kind != TPULW_INTS)
    return tpu_error(TPU_E_INVALID, "c_kernel: expected (int key, Tensor[] inputs, "
                     "float[] fscalars, int[] iscalars)");
  uint64_t key = (uint64_t)ka->i;
  const char *name = tpux_kernel_name(key);
  if (!name)
    return tpu_error(TPU_E_INVALID, "c_kernel: no kernel registered under key %016llx",
                     (unsigned long long)key);
  const tpux_executor *ex = tpux_executor_active();
  const char *fb = getenv("TORCH_TPU_PJRT_FALLBACK");
  if (ex && strcmp(ex->name, "pjrt") == 0 && !(fb && strcmp(fb, "vtpu") == 0))
    return tpu_error(TPU_E_UNSUPPORTED,
                     "C kernel '%s' cannot run on the PJRT executor (TORCH_TPU_BACKEND=pjrt): "
                     "user C kernels run on the vTPU executor only (or set "
                     "TORCH_TPU_PJRT_FALLBACK=vtpu to run such programs on the vTPU)", name);

  /* the signature: argument kinds in order (ndim -1 = scalar) */
  int32_t dt[TPUX_KERNEL_MAX_ARGS], nd[TPUX_KERNEL_MAX_ARGS];
  int64_t sz[TPUX_KERNEL_MAX_ARGS][TPU_MAX_DIMS];
  tpuir_val ops[TPUX_KERNEL_MAX_ARGS];
  int nin = ta->n + fa->n + ia->n;
  if (nin > TPUX_KERNEL_MAX_ARGS)
    return tpu_error(TPU_E_INVALID, "%s(): too many arguments (%d)", name, nin);
  int32_t want_nd[TPUX_KERNEL_MAX_ARGS], want_dt[TPUX_KERNEL_MAX_ARGS];
  int nk = tpux_kernel_args(key, TPUX_KERNEL_MAX_ARGS, want_nd, want_dt);
  if (nk < 0) return nk;
  int ti = 0, fi = 0, ii = 0;
  for (int k = 0; k < nk; k++) {
    if (want_nd[k] >= 0) {
      if (ti >= ta->n) break;
      const tpulw_tensor *t = &ta->tensors[ti++];
      if (!t->defined)
        return tpu_error(TPU_E_INVALID, "%s(): argument %d is an undefined tensor", name, k);
      dt[k] = t->view.dtype;
      nd[k] = t->view.ndim;
      for (int a = 0; a < t->view.ndim; a++) sz[k][a] = t->view.sizes[a];
      ops[k] = tpulw__tensor(b, t);
    } else if (tpu_dtype_is_float(want_dt[k])) {
      if (fi >= fa->n) break;
      dt[k] = want_dt[k];
      nd[k] = -1;
      ops[k] = tpuir_const_f(b->g, want_dt[k], fa->floats[fi++]);
    } else {
      if (ii >= ia->n) break;
      dt[k] = want_dt[k];
      nd[k] = -1;
      ops[k] = tpuir_const_i(b->g, want_dt[k], ia->ints[ii++]);
    }
    if (ops[k] < 0) return ops[k];
  }
  if (nk != nin || ti != ta->n || fi != fa->n || ii != ia->n)
    return tpu_error(TPU_E_INVALID, "%s(): got %d tensors, %d float and %d int scalars, which "
                     "do not match its signature", name, (int)ta->n, (int)fa->n, (int)ia->n);
  int nout = 0;
  int32_t odt[TPUX_KERNEL_MAX_OUTS], ond[TPUX_KERNEL_MAX_OUTS];
  int64_t osz[TPUX_KERNEL_MAX_OUTS][TPU_MAX_DIMS];
  int rc = tpux_kernel_infer(key, nin, dt, nd, (const int64_t(*)[TPU_MAX_DIMS])sz, NULL, &nout,
                             odt, ond, osz);
  if (rc < 0) return rc;
  for (int o = 0; o < nout; o++) {
    tpuir_val v = tpuir_custom_call(b->g, key, nin, ops, o, nout, odt[o], ond[o], osz[o]);
    rc = tpulw__result(b, v);
    if (rc < 0) return rc;
  }
  return TPU_OK;
}

const tpulw__row tpulw__row_c_kernel = {"torch_tpu::c_kernel", lower_c_kernel, 0};
