// The download lock (see lock.h).
#include "weights/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int weights_lock_take(WeightsLock *lock, const char *path, void (*waiting)(void *user),
                      void *user, ErrorMessage *err) {
    lock->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock->fd < 0) return error_set(err, "cannot create the lock %s: %s", path, strerror(errno));
    if (flock(lock->fd, LOCK_EX | LOCK_NB) == 0) return 0;
    if (errno == EWOULDBLOCK) {
        if (waiting) waiting(user);
        int status;
        while ((status = flock(lock->fd, LOCK_EX)) != 0 && errno == EINTR) continue;
        if (status == 0) return 0;
    }
    const int saved = errno;
    close(lock->fd);
    lock->fd = -1;
    return error_set(err, "cannot lock %s: %s", path, strerror(saved));
}

void weights_lock_release(WeightsLock *lock) {
    if (lock->fd < 0) return;
    flock(lock->fd, LOCK_UN);
    close(lock->fd);
    lock->fd = -1;
}
