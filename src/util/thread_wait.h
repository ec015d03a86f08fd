// How the OpenMP threads (the cpu backend's and oneDNN's) wait between
// parallel regions. libgomp's default spins for a while first; on a machine
// whose cores are shared (the data workers, decoder processes, other jobs)
// the spinning threads take the cores from whatever would run, and a step
// gets several times slower (docs/performance.md). libgomp reads
// OMP_WAIT_POLICY once, when it is loaded, so the commands that compute
// start themselves again with OMP_WAIT_POLICY=PASSIVE when it is unset; a
// value the user set is kept.
#ifndef LTC_UTIL_THREAD_WAIT_H
#define LTC_UTIL_THREAD_WAIT_H

// When OMP_WAIT_POLICY is unset: sets it to PASSIVE and executes this
// program again with argv (/proc/self/exe), not returning. Returns when it
// was set already, or when the exec failed (the run then goes on with
// libgomp's default).
void thread_wait_passive(char **argv);

// What the threads do, for the logs: "passive (OMP_WAIT_POLICY=PASSIVE)",
// or the user's value.
const char *thread_wait_describe(void);

#endif
