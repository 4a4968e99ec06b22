/* rt/internal.h - private interfaces between the runtime-core files
 * (rt/chip.c, rt/mem.c, rt/stream.c, rt/pool.c). Not part of the public API; tests may
 * use the parsing helpers. */
#ifndef TPU_RT_INTERNAL_H
#define TPU_RT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tpu_rt.h"

#define RT_MAX_CHIPS 64     /* physical chips supported */
#define RT_MAX_STREAMS 64   /* streams per chip, default stream included */
#define RT_DEFAULT_CHIPS 4
#define RT_DEFAULT_HBM ((uint64_t)16 << 30)
#define RT_DEFAULT_LOCK_DIR "/tmp/torch_tpu_locks"

/* ---- environment (rt/chip.c) -------------------------------------------- */

/* Process-wide settings, read once from the environment (pthread_once). */
typedef struct tpurt__env {
  int nphys;                   /* TORCH_TPU_VTPU_CHIPS */
  int ndev;                    /* visible devices (0 if TPU_VISIBLE_CHIPS bad) */
  int phys[RT_MAX_CHIPS];      /* visible device -> physical chip */
  int visible_bad;             /* 1 if TPU_VISIBLE_CHIPS was invalid */
  char visible_err[256];       /* why it was invalid */
  uint64_t hbm_bytes;          /* TORCH_TPU_HBM_BYTES */
  char lock_dir[512];          /* TORCH_TPU_LOCK_DIR */
  int launch_blocking;         /* TORCH_TPU_LAUNCH_BLOCKING=1 */
} tpurt__env;

/* The settings (read on first call). Borrowed, immutable, lives forever. */
const tpurt__env *tpurt__env_get(void);

/* Parse a TPU_VISIBLE_CHIPS value: comma list of distinct physical ids in
 * [0, nphys), blanks around entries allowed, "" = no chips. Fills out[] (up
 * to `max`) and returns the count, or -1 with a reason in err. */
int tpurt__parse_visible_chips(const char *s, int nphys, int *out, int max,
                           char *err, size_t errlen);
/* Parse a byte count: digits with an optional K/M/G/T suffix (binary
 * multiples; "KiB"/"KB"/"k" spellings accepted). 0 on success, -1 if bad. */
int tpurt__parse_bytes(const char *s, uint64_t *out);
/* Human-readable size the way PyTorch prints it ("512 bytes", "1.50 GiB")
 * into buf; returns buf. */
char *tpurt__format_bytes(uint64_t bytes, char *buf, size_t len);

/* ---- streams (rt/stream.c), used by rt/mem.c for stream-ordered free ------- */

/* Number of streams created so far on `dev` (0 if not open). */
int tpurt__stream_count(int dev);
/* Tasks ever enqueued / finished on stream `sid` of `dev` (monotonic). */
uint64_t tpurt__stream_enqueued(int dev, int sid);
uint64_t tpurt__stream_completed(int dev, int sid);
/* Block until stream `sid` of `dev` has finished `ticket` tasks. */
void tpurt__stream_wait_completed(int dev, int sid, uint64_t ticket);
/* The stream whose worker is the calling thread, or NULL. */
tpurt_stream *tpurt__current_worker_stream(void);

#endif /* TPU_RT_INTERNAL_H */
