// Decimal number parsing (see number.h).
#include "util/number.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// The length of a run of decimal digits at text.
static int digits(const char *text) {
    int n = 0;
    while (isdigit((unsigned char)text[n])) n++;
    return n;
}

int number_parse_decimal(const char *text, double *value) {
    // [+-] digits [. digits] [(e|E) [+-] digits], with a digit before or after the point
    const char *c = text;
    if (*c == '+' || *c == '-') c++;
    const int whole = digits(c);
    c += whole;
    int fraction = 0;
    if (*c == '.') fraction = digits(++c), c += fraction;
    if (whole + fraction == 0) return -1;
    if (*c == 'e' || *c == 'E') {
        c++;
        if (*c == '+' || *c == '-') c++;
        const int exponent = digits(c);
        if (exponent == 0) return -1;
        c += exponent;
    }
    if (*c != '\0') return -1;
    const double parsed = strtod(text, NULL);
    if (!isfinite(parsed)) return -2;
    *value = parsed;
    return 0;
}

int number_parse_bool(const char *text, int *value) {
    if (strcasecmp(text, "true") == 0 || strcmp(text, "1") == 0) *value = 1;
    else if (strcasecmp(text, "false") == 0 || strcmp(text, "0") == 0) *value = 0;
    else return -1;
    return 0;
}
