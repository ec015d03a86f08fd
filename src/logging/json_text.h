// JSON request bodies built in memory: a growable text with the pieces a
// body is made of. Strings are user text (option values, tags, run names),
// so they are escaped ('"', '\\', control bytes) and any byte that is not
// well-formed UTF-8 becomes U+FFFD: a server never gets a body it cannot
// parse. Numbers keep every bit of a double (17 significant digits); NaN
// and the infinities, which JSON lacks, are written as the strings "NaN",
// "Infinity", "-Infinity" that protobuf's JSON mapping (MLflow's server)
// reads as doubles. Out of memory is sticky: later calls do nothing and
// json_text_failed says so.
#ifndef LTC_LOGGING_JSON_TEXT_H
#define LTC_LOGGING_JSON_TEXT_H

#include <stddef.h>
#include <stdint.h>

typedef struct JsonText {
    char *text;  // NUL-terminated
    size_t length, capacity;
    int failed;  // an allocation failed: the text is incomplete
} JsonText;

// Empties text (keeps its memory).
void json_text_clear(JsonText *text);
void json_text_free(JsonText *text);
int json_text_failed(const JsonText *text);

// Appends raw text (punctuation, member names known to need no escaping).
void json_text_raw(JsonText *text, const char *raw);
// Appends a quoted, escaped string; at most max_bytes of its bytes (cut at
// a UTF-8 character boundary; 0: all of it).
void json_text_string(JsonText *text, const char *value, size_t max_bytes);
void json_text_int(JsonText *text, int64_t value);
void json_text_double(JsonText *text, double value);
// "name": "value" with the separator before it when text does not end in
// '{' or '[' (a member of an object being built).
void json_text_member_string(JsonText *text, const char *name, const char *value);

#endif
