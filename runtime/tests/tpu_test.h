/* tpu_test.h - tiny C test framework. Each test file defines TPU_TEST(name)
 * functions; they register themselves at load time. The runner
 * (tests/main.c) runs all (or those matching argv[1]) and prints
 * "N passed, N failed". */
#ifndef TPU_TEST_H
#define TPU_TEST_H
#include <math.h>
#include <stdio.h>

typedef void (*tpu_test_fn)(int *failed);
void tpu_test_register(const char *name, tpu_test_fn fn);

/* tpuir_hash with constants' values, folded to 64 bits (tests compare graphs) */
#define TEST_IR_HASH(g)                                                  \
  ({                                                                     \
    uint64_t h_[2];                                                      \
    tpuir_hash((g), TPUIR_HASH_VALUES, h_);                              \
    h_[0] ^ (h_[1] * 31);                                                \
  })

#define TPU_TEST(name)                                                   \
  static void test_##name(int *tpu_test_failed_);                        \
  __attribute__((constructor)) static void register_##name(void) {      \
    tpu_test_register(#name, test_##name);                               \
  }                                                                      \
  static void test_##name(int *tpu_test_failed_)

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, \
              #cond);                                                    \
      *tpu_test_failed_ = 1;                                             \
      return;                                                            \
    }                                                                    \
  } while (0)

#define CHECK_OK(expr)                                                   \
  do {                                                                   \
    int rc_ = (expr);                                                    \
    if (rc_ != 0) {                                                      \
      fprintf(stderr, "  %s:%d: %s returned %d (%s)\n", __FILE__,        \
              __LINE__, #expr, rc_, tpu_last_error());                   \
      *tpu_test_failed_ = 1;                                             \
      return;                                                            \
    }                                                                    \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                            \
  do {                                                                   \
    double a_ = (a), b_ = (b);                                           \
    if (!(fabs(a_ - b_) <= (tol))) {                                     \
      fprintf(stderr, "  %s:%d: %s=%g vs %s=%g (tol %g)\n", __FILE__,    \
              __LINE__, #a, a_, #b, b_, (double)(tol));                  \
      *tpu_test_failed_ = 1;                                             \
      return;                                                            \
    }                                                                    \
  } while (0)
#endif
