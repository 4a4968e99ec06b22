/* tpu_base.h - base layer of the torch_tpu C runtime (prefix tpu_).
 *
 * Status codes, per-thread error messages, dtypes and the strided view
 * descriptor shared by every other layer. No PyTorch dependency.
 */
#ifndef TPU_BASE_H
#define TPU_BASE_H

/* Marks the runtime's public API: the only symbols the extension exports
 * (the runtime is built with -fvisibility=hidden; library-private functions
 * use the double-underscore prefix of their layer and stay hidden). */
#define TPU_API __attribute__((visibility("default")))

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes: 0 = success, negative = error -------------------- */
typedef enum tpu_status {
  TPU_OK = 0,
  TPU_E_INVALID = -1,     /* bad argument / shape mismatch -> RuntimeError */
  TPU_E_INDEX = -2,       /* index out of range            -> IndexError   */
  TPU_E_TYPE = -3,        /* bad dtype / type combination  -> TypeError    */
  TPU_E_VALUE = -4,       /* bad value (e.g. p>1)          -> ValueError   */
  TPU_E_OOM = -5,         /* chip HBM exhausted            -> OutOfMemoryError */
  TPU_E_BUSY = -6,        /* chip held by another process  -> RuntimeError */
  TPU_E_UNSUPPORTED = -7, /* no native lowering for this case -> fallback / NotImplementedError */
  TPU_E_INTERNAL = -8,    /* bug or system failure         -> RuntimeError */
  TPU_E_LINALG = -9       /* decomposition failed (singular, not positive-definite,
                             no convergence) -> torch.linalg.LinAlgError */
} tpu_status;

/* Record an error for the calling thread and return `code` (convenience for
 * `return tpu_error(TPU_E_INVALID, "...%d", x);`). printf-style. */
TPU_API int tpu_error(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Message of the last error recorded on this thread ("" if none).
 * Borrowed: valid until the next tpu_error on this thread. */
TPU_API const char *tpu_last_error(void);
/* Code of the last error recorded on this thread (TPU_OK if none). */
TPU_API int tpu_last_error_code(void);
/* Clear this thread's error. */
TPU_API void tpu_clear_error(void);
/* Static name of a status code ("TPU_E_INDEX"...). */
TPU_API const char *tpu_status_name(int code);

/* ---- dtypes ---------------------------------------------------------- */
typedef enum tpu_dtype {
  TPU_BOOL = 0,
  TPU_U8,
  TPU_I8,
  TPU_I16,
  TPU_I32,
  TPU_I64,
  TPU_F16,
  TPU_BF16,
  TPU_F32,
  TPU_F64,
  TPU_C64,  /* complex64: two float32 (re, im) interleaved */
  TPU_C128, /* complex128: two float64 (re, im) interleaved */
  TPU_NUM_DTYPES
} tpu_dtype;

/* Size in bytes of one element (0 for an invalid dtype). */
TPU_API size_t tpu_dtype_size(int dt);
/* Static lower-case name ("float32", "bfloat16", ...); "?" if invalid. */
TPU_API const char *tpu_dtype_name(int dt);
TPU_API int tpu_dtype_is_float(int dt); /* f16, bf16, f32, f64 */
TPU_API int tpu_dtype_is_int(int dt);   /* u8..i64 (not bool) */
TPU_API int tpu_dtype_is_complex(int dt); /* c64, c128 */
/* Real dtype of a complex dtype's parts (c64 -> f32, c128 -> f64); any
 * other dtype is returned unchanged. */
TPU_API int tpu_dtype_complex_part(int dt);
/* Complex dtype whose parts have dtype dt (f64 -> c128; f16/bf16/f32 and
 * ints -> c64; complex dtypes unchanged). */
TPU_API int tpu_dtype_to_complex(int dt);

/* Scalar conversions with PyTorch/TPU rounding (round-to-nearest-even). */
TPU_API float tpu_bf16_to_f32(uint16_t h);
TPU_API uint16_t tpu_f32_to_bf16(float f);
TPU_API float tpu_f16_to_f32(uint16_t h);
TPU_API uint16_t tpu_f32_to_f16(float f);

/* ---- strided views --------------------------------------------------- */
#define TPU_MAX_DIMS 16

/* A strided view of typed memory. Sizes/strides/offset are in ELEMENTS.
 * `base` is borrowed: whoever builds the view keeps the memory alive.
 * A 0-dim view (ndim == 0) holds one element at base + offset. */
typedef struct tpu_view {
  void *base;
  int64_t offset;
  int32_t dtype; /* tpu_dtype */
  int32_t ndim;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t strides[TPU_MAX_DIMS];
} tpu_view;

/* Number of elements of a view (1 for ndim == 0). */
TPU_API int64_t tpu_view_numel(const tpu_view *v);
/* 1 if the view is C-contiguous (size-1 dims ignored). */
TPU_API int tpu_view_is_contiguous(const tpu_view *v);
/* Fill `v` as a contiguous view of `base` (strides computed). */
TPU_API void tpu_view_init_contiguous(tpu_view *v, void *base, int dtype, int ndim,
                              const int64_t *sizes);

/* ---- precision of matrix-unit ops (ARCHITECTURE §4) ------------------ */
typedef enum tpu_precision {
  TPU_PREC_DEFAULT = 0, /* 1 bf16 pass  */
  TPU_PREC_HIGH = 1,    /* 3 bf16 passes */
  TPU_PREC_HIGHEST = 2, /* 6 bf16 passes */
  TPU_PREC_FP32 = 3     /* true fp32 (internal use only) */
} tpu_precision;

/* ---- 128-bit hashing of keys ------------------------------------------- */
/* Two independent 64-bit lanes over 8-byte words (the tail zero-padded,
 * the length mixed in). Cache keys of recorded ops are hashed on the
 * dispatch path, so this costs a few cycles per word. Not cryptographic. */
typedef struct tpu_hash { uint64_t a, b; } tpu_hash;

static inline tpu_hash tpu_hash_init(void) {
  tpu_hash h = {14695981039346656037ull, 0x243f6a8885a308d3ull};
  return h;
}
static inline void tpu_hash_word(tpu_hash *h, uint64_t w) {
  h->a = (h->a ^ w) * 0x9e3779b97f4a7c15ull;
  h->a ^= h->a >> 32;
  h->b = (h->b + w + 0x632be59bd9b4e019ull) * 0xff51afd7ed558ccdull;
  h->b ^= h->b >> 29;
}
static inline void tpu_hash_bytes(tpu_hash *h, const void *p, size_t n) {
  const unsigned char *c = (const unsigned char *)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, c + i, 8);
    tpu_hash_word(h, w);
  }
  if (i < n) {
    uint64_t w = 0;
    __builtin_memcpy(&w, c + i, n - i);
    tpu_hash_word(h, w ^ ((uint64_t)(n - i) << 56));
  }
}
/* one variable or struct field (its bytes) */
#define TPU_HASH_FIELD(h, x) tpu_hash_bytes((h), &(x), sizeof(x))

#ifdef __cplusplus
}
#endif
#endif /* TPU_BASE_H */
