// Test helper for fake backends whose device runs late (test_batch_feed,
// test_staging): the host memory their host_alloc hands out, tracked so a
// fake can check that a copy reads from it, and a checksum with which a
// fake notices that a copy's source changed while the copy was pending.
#ifndef LTC_TESTS_FAKE_HOST_MEMORY_H
#define LTC_TESTS_FAKE_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

// FNV-1a of bytes.
uint64_t fake_checksum(const void *data, size_t bytes);

// host_alloc / host_free for a fake's op table: 64-byte aligned memory,
// counted and remembered (up to FAKE_HOST_BLOCKS blocks after a reset).
enum { FAKE_HOST_BLOCKS = 64 };
void fake_host_reset(void);
void *fake_host_alloc(Backend *backend, size_t bytes);
void fake_host_free(Backend *backend, void *pointer);
int fake_host_allocs(void);
int fake_host_frees(void);
// 1 when [p, p + bytes) lies in a block from fake_host_alloc not yet freed.
int fake_from_host_alloc(const void *p, size_t bytes);

// The start of a fake: a ref backend (one thread) whose host_alloc and
// host_free are the ones above, their counts reset. Fails the test when
// the backend cannot be made.
Backend *fake_ref_backend_create(void);

#endif
