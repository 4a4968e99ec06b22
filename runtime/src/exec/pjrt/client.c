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
 * Compile once, run many: a program's compiled forms hang off the graph
 * cache's entry (one per binding pattern, see below), so a program seen
 * before is neither emitted nor compiled again; with a cache directory
 * (TORCH_TPU_COMPILATION_CACHE_DIR) each is also stored serialized
 * (PJRT_Executable_Serialize) and a new process deserializes it instead of
 * compiling (StableHLO text + recompile when a plugin cannot serialize).
 *
 * Memory model: tensors live in runtime-owned host memory. On a host
 * platform (XLA:CPU; TORCH_TPU_PJRT_COPY=1 turns this off) that memory is
 * the device's: inputs are passed zero-copy (kImmutableZeroCopy), an
 * output that exactly equals an input is computed in place by donating
 * that input (kMutableZeroCopy + tf.aliasing_output), and an output that
 * overlaps nothing the program reads is written straight into its storage
 * (an extra donated argument over that storage). Whether the plugin really
 * wrote in place is checked (buffer pointer) and copied back otherwise.
 * On an accelerator, execute() uploads each input
 * (kImmutableOnlyDuringCall), runs the executable and downloads each
 * output (ToHostBuffer); device-resident storage there is future work.
 * Outputs that alias inputs are therefore safe either way.
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
static int nobuild_compile(const tpuir_graph *g, const tpux_key *key, void **exe) {
  (void)g;
  (void)key;
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
#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* xla.CompileOptionsProto { executable_build_options { num_replicas: 1
 * num_partitions: 1 } } */
static const char k_compile_options[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

#define PJRTX_VERSION 1u
static uint64_t g_ident; /* set by init_locked */
static int g_host_platform; /* set by init_locked */

static uint64_t file_ident(uint64_t h, const char *path) {
  struct stat st;
  char rp[PATH_MAX];
  if (path && realpath(path, rp)) h = fnv(h, rp, strlen(rp));
  if (path && stat(path, &st) == 0) {
    int64_t a[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
    h = fnv(h, a, sizeof a);
  }
  return h;
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
  /* host platform: the runtime's memory is the device's (zero-copy) */
  const char *cp = getenv("TORCH_TPU_PJRT_COPY");
  g_host_platform = pn.platform_name_size == 3 && !memcmp(pn.platform_name, "cpu", 3) &&
                    API_HAS(PJRT_Buffer_UnsafePointer) && !(cp && *cp && strcmp(cp, "0"));
  /* identity of compiled executables (disk tier) */
  uint64_t h = file_ident(0xcbf29ce484222325ull, path);
  h = fnv(h, pn.platform_name, pn.platform_name_size);
  if (API_HAS(PJRT_Client_PlatformVersion)) {
    ARGS(PJRT_Client_PlatformVersion_Args, pv);
    pv.client = g_client;
    if (perr(g_api->PJRT_Client_PlatformVersion(&pv), "platform version") == TPU_OK)
      h = fnv(h, pv.platform_version, pv.platform_version_size);
    else
      tpu_clear_error();
  }
  int ver[3] = {maj, min, (int)PJRTX_VERSION};
  h = fnv(h, ver, sizeof ver);
  h = fnv(h, k_compile_options, sizeof k_compile_options);
  Dl_info di;
  if (dladdr((void *)&tpux_pjrt_get_stats, &di) && di.dli_fname) h = file_ident(h, di.dli_fname);
  g_ident = h;
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

/* One compiled form of a program: per binding pattern (which outputs
 * overwrite which inputs, which are written straight into their storage;
 * see tpux__emit_stablehlo's alias). */
typedef struct variant {
  struct variant *next;
  int *want;                  /* the pattern asked for (lookup key), nout entries */
  int *eff;                   /* the pattern compiled (checks reset it) */
  PJRT_LoadedExecutable *exe; /* NULL: counted vTPU fallback */
  tpux__check *checks;        /* extra rank-0 i64 results after the outputs */
  int nchecks;
} variant;

typedef struct pexe {
  pthread_mutex_t mu;
  variant *vars;
  uint64_t k1, k2;
  char dir[1024]; /* "" : no disk tier */
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

#define STAT_ADD(field, v)            \
  do {                                \
    pthread_mutex_lock(&g_stat_mu);   \
    g_stats.field += (v);             \
    pthread_mutex_unlock(&g_stat_mu); \
  } while (0)



/* ---- disk tier: serialized executables ---------------------------------------
 * <dir>/<graph key>-<pattern>-<identity>.pjrtx, identity = hash of the
 * plugin (path, size, mtime, platform name/version, API version), this
 * runtime's own binary (size, mtime: the emitter is part of it) and the
 * compile options. Payload: the plugin's serialized executable
 * (PJRT_Executable_Serialize), or the StableHLO text when the plugin cannot
 * serialize (then a load skips emission but compiles). */
enum { PJRTX_EXE = 0, PJRTX_MLIR = 1 };
typedef struct pjrtx_hdr {
  char magic[4];
  uint32_t version, kind;
  int32_t nout, nchecks;
  uint64_t size;
} pjrtx_hdr;



static int can_serialize(void) {
  return API_HAS(PJRT_LoadedExecutable_GetExecutable) && API_HAS(PJRT_Executable_Serialize) &&
         API_HAS(PJRT_Executable_DeserializeAndLoad) && API_HAS(PJRT_Executable_Destroy);
}

static void disk_path(char *buf, size_t cap, const pexe *p, int nout, const int *want) {
  uint64_t ph = fnv(0xcbf29ce484222325ull, want, sizeof(int) * (size_t)nout);
  snprintf(buf, cap, "%s/%016llx%016llx-%016llx-%016llx.pjrtx", p->dir,
           (unsigned long long)p->k1, (unsigned long long)p->k2, (unsigned long long)ph,
           (unsigned long long)g_ident);
}

/* Compile StableHLO text; counts the compile. */
static int compile_text(const char *text, size_t len, PJRT_LoadedExecutable **exe) {
  double t0 = now_s();
  ARGS(PJRT_Program, prog);
  prog.code = (char *)text;
  prog.code_size = len;
  prog.format = "mlir";
  prog.format_size = 4;
  ARGS(PJRT_Client_Compile_Args, ca);
  ca.client = g_client;
  ca.program = &prog;
  ca.compile_options = k_compile_options;
  ca.compile_options_size = sizeof k_compile_options;
  int rc = perr(g_api->PJRT_Client_Compile(&ca), "compile");
  if (rc == TPU_OK && getenv("TORCH_TPU_PJRT_DUMP")) fprintf(stderr, "%s", text);
  if (rc != TPU_OK && getenv("TORCH_TPU_PJRT_DUMP_FAILED"))
    fprintf(stderr, "---- failed program ----\n%s", text);
  if (rc != TPU_OK) return rc;
  *exe = ca.executable;
  pthread_mutex_lock(&g_stat_mu);
  g_stats.compiles++;
  g_stats.compile_seconds += now_s() - t0;
  pthread_mutex_unlock(&g_stat_mu);
  return TPU_OK;
}

/* Load variant v (want already set) from the disk tier. 1 when loaded. */
static int disk_load(const pexe *p, int nout, variant *v) {
  if (!p->dir[0]) return 0;
  char path[1200];
  disk_path(path, sizeof path, p, nout, v->want);
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  pjrtx_hdr h;
  char *pay = NULL;
  int ok = fread(&h, sizeof h, 1, f) == 1 && !memcmp(h.magic, "TPUX", 4) &&
           h.version == PJRTX_VERSION && h.nout == nout && h.nchecks >= 0 &&
           h.nchecks < (1 << 20) && h.size < ((uint64_t)1 << 40) &&
           (h.kind == PJRTX_EXE || h.kind == PJRTX_MLIR);
  if (ok) {
    v->checks = h.nchecks ? calloc((size_t)h.nchecks, sizeof *v->checks) : NULL;
    pay = malloc(h.size + 1);
    ok = pay && (!h.nchecks || v->checks) &&
         fread(v->eff, sizeof(int), (size_t)nout, f) == (size_t)nout &&
         fread(v->checks, sizeof *v->checks, (size_t)h.nchecks, f) == (size_t)h.nchecks &&
         fread(pay, 1, h.size, f) == h.size;
  }
  fclose(f);
  if (ok) {
    v->nchecks = h.nchecks;
    pay[h.size] = 0;
    if (h.kind == PJRTX_EXE) {
      ARGS(PJRT_Executable_DeserializeAndLoad_Args, d);
      d.client = g_client;
      d.serialized_executable = pay;
      d.serialized_executable_size = h.size;
      ok = can_serialize() &&
           perr(g_api->PJRT_Executable_DeserializeAndLoad(&d), "deserialize") == TPU_OK;
      if (ok) {
        v->exe = d.loaded_executable;
        STAT_ADD(disk_loads, 1);
      }
    } else {
      ok = compile_text(pay, h.size, &v->exe) == TPU_OK;
    }
  }
  free(pay);
  if (!ok) { /* unreadable / stale: compiled afresh and rewritten */
    free(v->checks);
    v->checks = NULL;
    v->nchecks = 0;
    for (int i = 0; i < nout; i++) v->eff[i] = v->want[i];
  }
  return ok;
}

static void disk_store(const pexe *p, int nout, const variant *v, const char *text, size_t len) {
  if (!p->dir[0]) return;
  const char *pay = text;
  uint64_t size = len;
  uint32_t kind = PJRTX_MLIR;
  PJRT_Executable_Serialize_Args sa;
  memset(&sa, 0, sizeof sa);
  PJRT_Executable *ex = NULL;
  if (can_serialize()) {
    ARGS(PJRT_LoadedExecutable_GetExecutable_Args, ge);
    ge.loaded_executable = v->exe;
    if (perr(g_api->PJRT_LoadedExecutable_GetExecutable(&ge), "get executable") == TPU_OK) {
      ex = ge.executable;
      sa.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
      sa.executable = ex;
      if (perr(g_api->PJRT_Executable_Serialize(&sa), "serialize") == TPU_OK) {
        pay = sa.serialized_bytes;
        size = sa.serialized_bytes_size;
        kind = PJRTX_EXE;
      }
    }
  }
  char path[1200], tmp[1300];
  disk_path(path, sizeof path, p, nout, v->want);
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  pjrtx_hdr h = {{'T', 'P', 'U', 'X'}, PJRTX_VERSION, kind, nout, v->nchecks, size};
  FILE *f = fopen(tmp, "wb");
  int ok = f && fwrite(&h, sizeof h, 1, f) == 1 &&
           fwrite(v->eff, sizeof(int), (size_t)nout, f) == (size_t)nout &&
           fwrite(v->checks, sizeof *v->checks, (size_t)v->nchecks, f) == (size_t)v->nchecks &&
           fwrite(pay, 1, size, f) == size;
  if (f) ok &= fclose(f) == 0;
  if (ok && rename(tmp, path) == 0) STAT_ADD(disk_stores, 1);
  else unlink(tmp); /* the disk tier is an optimisation: a failed write is not an error */
  if (sa.serialized_executable && sa.serialized_executable_deleter)
    sa.serialized_executable_deleter(sa.serialized_executable);
  if (ex) {
    ARGS(PJRT_Executable_Destroy_Args, d);
    d.executable = ex;
    perr(g_api->PJRT_Executable_Destroy(&d), "executable destroy");
  }
}

static int pjrt_compile(const tpuir_graph *g, const tpux_key *key, void **out) {
  (void)g;
  *out = NULL;
  int rc = tpux__pjrt_init();
  if (rc != TPU_OK) return rc;
  pexe *p = calloc(1, sizeof *p);
  if (!p) return tpu_error(TPU_E_OOM, "PJRT compile: out of host memory");
  pthread_mutex_init(&p->mu, NULL);
  if (key) {
    p->k1 = key->k1;
    p->k2 = key->k2;
    snprintf(p->dir, sizeof p->dir, "%s", key->dir ? key->dir : "");
  }
  *out = p;
  return TPU_OK;
}

static void variant_free(variant *v) {
  if (v->exe) {
    ARGS(PJRT_LoadedExecutable_Destroy_Args, d);
    d.executable = v->exe;
    perr(g_api->PJRT_LoadedExecutable_Destroy(&d), "executable destroy");
  }
  free(v->checks);
  free(v->want);
  free(v->eff);
  free(v);
}

static void pjrt_release(void *vp) {
  pexe *p = vp;
  if (!p) return;
  for (variant *v = p->vars, *n; v; v = n) {
    n = v->next;
    variant_free(v);
  }
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* The compiled form of g for binding pattern want: from memory, the disk
 * tier, or emitted and compiled now (then stored). At most MAX_VARIANTS
 * patterns per program; past that want becomes all -1 (copy in and out). */
#define MAX_VARIANTS 8

static int get_variant(pexe *p, const tpuir_graph *g, int nout, int *want, variant **out) {
  pthread_mutex_lock(&p->mu);
  for (int pass = 0; pass < 2; pass++) {
    int nv = 0;
    for (variant *v = p->vars; v; v = v->next, nv++)
      if (!memcmp(v->want, want, sizeof(int) * (size_t)nout)) {
        pthread_mutex_unlock(&p->mu);
        *out = v;
        return TPU_OK;
      }
    if (nv < MAX_VARIANTS) break;
    for (int i = 0; i < nout; i++) want[i] = -1; /* too many patterns: copy in and out */
  }
  int rc = TPU_OK;
  variant *v = calloc(1, sizeof *v);
  if (v) {
    v->want = malloc(sizeof(int) * (size_t)nout);
    v->eff = malloc(sizeof(int) * (size_t)nout);
  }
  if (!v || !v->want || !v->eff) {
    if (v) variant_free(v);
    pthread_mutex_unlock(&p->mu);
    return tpu_error(TPU_E_OOM, "PJRT compile: out of host memory");
  }
  memcpy(v->want, want, sizeof(int) * (size_t)nout);
  memcpy(v->eff, want, sizeof(int) * (size_t)nout);
  if (!disk_load(p, nout, v)) {
    char *text = NULL;
    size_t len = 0;
    rc = tpux__emit_stablehlo(g, v->eff, &text, &len, &v->checks, &v->nchecks);
    STAT_ADD(emits, 1);
    if (rc == TPU_E_UNSUPPORTED && fallback_enabled()) {
      rc = TPU_OK; /* exe NULL: runs on the vTPU, counted at each execution */
    } else if (rc == TPU_OK) {
      rc = compile_text(text, len, &v->exe);
      if (rc == TPU_OK) disk_store(p, nout, v, text, len);
    }
    free(text);
  }
  if (rc == TPU_OK) {
    v->next = p->vars;
    p->vars = v;
    *out = v;
  } else {
    variant_free(v);
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
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

/* ---- binding patterns (host platforms) -----------------------------------
 * On a host platform (XLA:CPU) the runtime's memory is the device's: inputs
 * are passed zero-copy, and an output is written in place when nothing
 * else the program reads overlaps it: into an input it equals exactly (that
 * input is donated) or into its own storage (an extra donated argument).
 * Anything else (overlaps, strided outputs, programs with checks) is
 * copied back after the run as on an accelerator. */

typedef struct brange {
  uintptr_t lo, hi; /* [lo, hi) bytes; lo == hi: empty */
} brange;

static brange range_of(const tpu_view *v) {
  brange r = {0, 0};
  int64_t es = (int64_t)tpu_dtype_size(v->dtype), lo = 0, hi = 0;
  for (int d = 0; d < v->ndim; d++) {
    if (v->sizes[d] == 0) return r;
    int64_t span = (v->sizes[d] - 1) * v->strides[d];
    if (span < 0) lo += span;
    else hi += span;
  }
  uintptr_t b = (uintptr_t)v->base + (uintptr_t)(v->offset * es);
  r.lo = b + (uintptr_t)(lo * es);
  r.hi = b + (uintptr_t)((hi + 1) * es);
  return r;
}

static int overlap(brange a, brange b) { return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi; }

static int same_view(const tpu_view *a, const tpu_view *b) {
  return a->base == b->base && a->offset == b->offset && a->dtype == b->dtype &&
         a->ndim == b->ndim && !memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) &&
         tpu_view_is_contiguous(a) && tpu_view_is_contiguous(b);
}

/* want[i] for each output (see tpux__emit_stablehlo's alias). */
static int binding_pattern(int nin, const tpu_view *ins, int nout, const tpu_view *outs,
                           int *want) {
  for (int i = 0; i < nout; i++) want[i] = -1;
  if (!g_host_platform) return TPU_OK;
  brange *ri = malloc(sizeof(brange) * (size_t)(nin + nout + 1));
  if (!ri) return tpu_error(TPU_E_OOM, "PJRT execute: out of host memory");
  brange *ro = ri + nin;
  for (int k = 0; k < nin; k++) ri[k] = range_of(&ins[k]);
  for (int i = 0; i < nout; i++) ro[i] = range_of(&outs[i]);
  for (int i = 0; i < nout; i++) {
    if (ro[i].lo == ro[i].hi || !tpu_view_is_contiguous(&outs[i])) continue;
    int ok = 1;
    for (int j = 0; j < nout && ok; j++) ok = j == i || !overlap(ro[i], ro[j]);
    int k_alias = -2;
    for (int k = 0; k < nin && ok; k++) {
      if (!overlap(ro[i], ri[k])) continue;
      if (k_alias == -2 && same_view(&outs[i], &ins[k])) k_alias = k;
      else ok = 0;
    }
    if (ok) want[i] = k_alias;
  }
  free(ri);
  return TPU_OK;
}

static void *unsafe_ptr(PJRT_Buffer *b) {
  if (!b || !API_HAS(PJRT_Buffer_UnsafePointer)) return NULL;
  ARGS(PJRT_Buffer_UnsafePointer_Args, u);
  u.buffer = b;
  if (perr(g_api->PJRT_Buffer_UnsafePointer(&u), "buffer pointer") != TPU_OK) {
    tpu_clear_error();
    return NULL;
  }
  return (void *)u.buffer_pointer;
}

/* Raise the vTPU's error for failed check k (value v != INT64_MIN). */
static int check_error(const tpux__check *k, int64_t v) {
  switch (k->kind) {
  case TPUX_CHECK_INDEX:
    return tpu_error(TPU_E_INDEX, "index %lld is out of bounds for dimension %d with size %lld",
                     (long long)v, k->dim, (long long)k->size);
  case TPUX_CHECK_SELECT: return tpu_error(TPU_E_INDEX, "index out of range in self");
  case TPUX_CHECK_DIV_ZERO: return tpu_error(TPU_E_INVALID, "ZeroDivisionError");
  case TPUX_CHECK_CHOLESKY: {
    char bs[64] = "";
    if (k->dim) snprintf(bs, sizeof bs, ": (Batch element %lld)", (long long)(v / (k->size + 1)));
    return tpu_error(TPU_E_LINALG,
                     "cholesky%s: The factorization could not be completed because the input "
                     "is not positive-definite (the leading minor of order %d is not "
                     "positive-definite).",
                     bs, (int)(v % (k->size + 1)));
  }
  default: return tpu_error(TPU_E_INVALID, "Integers to negative integer powers are not allowed.");
  }
}

static int pjrt_execute(void *vp, const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
                        const tpu_view *outs) {
  pexe *p = vp;
  if (nin != tpuir_num_params(g) || nout != tpuir_num_outputs(g))
    return tpu_error(TPU_E_INVALID, "PJRT execute: graph has %d parameters / %d outputs, got %d / %d",
                     tpuir_num_params(g), tpuir_num_outputs(g), nin, nout);
  int *want = malloc(sizeof(int) * (size_t)(nout + 1));
  if (!want) return tpu_error(TPU_E_OOM, "PJRT execute: out of host memory");
  variant *v = NULL;
  int rc = binding_pattern(nin, ins, nout, outs, want);
  if (rc == TPU_OK) rc = get_variant(p, g, nout, want, &v);
  free(want);
  if (rc != TPU_OK) return rc;
  if (!v->exe) {
    STAT_ADD(fallbacks, 1);
    return tpux_run(g, nin, ins, nout, outs);
  }
  int ndst = 0;
  for (int i = 0; i < nout; i++) ndst += v->eff[i] == -2;
  int nargs = nin + ndst, nres = nout + v->nchecks;
  PJRT_Buffer **args = calloc((size_t)nargs + 1, sizeof *args);
  PJRT_Event **held = calloc((size_t)nargs + 1, sizeof *held); /* zero-copy: awaited last */
  void **dst = calloc((size_t)nout + 1, sizeof *dst);          /* in-place target per output */
  PJRT_Buffer **res = calloc((size_t)nres + 1, sizeof *res);
  uint64_t h2d = 0, d2h = 0, donated = 0, direct = 0;
  if (!args || !held || !dst || !res) {
    rc = tpu_error(TPU_E_OOM, "PJRT execute: out of host memory");
    goto done;
  }
  /* arguments: the parameters, then the donated output storages */
  for (int a = 0; a < nargs && rc == TPU_OK; a++) {
    int oi = -1, donor = 0;
    if (a >= nin) {
      for (int i = 0, c = nin; i < nout; i++)
        if (v->eff[i] == -2 && c++ == a) oi = i;
    } else {
      for (int i = 0; i < nout && !donor; i++) donor = v->eff[i] == a;
    }
    const tpu_view *iv = oi >= 0 ? &outs[oi] : &ins[a];
    void *ptr = NULL, *tmp = NULL;
    if ((rc = contiguous_in(iv, &ptr, &tmp)) != TPU_OK) {
      free(tmp);
      break;
    }
    int zero = g_host_platform && !tmp;
    ARGS(PJRT_Client_BufferFromHostBuffer_Args, b);
    b.client = g_client;
    b.data = ptr;
    b.type = btype(iv->dtype);
    b.dims = iv->sizes;
    b.num_dims = (size_t)iv->ndim;
    b.host_buffer_semantics = !zero ? PJRT_HostBufferSemantics_kImmutableOnlyDuringCall
                              : oi >= 0 || donor ? PJRT_HostBufferSemantics_kMutableZeroCopy
                                                 : PJRT_HostBufferSemantics_kImmutableZeroCopy;
    b.device = g_dev;
    rc = perr(g_api->PJRT_Client_BufferFromHostBuffer(&b), "host to device");
    if (rc == TPU_OK) {
      args[a] = b.buffer;
      if (zero) held[a] = b.done_with_host_buffer;
      else rc = await_event(b.done_with_host_buffer, "host to device");
      if (!zero || unsafe_ptr(b.buffer) != ptr)
        h2d += (uint64_t)tpu_view_numel(iv) * tpu_dtype_size(iv->dtype);
    }
    free(tmp);
  }
  if (rc != TPU_OK) goto done;
  for (int i = 0; i < nout; i++) {
    const tpu_view *ov = &outs[i];
    if (v->eff[i] != -1) dst[i] = (char *)ov->base + ov->offset * (int64_t)tpu_dtype_size(ov->dtype);
  }
  ARGS(PJRT_ExecuteOptions, opt);
  ARGS(PJRT_LoadedExecutable_Execute_Args, ea);
  PJRT_Buffer *const *arg_list = args;
  PJRT_Buffer **out_list = res;
  PJRT_Event *done_ev = NULL;
  ea.executable = v->exe;
  ea.options = &opt;
  ea.argument_lists = &arg_list;
  ea.num_devices = 1;
  ea.num_args = (size_t)nargs;
  ea.output_lists = &out_list;
  ea.device_complete_events = &done_ev;
  rc = perr(g_api->PJRT_LoadedExecutable_Execute(&ea), "execute");
  if (rc != TPU_OK) goto done;
  if ((rc = await_event(done_ev, "execute")) != TPU_OK) goto done;
  /* run-time checks first: a failed one raises before any output is written
   * (programs with checks write no output in place: see the emitter) */
  for (int c = 0; c < v->nchecks && rc == TPU_OK; c++) {
    int64_t val = 0;
    ARGS(PJRT_Buffer_ToHostBuffer_Args, th);
    th.src = res[nout + c];
    th.dst = &val;
    th.dst_size = sizeof val;
    rc = perr(g_api->PJRT_Buffer_ToHostBuffer(&th), "device to host");
    if (rc == TPU_OK) rc = await_event(th.event, "device to host");
    if (rc == TPU_OK && val != INT64_MIN) rc = check_error(&v->checks[c], val);
  }
  if (rc != TPU_OK) goto done;
  for (int i = 0; i < nout && rc == TPU_OK; i++) {
    const tpu_view *ov = &outs[i];
    size_t es = tpu_dtype_size(ov->dtype), nb = (size_t)tpu_view_numel(ov) * es;
    if (nb == 0) continue;
    if (dst[i] && unsafe_ptr(res[i]) == dst[i]) { /* written in place */
      if (v->eff[i] >= 0) donated++;
      else direct++;
      continue;
    }
    int contig = tpu_view_is_contiguous(ov);
    void *to = contig ? (char *)ov->base + ov->offset * (int64_t)es : malloc(nb);
    if (!to) {
      rc = tpu_error(TPU_E_OOM, "PJRT execute: out of host memory");
      break;
    }
    ARGS(PJRT_Buffer_ToHostBuffer_Args, th);
    th.src = res[i];
    th.dst = to;
    th.dst_size = nb;
    rc = perr(g_api->PJRT_Buffer_ToHostBuffer(&th), "device to host");
    if (rc == TPU_OK) rc = await_event(th.event, "device to host");
    d2h += nb;
    if (rc == TPU_OK && !contig) {
      tpu_view c;
      tpu_view_init_contiguous(&c, to, ov->dtype, ov->ndim, ov->sizes);
      rc = tpux_copy(ov, &c);
    }
    if (!contig) free(to);
  }
done:
  for (int k = 0; args && k < nargs; k++) buffer_destroy(args[k]);
  for (int i = 0; res && i < nres; i++) buffer_destroy(res[i]);
  /* the plugin is done with our memory once every buffer over it is gone */
  for (int k = 0; held && k < nargs; k++) {
    int rc2 = await_event(held[k], "zero-copy buffer release");
    if (rc == TPU_OK) rc = rc2;
  }
  pthread_mutex_lock(&g_stat_mu);
  if (rc == TPU_OK) g_stats.executions++;
  g_stats.bytes_h2d += h2d;
  g_stats.bytes_d2h += d2h;
  g_stats.donated_inputs += donated;
  g_stats.direct_outputs += direct;
  pthread_mutex_unlock(&g_stat_mu);
  free(args);
  free(held);
  free(dst);
  free(res);
  return rc;
}

static const tpux_executor g_pjrt = {"pjrt", pjrt_compile, pjrt_execute, pjrt_release, tpux_copy};
const tpux_executor *tpux_executor_pjrt(void) { return &g_pjrt; }

#endif /* TPU_HAVE_PJRT */
