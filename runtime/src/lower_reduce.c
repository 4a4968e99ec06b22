/* lower_reduce.c - (in progress) */
#include "lower_internal.h"

const lw_row lw_rows_reduce[] = {{"", 0, 0}};
const int lw_nrows_reduce = 0;
