// Fault injection for the tests of failure handling: the environment
// variable LTC_FAULT=NAME or NAME@STEP makes the named point fire (at that
// optimizer step, or at every step); several, comma-separated
// ("nan-gradient@1,kill-before-export@3"), each fire. The points are few
// and named where they are used:
//   nan-gradient@S   train: a NaN in the first gradient of step S (put in before the
//                    backward, which adds to it)
//   nan-weight@S     train: a NaN in the first weight after the update of step S
//   kill-before-export@S   train: SIGKILL right after the checkpoint of step S
//                    is written, before the export (S = the completed steps)
//   kill-before-rename@N   the N-th atomic file write of the process (1-based;
//                    util/file.c): SIGKILL once its temporary file is complete,
//                    before the rename (leaves "<file>.tmp.<pid>" behind, as a
//                    crash there would). In train the writes are: checkpoint,
//                    export, checkpoint, export, ... (one pair per epoch).
//   kill-in-write@K  the K-th step of the process's atomic writes (1-based; util/file.c):
//                    SIGKILL right after it. The steps of a write, in order: each
//                    temporary file created (empty), then complete; a group's previous
//                    main file removed; each rename. A test raising K until the write
//                    completes sees a kill at every point of it.
//   fail-write@N     the N-th atomic file write of the process fails once its temporary
//                    file is complete, as a full disk would (ENOSPC); train's writes are
//                    numbered as for kill-before-rename
//   abort@S          train: abort() as step S starts (S steps completed): a crash of
//                    the program itself (util/crash_report.h; the checkpoint before it
//                    stays)
//   sigterm-at-start train: SIGTERM to itself as the command starts, before
//                    parsing its options (a signal in the first milliseconds)
//   decoder-crash@I  the loader's decoder process (data/decoder_process.h) dies of
//                    SIGSEGV as it starts decoding the image of dataset index I (scan
//                    order, from 0): a crash inside a decoder library (bench-data,
//                    train, embed, on every rank)
//   decoder-hang@I   that process waits for ever instead of decoding image I: a
//                    decoder library caught in a loop (killed after the timeout)
//   decoder-start    every decoder process exits at once, before it is ready: one
//                    that cannot run on this machine
// Unset (normal runs), every point is off; the check is a getenv per call.
#ifndef LTC_UTIL_FAULT_H
#define LTC_UTIL_FAULT_H

// 1 when LTC_FAULT names `point` with no step or with step `step`.
int fault_fires(const char *point, long step);

#endif
