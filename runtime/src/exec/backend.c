/* exec/backend.c - the executor seam: the vTPU's table, selection of the
 * active executor from the environment, and the per-program executable
 * slot the graph cache keeps (tpux_exec_program). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_exec.h"

/* ---- vTPU ----------------------------------------------------------------- */

static int vtpu_compile(const tpuir_graph *g, const tpux_key *key, void **exe) {
  (void)g;
  (void)key;
  *exe = NULL; /* the vTPU plans each run from the graph itself */
  return TPU_OK;
}

static int vtpu_execute(void *exe, const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
                        const tpu_view *outs) {
  (void)exe;
  return tpux_run(g, nin, ins, nout, outs);
}

static void vtpu_release(void *exe) { (void)exe; }

static const tpux_executor g_vtpu = {"vtpu", vtpu_compile, vtpu_execute, vtpu_release, tpux_copy};

const tpux_executor *tpux_executor_vtpu(void) { return &g_vtpu; }

/* ---- selection ------------------------------------------------------------ */

/* Provided by exec/pjrt/client.c: initialise the PJRT client (plugin load, client,
 * device). TPU_OK or an error with the plugin's message. */
int tpux__pjrt_init(void);
const char *tpux__pjrt_device_name(void);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const tpux_executor *g_active;
static int g_rc;
static char g_msg[1024];
static char g_auto_msg[1024]; /* why TORCH_TPU_BACKEND=auto chose the vTPU */

static void select_once(void) {
  const char *b = getenv("TORCH_TPU_BACKEND");
  if (!b || !*b || !strcmp(b, "vtpu")) {
    g_active = &g_vtpu;
    return;
  }
  int autosel = !strcmp(b, "auto");
  if (strcmp(b, "pjrt") != 0 && !autosel) {
    g_rc = tpu_error(TPU_E_INVALID, "TORCH_TPU_BACKEND=%s: expected vtpu, pjrt or auto", b);
    snprintf(g_msg, sizeof g_msg, "%s", tpu_last_error());
    return;
  }
  g_rc = tpux__pjrt_init();
  if (g_rc != TPU_OK && autosel) { /* auto: an accelerator plugin that does not start */
    snprintf(g_auto_msg, sizeof g_auto_msg, "%s", tpu_last_error());
    g_rc = TPU_OK;
    g_active = &g_vtpu;
    return;
  }
  if (g_rc != TPU_OK) {
    snprintf(g_msg, sizeof g_msg, "%s", tpu_last_error());
    return;
  }
  g_active = tpux_executor_pjrt();
}

const tpux_executor *tpux_executor_active(void) {
  pthread_once(&g_once, select_once);
  const tpux_executor *ex = __atomic_load_n(&g_active, __ATOMIC_ACQUIRE);
  if (!ex) tpu_error(g_rc ? g_rc : TPU_E_INTERNAL, "%s", g_msg);
  return ex;
}

int tpux_executor_select(const char *name) {
  pthread_once(&g_once, select_once);
  const tpux_executor *ex;
  if (name && !strcmp(name, "vtpu")) {
    ex = &g_vtpu;
  } else if (name && !strcmp(name, "pjrt")) {
    int rc = tpux__pjrt_init();
    if (rc != TPU_OK) return rc;
    ex = tpux_executor_pjrt();
  } else {
    return tpu_error(TPU_E_INVALID, "executor %s: expected vtpu or pjrt", name ? name : "(null)");
  }
  __atomic_store_n(&g_active, ex, __ATOMIC_RELEASE);
  g_auto_msg[0] = 0;
  return TPU_OK;
}

const char *tpux_device_name(void) {
  const tpux_executor *ex = tpux_executor_active();
  if (!ex) return "";
  if (ex == &g_vtpu) return g_auto_msg[0] ? "vTPU (host CPU executor; PJRT plugin unusable)"
                                          : "vTPU (host CPU executor)";
  return tpux__pjrt_device_name();
}

/* ---- per-program executables ------------------------------------------------ */

typedef struct slot {
  const tpux_executor *ex;
  void *exe;
} slot;

static void slot_free(slot *s) {
  if (!s) return;
  s->ex->release(s->exe);
  free(s);
}

int tpux_exec_program(const tpuir_graph *g, const tpux_key *key, void **slotp, int nin,
                      const tpu_view *ins, int nout, const tpu_view *outs) {
  const tpux_executor *ex = tpux_executor_active();
  if (!ex) return tpu_last_error_code();
  if (ex == &g_vtpu) return tpux_run(g, nin, ins, nout, outs); /* no executable: no slot */
  slot *s = __atomic_load_n((slot **)slotp, __ATOMIC_ACQUIRE);
  if (!s) {
    slot *n = calloc(1, sizeof *n);
    if (!n) return tpu_error(TPU_E_OOM, "executor: out of host memory");
    n->ex = ex;
    int rc = ex->compile(g, key, &n->exe);
    if (rc != TPU_OK) {
      free(n);
      return rc;
    }
    slot *expect = NULL;
    if (__atomic_compare_exchange_n((slot **)slotp, &expect, n, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      s = n;
    } else {
      slot_free(n);
      s = expect;
    }
  }
  return s->ex->execute(s->exe, g, nin, ins, nout, outs);
}

void tpux_exec_release(void *s) { slot_free(s); }
