// Host memory of the late-device fakes (see fake_host_memory.h).
#include "fake_host_memory.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

static struct {
    void *blocks[FAKE_HOST_BLOCKS];
    size_t sizes[FAKE_HOST_BLOCKS];
    int allocs, frees;
} host;

uint64_t fake_checksum(const void *data, size_t bytes) {
    const uint8_t *byte = data;
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) hash = (hash ^ byte[i]) * 1099511628211ull;
    return hash;
}

void fake_host_reset(void) { memset(&host, 0, sizeof host); }

void *fake_host_alloc(Backend *backend, size_t bytes) {
    if (host.allocs >= FAKE_HOST_BLOCKS) return NULL;  // the test asked for too many
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    host.blocks[host.allocs] = p;
    host.sizes[host.allocs++] = bytes;
    return p;
}

void fake_host_free(Backend *backend, void *pointer) {
    host.frees++;
    for (int i = 0; i < host.allocs; i++)
        if (host.blocks[i] == pointer) host.blocks[i] = NULL;
    free(pointer);
}

int fake_host_allocs(void) { return host.allocs; }

int fake_host_frees(void) { return host.frees; }

int fake_from_host_alloc(const void *p, size_t bytes) {
    for (int i = 0; i < host.allocs; i++) {
        const char *block = host.blocks[i];
        if (block && (const char *)p >= block && (const char *)p + bytes <= block + host.sizes[i])
            return 1;
    }
    return 0;
}

Backend *fake_ref_backend_create(void) {
    fake_host_reset();
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("ref", 1, &err);
    if (!backend) fail_msg("%s", err.text);
    backend->op.host_alloc = fake_host_alloc;
    backend->op.host_free = fake_host_free;
    return backend;
}
