/* exec/backend.c - the executor seam: the vTPU's table, selection of the
 * active executor from the environment, and the per-program executable
 * slot the graph cache keeps (tpux_exec_program). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_exec.h"

/* ---- vTPU ----------------------------------------------------------------- */

/* The vTPU's executable is its plan (exec/vtpu/plan.c): built once per
 * cached program, run per execution. */
static int vtpu_compile(const tpuir_graph *g, const tpux_key *key, void **exe) {
  (void)key;
  return tpux_plan_new(g, (tpux_plan **)exe);
}

static int vtpu_execute(void *exe, const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
                        const tpu_view *outs) {
  (void)g; /* the plan's own graph */
  return tpux_plan_run(exe, nin, ins, nout, outs);
}

static void vtpu_release(void *exe) { tpux_plan_free(exe); }

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

/* ---- per-program executables ------------------------------------------------
 * A program's slot holds one executable per executor (the active one can
 * change between runs: tpux_executor_select), each compiled on its first
 * run under that executor. Slot and executables are published with
 * compare-exchange; a run that loses the race frees its own copy. */

enum { EX_VTPU, EX_PJRT, EX_N };

typedef struct exe_entry {
  const tpux_executor *ex;
  void *exe;
} exe_entry;

typedef struct slot {
  exe_entry *e[EX_N]; /* owned; NULL until compiled */
} slot;

static void slot_free(slot *s) {
  if (!s) return;
  for (int i = 0; i < EX_N; i++)
    if (s->e[i]) {
      s->e[i]->ex->release(s->e[i]->exe);
      free(s->e[i]);
    }
  free(s);
}

/* The slot of a program, created on first use. */
static slot *slot_get(void **slotp) {
  slot *s = __atomic_load_n((slot **)slotp, __ATOMIC_ACQUIRE);
  if (s) return s;
  slot *n = calloc(1, sizeof *n);
  if (!n) {
    tpu_error(TPU_E_OOM, "executor: out of host memory");
    return NULL;
  }
  slot *expect = NULL;
  if (__atomic_compare_exchange_n((slot **)slotp, &expect, n, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE))
    return n;
  free(n);
  return expect;
}

/* Executor ex's executable of g in slot s into *out, compiled on first
 * use. TPU_OK or the compile's error. */
static int entry_get(slot *s, const tpux_executor *ex, const tpuir_graph *g,
                     const tpux_key *key, exe_entry **out) {
  exe_entry **ep = &s->e[ex == &g_vtpu ? EX_VTPU : EX_PJRT];
  *out = __atomic_load_n(ep, __ATOMIC_ACQUIRE);
  if (*out) return TPU_OK;
  exe_entry *n = calloc(1, sizeof *n);
  if (!n) return tpu_error(TPU_E_OOM, "executor: out of host memory");
  n->ex = ex;
  int rc = ex->compile(g, key, &n->exe);
  if (rc != TPU_OK) {
    free(n);
    return rc;
  }
  exe_entry *expect = NULL;
  if (__atomic_compare_exchange_n(ep, &expect, n, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    *out = n;
  } else {
    ex->release(n->exe);
    free(n);
    *out = expect;
  }
  return TPU_OK;
}

int tpux_exec_program(const tpuir_graph *g, const tpux_key *key, void **slotp, int nin,
                      const tpu_view *ins, int nout, const tpu_view *outs) {
  const tpux_executor *ex = tpux_executor_active();
  if (!ex) return tpu_last_error_code();
  slot *s = slot_get(slotp);
  if (!s) return TPU_E_OOM;
  exe_entry *e;
  int rc = entry_get(s, ex, g, key, &e);
  if (rc != TPU_OK) return rc;
  return ex->execute(e->exe, g, nin, ins, nout, outs);
}

void tpux_exec_release(void *s) { slot_free(s); }
