/* rt/chip.c - environment, visible devices and the per-chip inter-process lock.
 *
 * The environment is read once (pthread_once). Opening a device takes an
 * exclusive flock on <lock_dir>/vtpu_chip<phys>.lock and keeps the fd open
 * for the life of the process, so the kernel releases the lock when the
 * process exits or crashes. The holder writes its pid into the file so a
 * second process can name it in the TPU_E_BUSY message.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt/internal.h"
#include "tpu_rt.h"

/* ---- parsing helpers -------------------------------------------------- */

int tpurt__parse_visible_chips(const char *s, int nphys, int *out, int max,
                           char *err, size_t errlen) {
  int n = 0;
  const char *p = s;
  while (isspace((unsigned char)*p)) p++;
  if (*p == 0) return 0; /* empty list: no chips */
  for (;;) {
    while (isspace((unsigned char)*p)) p++;
    if (!isdigit((unsigned char)*p)) {
      snprintf(err, errlen, "entry %d is not a chip id", n);
      return -1;
    }
    long v = 0;
    while (isdigit((unsigned char)*p)) {
      v = v * 10 + (*p - '0');
      if (v > 1000000) v = 1000000;
      p++;
    }
    while (isspace((unsigned char)*p)) p++;
    if (v >= nphys) {
      snprintf(err, errlen, "chip %ld does not exist (this host has %d vTPU chips)",
               v, nphys);
      return -1;
    }
    for (int i = 0; i < n; i++)
      if (out[i] == v) {
        snprintf(err, errlen, "chip %ld is listed twice", v);
        return -1;
      }
    if (n >= max) {
      snprintf(err, errlen, "more than %d chips listed", max);
      return -1;
    }
    out[n++] = (int)v;
    if (*p == 0) return n;
    if (*p != ',') {
      snprintf(err, errlen, "unexpected character '%c'", *p);
      return -1;
    }
    p++;
  }
}

int tpurt__parse_bytes(const char *s, uint64_t *out) {
  const char *p = s;
  while (isspace((unsigned char)*p)) p++;
  if (!isdigit((unsigned char)*p)) return -1;
  uint64_t ip = 0;
  while (isdigit((unsigned char)*p)) {
    if (ip > (UINT64_MAX - 9) / 10) return -1;
    ip = ip * 10 + (uint64_t)(*p - '0');
    p++;
  }
  /* optional fraction, only meaningful with a suffix */
  uint64_t frac_num = 0, frac_den = 1;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p)) return -1;
    while (isdigit((unsigned char)*p)) {
      if (frac_den < 1000000000ull) {
        frac_num = frac_num * 10 + (uint64_t)(*p - '0');
        frac_den *= 10;
      }
      p++;
    }
  }
  int shift = 0;
  switch (*p) {
  case 'k': case 'K': shift = 10; p++; break;
  case 'm': case 'M': shift = 20; p++; break;
  case 'g': case 'G': shift = 30; p++; break;
  case 't': case 'T': shift = 40; p++; break;
  default: break;
  }
  if (shift && (*p == 'i' || *p == 'I')) {
    p++;
    if (*p != 'b' && *p != 'B') return -1;
  }
  if (*p == 'b' || *p == 'B') p++;
  while (isspace((unsigned char)*p)) p++;
  if (*p) return -1;
  if (frac_num && !shift) return -1; /* fractional bytes */
  if (shift && ip > (UINT64_MAX >> shift)) return -1;
  uint64_t v = ip << shift;
  if (frac_num) v += (frac_num << shift) / frac_den;
  *out = v;
  return 0;
}

char *tpurt__format_bytes(uint64_t b, char *buf, size_t len) {
  if (b <= 1024)
    snprintf(buf, len, "%llu bytes", (unsigned long long)b);
  else if (b <= ((uint64_t)1 << 20))
    snprintf(buf, len, "%.2f KiB", (double)b / 1024.0);
  else if (b <= ((uint64_t)1 << 30))
    snprintf(buf, len, "%.2f MiB", (double)b / 1048576.0);
  else
    snprintf(buf, len, "%.2f GiB", (double)b / 1073741824.0);
  return buf;
}

/* ---- environment ------------------------------------------------------ */

static tpurt__env g_env;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

static void env_init(void) {
  tpurt__env *e = &g_env;
  const char *v = getenv("TORCH_TPU_VTPU_CHIPS");
  e->nphys = RT_DEFAULT_CHIPS;
  if (v && *v) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end == 0 && n >= 0) e->nphys = n > RT_MAX_CHIPS ? RT_MAX_CHIPS : (int)n;
  }
  v = getenv("TPU_VISIBLE_CHIPS");
  if (v) {
    char why[128] = {0};
    int n = tpurt__parse_visible_chips(v, e->nphys, e->phys, RT_MAX_CHIPS, why, sizeof why);
    if (n < 0) {
      e->visible_bad = 1;
      e->ndev = 0;
      snprintf(e->visible_err, sizeof e->visible_err,
               "TPU_VISIBLE_CHIPS='%.64s' is invalid: %.120s", v, why);
    } else {
      e->ndev = n;
    }
  } else {
    e->ndev = e->nphys;
    for (int i = 0; i < e->nphys; i++) e->phys[i] = i;
  }
  e->hbm_bytes = RT_DEFAULT_HBM;
  v = getenv("TORCH_TPU_HBM_BYTES");
  uint64_t hb;
  if (v && *v && tpurt__parse_bytes(v, &hb) == 0) e->hbm_bytes = hb;
  v = getenv("TORCH_TPU_LOCK_DIR");
  snprintf(e->lock_dir, sizeof e->lock_dir, "%s", v && *v ? v : RT_DEFAULT_LOCK_DIR);
  v = getenv("TORCH_TPU_LAUNCH_BLOCKING");
  e->launch_blocking = v && strcmp(v, "1") == 0;
}

static void atfork_child(void);

static void env_once(void) {
  env_init();
  pthread_atfork(NULL, NULL, atfork_child);
}

const tpurt__env *tpurt__env_get(void) {
  pthread_once(&g_env_once, env_once);
  return &g_env;
}

/* ---- devices ---------------------------------------------------------- */

static pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_open[RT_MAX_CHIPS];
static int g_lock_fd[RT_MAX_CHIPS]; /* under g_open_mu; kept open until exit */

/* A forked child shares the parent's open lock files (flock locks belong to
 * the open file description): drop the child's references, so the chips
 * stay the parent's and are freed when the parent exits even if the child
 * lives on. In the child the devices count as not open; opening one again
 * fails with TPU_E_BUSY while the parent holds it. */
static void atfork_child(void) {
  pthread_mutex_init(&g_open_mu, NULL);
  for (int i = 0; i < RT_MAX_CHIPS; i++)
    if (atomic_load_explicit(&g_open[i], memory_order_relaxed)) {
      close(g_lock_fd[i]);
      g_lock_fd[i] = -1;
      atomic_store_explicit(&g_open[i], 0, memory_order_relaxed);
    }
}

/* Visible chips of this process (0 if TPU_VISIBLE_CHIPS is invalid). */
int tpurt_device_count(void) { return tpurt__env_get()->ndev; }

/* Physical chip id of visible device `dev`, or TPU_E_INVALID. */
int tpurt_device_physical_id(int dev) {
  const tpurt__env *e = tpurt__env_get();
  if (dev < 0 || dev >= e->ndev) return TPU_E_INVALID;
  return e->phys[dev];
}

/* 1 if this process has opened `dev`. */
int tpurt_device_is_open(int dev) {
  const tpurt__env *e = tpurt__env_get();
  if (dev < 0 || dev >= e->ndev) return 0;
  return atomic_load_explicit(&g_open[dev], memory_order_acquire);
}

/* HBM capacity of a visible device in bytes (0 if `dev` is bad). */
uint64_t tpurt_device_hbm_capacity(int dev) {
  const tpurt__env *e = tpurt__env_get();
  if (dev < 0 || dev >= e->ndev) return 0;
  return e->hbm_bytes;
}

/* mkdir -p with mode 0777 (umask overridden) for directories we create. */
static int make_dirs(const char *path) {
  char buf[512];
  if (strlen(path) >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, strlen(path) + 1);
  size_t len = strlen(buf);
  for (size_t i = 1; i <= len; i++) {
    if (buf[i] != '/' && buf[i] != 0) continue;
    char c = buf[i];
    buf[i] = 0;
    if (mkdir(buf, 0777) == 0) {
      chmod(buf, 0777); /* shared between users */
    } else if (errno != EEXIST) {
      return -1;
    }
    buf[i] = c;
  }
  return 0;
}

static int take_chip_lock(int dev, int phys, int *fd_out) {
  const tpurt__env *e = tpurt__env_get();
  if (make_dirs(e->lock_dir) != 0)
    return tpu_error(TPU_E_INTERNAL, "cannot create lock directory %s: %s",
                     e->lock_dir, strerror(errno));
  char path[600];
  snprintf(path, sizeof path, "%s/vtpu_chip%d.lock", e->lock_dir, phys);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  int writable = 1;
  if (fd < 0 && errno == EACCES) {
    fd = open(path, O_RDONLY | O_CLOEXEC);
    writable = 0;
  }
  if (fd < 0)
    return tpu_error(TPU_E_INTERNAL, "cannot open lock file %s: %s", path,
                     strerror(errno));
  if (writable) fchmod(fd, 0666); /* best effort: let other users lock it */
  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    if (err == EWOULDBLOCK) {
      char pidbuf[32] = {0};
      ssize_t r = pread(fd, pidbuf, sizeof pidbuf - 1, 0);
      close(fd);
      long pid = r > 0 ? strtol(pidbuf, NULL, 10) : 0;
      if (pid > 0)
        return tpu_error(TPU_E_BUSY,
                         "vTPU chip %d (tpu:%d) is held by another process "
                         "(pid %ld); set TPU_VISIBLE_CHIPS to use other chips",
                         phys, dev, pid);
      return tpu_error(TPU_E_BUSY,
                       "vTPU chip %d (tpu:%d) is held by another process; set "
                       "TPU_VISIBLE_CHIPS to use other chips",
                       phys, dev);
    }
    close(fd);
    return tpu_error(TPU_E_INTERNAL, "flock(%s) failed: %s", path, strerror(err));
  }
  if (writable) {
    char pidbuf[32];
    int n = snprintf(pidbuf, sizeof pidbuf, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pidbuf, (size_t)n, 0) != n) {
      /* the lock is held regardless; only the diagnostic pid is missing */
    }
  }
  *fd_out = fd;
  return TPU_OK;
}

/* Open visible device `dev` (idempotent): takes the chip's inter-process
 * lock. TPU_E_BUSY if another live process holds it. */
int tpurt_device_open(int dev) {
  const tpurt__env *e = tpurt__env_get();
  if (e->visible_bad) return tpu_error(TPU_E_INVALID, "%s", e->visible_err);
  if (dev < 0 || dev >= e->ndev)
    return tpu_error(TPU_E_INVALID, "invalid device tpu:%d (%d visible)", dev,
                     e->ndev);
  if (atomic_load_explicit(&g_open[dev], memory_order_acquire)) return TPU_OK;
  pthread_mutex_lock(&g_open_mu);
  int rc = TPU_OK;
  if (!atomic_load_explicit(&g_open[dev], memory_order_relaxed)) {
    int fd = -1;
    rc = take_chip_lock(dev, e->phys[dev], &fd);
    if (rc == TPU_OK) {
      g_lock_fd[dev] = fd;
      atomic_store_explicit(&g_open[dev], 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_open_mu);
  return rc;
}
