// The crash report (see crash_report.h). glibc's backtrace() and
// backtrace_symbols_fd() write without allocating once the unwinder is
// loaded, which crash_report_install does ahead, so the handler works after
// heap damage; it uses only write() besides them.
#include "util/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CRASH_FRAMES 64

// The sanitizers report crashes themselves (and own these signals): the
// report is left out of their builds altogether.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

static void write_text(const char *text) {
    size_t left = strlen(text);
    while (left > 0) {
        const ssize_t wrote = write(STDERR_FILENO, text, left);
        if (wrote <= 0) return;
        text += wrote;
        left -= (size_t)wrote;
    }
}

static void on_crash(int signal_number) {
    const char *name = sigabbrev_np(signal_number);  // a static table: no allocation
    write_text("lightly-train-c: crashed with SIG");
    write_text(name ? name : "?");
    write_text("; the stack of the thread it hit (addr2line -f -e <this program> <the offsets "
               "in +0x...> names them); please report it with the command line:\n");
    void *frames[CRASH_FRAMES];
    const int count = backtrace(frames, CRASH_FRAMES);
    backtrace_symbols_fd(frames, count, STDERR_FILENO);
    // The default action now (SA_RESETHAND restored it): the same death and
    // exit status as without the report, a core file where they are kept.
    raise(signal_number);
}

void crash_report_install(void) {
    void *warm[1];
    (void)backtrace(warm, 1);  // loads libgcc's unwinder now, not in the handler
    static char alternate[64 * 1024];  // the handler's stack after a stack overflow
    const stack_t stack = {.ss_sp = alternate, .ss_size = sizeof alternate};
    const int on_stack = sigaltstack(&stack, NULL) == 0;
    struct sigaction action = {0};
    action.sa_handler = on_crash;
    action.sa_flags = SA_RESETHAND | SA_NODEFER | (on_stack ? SA_ONSTACK : 0);
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
        sigaction(crash_signals[i], &action, NULL);
}

#else

void crash_report_install(void) {}

#endif
