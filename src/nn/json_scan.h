// A minimal, bounds-checked JSON scanner: what the safetensors header needs
// (objects, arrays, strings with escapes, integers), and skipping any value
// (the MLflow client's responses, logging/mlflow_rest.h). The caller drives
// it token by token, knowing the structure it expects, so nesting depth is
// the caller's and nothing recurses. Input is never trusted: every read
// checks the end of the text, strings are validated as UTF-8 and \uXXXX
// escapes (surrogate pairs included) are decoded to UTF-8.
#ifndef LTC_NN_JSON_SCAN_H
#define LTC_NN_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef struct JsonScanner {
    const char *text;  // not NUL-terminated
    size_t size;
    size_t pos;  // next byte to read
} JsonScanner;

void json_scanner_init(JsonScanner *scanner, const char *text, size_t size);

// Skips whitespace; returns the next byte without consuming it (0 at the end).
char json_peek(JsonScanner *scanner);
// Skips whitespace and consumes `expected`, or fails naming what was found.
int json_expect(JsonScanner *scanner, char expected, ErrorMessage *err);
// After an object member or array element: consumes ',' (returns 1: more
// follow) or `close` (returns 0: done); anything else is an error (-1).
int json_next_item(JsonScanner *scanner, char close, ErrorMessage *err);
// Succeeds when only whitespace is left.
int json_expect_end(JsonScanner *scanner, ErrorMessage *err);

// Decoded length in bytes of the string at the cursor (which must be a
// string), without consuming it: lets the caller check limits or allocate.
int json_string_length(JsonScanner *scanner, size_t *length, ErrorMessage *err);
// Decodes the string at the cursor into out (NUL-terminated; capacity counts
// the NUL) and consumes it. "\u0000" is refused: the result is a C string.
int json_read_string(JsonScanner *scanner, char *out, size_t capacity, ErrorMessage *err);
// Reads an integer (no fraction, no exponent) that fits an int64_t.
int json_read_int64(JsonScanner *scanner, int64_t *value, ErrorMessage *err);

// Skips the value at the cursor, whatever it is (object, array, string,
// number, true, false, null), nested up to JSON_SKIP_MAX_DEPTH deep; checks
// its syntax on the way.
#define JSON_SKIP_MAX_DEPTH 64
int json_skip_value(JsonScanner *scanner, ErrorMessage *err);
// With the cursor on an object: moves it onto the value of the member named
// key (1), or past the object when it has none (0); -1 on a syntax error.
int json_find_member(JsonScanner *scanner, const char *key, ErrorMessage *err);

// Length of the well-formed UTF-8 sequence at bytes (at most `available`
// of them readable), or 0 when it is malformed (overlong, a surrogate,
// above U+10FFFF, cut short).
size_t json_utf8_sequence_length(const unsigned char *bytes, size_t available);
// 1 when bytes[0..length) is well-formed UTF-8 (no overlong forms, no
// surrogates, nothing above U+10FFFF).
int json_utf8_valid(const char *bytes, size_t length);

#endif
