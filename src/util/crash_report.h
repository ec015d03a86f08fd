// A crash report on standard error: when the program dies of SIGSEGV,
// SIGBUS, SIGILL, SIGFPE or SIGABRT (glibc's heap checks end in abort()),
// one line naming the signal and the faulting thread's stack as return
// addresses (`addr2line -f -e lightly-train-c OFFSET` names them), then the
// signal's own death, so that the exit status stays 128 + the signal. A bug
// report then says where, from any run. Not installed under the sanitizers,
// whose own reports say more.
#ifndef LTC_UTIL_CRASH_REPORT_H
#define LTC_UTIL_CRASH_REPORT_H

// Sets the handlers (on an alternate stack, so that a stack overflow is
// reported too) for the calling process. Call once, early in main.
void crash_report_install(void);

#endif
