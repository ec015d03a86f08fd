// LTC_FAULT parsing (see fault.h).
#include "util/fault.h"

#include <stdlib.h>
#include <string.h>

// 1 when the entry (up to end) names point with no step or with step.
static int entry_fires(const char *entry, const char *end, const char *point, long step) {
    const size_t length = strlen(point);
    if ((size_t)(end - entry) < length || strncmp(entry, point, length) != 0) return 0;
    const char *rest = entry + length;
    if (rest == end) return 1;
    if (*rest != '@' || rest + 1 == end) return 0;
    char *number_end = NULL;
    const long wanted = strtol(rest + 1, &number_end, 10);
    return number_end == end && wanted == step;
}

int fault_fires(const char *point, long step) {
    const char *fault = getenv("LTC_FAULT");
    if (!fault) return 0;
    for (const char *entry = fault; *entry;) {
        const char *comma = strchr(entry, ',');
        const char *end = comma ? comma : entry + strlen(entry);
        if (entry_fires(entry, end, point, step)) return 1;
        entry = comma ? comma + 1 : end;
    }
    return 0;
}
