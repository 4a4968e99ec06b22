/* lower_linalg.c - (in progress) */
#include "lower_internal.h"

const lw_row lw_rows_linalg[] = {{"", 0, 0}};
const int lw_nrows_linalg = 0;
