// Error messages for library code: functions return 0 on success or -1 and
// fill an ErrorMessage owned by the caller (per object or per thread, never
// global), so only the command layer decides to print or exit.
#ifndef LTC_UTIL_ERROR_H
#define LTC_UTIL_ERROR_H

#include <stddef.h>

typedef struct ErrorMessage {
    char text[512];
} ErrorMessage;

// Writes the message (printf-style) into err when err is not NULL; returns -1
// so that `return error_set(err, ...);` reads naturally.
int error_set(ErrorMessage *err, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

// Prepends "prefix: " to an existing message (adds context on the way up).
int error_prefix(ErrorMessage *err, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

#endif
