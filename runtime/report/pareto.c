/*
 * pareto.c - the Pareto front of a table of rows (report.h): which rows no other row beats in
 * every metric. A sweep marks them (kvsim sweep --pareto).
 */
#include "runtime/report/report.h"

#include <math.h>

/* Whether row a dominates row b: at least as good in every metric, better in one. */
static bool dominates(const double *a, const double *b, size_t nmetrics, const bool *lower)
{
    bool better = false;
    for (size_t m = 0; m < nmetrics; m++) {
        double x = lower[m] ? a[m] : -a[m], y = lower[m] ? b[m] : -b[m];
        if (x > y)
            return false;
        better |= x < y;
    }
    return better;
}

size_t kvsim_pareto_front(const double *values, size_t nrows, size_t nmetrics, const bool *lower,
                          bool *on_front)
{
    size_t n = 0;
    for (size_t i = 0; i < nrows; i++) {
        const double *a = values + i * nmetrics;
        bool ok = true;
        for (size_t m = 0; m < nmetrics && ok; m++)
            ok = !isnan(a[m]);
        for (size_t j = 0; j < nrows && ok; j++) {
            const double *b = values + j * nmetrics;
            bool eligible = true;
            for (size_t m = 0; m < nmetrics && eligible; m++)
                eligible = !isnan(b[m]);
            ok = !(j != i && eligible && dominates(b, a, nmetrics, lower));
        }
        on_front[i] = ok;
        n += ok;
    }
    return n;
}
