/* lower_random.c - (in progress) */
#include "lower_internal.h"

const lw_row lw_rows_random[] = {{"", 0, 0}};
const int lw_nrows_random = 0;
