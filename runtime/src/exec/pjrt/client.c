/* exec/pjrt/client.c - the PJRT executor: programs compiled by a PJRT plugin
 * (XLA:CPU from xla-cpu-pjrt, XLA's CUDA plugin, libtpu) from the StableHLO
 * text of exec/pjrt/emit.c, executed on the plugin's first addressable
 * device.
 *
 * Built against the official pjrt_c_api.h found at build time (the
 * xla-cpu-pjrt wheel installs it; runtime/Makefile passes -DTPU_HAVE_PJRT
 * and its directory). Without it every PJRT entry point fails with
 * TPU_E_UNSUPPORTED saying so.
 *
 * Plugin: dlopen(RTLD_NOW | RTLD_LOCAL) of TORCH_TPU_PJRT_PLUGIN,
 * GetPjrtApi, major version must equal the header's, minor version and the
 * API table size must cover every function used here; PJRT_Plugin_Initialize,
 * PJRT_Client_Create (no options), first addressable device. Every args
 * struct carries its <Name>_STRUCT_SIZE; every PJRT_Error is turned into a
 * tpu_error carrying the plugin's message and destroyed; every event is
 * awaited and destroyed.
 *
 * Memory model (pragmatic, for now): tensors live in runtime-owned host
 * memory. execute() uploads each input (BufferFromHostBuffer,
 * kImmutableOnlyDuringCall: the plugin copies during the call), runs the
 * executable, downloads each output (ToHostBuffer, awaited) into the output
 * view and destroys the device buffers. Outputs that alias inputs are
 * therefore safe.
 *
 * Ops StableHLO has no expression for make compile fail with
 * TPU_E_UNSUPPORTED "unsupported on PJRT: <op>"; with
 * TORCH_TPU_PJRT_FALLBACK=vtpu such a program runs on the vTPU instead and
 * is counted (tpux_pjrt_get_stats().fallbacks).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/pjrt/internal.h"

static pthread_mutex_t g_stat_mu = PTHREAD_MUTEX_INITIALIZER;
static tpux_pjrt_stats g_stats;

void tpux_pjrt_get_stats(tpux_pjrt_stats *out) {
  pthread_mutex_lock(&g_stat_mu);
  *out = g_stats;
  pthread_mutex_unlock(&g_stat_mu);
}

#ifndef TPU_HAVE_PJRT

int tpux__pjrt_init(void) {
  return tpu_error(TPU_E_UNSUPPORTED,
                   "PJRT executor not built: the runtime was compiled without pjrt_c_api.h "
                   "(pip install xla-cpu-pjrt, then rebuild the runtime)");
}
const char *tpux__pjrt_device_name(void) { return ""; }
static int nobuild_compile(const tpuir_graph *g, void **exe) {
  (void)g;
  *exe = NULL;
  return tpux__pjrt_init();
}
static int nobuild_execute(void *exe, const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
                           const tpu_view *outs) {
  return tpux__pjrt_init();
}
static void nobuild_release(void *exe) { (void)exe; }
static const tpux_executor g_pjrt = {"pjrt", nobuild_compile, nobuild_execute, nobuild_release,
                                     tpux_copy};
const tpux_executor *tpux_executor_pjrt(void) { return &g_pjrt; }

#else /* TPU_HAVE_PJRT */

#include <dlfcn.h>
#include <glob.h>
#include <stddef.h>

#include "pjrt_c_api.h"

static void *g_dl;
static const PJRT_Api *g_api;
static PJRT_Client *g_client;
static PJRT_Device *g_dev;
static char g_name[256];
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_init_rc = 1; /* 1: not tried yet */
static char g_init_msg[1024];

/* Zeroed args struct of type T with its struct_size set. */
#define ARGS(T, v) \
  T v;             \
  memset(&v, 0, sizeof v); \
  v.struct_size = T##_STRUCT_SIZE

static int code_of(PJRT_Error_Code c) {
  switch (c) {
  case PJRT_Error_Code_INVALID_ARGUMENT:
  case PJRT_Error_Code_OUT_OF_RANGE: return TPU_E_INVALID;
  case PJRT_Error_Code_RESOURCE_EXHAUSTED: return TPU_E_OOM;
  case PJRT_Error_Code_UNIMPLEMENTED: return TPU_E_UNSUPPORTED;
  default: return TPU_E_INTERNAL;
  }
}

/* Turn a PJRT_Error into a tpu_error (message "PJRT <what>: <plugin
 * message>") and destroy it. NULL -> TPU_OK. */
static int perr(PJRT_Error *err, const char *what) {
  if (!err) return TPU_OK;
  ARGS(PJRT_Error_Message_Args, m);
  m.error = err;
  g_api->PJRT_Error_Message(&m);
  ARGS(PJRT_Error_GetCode_Args, c);
  c.error = err;
  PJRT_Error *e2 = g_api->PJRT_Error_GetCode(&c);
  int code = e2 ? TPU_E_INTERNAL : code_of(c.code);
  if (e2) {
    ARGS(PJRT_Error_Destroy_Args, d2);
    d2.error = e2;
    g_api->PJRT_Error_Destroy(&d2);
  }
  int rc = tpu_error(code, "PJRT %s: %.*s", what, (int)m.message_size,
                     m.message ? m.message : "");
  ARGS(PJRT_Error_Destroy_Args, d);
  d.error = err;
  g_api->PJRT_Error_Destroy(&d);
  return rc;
}

/* Await and destroy event ev (NULL is fine). */
static int await_event(PJRT_Event *ev, const char *what) {
  if (!ev) return TPU_OK;
  ARGS(PJRT_Event_Await_Args, a);
  a.event = ev;
  int rc = perr(g_api->PJRT_Event_Await(&a), what);
  ARGS(PJRT_Event_Destroy_Args, d);
  d.event = ev;
  int rc2 = perr(g_api->PJRT_Event_Destroy(&d), "event destroy");
  return rc != TPU_OK ? rc : rc2;
}

static void buffer_destroy(PJRT_Buffer *b) {
  if (!b) return;
  ARGS(PJRT_Buffer_Destroy_Args, d);
  d.buffer = b;
  perr(g_api->PJRT_Buffer_Destroy(&d), "buffer destroy");
}

/* The API table must hold every function we call. */
#define API_HAS(fn) \
  (g_api->struct_size >= offsetof(PJRT_Api, fn) + sizeof(void *) && g_api->fn != NULL)

/* 1 if the machine shows TPU device nodes (/dev/accel* on v2-v4, VFIO
 * groups on v5e/v6e). libtpu without them spends minutes retrying the GCE
 * metadata server before it fails, so we fail at once instead. */
static int have_tpu_devices(void) {
  static const char *pats[] = {"/dev/accel[0-9]*", "/dev/vfio/[0-9]*"};
  for (int i = 0; i < 2; i++) {
    glob_t gl;
    int n = glob(pats[i], 0, NULL, &gl) == 0 ? (int)gl.gl_pathc : 0;
    if (n) globfree(&gl);
    if (n) return 1;
  }
  return 0;
}

static int init_locked(void) {
  const char *path = getenv("TORCH_TPU_PJRT_PLUGIN");
  if (!path || !*path)
    return tpu_error(TPU_E_INVALID,
                     "TORCH_TPU_BACKEND=pjrt: no PJRT plugin found; set TORCH_TPU_PJRT_PLUGIN="
                     "/path/plugin.so or install one (pip install xla-cpu-pjrt for XLA:CPU, "
                     "jax-cuda12-pjrt for NVIDIA GPUs, libtpu for TPUs)");
  const char *base0 = strrchr(path, '/');
  base0 = base0 ? base0 + 1 : path;
  if (strstr(base0, "libtpu") && !have_tpu_devices())
    return tpu_error(TPU_E_INVALID,
                     "PJRT plugin %s: no TPU on this machine (no /dev/accel* or /dev/vfio "
                     "devices); libtpu runs only on a TPU VM. Use TORCH_TPU_BACKEND=vtpu (the "
                     "default) or another plugin",
                     path);
  g_dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_dl) return tpu_error(TPU_E_INVALID, "PJRT plugin %s: cannot load: %s", path, dlerror());
  typedef const PJRT_Api *(*get_api_fn)(void);
  get_api_fn get = (get_api_fn)dlsym(g_dl, "GetPjrtApi");
  if (!get)
    return tpu_error(TPU_E_INVALID, "PJRT plugin %s: no GetPjrtApi symbol (not a PJRT plugin)",
                     path);
  g_api = get();
  if (!g_api) return tpu_error(TPU_E_INTERNAL, "PJRT plugin %s: GetPjrtApi returned NULL", path);
  int maj = g_api->pjrt_api_version.major_version, min = g_api->pjrt_api_version.minor_version;
  if (maj != PJRT_API_MAJOR)
    return tpu_error(TPU_E_INVALID,
                     "PJRT plugin %s: API version %d.%d, this runtime was built for %d.%d "
                     "(major versions must match)",
                     path, maj, min, PJRT_API_MAJOR, PJRT_API_MINOR);
  if (!API_HAS(PJRT_Error_Destroy) || !API_HAS(PJRT_Error_Message) ||
      !API_HAS(PJRT_Error_GetCode) || !API_HAS(PJRT_Event_Await) ||
      !API_HAS(PJRT_Event_Destroy) || !API_HAS(PJRT_Client_Create) ||
      !API_HAS(PJRT_Client_AddressableDevices) || !API_HAS(PJRT_Client_Compile) ||
      !API_HAS(PJRT_Client_BufferFromHostBuffer) || !API_HAS(PJRT_Client_PlatformName) ||
      !API_HAS(PJRT_Device_GetDescription) || !API_HAS(PJRT_DeviceDescription_Kind) ||
      !API_HAS(PJRT_LoadedExecutable_Execute) || !API_HAS(PJRT_LoadedExecutable_Destroy) ||
      !API_HAS(PJRT_Buffer_ToHostBuffer) || !API_HAS(PJRT_Buffer_Destroy))
    return tpu_error(TPU_E_INVALID,
                     "PJRT plugin %s: API %d.%d lacks functions this runtime needs (built for "
                     "%d.%d)",
                     path, maj, min, PJRT_API_MAJOR, PJRT_API_MINOR);
  int rc;
  if (API_HAS(PJRT_Plugin_Initialize)) {
    ARGS(PJRT_Plugin_Initialize_Args, pi);
    if ((rc = perr(g_api->PJRT_Plugin_Initialize(&pi), "plugin initialize")) != TPU_OK) return rc;
  }
  ARGS(PJRT_Client_Create_Args, cc);
  PJRT_Error *err = g_api->PJRT_Client_Create(&cc);
  if (err) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char what[300];
    if (strstr(base, "libtpu"))
      snprintf(what, sizeof what,
               "client create (%s: no usable TPU on this machine? libtpu needs a TPU VM)", base);
    else
      snprintf(what, sizeof what, "client create (%s)", base);
    return perr(err, what);
  }
  g_client = cc.client;
  ARGS(PJRT_Client_AddressableDevices_Args, ad);
  ad.client = g_client;
  if ((rc = perr(g_api->PJRT_Client_AddressableDevices(&ad), "addressable devices")) != TPU_OK)
    return rc;
  if (ad.num_addressable_devices == 0)
    return tpu_error(TPU_E_INVALID, "PJRT plugin %s: the client has no addressable device", path);
  g_dev = ad.addressable_devices[0];
  ARGS(PJRT_Client_PlatformName_Args, pn);
  pn.client = g_client;
  if ((rc = perr(g_api->PJRT_Client_PlatformName(&pn), "platform name")) != TPU_OK) return rc;
  ARGS(PJRT_Device_GetDescription_Args, gd);
  gd.device = g_dev;
  if ((rc = perr(g_api->PJRT_Device_GetDescription(&gd), "device description")) != TPU_OK)
    return rc;
  ARGS(PJRT_DeviceDescription_Kind_Args, dk);
  dk.device_description = gd.device_description;
  if ((rc = perr(g_api->PJRT_DeviceDescription_Kind(&dk), "device kind")) != TPU_OK) return rc;
  snprintf(g_name, sizeof g_name, "%.*s (%.*s via PJRT, API %d.%d)", (int)dk.device_kind_size,
           dk.device_kind, (int)pn.platform_name_size, pn.platform_name, maj, min);
  return TPU_OK;
}

int tpux__pjrt_init(void) {
  pthread_mutex_lock(&g_init_mu);
  if (g_init_rc == 1) {
    g_init_rc = init_locked();
    if (g_init_rc != TPU_OK) snprintf(g_init_msg, sizeof g_init_msg, "%s", tpu_last_error());
  }
  int rc = g_init_rc;
  pthread_mutex_unlock(&g_init_mu);
  if (rc != TPU_OK) return tpu_error(rc, "%s", g_init_msg);
  return TPU_OK;
}

const char *tpux__pjrt_device_name(void) { return g_name; }

static PJRT_Buffer_Type btype(int dt) {
  switch (dt) {
  case TPU_BOOL: return PJRT_Buffer_Type_PRED;
  case TPU_U8: return PJRT_Buffer_Type_U8;
  case TPU_I8: return PJRT_Buffer_Type_S8;
  case TPU_I16: return PJRT_Buffer_Type_S16;
  case TPU_I32: return PJRT_Buffer_Type_S32;
  case TPU_I64: return PJRT_Buffer_Type_S64;
  case TPU_F16: return PJRT_Buffer_Type_F16;
  case TPU_BF16: return PJRT_Buffer_Type_BF16;
  case TPU_F32: return PJRT_Buffer_Type_F32;
  case TPU_F64: return PJRT_Buffer_Type_F64;
  case TPU_C64: return PJRT_Buffer_Type_C64;
  case TPU_C128: return PJRT_Buffer_Type_C128;
  default: return PJRT_Buffer_Type_INVALID;
  }
}

typedef struct pexe {
  PJRT_LoadedExecutable *exe; /* NULL: counted vTPU fallback */
  tpux__check *checks;        /* extra rank-0 i64 results after the outputs */
  int nchecks;
} pexe;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fallback_enabled(void) {
  const char *f = getenv("TORCH_TPU_PJRT_FALLBACK");
  return f && !strcmp(f, "vtpu");
}

/* xla.CompileOptionsProto { executable_build_options { num_replicas: 1
 * num_partitions: 1 } } */
static const char k_compile_options[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};

static int pjrt_compile(const tpuir_graph *g, void **out) {
  *out = NULL;
  int rc = tpux__pjrt_init();
  if (rc != TPU_OK) return rc;
  pexe *p = calloc(1, sizeof *p);
  if (!p) return tpu_error(TPU_E_OOM, "PJRT compile: out of host memory");
  char *text = NULL;
  size_t len = 0;
  rc = tpux__emit_stablehlo(g, &text, &len, &p->checks, &p->nchecks);
  if (rc == TPU_E_UNSUPPORTED && fallback_enabled()) {
    *out = p; /* exe NULL: runs on the vTPU, counted at each execution */
    return TPU_OK;
  }
  if (rc != TPU_OK) {
    free(p->checks);
    free(p);
    return rc;
  }
  double t0 = now_s();
  ARGS(PJRT_Program, prog);
  prog.code = text;
  prog.code_size = len;
  prog.format = "mlir";
  prog.format_size = 4;
  ARGS(PJRT_Client_Compile_Args, ca);
  ca.client = g_client;
  ca.program = &prog;
  ca.compile_options = k_compile_options;
  ca.compile_options_size = sizeof k_compile_options;
  rc = perr(g_api->PJRT_Client_Compile(&ca), "compile");
  if (rc == TPU_OK && getenv("TORCH_TPU_PJRT_DUMP")) fprintf(stderr, "%s", text);
  if (rc != TPU_OK && getenv("TORCH_TPU_PJRT_DUMP_FAILED"))
    fprintf(stderr, "---- failed program ----\n%s", text);
  free(text);
  if (rc != TPU_OK) {
    free(p->checks);
    free(p);
    return rc;
  }
  p->exe = ca.executable;
  pthread_mutex_lock(&g_stat_mu);
  g_stats.compiles++;
  g_stats.compile_seconds += now_s() - t0;
  pthread_mutex_unlock(&g_stat_mu);
  *out = p;
  return TPU_OK;
}

static void pjrt_release(void *v) {
  pexe *p = v;
  if (!p) return;
  if (p->exe) {
    ARGS(PJRT_LoadedExecutable_Destroy_Args, d);
    d.executable = p->exe;
    perr(g_api->PJRT_LoadedExecutable_Destroy(&d), "executable destroy");
  }
  free(p->checks);
  free(p);
}

/* Host pointer of a contiguous copy of view v: the view's own memory when
 * it is contiguous, else *tmp (malloc'd here, caller frees). */
static int contiguous_in(const tpu_view *v, void **ptr, void **tmp) {
  size_t es = tpu_dtype_size(v->dtype), nb = (size_t)tpu_view_numel(v) * es;
  *tmp = NULL;
  if (tpu_view_is_contiguous(v)) {
    *ptr = (char *)v->base + v->offset * (int64_t)es;
    return TPU_OK;
  }
  *tmp = malloc(nb ? nb : 1);
  if (!*tmp) return tpu_error(TPU_E_OOM, "PJRT: out of host memory");
  tpu_view c;
  tpu_view_init_contiguous(&c, *tmp, v->dtype, v->ndim, v->sizes);
  int rc = tpux_copy(&c, v);
  *ptr = *tmp;
  return rc;
}

static int pjrt_execute(void *v, const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
                        const tpu_view *outs) {
  pexe *p = v;
  if (!p->exe) {
    pthread_mutex_lock(&g_stat_mu);
    g_stats.fallbacks++;
    pthread_mutex_unlock(&g_stat_mu);
    return tpux_run(g, nin, ins, nout, outs);
  }
  if (nin != tpuir_num_params(g) || nout != tpuir_num_outputs(g))
    return tpu_error(TPU_E_INVALID, "PJRT execute: graph has %d parameters / %d outputs, got %d / %d",
                     tpuir_num_params(g), tpuir_num_outputs(g), nin, nout);
  int rc = TPU_OK;
  PJRT_Buffer **args = calloc((size_t)nin + 1, sizeof *args);
  int nres = nout + p->nchecks;
  PJRT_Buffer **res = calloc((size_t)nres + 1, sizeof *res);
  if (!args || !res) {
    rc = tpu_error(TPU_E_OOM, "PJRT execute: out of host memory");
    goto done;
  }
  for (int k = 0; k < nin && rc == TPU_OK; k++) {
    const tpu_view *iv = &ins[k];
    void *ptr = NULL, *tmp = NULL;
    if ((rc = contiguous_in(iv, &ptr, &tmp)) != TPU_OK) {
      free(tmp);
      break;
    }
    ARGS(PJRT_Client_BufferFromHostBuffer_Args, b);
    b.client = g_client;
    b.data = ptr;
    b.type = btype(iv->dtype);
    b.dims = iv->sizes;
    b.num_dims = (size_t)iv->ndim;
    b.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
    b.device = g_dev;
    rc = perr(g_api->PJRT_Client_BufferFromHostBuffer(&b), "host to device");
    if (rc == TPU_OK) {
      args[k] = b.buffer;
      rc = await_event(b.done_with_host_buffer, "host to device");
    }
    free(tmp);
  }
  if (rc != TPU_OK) goto done;
  ARGS(PJRT_ExecuteOptions, opt);
  ARGS(PJRT_LoadedExecutable_Execute_Args, ea);
  PJRT_Buffer *const *arg_list = args;
  PJRT_Buffer **out_list = res;
  PJRT_Event *done_ev = NULL;
  ea.executable = p->exe;
  ea.options = &opt;
  ea.argument_lists = &arg_list;
  ea.num_devices = 1;
  ea.num_args = (size_t)nin;
  ea.output_lists = &out_list;
  ea.device_complete_events = &done_ev;
  rc = perr(g_api->PJRT_LoadedExecutable_Execute(&ea), "execute");
  if (rc != TPU_OK) goto done;
  if ((rc = await_event(done_ev, "execute")) != TPU_OK) goto done;
  /* run-time checks first: a failed one raises before any output is written */
  for (int c = 0; c < p->nchecks && rc == TPU_OK; c++) {
    int64_t v = 0;
    ARGS(PJRT_Buffer_ToHostBuffer_Args, th);
    th.src = res[nout + c];
    th.dst = &v;
    th.dst_size = sizeof v;
    rc = perr(g_api->PJRT_Buffer_ToHostBuffer(&th), "device to host");
    if (rc == TPU_OK) rc = await_event(th.event, "device to host");
    if (rc != TPU_OK || v == INT64_MIN) continue;
    const tpux__check *k = &p->checks[c];
    switch (k->kind) {
    case TPUX_CHECK_INDEX:
      rc = tpu_error(TPU_E_INDEX, "index %lld is out of bounds for dimension %d with size %lld",
                     (long long)v, k->dim, (long long)k->size);
      break;
    case TPUX_CHECK_SELECT: rc = tpu_error(TPU_E_INDEX, "index out of range in self"); break;
    case TPUX_CHECK_DIV_ZERO: rc = tpu_error(TPU_E_INVALID, "ZeroDivisionError"); break;
    case TPUX_CHECK_CHOLESKY: {
      char bs[64] = "";
      if (k->dim) snprintf(bs, sizeof bs, ": (Batch element %lld)", (long long)(v / (k->size + 1)));
      rc = tpu_error(TPU_E_LINALG,
                     "cholesky%s: The factorization could not be completed because the input "
                     "is not positive-definite (the leading minor of order %d is not "
                     "positive-definite).",
                     bs, (int)(v % (k->size + 1)));
      break;
    }
    default:
      rc = tpu_error(TPU_E_INVALID, "Integers to negative integer powers are not allowed.");
      break;
    }
  }
  if (rc != TPU_OK) goto done;
  for (int i = 0; i < nout && rc == TPU_OK; i++) {
    const tpu_view *ov = &outs[i];
    size_t es = tpu_dtype_size(ov->dtype), nb = (size_t)tpu_view_numel(ov) * es;
    if (nb == 0) continue;
    int direct = tpu_view_is_contiguous(ov);
    void *dst = direct ? (char *)ov->base + ov->offset * (int64_t)es : malloc(nb);
    if (!dst) {
      rc = tpu_error(TPU_E_OOM, "PJRT execute: out of host memory");
      break;
    }
    ARGS(PJRT_Buffer_ToHostBuffer_Args, th);
    th.src = res[i];
    th.dst = dst;
    th.dst_size = nb;
    rc = perr(g_api->PJRT_Buffer_ToHostBuffer(&th), "device to host");
    if (rc == TPU_OK) rc = await_event(th.event, "device to host");
    if (rc == TPU_OK && !direct) {
      tpu_view c;
      tpu_view_init_contiguous(&c, dst, ov->dtype, ov->ndim, ov->sizes);
      rc = tpux_copy(ov, &c);
    }
    if (!direct) free(dst);
  }
  if (rc == TPU_OK) {
    pthread_mutex_lock(&g_stat_mu);
    g_stats.executions++;
    pthread_mutex_unlock(&g_stat_mu);
  }
done:
  for (int k = 0; args && k < nin; k++) buffer_destroy(args[k]);
  for (int i = 0; res && i < nres; i++) buffer_destroy(res[i]);
  free(args);
  free(res);
  return rc;
}

static const tpux_executor g_pjrt = {"pjrt", pjrt_compile, pjrt_execute, pjrt_release, tpux_copy};
const tpux_executor *tpux_executor_pjrt(void) { return &g_pjrt; }

#endif /* TPU_HAVE_PJRT */
