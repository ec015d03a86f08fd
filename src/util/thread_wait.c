// OpenMP threads that sleep while they wait (see thread_wait.h).
#include "util/thread_wait.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WAIT_VARIABLE "OMP_WAIT_POLICY"

void thread_wait_passive(char **argv) {
    const char *policy = getenv(WAIT_VARIABLE);
    if (policy && *policy) return;
    if (setenv(WAIT_VARIABLE, "PASSIVE", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv(WAIT_VARIABLE);  // not executed: libgomp keeps its default, so must the logs
}

const char *thread_wait_describe(void) {
    static char text[96];
    const char *policy = getenv(WAIT_VARIABLE);
    snprintf(text, sizeof text, "%s (%s=%.40s)", policy && *policy ? policy : "libgomp's default",
             WAIT_VARIABLE, policy && *policy ? policy : "");
    return text;
}
