// ErrorMessage helpers (see error.h).
#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int error_set(ErrorMessage *err, const char *format, ...) {
    if (err) {
        va_list args;
        va_start(args, format);
        vsnprintf(err->text, sizeof err->text, format, args);
        va_end(args);
    }
    return -1;
}

int error_prefix(ErrorMessage *err, const char *format, ...) {
    if (err) {
        char joined[sizeof err->text];
        va_list args;
        va_start(args, format);
        int length = vsnprintf(joined, sizeof joined, format, args);
        va_end(args);
        if (length < 0) length = 0;
        size_t used = (size_t)length < sizeof joined ? (size_t)length : sizeof joined - 1;
        // Append ": " and the old message, truncating to the buffer.
        const char *parts[2] = {": ", err->text};
        for (int p = 0; p < 2; p++) {
            for (const char *c = parts[p]; *c && used + 1 < sizeof joined; c++)
                joined[used++] = *c;
        }
        joined[used] = '\0';
        memcpy(err->text, joined, sizeof joined);
    }
    return -1;
}
