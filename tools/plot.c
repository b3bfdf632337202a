/* A loss-curve SVG written by hand (see plot.h): axes with "nice" ticks, grid lines, a
   polyline per series, a legend. */
#include "plot.h"

#include <math.h>
#include <stdio.h>

/* 1, 2 or 5 times a power of ten, so that range / step is about `ticks` */
static double nice_step(double range, int ticks)
{
    double raw = range / ticks, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

void plot_loss_svg(FILE *f, const char *title, const float *train, const double *val, int steps, double unigram)
{
    const double W = 820, Hh = 500, L = 78, R = 24, T = 52, B = 62;
    const double pw = W - L - R, ph = Hh - T - B;
    double ymax = 0;
    for (int i = 0; i < steps; i++) if (isfinite(train[i]) && train[i] > ymax) ymax = train[i];
    for (int i = 0; i <= steps; i++) if (isfinite(val[i]) && val[i] > ymax) ymax = val[i];
    if (isfinite(unigram) && unigram > ymax) ymax = unigram;
    if (!(ymax > 0)) ymax = 1;
    double ystep = nice_step(ymax, 6);
    ymax = ceil(ymax * 1.02 / ystep) * ystep;
    double xmax = steps > 1 ? steps : 1, xstep = nice_step(xmax, 8);
#define X(v) (L + (v) / xmax * pw)
#define Y(v) (T + ph - (v) / ymax * ph)

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"13\">\n", W, Hh, W, Hh);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"28\" text-anchor=\"middle\" "
               "font-size=\"15\">", W / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    /* grid and ticks */
    fprintf(f, "<g stroke=\"#e3e3e3\" stroke-width=\"1\">\n");
    for (double y = 0; y <= ymax + 1e-9; y += ystep) fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", L, Y(y), L + pw, Y(y));
    for (double x = 0; x <= xmax + 1e-9; x += xstep) fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", X(x), T, X(x), T + ph);
    fprintf(f, "</g>\n<g fill=\"#333\">\n");
    for (double y = 0; y <= ymax + 1e-9; y += ystep)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 8, Y(y) + 4, y);
    for (double x = 0; x <= xmax + 1e-9; x += xstep)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", X(x), T + ph + 20, x);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">optimizer step</text>\n", L + pw / 2, Hh - 16);
    fprintf(f, "<text transform=\"translate(22 %.1f) rotate(-90)\" text-anchor=\"middle\">cross-entropy loss (nats per token)</text>\n",
            T + ph / 2);
    fprintf(f, "</g>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#555\"/>\n", L, T, pw, ph);
    /* reference line */
    if (isfinite(unigram))
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#2ca02c\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"6 4\"/>\n", L, Y(unigram), L + pw, Y(unigram));
    /* training loss */
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.3\" points=\"");
    for (int i = 0; i < steps; i++)
        if (isfinite(train[i])) fprintf(f, "%.1f,%.1f ", X(i + 1), Y(fmin(train[i], ymax)));
    fprintf(f, "\"/>\n");
    /* validation loss */
    fprintf(f, "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"");
    for (int i = 0; i <= steps; i++)
        if (isfinite(val[i])) fprintf(f, "%.1f,%.1f ", X(i), Y(fmin(val[i], ymax)));
    fprintf(f, "\"/>\n<g fill=\"#ff7f0e\">\n");
    for (int i = 0; i <= steps; i++)
        if (isfinite(val[i])) fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\"/>\n", X(i), Y(fmin(val[i], ymax)));
    fprintf(f, "</g>\n");
    /* legend */
    double lx = L + pw - 250, ly = T + 14;
    fprintf(f, "<g><rect x=\"%.1f\" y=\"%.1f\" width=\"240\" height=\"68\" fill=\"white\" stroke=\"#bbb\"/>\n", lx, ly - 4);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
               "<text x=\"%.1f\" y=\"%.1f\">training loss (per step)</text>\n", lx + 10, ly + 10, lx + 40, ly + 10, lx + 48, ly + 14);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>"
               "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#ff7f0e\"/><text x=\"%.1f\" y=\"%.1f\">validation loss (held-out 10%%)</text>\n",
            lx + 10, ly + 30, lx + 40, ly + 30, lx + 25, ly + 30, lx + 48, ly + 34);
    if (isfinite(unigram))
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#2ca02c\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">unigram entropy (%.3f)</text>\n", lx + 10, ly + 50, lx + 40, ly + 50, lx + 48, ly + 54, unigram);
    fprintf(f, "</g>\n</svg>\n");
#undef X
#undef Y
}
