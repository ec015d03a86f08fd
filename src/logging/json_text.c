// JSON text in memory (see json_text.h).
#include "logging/json_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/json_scan.h"

static int reserve(JsonText *text, size_t more) {
    if (text->failed) return -1;
    if (text->length + more + 1 <= text->capacity) return 0;
    size_t capacity = text->capacity ? text->capacity : 256;
    while (capacity < text->length + more + 1) capacity *= 2;
    char *grown = realloc(text->text, capacity);
    if (!grown) {
        text->failed = 1;
        return -1;
    }
    text->text = grown;
    text->capacity = capacity;
    return 0;
}

static void append(JsonText *text, const char *bytes, size_t length) {
    if (reserve(text, length)) return;
    memcpy(text->text + text->length, bytes, length);
    text->length += length;
    text->text[text->length] = '\0';
}

void json_text_clear(JsonText *text) {
    text->length = 0;
    text->failed = 0;
    if (text->text) text->text[0] = '\0';
}

void json_text_free(JsonText *text) {
    free(text->text);
    memset(text, 0, sizeof *text);
}

int json_text_failed(const JsonText *text) { return text->failed; }

void json_text_raw(JsonText *text, const char *raw) { append(text, raw, strlen(raw)); }

void json_text_string(JsonText *text, const char *value, size_t max_bytes) {
    const unsigned char *bytes = (const unsigned char *)value;
    size_t size = strlen(value);
    if (max_bytes && size > max_bytes) {
        size = max_bytes;
        while (size > 0 && (bytes[size] & 0xc0) == 0x80) size--;  // not inside a character
    }
    append(text, "\"", 1);
    for (size_t at = 0; at < size;) {
        const unsigned char c = bytes[at];
        if (c == '"' || c == '\\') {
            const char escaped[2] = {'\\', (char)c};
            append(text, escaped, 2);
            at++;
        } else if (c < 0x20) {
            char escaped[8];
            snprintf(escaped, sizeof escaped, "\\u%04x", c);
            append(text, escaped, 6);
            at++;
        } else {
            const size_t length = json_utf8_sequence_length(bytes + at, size - at);
            if (length) {
                append(text, (const char *)bytes + at, length);
                at += length;
            } else {
                append(text, "\xef\xbf\xbd", 3);  // U+FFFD for the malformed byte
                at++;
            }
        }
    }
    append(text, "\"", 1);
}

void json_text_int(JsonText *text, int64_t value) {
    char number[32];
    snprintf(number, sizeof number, "%lld", (long long)value);
    json_text_raw(text, number);
}

void json_text_double(JsonText *text, double value) {
    char number[40];
    if (isnan(value))
        snprintf(number, sizeof number, "\"NaN\"");
    else if (isinf(value))
        snprintf(number, sizeof number, value > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    else
        snprintf(number, sizeof number, "%.17g", value);
    json_text_raw(text, number);
}

void json_text_member_string(JsonText *text, const char *name, const char *value) {
    const char last = text->length ? text->text[text->length - 1] : '{';
    if (last != '{' && last != '[') json_text_raw(text, ", ");
    json_text_string(text, name, 0);
    json_text_raw(text, ": ");
    json_text_string(text, value, 0);
}
