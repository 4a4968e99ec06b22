/* main.c - C test runner: runs every registered test (or those whose name
 * contains argv[1]) and prints "N passed, N failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_base.h"
#include "tpu_test.h"

#define MAX_TESTS 1024
static struct { const char *name; tpu_test_fn fn; } g_tests[MAX_TESTS];
static int g_ntests;

void tpu_test_register(const char *name, tpu_test_fn fn) {
  if (g_ntests < MAX_TESTS) {
    g_tests[g_ntests].name = name;
    g_tests[g_ntests].fn = fn;
    g_ntests++;
  }
}

int main(int argc, char **argv) {
  const char *filter = argc > 1 ? argv[1] : NULL;
  int passed = 0, failed = 0;
  for (int i = 0; i < g_ntests; i++) {
    if (filter && !strstr(g_tests[i].name, filter)) continue;
    int f = 0;
    tpu_clear_error();
    g_tests[i].fn(&f);
    printf("%s %s\n", f ? "FAIL" : "ok  ", g_tests[i].name);
    fflush(stdout);
    if (f) failed++; else passed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
