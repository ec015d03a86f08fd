// Minimal bounds-checked JSON scanner for the safetensors header (see
// json_scan.h). Errors give the byte position within the scanned text.
#include "nn/json_scan.h"

#include <string.h>

void json_scanner_init(JsonScanner *scanner, const char *text, size_t size) {
    scanner->text = text;
    scanner->size = size;
    scanner->pos = 0;
}

static void skip_whitespace(JsonScanner *scanner) {
    while (scanner->pos < scanner->size) {
        const char c = scanner->text[scanner->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        scanner->pos++;
    }
}

char json_peek(JsonScanner *scanner) {
    skip_whitespace(scanner);
    return scanner->pos < scanner->size ? scanner->text[scanner->pos] : 0;
}

// "found 'x'", "found byte 0xC3" or "found the end of the header".
static int error_found(const JsonScanner *scanner, ErrorMessage *err, const char *wanted) {
    if (scanner->pos >= scanner->size)
        return error_set(err, "invalid JSON at byte %zu: expected %s, found the end", scanner->pos,
                         wanted);
    const unsigned char c = (unsigned char)scanner->text[scanner->pos];
    if (c >= 0x21 && c < 0x7f)
        return error_set(err, "invalid JSON at byte %zu: expected %s, found '%c'", scanner->pos,
                         wanted, c);
    return error_set(err, "invalid JSON at byte %zu: expected %s, found byte 0x%02x", scanner->pos,
                     wanted, c);
}

int json_expect(JsonScanner *scanner, char expected, ErrorMessage *err) {
    if (json_peek(scanner) != expected || scanner->pos >= scanner->size) {
        const char wanted[4] = {'\'', expected, '\'', 0};
        return error_found(scanner, err, wanted);
    }
    scanner->pos++;
    return 0;
}

int json_next_item(JsonScanner *scanner, char close, ErrorMessage *err) {
    const char c = json_peek(scanner);
    if (scanner->pos < scanner->size && (c == ',' || c == close)) {
        scanner->pos++;
        return c == ',';
    }
    return error_found(scanner, err, close == '}' ? "',' or '}'" : "',' or ']'");
}

int json_expect_end(JsonScanner *scanner, ErrorMessage *err) {
    skip_whitespace(scanner);
    if (scanner->pos < scanner->size) return error_found(scanner, err, "only spaces after the JSON");
    return 0;
}

size_t json_utf8_sequence_length(const unsigned char *p, size_t available) {
    const unsigned char lead = p[0];
    if (lead < 0x80) return 1;
    size_t length;
    unsigned char second_min = 0x80, second_max = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3;
        if (lead == 0xe0) second_min = 0xa0;  // overlong
        if (lead == 0xed) second_max = 0x9f;  // UTF-16 surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4;
        if (lead == 0xf0) second_min = 0x90;  // overlong
        if (lead == 0xf4) second_max = 0x8f;  // above U+10FFFF
    } else {
        return 0;
    }
    if (available < length) return 0;
    if (p[1] < second_min || p[1] > second_max) return 0;
    for (size_t i = 2; i < length; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return length;
}

int json_utf8_valid(const char *bytes, size_t length) {
    size_t i = 0;
    while (i < length) {
        const size_t step = json_utf8_sequence_length((const unsigned char *)bytes + i, length - i);
        if (step == 0) return 0;
        i += step;
    }
    return 1;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Four hex digits at text[at..at+4) -> 0..0xFFFF, or -1.
static long read_hex4(const JsonScanner *scanner, size_t at) {
    if (at > scanner->size || scanner->size - at < 4) return -1;
    long value = 0;
    for (size_t i = 0; i < 4; i++) {
        const int digit = hex_value(scanner->text[at + i]);
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;
}

static size_t utf8_encode(unsigned long code_point, unsigned char out[4]) {
    if (code_point < 0x80) {
        out[0] = (unsigned char)code_point;
        return 1;
    }
    if (code_point < 0x800) {
        out[0] = (unsigned char)(0xc0 | code_point >> 6);
        out[1] = (unsigned char)(0x80 | (code_point & 0x3f));
        return 2;
    }
    if (code_point < 0x10000) {
        out[0] = (unsigned char)(0xe0 | code_point >> 12);
        out[1] = (unsigned char)(0x80 | (code_point >> 6 & 0x3f));
        out[2] = (unsigned char)(0x80 | (code_point & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | code_point >> 18);
    out[1] = (unsigned char)(0x80 | (code_point >> 12 & 0x3f));
    out[2] = (unsigned char)(0x80 | (code_point >> 6 & 0x3f));
    out[3] = (unsigned char)(0x80 | (code_point & 0x3f));
    return 4;
}

// Decodes the escape at text[*at] (the byte after the backslash) into out;
// advances *at past it. Returns the number of bytes written, 0 on error.
static size_t decode_escape(const JsonScanner *scanner, size_t *at, unsigned char out[4],
                            ErrorMessage *err) {
    const size_t start = *at - 1;  // the backslash
    if (*at >= scanner->size) {
        error_set(err, "invalid JSON at byte %zu: unterminated string", start);
        return 0;
    }
    const char kind = scanner->text[(*at)++];
    switch (kind) {
    case '"': case '\\': case '/': out[0] = (unsigned char)kind; return 1;
    case 'b': out[0] = '\b'; return 1;
    case 'f': out[0] = '\f'; return 1;
    case 'n': out[0] = '\n'; return 1;
    case 'r': out[0] = '\r'; return 1;
    case 't': out[0] = '\t'; return 1;
    case 'u': break;
    default:
        error_set(err, "invalid JSON at byte %zu: unknown escape '\\%c'", start,
                  kind >= 0x21 && kind < 0x7f ? kind : '?');
        return 0;
    }
    long unit = read_hex4(scanner, *at);
    if (unit < 0) {
        error_set(err, "invalid JSON at byte %zu: \\u needs four hex digits", start);
        return 0;
    }
    *at += 4;
    unsigned long code_point = (unsigned long)unit;
    if (unit >= 0xdc00 && unit <= 0xdfff) {
        error_set(err, "invalid JSON at byte %zu: lone low surrogate \\u%04lx", start, unit);
        return 0;
    }
    if (unit >= 0xd800 && unit <= 0xdbff) {
        // A high surrogate must be followed by an escaped low surrogate.
        const long low = *at + 1 < scanner->size && scanner->text[*at] == '\\' &&
                                 scanner->text[*at + 1] == 'u'
                             ? read_hex4(scanner, *at + 2)
                             : -1;
        if (low < 0xdc00 || low > 0xdfff) {
            error_set(err, "invalid JSON at byte %zu: high surrogate \\u%04lx without a low one",
                      start, unit);
            return 0;
        }
        *at += 6;
        code_point = 0x10000 + (((unsigned long)unit - 0xd800) << 10) + ((unsigned long)low - 0xdc00);
    }
    if (code_point == 0) {
        error_set(err, "byte %zu: \\u0000 (NUL) is not allowed in a string", start);
        return 0;
    }
    return utf8_encode(code_point, out);
}

// Walks the string at the cursor; writes its decoded bytes to out when out
// is not NULL. Sets *length and the position after the closing quote.
static int scan_string(JsonScanner *scanner, char *out, size_t capacity, size_t *length,
                       size_t *end, ErrorMessage *err) {
    if (json_peek(scanner) != '"' || scanner->pos >= scanner->size)
        return error_found(scanner, err, "a string");
    const unsigned char *text = (const unsigned char *)scanner->text;
    size_t at = scanner->pos + 1, used = 0;
    for (;;) {
        if (at >= scanner->size)
            return error_set(err, "invalid JSON at byte %zu: unterminated string", scanner->pos);
        unsigned char decoded[4];
        size_t count;
        const unsigned char c = text[at];
        if (c == '"') break;
        if (c >= 0x20 && c < 0x80 && c != '\\') {  // plain ASCII, the common case
            if (out) {
                if (used == capacity - 1)
                    return error_set(err, "byte %zu: string longer than %zu bytes", scanner->pos,
                                     capacity - 1);
                out[used] = (char)c;
            }
            used++;
            at++;
            continue;
        }
        if (c < 0x20) {
            return error_set(err, "invalid JSON at byte %zu: control byte 0x%02x in a string", at,
                             c);
        } else if (c == '\\') {
            at++;
            count = decode_escape(scanner, &at, decoded, err);
            if (count == 0) return -1;
        } else {
            count = json_utf8_sequence_length(text + at, scanner->size - at);
            if (count == 0)
                return error_set(err, "byte %zu: invalid UTF-8 in a string", at);
            memcpy(decoded, text + at, count);
            at += count;
        }
        if (out) {
            if (capacity - 1 - used < count)
                return error_set(err, "byte %zu: string longer than %zu bytes", scanner->pos,
                                 capacity - 1);
            memcpy(out + used, decoded, count);
        }
        used += count;
    }
    if (out) out[used] = '\0';
    *length = used;
    *end = at + 1;
    return 0;
}

int json_string_length(JsonScanner *scanner, size_t *length, ErrorMessage *err) {
    size_t end;
    return scan_string(scanner, NULL, 0, length, &end, err);
}

int json_read_string(JsonScanner *scanner, char *out, size_t capacity, ErrorMessage *err) {
    if (capacity == 0) return error_set(err, "no room for a string");
    size_t length, end;
    if (scan_string(scanner, out, capacity, &length, &end, err) != 0) return -1;
    scanner->pos = end;
    return 0;
}

int json_read_int64(JsonScanner *scanner, int64_t *value, ErrorMessage *err) {
    const char first = json_peek(scanner);
    if (first != '-' && (first < '0' || first > '9')) return error_found(scanner, err, "an integer");
    const size_t start = scanner->pos;
    const int negative = first == '-';
    size_t at = start + negative;
    if (at >= scanner->size || scanner->text[at] < '0' || scanner->text[at] > '9') {
        scanner->pos = at;
        return error_found(scanner, err, "a digit");
    }
    if (scanner->text[at] == '0' && at + 1 < scanner->size && scanner->text[at + 1] >= '0' &&
        scanner->text[at + 1] <= '9')
        return error_set(err, "invalid JSON at byte %zu: number with a leading zero", start);
    // Accumulate the magnitude; a negative number may reach 2^63.
    const uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t magnitude = 0;
    while (at < scanner->size && scanner->text[at] >= '0' && scanner->text[at] <= '9') {
        const unsigned digit = (unsigned)(scanner->text[at] - '0');
        if (magnitude > (limit - digit) / 10)
            return error_set(err, "byte %zu: integer out of the 64-bit range", start);
        magnitude = magnitude * 10 + digit;
        at++;
    }
    if (at < scanner->size &&
        (scanner->text[at] == '.' || scanner->text[at] == 'e' || scanner->text[at] == 'E'))
        return error_set(err, "byte %zu: expected an integer, found a fraction or exponent", start);
    scanner->pos = at;
    *value = negative ? (magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)magnitude)
                      : (int64_t)magnitude;
    return 0;
}

// A number (JSON's grammar: -, digits without a leading zero, fraction,
// exponent) or true / false / null at the cursor, consumed.
static int skip_scalar(JsonScanner *scanner, ErrorMessage *err) {
    static const char *const literals[] = {"true", "false", "null"};
    const char *text = scanner->text;
    const size_t size = scanner->size, start = scanner->pos;
    for (size_t i = 0; i < 3; i++) {
        const size_t length = strlen(literals[i]);
        if (size - start >= length && memcmp(text + start, literals[i], length) == 0) {
            scanner->pos += length;
            return 0;
        }
    }
    size_t at = start;
    if (at < size && text[at] == '-') at++;
    const size_t digits = at;
    while (at < size && text[at] >= '0' && text[at] <= '9') at++;
    if (at == digits || (text[digits] == '0' && at - digits > 1))
        return error_found(scanner, err, "a value");
    if (at < size && text[at] == '.') {
        const size_t fraction = ++at;
        while (at < size && text[at] >= '0' && text[at] <= '9') at++;
        if (at == fraction)
            return error_set(err, "invalid JSON at byte %zu: a number ends in '.'", at);
    }
    if (at < size && (text[at] == 'e' || text[at] == 'E')) {
        at++;
        if (at < size && (text[at] == '+' || text[at] == '-')) at++;
        const size_t exponent = at;
        while (at < size && text[at] >= '0' && text[at] <= '9') at++;
        if (at == exponent)
            return error_set(err, "invalid JSON at byte %zu: an exponent without digits", at);
    }
    scanner->pos = at;
    return 0;
}

// An object member's name and its ':' (the cursor on the name).
static int skip_member_name(JsonScanner *scanner, ErrorMessage *err) {
    size_t length, end;
    if (scan_string(scanner, NULL, 0, &length, &end, err)) return -1;
    scanner->pos = end;
    return json_expect(scanner, ':', err);
}

int json_skip_value(JsonScanner *scanner, ErrorMessage *err) {
    char closers[JSON_SKIP_MAX_DEPTH];  // what ends each open object or array
    int depth = 0;
    for (;;) {
        const char c = json_peek(scanner);
        if (c == '{' || c == '[') {
            if (depth == JSON_SKIP_MAX_DEPTH)
                return error_set(err, "invalid JSON at byte %zu: nested deeper than %d",
                                 scanner->pos, JSON_SKIP_MAX_DEPTH);
            closers[depth++] = c == '{' ? '}' : ']';
            scanner->pos++;
            if (json_peek(scanner) != closers[depth - 1]) {
                if (c == '{' && skip_member_name(scanner, err)) return -1;
                continue;  // the first element or member value
            }
            scanner->pos++;
            depth--;
        } else if (c == '"') {
            size_t length, end;
            if (scan_string(scanner, NULL, 0, &length, &end, err)) return -1;
            scanner->pos = end;
        } else if (skip_scalar(scanner, err)) {
            return -1;
        }
        // A value is complete: close what it completes, or go on to the next one.
        for (;;) {
            if (depth == 0) return 0;
            const int more = json_next_item(scanner, closers[depth - 1], err);
            if (more < 0) return -1;
            if (more) break;
            depth--;
        }
        if (closers[depth - 1] == '}' && skip_member_name(scanner, err)) return -1;
    }
}

int json_find_member(JsonScanner *scanner, const char *key, ErrorMessage *err) {
    if (json_expect(scanner, '{', err)) return -1;
    if (json_peek(scanner) == '}') {
        scanner->pos++;
        return 0;
    }
    const size_t key_length = strlen(key);
    for (;;) {
        size_t length, end;
        if (scan_string(scanner, NULL, 0, &length, &end, err)) return -1;
        char name[256];
        const int same = length == key_length && length < sizeof name &&
                         json_read_string(scanner, name, sizeof name, err) == 0 &&
                         memcmp(name, key, length) == 0;
        scanner->pos = end;
        if (json_expect(scanner, ':', err)) return -1;
        if (same) return 1;
        if (json_skip_value(scanner, err)) return -1;
        const int more = json_next_item(scanner, '}', err);
        if (more <= 0) return more;
    }
}
