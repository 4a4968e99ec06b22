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
#include "ir/internal.h"

#define TPUG_DISK_VERSION 1u

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
  snprintf(buf, cap, "%s/%016llx%016llx-v%u-%zu.tpug", g_dir,
           (unsigned long long)k1, (unsigned long long)k2, TPUG_DISK_VERSION,
           sizeof(tpuir_node));
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

/* ---- serialization ------------------------------------------------------ */

typedef struct disk_hdr {
  char magic[4];
  uint32_t version, node_size;
  int32_t nnodes, nparams, nouts;
} disk_hdr;

int tpug__graph_write(const tpuir_graph *g, const char *path) {
  char tmp[1300];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return tpu_error(TPU_E_INTERNAL, "cache: cannot write %s", tmp);
  disk_hdr h = {{'T', 'P', 'U', 'G'}, TPUG_DISK_VERSION,
                (uint32_t)sizeof(tpuir_node), tpuir_num_nodes(g),
                tpuir_num_params(g), tpuir_num_outputs(g)};
  int ok = fwrite(&h, sizeof h, 1, f) == 1;
  for (int t = 0; ok && t < h.nnodes; t++) {
    tpuir_node n = *tpuir_get_node(g, t);
    n.list = NULL;
    ok = fwrite(&n, sizeof n, 1, f) == 1;
  }
  for (int t = 0; ok && t < h.nnodes; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (n->nlist)
      ok = fwrite(n->list, sizeof(tpuir_val), (size_t)n->nlist, f) ==
           (size_t)n->nlist;
  }
  for (int i = 0; ok && i < h.nouts; i++) {
    tpuir_val v = tpuir_output(g, i);
    ok = fwrite(&v, sizeof v, 1, f) == 1;
  }
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
  disk_hdr h;
  tpuir_node *nodes = NULL;
  tpuir_graph *g = NULL;
  tpuir_val *outs = NULL;
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, "TPUG", 4) != 0 ||
      h.version != TPUG_DISK_VERSION || h.node_size != sizeof(tpuir_node) ||
      h.nnodes < 0 || h.nouts < 0 || h.nnodes > (1 << 24))
    goto bad;
  nodes = calloc((size_t)h.nnodes + 1, sizeof *nodes);
  outs = calloc((size_t)h.nouts + 1, sizeof *outs);
  g = tpuir_graph_new();
  if (!nodes || !outs || !g) goto bad;
  if (fread(nodes, sizeof *nodes, (size_t)h.nnodes, f) != (size_t)h.nnodes)
    goto bad;
  for (int t = 0; t < h.nnodes; t++) {
    tpuir_node *s = &nodes[t];
    if (s->op < 0 || s->op >= TPUIR_NUM_OPS || s->nin < 0 || s->nin > 4 ||
        s->nlist < 0)
      goto bad;
    for (int k = 0; k < s->nin; k++)
      if (s->in[k] < 0 || s->in[k] >= t) goto bad;
    if (s->op == TPUIR_PARAM) {
      if (tpuir_param(g, s->dtype, s->ndim, s->sizes) != t) goto bad;
      continue;
    }
    tpuir_val *list = NULL;
    if (s->nlist) {
      list = malloc((size_t)s->nlist * sizeof *list);
      if (!list ||
          fread(list, sizeof *list, (size_t)s->nlist, f) != (size_t)s->nlist) {
        free(list);
        goto bad;
      }
      for (int k = 0; k < s->nlist; k++)
        if (list[k] < 0 || list[k] >= t) {
          free(list);
          goto bad;
        }
    }
    tpuir_node *d = tpuir__new_node(g, s->op);
    if (!d) {
      free(list);
      goto bad;
    }
    *d = *s;
    d->list = list;
    tpuir__commit(g);
  }
  if (fread(outs, sizeof *outs, (size_t)h.nouts, f) != (size_t)h.nouts)
    goto bad;
  if (tpuir_num_params(g) != h.nparams ||
      tpuir_set_outputs(g, h.nouts, outs) != TPU_OK)
    goto bad;
  fclose(f);
  free(nodes);
  free(outs);
  return g;
bad:
  fclose(f);
  free(nodes);
  free(outs);
  tpuir_graph_free(g);
  return NULL;
}
