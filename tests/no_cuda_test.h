// The whole test of a file that checks the cuda backend's own internals
// (its headers need the CUDA toolkit), in a build without CUDA: one case
// that says so and is skipped, so that the binary exists and reports it.
// Include after cmocka.h, in the file's #else branch; its main returns
// no_cuda_test_main().
#ifndef LTC_TESTS_NO_CUDA_TEST_H
#define LTC_TESTS_NO_CUDA_TEST_H

#include <stdio.h>

static void test_built_without_cuda(void **state) {
    (void)state;
    printf("skipped: built without CUDA\n");
    skip();
}

static int no_cuda_test_main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_built_without_cuda)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
