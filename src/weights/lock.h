// An exclusive lock between processes on a file next to the one being
// downloaded, so that several processes needing one file (the ranks of a
// job, two runs) download it once: the first takes the lock and downloads,
// the others wait for it and then find the file. flock(2): held until
// released or the process ends (a killed downloader never leaves it held);
// on NFS, Linux clients emulate it with byte-range locks.
#ifndef LTC_WEIGHTS_LOCK_H
#define LTC_WEIGHTS_LOCK_H

#include "util/error.h"

typedef struct WeightsLock {
    int fd;  // -1: not held
} WeightsLock;

// Takes the lock on path (created when missing). When another process holds
// it, calls waiting(user) once (may be NULL), then blocks until it is free.
int weights_lock_take(WeightsLock *lock, const char *path, void (*waiting)(void *user),
                      void *user, ErrorMessage *err);

void weights_lock_release(WeightsLock *lock);

#endif
