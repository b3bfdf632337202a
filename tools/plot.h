/* The loss curve of wgml train as a hand-written SVG: training loss per step, validation
   loss where it was measured, and the unigram entropy of the data for reference. */
#ifndef WGML_TOOLS_PLOT_H
#define WGML_TOOLS_PLOT_H

#include <stdio.h>

/* train[i]: loss of step i + 1 (i < steps). val[i] (i <= steps): validation loss after i
   steps, NaN where none was measured. unigram: a horizontal reference line (NaN: none).
   Writes to f (the caller checks the writes). */
void plot_loss_svg(FILE *f, const char *title, const float *train, const double *val, int steps, double unigram);

#endif
