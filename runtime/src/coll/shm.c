/* coll/shm.c - the communicator's shared-memory segment (create/attach,
 * unlink once everyone is attached), the bounded waits (spin, then futex
 * sleep on a shared doorbell) and failure/abort bookkeeping. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll/internal.h"

#define COLL_SPIN 2000
#define COLL_SLICE_MS 20 /* futex sleep slice: abort/peer checks in between */
#define COLL_DEFAULT_SLOT (1u << 20)
#define COLL_DIRECT_BYTES (256u << 10)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

const char *tpucoll__kind_name(int kind) {
  static const char *names[TPUCOLL_NUM_KINDS] = {
      "barrier",    "all_reduce",     "broadcast",  "reduce", "all_gather",
      "reduce_scatter", "all_to_all", "send",       "recv"};
  return kind >= 0 && kind < TPUCOLL_NUM_KINDS ? names[kind] : "?";
}

uint8_t *tpucoll__slot(tpucoll_comm *c, uint64_t parity, int rank) {
  return c->data + ((parity & 1) * (size_t)c->size + (size_t)rank) * c->slot_bytes;
}

uint8_t *tpucoll__result(tpucoll_comm *c, uint64_t parity) {
  return c->data + (2 * (size_t)c->size + (parity & 1)) * c->slot_bytes;
}

/* ---- failure ------------------------------------------------------------ */

int tpucoll__fail(tpucoll_comm *c, int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!c->aborted) {
    c->aborted = 1;
    snprintf(c->abort_msg, sizeof c->abort_msg, "%s", msg);
  }
  if (c->hdr) {
    uint32_t expect = 0;
    if (atomic_compare_exchange_strong(&c->hdr->aborted, &expect, 2)) {
      c->hdr->abort_rank = c->rank;
      snprintf(c->hdr->abort_msg, sizeof c->hdr->abort_msg, "%.255s", msg);
      atomic_store(&c->hdr->aborted, 1); /* message complete */
    }
    tpucoll__ring(c);
  }
  return tpu_error(code, "%s", msg);
}

void tpucoll_comm_abort(tpucoll_comm *c, const char *reason) {
  if (!c) return;
  tpucoll__fail(c, TPU_E_INTERNAL, "tpu_dist: communicator aborted by rank %d: %s",
            c->rank, reason ? reason : "abort requested");
  tpu_clear_error();
}

/* 1 if process `pid` is gone (or a zombie nobody reaped yet). */
static int pid_dead(int pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) == -1 && errno == ESRCH) return 1;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  return p && (p[2] == 'Z' || p[2] == 'X');
}

int tpucoll__check_alive(tpucoll_comm *c) {
  if (c->aborted)
    return tpu_error(TPU_E_INTERNAL, "%s", c->abort_msg);
  if (atomic_load(&c->hdr->aborted) == 1) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s", c->hdr->abort_msg);
    c->aborted = 1;
    snprintf(c->abort_msg, sizeof c->abort_msg,
             "tpu_dist: communicator aborted (rank %d failed: %.300s)",
             c->hdr->abort_rank, msg);
    return tpu_error(TPU_E_INTERNAL, "%s", c->abort_msg);
  }
  return TPU_OK;
}

/* ---- waiting ------------------------------------------------------------ */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val,
                  const struct timespec *ts) {
  return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

/* Wake the sleepers (if any) after publishing progress. The doorbell
 * bump and the sleeper count are sequentially consistent on both sides: a
 * waiter counts itself before re-checking its counter, so either the ringer
 * sees it (and wakes it) or the waiter sees the progress (or the new bell
 * value, and FUTEX_WAIT returns at once). No syscall when nobody sleeps. */
void tpucoll__ring(tpucoll_comm *c) {
  atomic_fetch_add(&c->hdr->bell, 1);
  if (atomic_load(&c->hdr->sleepers))
    futex(&c->hdr->bell, FUTEX_WAKE, INT32_MAX, NULL);
}

static int spin_rounds(int size) {
  const char *s = getenv("TORCH_TPU_COLL_SPIN");
  if (s && *s) return atoi(s) < 0 ? 0 : atoi(s);
  /* more ranks than cores: a spinning rank only keeps the rank it waits
   * for off the CPU, so sleep at once */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 && size > cpus ? 0 : COLL_SPIN;
}

int tpucoll__wait_ge(tpucoll_comm *c, _Atomic uint64_t *ctr, uint64_t target,
                 int peer, const char *what) {
  for (int i = 0; i < c->spin; i++) {
    if (atomic_load_explicit(ctr, memory_order_acquire) >= target) return TPU_OK;
    cpu_relax();
  }
  int64_t start = now_ms(), deadline = start + c->timeout_ms, checked = start;
  for (int rounds = 0;; rounds++) {
    uint32_t bell = atomic_load(&c->hdr->bell);
    if (atomic_load_explicit(ctr, memory_order_acquire) >= target) return TPU_OK;
    int rc = tpucoll__check_alive(c);
    if (rc) return rc;
    if (c->spin && rounds < 4) { /* a few yields before the first sleep */
      sched_yield();
      continue;
    }
    int64_t now = now_ms();
    if (now >= deadline)
      return tpucoll__fail(c, TPU_E_INTERNAL,
                       "tpu_dist timeout: rank %d waited %lld ms in %s (collective #%llu) "
                       "for rank %d, which did not arrive (timeout %lld ms)",
                       c->rank, (long long)(now - start), what,
                       (unsigned long long)c->seq, peer, (long long)c->timeout_ms);
    /* is the peer still there? (reads /proc: once per slice, not per wake) */
    if (now - checked >= COLL_SLICE_MS) {
      checked = now;
      int pid = c->ranks[peer].pid;
      /* a peer may arrive and exit between the counter check above and
       * this one (the last barrier of a run): its arrival counts */
      if (pid_dead(pid) && atomic_load_explicit(ctr, memory_order_acquire) < target)
        return tpucoll__fail(c, TPU_E_INTERNAL,
                         "tpu_dist timeout: rank %d (pid %d) exited while rank %d waited "
                         "for it in %s (collective #%llu)",
                         peer, pid, c->rank, what, (unsigned long long)c->seq);
    }
    int64_t slice = deadline - now < COLL_SLICE_MS ? deadline - now : COLL_SLICE_MS;
    struct timespec ts = {slice / 1000, (slice % 1000) * 1000000};
    atomic_fetch_add(&c->hdr->sleepers, 1);
    if (atomic_load(ctr) < target) futex(&c->hdr->bell, FUTEX_WAIT, bell, &ts);
    atomic_fetch_sub(&c->hdr->sleepers, 1);
  }
}

int tpucoll__barrier(tpucoll_comm *c, const char *what) {
  uint64_t g = ++c->gen;
  atomic_store_explicit(&c->ranks[c->rank].arrive, g, memory_order_release);
  tpucoll__ring(c);
  for (int k = 0; k < c->size; k++) {
    if (k == c->rank) continue;
    int rc = tpucoll__wait_ge(c, &c->ranks[k].arrive, g, k, what);
    if (rc) return rc;
  }
  return TPU_OK;
}

/* ---- segment ------------------------------------------------------------ */

static size_t layout(tpucoll_comm *c) {
  size_t n = (size_t)c->size, off = round_up(sizeof(tpucoll__hdr), 4096);
  size_t ranks_off = off;
  off = round_up(off + n * sizeof(tpucoll__rank), 4096);
  size_t chans_off = off;
  off = round_up(off + n * n * sizeof(tpucoll__chan), 4096);
  size_t data_off = off;
  off += (2 * n + 2) * c->slot_bytes;
  size_t p2p_off = round_up(off, 4096);
  off = p2p_off + n * n * 2 * c->p2p_bytes;
  if (c->base) {
    c->hdr = (tpucoll__hdr *)c->base;
    c->ranks = (tpucoll__rank *)(c->base + ranks_off);
    c->chans = (tpucoll__chan *)(c->base + chans_off);
    c->data = c->base + data_off;
    c->p2p = c->base + p2p_off;
  }
  return off;
}

/* A byte count from the environment ("4096", "64K", "1M"), else `dflt`. */
static size_t env_bytes(const char *name, size_t dflt) {
  const char *s = getenv(name);
  if (s && *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10;
    else if (*end == 'M' || *end == 'm') v <<= 20;
    if (end != s) return (size_t)v;
  }
  return dflt;
}

static size_t default_slot(void) {
  size_t v = env_bytes("TORCH_TPU_COLL_SLOT_BYTES", COLL_DEFAULT_SLOT);
  return v >= 4096 ? v : COLL_DEFAULT_SLOT;
}

static int attach_wait(tpucoll_comm *c, int64_t deadline, int *fd_out) {
  for (int delay_us = 200;; delay_us = delay_us < 20000 ? delay_us * 2 : delay_us) {
    int fd = shm_open(c->name, O_RDWR, 0600);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && (size_t)st.st_size == c->map_bytes) {
        *fd_out = fd;
        return TPU_OK;
      }
      close(fd);
    } else if (errno != ENOENT) {
      return tpu_error(TPU_E_INTERNAL, "tpu_dist: shm_open(%s): %s", c->name, strerror(errno));
    }
    if (now_ms() >= deadline)
      return tpu_error(TPU_E_INTERNAL,
                       "tpu_dist timeout: rank %d could not attach to segment %s "
                       "within %lld ms (rank 0 did not create it)",
                       c->rank, c->name, (long long)c->timeout_ms);
    usleep((useconds_t)delay_us);
  }
}

int tpucoll_comm_init(const char *name, int rank, int size, size_t slot_bytes,
                      int64_t timeout_ms, tpucoll_comm **out) {
  *out = NULL;
  if (!name || name[0] != '/' || strlen(name) >= sizeof(((tpucoll_comm *)0)->name))
    return tpu_error(TPU_E_INVALID, "tpu_dist: segment name must start with '/' and be short");
  if (size < 1 || size > TPUCOLL_MAX_RANKS || rank < 0 || rank >= size)
    return tpu_error(TPU_E_INVALID, "tpu_dist: bad rank %d / size %d (max %d ranks per host)",
                     rank, size, TPUCOLL_MAX_RANKS);
  if (timeout_ms <= 0) timeout_ms = 1800000;
  if (!slot_bytes) slot_bytes = default_slot();
  slot_bytes = round_up(slot_bytes, 4096);
  tpucoll_comm *c = calloc(1, sizeof *c);
  if (!c) return tpu_error(TPU_E_OOM, "tpu_dist: out of host memory");
  snprintf(c->name, sizeof c->name, "%s", name);
  c->rank = rank;
  c->size = size;
  c->timeout_ms = timeout_ms;
  c->spin = spin_rounds(size);
  c->direct_bytes = env_bytes("TORCH_TPU_COLL_DIRECT_BYTES", COLL_DIRECT_BYTES);
  c->slot_bytes = slot_bytes;
  c->p2p_bytes = slot_bytes;
  c->map_bytes = layout(c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  int64_t deadline = now_ms() + timeout_ms;
  int fd = -1, rc = TPU_OK;
  if (rank == 0) {
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      rc = tpu_error(TPU_E_INTERNAL, "tpu_dist: shm_open(%s) create: %s", name, strerror(errno));
      goto fail;
    }
    c->linked = 1;
    if (ftruncate(fd, (off_t)c->map_bytes) != 0) {
      rc = tpu_error(TPU_E_INTERNAL, "tpu_dist: ftruncate(%s, %zu): %s", name, c->map_bytes,
                     strerror(errno));
      goto fail;
    }
  } else {
    rc = attach_wait(c, deadline, &fd);
    if (rc) goto fail;
  }
  c->base = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  fd = -1;
  if (c->base == MAP_FAILED) {
    c->base = NULL;
    rc = tpu_error(TPU_E_INTERNAL, "tpu_dist: mmap %zu bytes: %s", c->map_bytes, strerror(errno));
    goto fail;
  }
  layout(c);
  if (rank == 0) {
    c->hdr->magic = COLL_MAGIC;
    c->hdr->size = size;
    c->hdr->slot_bytes = slot_bytes;
    c->hdr->p2p_bytes = c->p2p_bytes;
    atomic_store(&c->hdr->ready, 1);
  } else {
    while (atomic_load(&c->hdr->ready) != 1) {
      if (now_ms() >= deadline) {
        rc = tpu_error(TPU_E_INTERNAL, "tpu_dist timeout: segment %s never became ready", name);
        goto fail;
      }
      usleep(200);
    }
    if (c->hdr->magic != COLL_MAGIC || c->hdr->size != size ||
        c->hdr->slot_bytes != slot_bytes) {
      rc = tpu_error(TPU_E_INVALID,
                     "tpu_dist: segment %s was made for %d ranks / %llu-byte slots, "
                     "rank %d expects %d / %zu",
                     name, c->hdr->size, (unsigned long long)c->hdr->slot_bytes, rank, size,
                     slot_bytes);
      goto fail;
    }
  }
  c->ranks[rank].pid = (int32_t)getpid();
  rc = tpucoll__barrier(c, "init");
  if (rc) goto fail;
  if (rank == 0) {
    shm_unlink(name);
    c->linked = 0;
  }
  *out = c;
  return TPU_OK;
fail:
  if (fd >= 0) close(fd);
  {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tpu_last_error());
    shm_unlink(name); /* whoever fails removes the name: nothing leaks */
    c->linked = 0;
    tpucoll_comm_destroy(c);
    return tpu_error(rc, "%s", msg);
  }
}

void tpucoll_comm_destroy(tpucoll_comm *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  int started = c->thread_started;
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (started) pthread_join(c->thread, NULL);
  if (c->linked) shm_unlink(c->name);
  if (c->base) munmap(c->base, c->map_bytes);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

int tpucoll_comm_rank(const tpucoll_comm *c) { return c ? c->rank : -1; }
int tpucoll_comm_size(const tpucoll_comm *c) { return c ? c->size : -1; }
void tpucoll_comm_set_timeout(tpucoll_comm *c, int64_t timeout_ms) {
  if (c && timeout_ms > 0) c->timeout_ms = timeout_ms;
}
