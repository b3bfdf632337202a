/* The attention kernels' tuning fields (see src/tuning.h): 0 lets src/ops/attention.c's
   rules decide. */
#ifndef WGML_ATTENTION_TUNING_H
#define WGML_ATTENTION_TUNING_H

#include <stdint.h>

typedef struct wgml__attention_tuning {
    uint32_t unused;
} wgml__attention_tuning;

#endif
