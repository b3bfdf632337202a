/* The loss curve of wgml train as a hand-written SVG: training loss per step, validation
   loss where it was measured, and the unigram entropy of the data for reference. */
#ifndef WGML_TOOLS_PLOT_H
#define WGML_TOOLS_PLOT_H

/* train[i]: loss of step i + 1 (i < steps). val[i] (i <= steps): validation loss after i
   steps, NaN where none was measured. unigram: a horizontal reference line (NaN: none).
   Returns 0, or -1 when the file cannot be written. */
int plot_loss_svg(const char *path, const char *title, const float *train, const double *val, int steps, double unigram);

#endif
