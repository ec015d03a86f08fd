// The cuda backend's count of its device memory (src/backend/cuda/
// cuda_memory.c): the bytes its alloc op holds now and held at most, through
// allocations and frees in any order (300 of scrambled sizes, half freed
// and allocated again), the shared workspace apart, and the paths line that
// reports them. Runs on the CUDA emulation (emu_tests.list)
// and on a GPU; skipped where no cuda backend can be made.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"

#ifdef LTC_WITH_CUDA
#include "backend/cuda/cuda_backend.h"

enum { COUNT = 300 };

static void expect_counted(Backend *b, size_t live, size_t peak) {
    size_t got_live, got_peak, workspace;
    cuda_backend_memory(b, &got_live, &got_peak, &workspace);
    assert_int_equal(got_live, live);
    assert_int_equal(got_peak, peak);
}

static void test_alloc_and_free_are_counted(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    Backend *b = cuda_backend_create(0, &err);
    if (!b) {
        printf("skipped: no cuda backend (%s)\n", err.text);
        skip();
    }
    size_t live0, peak0, workspace;
    cuda_backend_memory(b, &live0, &peak0, &workspace);
    void *p[COUNT];
    size_t live = live0, peak = peak0;
    for (int i = 0; i < COUNT; i++) {  // 1 .. 300 KB, in a scrambled order of sizes
        const size_t bytes = (size_t)((i * 37) % COUNT + 1) * 1024;
        p[i] = b->op.alloc(b, bytes);
        assert_non_null(p[i]);
        live += bytes;
        if (live > peak) peak = live;
    }
    expect_counted(b, live, peak);
    // every other one freed, then allocated again smaller: the peak stays
    for (int i = 0; i < COUNT; i += 2) {
        b->op.free(b, p[i]);
        live -= (size_t)((i * 37) % COUNT + 1) * 1024;
    }
    expect_counted(b, live, peak);
    for (int i = 0; i < COUNT; i += 2) {
        p[i] = b->op.alloc(b, 512);
        assert_non_null(p[i]);
        live += 512;
    }
    expect_counted(b, live, peak);
    b->op.free(b, NULL);  // nothing, as cudaFree(NULL)
    expect_counted(b, live, peak);
    for (int i = COUNT - 1; i >= 0; i--) b->op.free(b, p[i]);
    expect_counted(b, live0, peak);
    char paths[1024] = "";
    b->op.describe_paths(b, paths, sizeof paths);
    char expected[96];
    snprintf(expected, sizeof expected, "device memory: %.0f MiB allocated at most",
             peak / 1048576.0);
    if (!strstr(paths, expected)) fail_msg("paths line '%s' lacks '%s'", paths, expected);
    b->destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_alloc_and_free_are_counted)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

#include "no_cuda_test.h"

int main(void) { return no_cuda_test_main(); }

#endif
