/* lower_index.c - (in progress) */
#include "lower_internal.h"

const lw_row lw_rows_index[] = {{"", 0, 0}};
const int lw_nrows_index = 0;
