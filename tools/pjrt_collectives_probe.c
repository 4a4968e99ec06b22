/* tools/pjrt_collectives_probe.c - does a PJRT plugin run a StableHLO
 * all_reduce ACROSS PROCESSES (one process per rank, as tpu_dist runs)?
 * The prerequisite for lowering the collectives of a compiled graph to
 * stablehlo.all_reduce/all_gather/reduce_scatter on the PJRT executor
 * (README, distributed section). Run through tools/pjrt_collectives_probe.sh.
 *
 *   pjrt_collectives_probe <plugin.so> <rank> <nranks> <kv_dir> [name=int ...]
 *
 * Each rank: PJRT_Client_Create with the given int64 create options (the
 * script passes node_id/num_nodes, and cpu_device_count=1 for XLA:CPU) and
 * the key-value callbacks, backed by one file per key in kv_dir (a get
 * waits up to 60 s for the key); prints the client's process index, its
 * devices and how often the plugin used the key-value store; compiles
 * all_reduce(sum) over replica_groups [[0..nranks-1]] with num_replicas =
 * nranks; runs it on the executable's addressable devices with input
 * rank*10 + local device + 1 (4 floats) and prints each result.
 * Last line: "PASS" when every result is the sum over all ranks' inputs
 * (nranks processes, one device each), else "FAIL: <why>". Exit status 0
 * on PASS, 1 on FAIL. */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pjrt_c_api.h"

#define ARGS(T, v)          \
  T v;                      \
  memset(&v, 0, sizeof v);  \
  v.struct_size = T##_STRUCT_SIZE

#define MAXDEV 16

static const PJRT_Api *A;
static int g_rank, g_kv_calls;
static const char *g_kv_dir;

__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("rank %d FAIL: ", g_rank);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

/* Exits with the plugin's message when err is set. */
static void check(PJRT_Error *err, const char *what) {
  if (!err) return;
  ARGS(PJRT_Error_Message_Args, m);
  m.error = err;
  A->PJRT_Error_Message(&m);
  fail("%s: %.*s", what, (int)m.message_size, m.message);
}

static void await_event(PJRT_Event *ev, const char *what) {
  if (!ev) return;
  ARGS(PJRT_Event_Await_Args, a);
  a.event = ev;
  check(A->PJRT_Event_Await(&a), what);
  ARGS(PJRT_Event_Destroy_Args, d);
  d.event = ev;
  check(A->PJRT_Event_Destroy(&d), "event destroy");
}

static void kv_path(char *buf, size_t cap, const char *key, size_t n) {
  int off = snprintf(buf, cap, "%s/", g_kv_dir);
  for (size_t i = 0; i < n && off + 1 < (int)cap; i++)
    buf[off++] = key[i] == '/' ? '_' : key[i];
  buf[off] = 0;
}

static PJRT_Error *kv_put(PJRT_KeyValuePutCallback_Args *a) {
  char path[1024], tmp[1100];
  g_kv_calls++;
  kv_path(path, sizeof path, a->key, a->key_size);
  snprintf(tmp, sizeof tmp, "%s.tmp%d", path, g_rank);
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(a->value, 1, a->value_size, f) != a->value_size || fclose(f) != 0 ||
      rename(tmp, path) != 0)
    fail("kv_put cannot write %s", path);
  return NULL;
}

static void kv_free(char *p) { free(p); }

static PJRT_Error *kv_get(PJRT_KeyValueGetCallback_Args *a) {
  char path[1024];
  g_kv_calls++;
  kv_path(path, sizeof path, a->key, a->key_size);
  FILE *f = NULL;
  for (int i = 0; i < 600 && !(f = fopen(path, "rb")); i++) usleep(100000);
  if (!f) fail("kv_get timed out after 60 s: %s", path);
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
    if ((n += got) == cap) buf = realloc(buf, cap *= 2);
  fclose(f);
  if (!buf) fail("kv_get: out of memory");
  a->value = buf;
  a->value_size = n;
  a->value_deleter_callback = kv_free;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s plugin.so rank nranks kv_dir [name=int ...]\n", argv[0]);
    return 2;
  }
  g_rank = atoi(argv[2]);
  int nranks = atoi(argv[3]);
  g_kv_dir = argv[4];
  if (nranks < 1 || nranks > 9) fail("nranks must be 1..9, got %d", nranks);
  void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!dl) fail("dlopen: %s", dlerror());
  const PJRT_Api *(*get)(void) = (const PJRT_Api *(*)(void))dlsym(dl, "GetPjrtApi");
  if (!get || !(A = get())) fail("%s: no GetPjrtApi (not a PJRT plugin)", argv[1]);
  if (A->PJRT_Plugin_Initialize) {
    ARGS(PJRT_Plugin_Initialize_Args, pi);
    check(A->PJRT_Plugin_Initialize(&pi), "plugin initialize");
  }

  int nopt = argc - 5;
  PJRT_NamedValue opts[16];
  memset(opts, 0, sizeof opts);
  if (nopt > 16) nopt = 16;
  for (int i = 0; i < nopt; i++) {
    char *eq = strchr(argv[5 + i], '=');
    if (!eq) fail("option %s is not name=int", argv[5 + i]);
    opts[i].struct_size = PJRT_NamedValue_STRUCT_SIZE;
    opts[i].name = argv[5 + i];
    opts[i].name_size = (size_t)(eq - argv[5 + i]);
    opts[i].type = PJRT_NamedValue_kInt64;
    opts[i].int64_value = atoll(eq + 1);
    opts[i].value_size = 1;
  }
  ARGS(PJRT_Client_Create_Args, cc);
  cc.create_options = opts;
  cc.num_options = (size_t)nopt;
  cc.kv_get_callback = kv_get;
  cc.kv_put_callback = kv_put;
  check(A->PJRT_Client_Create(&cc), "client create");
  PJRT_Client *client = cc.client;

  ARGS(PJRT_Client_ProcessIndex_Args, px);
  px.client = client;
  check(A->PJRT_Client_ProcessIndex(&px), "process index");
  ARGS(PJRT_Client_Devices_Args, ds);
  ds.client = client;
  check(A->PJRT_Client_Devices(&ds), "devices");
  ARGS(PJRT_Client_AddressableDevices_Args, ad);
  ad.client = client;
  check(A->PJRT_Client_AddressableDevices(&ad), "addressable devices");
  printf("rank %d: client process_index %d, %zu devices (%zu addressable), key-value calls %d\n",
         g_rank, px.process_index, ds.num_devices, ad.num_addressable_devices, g_kv_calls);
  for (size_t i = 0; i < ds.num_devices; i++) {
    ARGS(PJRT_Device_GetDescription_Args, gd);
    gd.device = ds.devices[i];
    check(A->PJRT_Device_GetDescription(&gd), "device description");
    ARGS(PJRT_DeviceDescription_Id_Args, di);
    di.device_description = gd.device_description;
    check(A->PJRT_DeviceDescription_Id(&di), "device id");
    ARGS(PJRT_DeviceDescription_ProcessIndex_Args, dp);
    dp.device_description = gd.device_description;
    check(A->PJRT_DeviceDescription_ProcessIndex(&dp), "device process index");
    printf("rank %d:   device id %d, process_index %d\n", g_rank, di.id, dp.process_index);
  }

  char groups[64] = "", text[2048];
  for (int i = 0; i < nranks; i++)
    snprintf(groups + strlen(groups), sizeof groups - strlen(groups), "%s%d", i ? ", " : "", i);
  snprintf(text, sizeof text,
           "module @probe attributes {mhlo.num_replicas = %d : i32, mhlo.num_partitions = 1 : "
           "i32} {\n"
           "  func.func public @main(%%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
           "    %%0 = \"stablehlo.all_reduce\"(%%arg0) <{replica_groups = dense<[[%s]]> : "
           "tensor<1x%dxi64>}> ({\n"
           "    ^bb0(%%a: tensor<f32>, %%b: tensor<f32>):\n"
           "      %%s = stablehlo.add %%a, %%b : tensor<f32>\n"
           "      stablehlo.return %%s : tensor<f32>\n"
           "    }) : (tensor<4xf32>) -> tensor<4xf32>\n"
           "    return %%0 : tensor<4xf32>\n"
           "  }\n"
           "}\n",
           nranks, groups, nranks);
  /* xla.CompileOptionsProto { executable_build_options { num_replicas: nranks
   * num_partitions: 1 } } */
  const char copts[] = {0x1a, 0x04, 0x20, (char)nranks, 0x28, 0x01};
  ARGS(PJRT_Program, prog);
  prog.code = text;
  prog.code_size = strlen(text);
  prog.format = "mlir";
  prog.format_size = 4;
  ARGS(PJRT_Client_Compile_Args, ca);
  ca.client = client;
  ca.program = &prog;
  ca.compile_options = copts;
  ca.compile_options_size = sizeof copts;
  check(A->PJRT_Client_Compile(&ca), "compile (all_reduce, num_replicas = nranks)");
  PJRT_LoadedExecutable *exe = ca.executable;
  ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, ed);
  ed.executable = exe;
  check(A->PJRT_LoadedExecutable_AddressableDevices(&ed), "executable devices");
  size_t nd = ed.num_addressable_devices;
  printf("rank %d: the executable runs on %zu device(s) of this process\n", g_rank, nd);
  if (nd < 1 || nd > MAXDEV) fail("unexpected device count %zu", nd);

  float in[MAXDEV][4];
  PJRT_Buffer *args[MAXDEV], **arg_lists[MAXDEV], *outs[MAXDEV][1], **out_lists[MAXDEV];
  PJRT_Event *done[MAXDEV];
  int64_t dims[1] = {4};
  for (size_t d = 0; d < nd; d++) {
    for (int j = 0; j < 4; j++) in[d][j] = (float)(g_rank * 10 + (int)d + 1);
    ARGS(PJRT_Client_BufferFromHostBuffer_Args, bh);
    bh.client = client;
    bh.data = in[d];
    bh.type = PJRT_Buffer_Type_F32;
    bh.dims = dims;
    bh.num_dims = 1;
    bh.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
    bh.device = ed.addressable_devices[d];
    check(A->PJRT_Client_BufferFromHostBuffer(&bh), "host to device");
    await_event(bh.done_with_host_buffer, "host to device");
    args[d] = bh.buffer;
    arg_lists[d] = &args[d];
    out_lists[d] = outs[d];
  }
  ARGS(PJRT_ExecuteOptions, eo);
  ARGS(PJRT_LoadedExecutable_Execute_Args, ea);
  ea.executable = exe;
  ea.options = &eo;
  ea.argument_lists = (PJRT_Buffer *const *const *)arg_lists;
  ea.num_devices = nd;
  ea.num_args = 1;
  ea.output_lists = (PJRT_Buffer **const *)out_lists;
  ea.device_complete_events = done;
  check(A->PJRT_LoadedExecutable_Execute(&ea), "execute");
  /* every rank's input, one device each: sum of (r*10 + 1) */
  float want = 0;
  for (int r = 0; r < nranks; r++) want += (float)(r * 10 + 1);
  int ok = 1;
  for (size_t d = 0; d < nd; d++) {
    await_event(done[d], "execute");
    float o[4];
    ARGS(PJRT_Buffer_ToHostBuffer_Args, th);
    th.src = outs[d][0];
    th.dst = o;
    th.dst_size = sizeof o;
    check(A->PJRT_Buffer_ToHostBuffer(&th), "device to host");
    await_event(th.event, "device to host");
    printf("rank %d: device %zu: input %g -> all_reduce %g (a cross-process sum is %g)\n",
           g_rank, d, in[d][0], o[0], want);
    ok &= o[0] == want && nd == 1;
  }
  printf("rank %d: key-value calls %d\n", g_rank, g_kv_calls);
  if (!ok)
    fail("the all_reduce did not sum across processes (%zu device(s) of this process ran the "
         "replicas: in-process collectives only)", nd);
  printf("rank %d PASS: %s\n", g_rank,
         nranks > 1 ? "cross-process all_reduce" : "1 rank (the probe itself works)");
  return 0;
}
