/* graph/cache.c - the compilation cache shared by every eager mode: an
 * in-memory LRU of merged programs keyed by a 128-bit structural key, and
 * an optional on-disk tier (TORCH_TPU_COMPILATION_CACHE_DIR) holding the
 * serialized graphs, so a fresh process skips compiling (merging) them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/internal.h"
#include "tpu_exec.h"

#define TPUG_DISK_VERSION 2u /* 2: tpuir_write's format */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static tpug_prog **g_ent;
static int g_n, g_cap_entries;
static uint64_t g_tick, g_hits, g_disk_hits;
static char g_dir[1024];
static int g_env_done;

static void env_init(void) {
  if (g_env_done) return;
  g_env_done = 1;
  const char *d = getenv("TORCH_TPU_COMPILATION_CACHE_DIR");
  if (d && *d) {
    snprintf(g_dir, sizeof g_dir, "%s", d);
    mkdir(g_dir, 0777); /* as tpug_cache_set_dir does; an existing one stays */
  }
  const char *e = getenv("TORCH_TPU_CACHE_ENTRIES");
  g_cap_entries = e && atoi(e) > 0 ? atoi(e) : 512;
}

void tpug__prog_unref(tpug_prog *p) {
  if (!p) return;
  if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    tpux_exec_release(p->exe);
    tpuir_graph_free(p->g);
    free(p);
  }
}

static tpug_prog *find(uint64_t k1, uint64_t k2) {
  for (int i = 0; i < g_n; i++)
    if (g_ent[i]->k1 == k1 && g_ent[i]->k2 == k2) return g_ent[i];
  return NULL;
}

/* insert p (holding one reference for the cache); evicts the LRU entry */
static int insert(tpug_prog *p) {
  if (g_n == g_cap_entries) {
    int lru = 0;
    for (int i = 1; i < g_n; i++)
      if (g_ent[i]->tick < g_ent[lru]->tick) lru = i;
    tpug__prog_unref(g_ent[lru]);
    g_ent[lru] = g_ent[--g_n];
  }
  if (!g_ent) {
    g_ent = malloc((size_t)g_cap_entries * sizeof *g_ent);
    if (!g_ent) return -1;
  }
  g_ent[g_n++] = p;
  return 0;
}

static void disk_path(char *buf, size_t cap, uint64_t k1, uint64_t k2) {
  snprintf(buf, cap, "%s/%016llx%016llx-v%u.tpug", g_dir, (unsigned long long)k1,
           (unsigned long long)k2, TPUG_DISK_VERSION);
}

static tpug_prog *new_prog(uint64_t k1, uint64_t k2, tpuir_graph *g) {
  tpug_prog *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->k1 = k1;
  p->k2 = k2;
  p->g = g;
  p->refs = 1;
  return p;
}

tpug_prog *tpug__cache_get(uint64_t k1, uint64_t k2, int *from_disk) {
  *from_disk = 0;
  pthread_mutex_lock(&g_mu);
  env_init();
  tpug_prog *p = find(k1, k2);
  if (p) {
    p->tick = ++g_tick;
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_ACQ_REL);
    g_hits++;
    pthread_mutex_unlock(&g_mu);
    return p;
  }
  char path[1200] = "";
  if (g_dir[0]) disk_path(path, sizeof path, k1, k2);
  pthread_mutex_unlock(&g_mu);
  if (!path[0]) return NULL;
  tpuir_graph *g = tpug__graph_read(path);
  if (!g) return NULL;
  p = new_prog(k1, k2, g);
  if (!p) {
    tpuir_graph_free(g);
    return NULL;
  }
  pthread_mutex_lock(&g_mu);
  tpug_prog *q = find(k1, k2);
  if (q) { /* another thread won */
    __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&g_mu);
    tpug__prog_unref(p);
    return q;
  }
  p->tick = ++g_tick;
  if (insert(p) == 0) p->refs++;
  g_disk_hits++;
  pthread_mutex_unlock(&g_mu);
  *from_disk = 1;
  return p;
}

tpug_prog *tpug__cache_put(uint64_t k1, uint64_t k2, tpuir_graph *g) {
  tpug_prog *p = new_prog(k1, k2, g);
  if (!p) {
    tpuir_graph_free(g);
    return NULL;
  }
  pthread_mutex_lock(&g_mu);
  env_init();
  char path[1200] = "";
  if (g_dir[0]) disk_path(path, sizeof path, k1, k2);
  tpug_prog *q = find(k1, k2);
  if (!q) {
    p->tick = ++g_tick;
    if (insert(p) == 0) p->refs++;
  }
  pthread_mutex_unlock(&g_mu);
  if (path[0] && access(path, F_OK) != 0) tpug__graph_write(g, path);
  return p;
}

const char *tpug__cache_dir(char *buf, size_t cap) {
  pthread_mutex_lock(&g_mu);
  env_init();
  snprintf(buf, cap, "%s", g_dir);
  pthread_mutex_unlock(&g_mu);
  return buf;
}

void tpug__cache_count(uint64_t *hits, uint64_t *disk_hits, uint64_t *entries) {
  pthread_mutex_lock(&g_mu);
  *hits = g_hits;
  *disk_hits = g_disk_hits;
  *entries = (uint64_t)g_n;
  pthread_mutex_unlock(&g_mu);
}

void tpug__cache_reset_counts(void) {
  pthread_mutex_lock(&g_mu);
  g_hits = g_disk_hits = 0;
  pthread_mutex_unlock(&g_mu);
}

/* Drop every in-memory program (running tasks keep their references). */
void tpug_cache_clear(void) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_n; i++) tpug__prog_unref(g_ent[i]);
  g_n = 0;
  pthread_mutex_unlock(&g_mu);
}

/* Set (or with NULL/"" disable) the disk tier directory; creates it. */
int tpug_cache_set_dir(const char *dir) {
  pthread_mutex_lock(&g_mu);
  env_init();
  snprintf(g_dir, sizeof g_dir, "%s", dir ? dir : "");
  pthread_mutex_unlock(&g_mu);
  if (dir && *dir) mkdir(dir, 0777);
  return TPU_OK;
}

/* ---- files --------------------------------------------------------------- */

/* Write atomically (a temporary file renamed into place), in the IR's own
 * format (tpuir_write). */
int tpug__graph_write(const tpuir_graph *g, const char *path) {
  char tmp[1300];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return tpu_error(TPU_E_INTERNAL, "cache: cannot write %s", tmp);
  int ok = tpuir_write(g, f) == TPU_OK;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return tpu_error(TPU_E_INTERNAL, "cache: cannot write %s", path);
  }
  return TPU_OK;
}

tpuir_graph *tpug__graph_read(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  tpuir_graph *g = tpuir_read(f);
  fclose(f);
  return g;
}
