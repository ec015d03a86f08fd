// train.log: a timestamped, append-only record of a run (command line, system
// and library versions, resolved configuration, messages). Opened in append
// mode so a resumed run adds to the same file; every line is flushed at once
// so a crash or kill keeps everything written before it. Writes are
// best-effort: a full disk must not stop training, so the line functions
// return nothing.
#ifndef LTC_LOGGING_RUN_LOG_H
#define LTC_LOGGING_RUN_LOG_H

#include <stddef.h>
#include <stdio.h>

#include "util/error.h"

typedef struct RunLog RunLog;

// Opens (creates) path for appending; the folder must exist.
int run_log_open(RunLog **log, const char *path, ErrorMessage *err);

// One line "YYYY-MM-DD HH:MM:SS <text>" (local time); the newline is added.
void run_log_line(RunLog *log, const char *format, ...) __attribute__((format(printf, 2, 3)));

// "command: <argv quoted for a POSIX shell>", so it can be pasted back.
void run_log_command_line(RunLog *log, int argc, char **argv);

// Host, OS, CPU model, logical and usable cores, AVX2, memory, compiler,
// program and library versions, GPUs (CUDA builds), one line each.
void run_log_system_info(RunLog *log);

// Flushes and closes; log may be NULL.
void run_log_close(RunLog *log);

// Writes the arguments to out separated by spaces, each quoted for a POSIX
// shell where needed ('...' with ' written as '\''), so `sh -c` gives back
// exactly the same argv.
void shell_quote_args(FILE *out, int argc, char *const *argv);

// The CPU model from /proc/cpuinfo ("model name"), or "unknown CPU".
void system_info_cpu_model(char *out, size_t size);

// Total physical memory in bytes from /proc/meminfo (MemTotal), 0 if unknown.
unsigned long long system_info_total_memory(void);

#endif
