// Staging ring for a step's small inputs (see staging.h).
#include "backend/staging.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A new buffer at index `at`; the ones from `at` on move up by one, so the
// order in turn is kept. 0, or -1 when out of memory (nothing changed).
static int staging_add(Staging *staging, int at, ErrorMessage *err) {
    Backend *backend = staging->backend;
    void *host = backend->op.host_alloc(backend, staging->bytes);
    Fence *fence = host ? backend->op.fence_create(backend, err) : NULL;
    if (!fence) {
        if (host) backend->op.host_free(backend, host);
        else error_set(err, "out of host memory for %zu bytes of staging", staging->bytes);
        return -1;
    }
    const int moved = staging->count - at;
    memmove(staging->host + at + 1, staging->host + at, (size_t)moved * sizeof *staging->host);
    memmove(staging->fence + at + 1, staging->fence + at, (size_t)moved * sizeof *staging->fence);
    staging->host[at] = host;
    staging->fence[at] = fence;
    staging->count++;
    return 0;
}

int staging_init(Staging *staging, Backend *backend, size_t bytes, ErrorMessage *err) {
    memset(staging, 0, sizeof *staging);
    staging->backend = backend;
    staging->bytes = bytes ? bytes : 1;
    staging->current = -1;
    return staging_add(staging, 0, err);
}

void staging_free(Staging *staging) {
    Backend *backend = staging->backend;
    for (int i = 0; i < staging->count; i++) {
        backend->op.fence_wait(backend, staging->fence[i]);
        backend->op.fence_free(backend, staging->fence[i]);
        backend->op.host_free(backend, staging->host[i]);
    }
    memset(staging, 0, sizeof *staging);
    staging->current = -1;
}

void staging_step_begin(Backend *backend) { backend->staging_steps++; }

// Unmarked: the buffer next in turn.
static int ring_take(Staging *staging) {
    Backend *backend = staging->backend;
    const int at = staging->next;
    if (!backend->op.fence_passed(backend, staging->fence[at])) {
        // Its copies are still queued: a new buffer takes this use (the
        // busy one stays next in turn), or at the cap the host waits.
        ErrorMessage ignored = {{0}};
        if (staging->count >= STAGING_MAX_BUFFERS || staging_add(staging, at, &ignored) != 0) {
            backend->op.fence_wait(backend, staging->fence[at]);
            staging->waits++;
        }
    }
    return at;
}

// Marked: this step's next site, whose buffer is made at its first use
// (at the end, so the sites before keep theirs); once the copy of the step
// before out of it has run.
static int site_take(Staging *staging) {
    Backend *backend = staging->backend;
    if (staging->step != backend->staging_steps) {
        staging->step = backend->staging_steps;
        staging->site = 0;
    }
    int at = staging->site++;
    if (at >= staging->count) {
        ErrorMessage ignored = {{0}};
        if (staging->count < STAGING_MAX_BUFFERS &&
            staging_add(staging, staging->count, &ignored) == 0) {
            at = staging->count - 1;
        } else {
            at %= staging->count;
            staging->shared++;
        }
    }
    if (!backend->op.fence_passed(backend, staging->fence[at])) {
        backend->op.fence_wait(backend, staging->fence[at]);
        staging->waits++;
    }
    return at;
}

void *staging_take(Staging *staging) {
    const int at = staging->backend->staging_steps ? site_take(staging) : ring_take(staging);
    staging->current = at;
    staging->next = (at + 1) % staging->count;
    return staging->host[at];
}

void staging_upload(Staging *staging, void *device, const void *host, size_t bytes) {
    const int at = staging->current;
    const char *buffer = at >= 0 ? staging->host[at] : NULL;
    if (!buffer || (const char *)host < buffer ||
        (const char *)host + bytes > buffer + staging->bytes) {
        fprintf(stderr, "internal error: staging_upload of %zu bytes outside the buffer taken\n",
                bytes);
        abort();
    }
    Backend *backend = staging->backend;
    backend->op.upload_ordered(backend, device, host, bytes);
    backend->op.fence_record(backend, staging->fence[at]);
}
