// Tests of the libraries opened at run time (util/dynamic_library.h): a
// missing library and a missing symbol are one-line errors naming them;
// --version's locate names the file the loader finds; and every function
// the program forwards to cuDNN, cuBLASLt and NCCL resolves in the installed
// libraries of the version the headers are from (skipped where they are not
// installed, as on a machine without the CUDA toolkit). OpenMPI's table is
// resolved by every MPI run (tests/e2e/comm_mpi.sh, train_ranks.sh).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <string.h>

#include "util/dynamic_library.h"
#ifdef LTC_WITH_CUDA
#include "backend/cuda/cublaslt_library.h"
#include "backend/cuda/cudnn_library.h"
#include "dist/nccl_library.h"
#endif

static double (*cosine)(double);
static void *no_such_function;

static void test_missing_library(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    const DynamicSymbol symbols[] = {{"cos", (void **)&cosine}};
    assert_null(dynamic_library_open("libabsent", "libabsent.so.7", RTLD_NOW | RTLD_LOCAL,
                                     "install it", symbols, 1, &err));
    assert_non_null(strstr(err.text, "cannot load libabsent: libabsent.so.7: cannot open "));
    assert_non_null(strstr(err.text, "; install it"));
    char path[256];
    assert_int_equal(dynamic_library_locate("libabsent.so.7", path, sizeof path), -1);
    assert_non_null(strstr(path, "libabsent.so.7"));
}

static void test_symbols_resolve_or_fail(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    const DynamicSymbol good[] = {{"cos", (void **)&cosine}};
    void *math = dynamic_library_open("libm", "libm.so.6", RTLD_NOW | RTLD_LOCAL, NULL, good, 1,
                                      &err);
    assert_non_null(math);
    assert_true(cosine(0.0) == 1.0);
    dlclose(math);
    const DynamicSymbol bad[] = {{"cos", (void **)&cosine},
                                 {"no_such_function", &no_such_function}};
    assert_null(dynamic_library_open("libm", "libm.so.6", RTLD_NOW | RTLD_LOCAL, NULL, bad, 2,
                                     &err));
    assert_string_equal(err.text, "libm (libm.so.6) lacks no_such_function: a different version "
                                  "than this program was built for");
    char path[256];
    assert_int_equal(dynamic_library_locate("libm.so.6", path, sizeof path), 0);
    assert_non_null(strstr(path, "/libm.so.6"));
}

// Every forwarded function of `file` resolves, where the loader finds it.
static void check_table(const char *file, int (*open_library)(ErrorMessage *)) {
    char path[512];
    if (dynamic_library_locate(file, path, sizeof path) != 0) {
        print_message("%s not installed here: %s\n", file, path);
        skip();
    }
    ErrorMessage err = {{0}};
    if (open_library(&err) != 0) fail_msg("%s (%s): %s", file, path, err.text);
}

static void test_cudnn_table(void **state) {
    (void)state;
#ifdef LTC_WITH_CUDA
    check_table(cudnn_library_file(), cudnn_library_open);
#else
    skip();
#endif
}

static void test_cublaslt_table(void **state) {
    (void)state;
#ifdef LTC_WITH_CUDA
    check_table(cublaslt_library_file(), cublaslt_library_open);
#else
    skip();
#endif
}

static void test_nccl_table(void **state) {
    (void)state;
#ifdef LTC_WITH_CUDA
    check_table(nccl_library_file(), nccl_library_open);
#else
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_symbols_resolve_or_fail),
        cmocka_unit_test(test_cudnn_table),
        cmocka_unit_test(test_cublaslt_table),
        cmocka_unit_test(test_nccl_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
