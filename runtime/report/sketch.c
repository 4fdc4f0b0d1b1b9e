/*
 * sketch.c - the ITL quantile sketch (kvsim_sketch_*) and exact nearest-rank percentiles
 * (report.h). Pure functions of their inputs: no threads, no globals.
 */
#include "runtime/report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the sketch ------------------------------------------------------------------------------ */

/* gamma = (1 + a) / (1 - a) for a = KVSIM_SKETCH_ALPHA. */
#define SKETCH_GAMMA        ((1.0 + KVSIM_SKETCH_ALPHA) / (1.0 - KVSIM_SKETCH_ALPHA))
/* ln(gamma) = 2 atanh(a) and its inverse, to 40 digits (decimal arithmetic, see the tests). */
#define SKETCH_LN_GAMMA     0.002000000666667066666952381174603356421508
#define SKETCH_INV_LN_GAMMA 499.9998333332888888656084505114529463873
/*
 * Keys of values in [1, INT64_MAX] lie in [0, 21835]; the bucket array never extends past
 * this bound, which caps a sketch at about 175 KB.
 */
#define SKETCH_KEY_LIMIT    21900
/* First allocation and minimum growth step, in buckets. */
#define SKETCH_MIN_GROWTH   64

int32_t kvsim_sketch_key(int64_t v)
{
    if (v <= 1)
        return 0;
    return (int32_t)ceil(log((double)v) * SKETCH_INV_LN_GAMMA);
}

double kvsim_sketch_key_value(int32_t key)
{
    return 2.0 * exp((double)key * SKETCH_LN_GAMMA) / (SKETCH_GAMMA + 1.0);
}

void kvsim_sketch_init(struct kvsim_sketch *s)
{
    memset(s, 0, sizeof *s);
    s->last_value = -1;
}

void kvsim_sketch_fini(struct kvsim_sketch *s)
{
    if (s == NULL)
        return;
    free(s->bins);
    kvsim_sketch_init(s);
}

static int32_t min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static int32_t max_i32(int32_t a, int32_t b) { return a > b ? a : b; }

/*
 * Makes the bucket array cover keys [lo, hi] (0 <= lo <= hi < SKETCH_KEY_LIMIT), growing it
 * by at least half its width on the side(s) that grow, so that growth is amortized O(1).
 * Returns 0, or -ENOMEM with the sketch unchanged.
 */
static int sketch_reserve(struct kvsim_sketch *s, int32_t lo, int32_t hi)
{
    int32_t cur_lo = s->offset;
    int32_t cur_hi = s->offset + (int32_t)s->num_bins - 1;
    if (s->bins != NULL && lo >= cur_lo && hi <= cur_hi)
        return 0;

    int32_t new_lo, new_hi;
    if (s->bins == NULL) {
        int32_t width = hi - lo + 1;
        int32_t pad = max_i32(SKETCH_MIN_GROWTH, width) / 2;
        new_lo = lo - pad;
        new_hi = hi + pad;
    } else {
        int32_t width = max_i32(hi, cur_hi) - min_i32(lo, cur_lo) + 1;
        int32_t pad = max_i32(SKETCH_MIN_GROWTH, width / 2);
        new_lo = lo < cur_lo ? lo - pad : cur_lo;
        new_hi = hi > cur_hi ? hi + pad : cur_hi;
    }
    new_lo = max_i32(new_lo, 0);
    new_hi = min_i32(new_hi, SKETCH_KEY_LIMIT - 1);

    uint32_t n = (uint32_t)(new_hi - new_lo + 1);
    uint64_t *bins = calloc(n, sizeof *bins);
    if (bins == NULL)
        return -ENOMEM;
    if (s->bins != NULL)
        memcpy(bins + (cur_lo - new_lo), s->bins, s->num_bins * sizeof *bins);
    free(s->bins);
    s->bins = bins;
    s->offset = new_lo;
    s->num_bins = n;
    return 0;
}

/* The key of v > 0 through the one-entry cache. */
static int32_t cached_key(struct kvsim_sketch *s, int64_t v)
{
    if (v != s->last_value) {
        s->last_value = v;
        s->last_key = kvsim_sketch_key(v);
    }
    return s->last_key;
}

static void count_value(struct kvsim_sketch *s, int64_t v, int32_t key, uint64_t n)
{
    if (v == 0)
        s->zero_count += n;
    else
        s->bins[key - s->offset] += n;
    if (s->count == 0 || v < s->min)
        s->min = v;
    if (s->count == 0 || v > s->max)
        s->max = v;
    s->count += n;
}

int kvsim_sketch_add(struct kvsim_sketch *s, int64_t v)
{
    if (v < 0)
        return -EINVAL;
    int32_t key = v > 0 ? cached_key(s, v) : -1;
    if (key >= 0 &&
        (s->bins == NULL || key < s->offset || key >= s->offset + (int32_t)s->num_bins)) {
        int err = sketch_reserve(s, key, key);
        if (err)
            return err;
    }
    count_value(s, v, key, 1);
    return 0;
}

int kvsim_sketch_add_two(struct kvsim_sketch *s, int64_t a, uint64_t na, int64_t b, uint64_t nb)
{
    if ((na && a < 0) || (nb && b < 0))
        return -EINVAL;
    int32_t ka = na && a > 0 ? cached_key(s, a) : -1;
    int32_t kb = nb && b > 0 ? cached_key(s, b) : -1;
    if (ka >= 0 || kb >= 0) {
        int32_t lo = ka < 0 ? kb : kb < 0 ? ka : min_i32(ka, kb);
        int32_t hi = max_i32(ka, kb);
        /* sketch_reserve's own test first, here: the keys are covered almost always */
        if (s->bins == NULL || lo < s->offset || hi >= s->offset + (int32_t)s->num_bins) {
            int err = sketch_reserve(s, lo, hi);
            if (err)
                return err;
        }
    }
    if (na)
        count_value(s, a, ka, na);
    if (nb)
        count_value(s, b, kb, nb);
    return 0;
}

int kvsim_sketch_merge(struct kvsim_sketch *dst, const struct kvsim_sketch *src)
{
    if (src->count == 0)
        return 0;
    if (src->bins != NULL) {
        int err = sketch_reserve(dst, src->offset, src->offset + (int32_t)src->num_bins - 1);
        if (err)
            return err;
        uint64_t *d = dst->bins + (src->offset - dst->offset);
        for (uint32_t i = 0; i < src->num_bins; i++)
            d[i] += src->bins[i];
    }
    if (dst->count == 0 || src->min < dst->min)
        dst->min = src->min;
    if (dst->count == 0 || src->max > dst->max)
        dst->max = src->max;
    dst->zero_count += src->zero_count;
    dst->count += src->count;
    return 0;
}

double kvsim_sketch_at_rank(const struct kvsim_sketch *s, uint64_t r)
{
    if (s->count == 0)
        return NAN;
    if (r < 1)
        r = 1;
    if (r > s->count)
        r = s->count;
    if (r == 1)
        return (double)s->min;
    if (r == s->count)
        return (double)s->max;

    double v = (double)s->max;
    uint64_t seen = s->zero_count;
    if (r <= seen) {
        v = 0.0;
    } else {
        for (uint32_t i = 0; i < s->num_bins; i++) {
            seen += s->bins[i];
            if (seen >= r) {
                v = kvsim_sketch_key_value(s->offset + (int32_t)i);
                break;
            }
        }
    }
    if (v < (double)s->min)
        v = (double)s->min;
    if (v > (double)s->max)
        v = (double)s->max;
    return v;
}

double kvsim_sketch_quantile(const struct kvsim_sketch *s, double q)
{
    if (s->count == 0 || isnan(q))
        return NAN;
    uint64_t r;
    if (q <= 0.0)
        r = 1;
    else if (q >= 1.0)
        r = s->count;
    else
        r = (uint64_t)ceil(q * (double)s->count);
    return kvsim_sketch_at_rank(s, r);
}

uint64_t kvsim_sketch_bin(const struct kvsim_sketch *s, int32_t key)
{
    if (s->bins == NULL || key < s->offset || key >= s->offset + (int32_t)s->num_bins)
        return 0;
    return s->bins[key - s->offset];
}

/* ---- exact percentiles ----------------------------------------------------------------------- */

uint64_t kvsim_nearest_rank(uint64_t n, uint32_t permille)
{
    if (n == 0)
        return 0;
    if (permille >= 1000)
        return n;
    /* ceil(permille * n / 1000) without overflow: n = 1000 q + rem. */
    uint64_t q = n / 1000, rem = n % 1000;
    uint64_t r = q * permille + (rem * permille + 999) / 1000;
    return r < 1 ? 1 : r;
}

double kvsim_percentile_sorted(const double *sorted, size_t n, uint32_t permille)
{
    return sorted[kvsim_nearest_rank(n, permille) - 1];
}
