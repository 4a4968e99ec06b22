/* lower_nn.c - (in progress) */
#include "lower_internal.h"

const lw_row lw_rows_nn[] = {{"", 0, 0}};
const int lw_nrows_nn = 0;
