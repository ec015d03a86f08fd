// The NCCL functions comm_nccl.c calls, forwarded into the library opened
// at run time (see util/dynamic_library.h). CUDA builds only.
// A NCCL function called elsewhere but missing from the list below is an
// undefined reference when the program is linked: add it here.
#include "dist/nccl_library.h"

#ifdef LTC_WITH_CUDA

#include <dlfcn.h>
#include <nccl.h>

#include "util/dynamic_library.h"

#define STRINGIFY(x) #x
#define SONAME(major) "libnccl.so." STRINGIFY(major)

#define NCCL_FUNCTIONS(X)                                                                      \
    X(const char *, ncclGetErrorString, (ncclResult_t r), (r))                                 \
    X(ncclResult_t, ncclGetVersion, (int *version), (version))                                 \
    X(const char *, ncclGetLastError, (ncclComm_t c), (c))                                     \
    X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id))                                \
    X(ncclResult_t, ncclCommInitRankConfig,                                                    \
      (ncclComm_t * c, int ranks, ncclUniqueId id, int rank, ncclConfig_t *config),            \
      (c, ranks, id, rank, config))                                                            \
    X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t c, ncclResult_t * e), (c, e))           \
    X(ncclResult_t, ncclCommFinalize, (ncclComm_t c), (c))                                     \
    X(ncclResult_t, ncclCommDestroy, (ncclComm_t c), (c))                                      \
    X(ncclResult_t, ncclCommAbort, (ncclComm_t c), (c))                                        \
    X(ncclResult_t, ncclAllReduce,                                                             \
      (const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,           \
       ncclComm_t c, cudaStream_t s),                                                          \
      (send, recv, count, t, op, c, s))                                                        \
    X(ncclResult_t, ncclAllGather,                                                             \
      (const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c,             \
       cudaStream_t s),                                                                        \
      (send, recv, count, t, c, s))                                                            \
    X(ncclResult_t, ncclBroadcast,                                                             \
      (const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,   \
       cudaStream_t s),                                                                        \
      (send, recv, count, t, root, c, s))

const char *nccl_library_file(void) { return SONAME(NCCL_MAJOR); }

DYNAMIC_LIBRARY(NCCL_FUNCTIONS, nccl_library_open, "NCCL", nccl_library_file(),
                RTLD_NOW | RTLD_LOCAL, CUDA_LIBRARIES_HINT)

void nccl_library_path(char *path, size_t size) {
    dynamic_library_file_of((const void *)loaded.ncclGetVersion, path, size);
}

#else  // no CUDA: nothing to open

const char *nccl_library_file(void) { return "libnccl (not built)"; }

int nccl_library_open(ErrorMessage *err) {
    return error_set(err, "this build has no CUDA/NCCL");
}

#endif
