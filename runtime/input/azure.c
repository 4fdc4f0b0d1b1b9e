/*
 * azure.c - one row of an Azure LLM inference CSV trace (input.h): `TIMESTAMP` (wall clock,
 * YYYY-MM-DD HH:MM:SS[.f]), `ContextTokens`, `GeneratedTokens`, and the header line.
 */
#include "runtime/input/input_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Largest distance of an Azure row's time from the first row's: 100 years of 365.25 days. */
#define MAX_AZURE_SPAN_S 3155760000LL

static const char AZURE_HEADER[] = "TIMESTAMP,ContextTokens,GeneratedTokens";

/* ---- Azure CSV --------------------------------------------------------------------------- */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static unsigned digits_value(const char *s, size_t n)
{
    unsigned v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned)(s[i] - '0');
    return v;
}

/*
 * Parses "YYYY-MM-DD HH:MM:SS[.f{0,9}]" (no time zone) into seconds since 1970 and ns.
 * Returns NULL, or what is wrong with it.
 */
static const char *parse_time(const char *s, size_t n, int64_t *sec, int64_t *nsec)
{
    static const unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n < 19 || !all_digits(s, 4) || s[4] != '-' || !all_digits(s + 5, 2) || s[7] != '-' ||
        !all_digits(s + 8, 2) || s[10] != ' ' || !all_digits(s + 11, 2) || s[13] != ':' ||
        !all_digits(s + 14, 2) || s[16] != ':' || !all_digits(s + 17, 2))
        return "expected YYYY-MM-DD HH:MM:SS[.fffffffff]";
    size_t nf = 0;
    if (n > 19) {
        nf = n - 20;
        if (s[19] != '.' || nf > 9 || !all_digits(s + 20, nf))
            return "expected YYYY-MM-DD HH:MM:SS[.fffffffff] (at most 9 fraction digits)";
    }
    unsigned y = digits_value(s, 4), mo = digits_value(s + 5, 2), d = digits_value(s + 8, 2);
    unsigned h = digits_value(s + 11, 2), mi = digits_value(s + 14, 2);
    unsigned se = digits_value(s + 17, 2);
    if (mo < 1 || mo > 12)
        return "month out of range";
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d < 1 || d > mdays[mo - 1] + (mo == 2 && leap))
        return "day out of range";
    if (h > 23)
        return "hour out of range";
    if (mi > 59)
        return "minute out of range";
    if (se > 59)
        return "second out of range";
    unsigned frac = digits_value(s + 20, nf);
    for (size_t i = nf; i < 9; i++)
        frac *= 10;
    *sec = days_from_civil((int64_t)y, mo, d) * 86400 + (int64_t)(h * 3600 + mi * 60 + se);
    *nsec = (int64_t)frac;
    return NULL;
}

/* Parses a token count field (decimal digits only, 1 .. UINT32_MAX). Returns 0 or -EINVAL. */
static int parse_tokens(struct loader *ld, uint32_t line, const char *name, const char *s, size_t n,
                        uint32_t *out)
{
    char q[INPUT__QUOTE_MAX + 8];
    if (n == 0 || !all_digits(s, n))
        return input__fail_field(ld, line, name, "'%s' is not a non-negative integer",
                                 input__quote(q, sizeof q, s, n));
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > UINT32_MAX)
            return input__fail_field(ld, line, name, "%s is too large (max %" PRIu32 ")",
                                     input__quote(q, sizeof q, s, n), UINT32_MAX);
    }
    if (v == 0)
        return input__fail_field(ld, line, name, "0 tokens (must be >= 1)");
    *out = (uint32_t)v;
    return 0;
}

int input__azure_line(struct loader *ld, struct azure_state *st, uint32_t line, const char *s,
                      size_t n)
{
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    const char *f[3];
    size_t fl[3], cols = 1;
    f[0] = s;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ',')
            continue;
        if (cols < 3) {
            fl[cols - 1] = (size_t)(s + i - f[cols - 1]);
            f[cols] = s + i + 1;
        }
        cols++;
    }
    if (cols != 3)
        return input__fail(ld, -EINVAL, line,
                           "expected 3 columns (TIMESTAMP,ContextTokens,GeneratedTokens), got %zu",
                           cols);
    fl[2] = (size_t)(s + n - f[2]);

    char q[INPUT__QUOTE_MAX + 8];
    int64_t sec, nsec;
    const char *why = parse_time(f[0], fl[0], &sec, &nsec);
    if (why)
        return input__fail_field(ld, line, "TIMESTAMP", "'%s': %s",
                                 input__quote(q, sizeof q, f[0], fl[0]), why);
    if (!st->have_first) {
        st->have_first = true;
        st->sec0 = sec;
        st->nsec0 = nsec;
    }
    if (sec - st->sec0 > MAX_AZURE_SPAN_S || st->sec0 - sec > MAX_AZURE_SPAN_S)
        return input__fail_field(ld, line, "TIMESTAMP",
                                 "'%s' is more than 100 years from the first row",
                                 input__quote(q, sizeof q, f[0], fl[0]));
    uint32_t ctx, gen;
    int rc = parse_tokens(ld, line, "ContextTokens", f[1], fl[1], &ctx);
    if (!rc)
        rc = parse_tokens(ld, line, "GeneratedTokens", f[2], fl[2], &gen);
    if (rc)
        return rc;
    struct kvsim_req_spec *r =
        input__add_req(ld, line, (sec - st->sec0) * 1000000000 + (nsec - st->nsec0));
    if (!r)
        return input__oom(ld);
    r->input_len = ctx;
    r->output_len = gen;
    return 0;
}

int input__azure_header(struct loader *ld, const char *s, size_t n)
{
    size_t m = n;
    while (m > 0 && (s[m - 1] == '\n' || s[m - 1] == '\r'))
        m--;
    if (m != sizeof AZURE_HEADER - 1 || memcmp(s, AZURE_HEADER, m) != 0) {
        char q[INPUT__QUOTE_MAX + 8];
        return input__fail(ld, -EINVAL, 1, "bad header '%s' (expected '%s')",
                           input__quote(q, sizeof q, s, m), AZURE_HEADER);
    }
    return 0;
}
