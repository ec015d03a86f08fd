// LTC_FAULT parsing (see fault.h).
#include "util/fault.h"

#include <stdlib.h>
#include <string.h>

int fault_fires(const char *point, long step) {
    const char *fault = getenv("LTC_FAULT");
    if (!fault) return 0;
    const size_t length = strlen(point);
    if (strncmp(fault, point, length) != 0) return 0;
    if (fault[length] == '\0') return 1;
    if (fault[length] != '@') return 0;
    char *end = NULL;
    const long wanted = strtol(fault + length + 1, &end, 10);
    return end != fault + length + 1 && *end == '\0' && wanted == step;
}
