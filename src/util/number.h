// Decimal number parsing for command-line values (options and
// --method-arg): "12", "-0.5", "1e-3", ".5"; nothing else. strtod alone
// would also take "0x10" (16), "inf", "nan" and leading blanks. And their
// booleans.
#ifndef LTC_UTIL_NUMBER_H
#define LTC_UTIL_NUMBER_H

// 0 and *value when the whole of text is a finite decimal number; -1 when
// it is not a decimal number, -2 when it is one beyond the range of a
// double (*value untouched). Underflow to a tiny or zero value is accepted.
int number_parse_decimal(const char *text, double *value);

// A boolean as the command line and LightlyTrain's Python values write it:
// true / false in any case (Python's True), 1 / 0. 0 and *value, or -1.
int number_parse_bool(const char *text, int *value);

#endif
