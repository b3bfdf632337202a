/* The matrix products' tuning fields (see src/tuning.h): 0 lets src/ops/matmul.c's rules
   decide. */
#ifndef WGML_MATMUL_TUNING_H
#define WGML_MATMUL_TUNING_H

#include <stdint.h>

typedef struct wgml__matmul_tuning {
    uint32_t unused;
} wgml__matmul_tuning;

#endif
