// Libraries opened at run time instead of linked: cuDNN, NCCL and OpenMPI.
//
// A linked library must be present for the program to start at all, and
// loading the big ones costs every start (docs/gpu.md). These three are
// needed only by some runs (a GPU, GPU ranks, CPU ranks), and the same
// binary (the pip wheel's, the bundle's) must start and train on the CPU
// where they are missing. So each is opened with dlopen by its soname when
// first needed (LD_LIBRARY_PATH, the program's run path and the system's
// folders are searched, as for a linked library) and its functions are
// resolved into a table.
//
// The calling code stays as written against the library's header: a file
// per library defines each function it uses with the header's own
// prototype (the compiler checks it) as a forwarder into the table, from
// one X-macro list:
//
//   #define CUDNN_FUNCTIONS(X) X(cudnnStatus_t, cudnnCreate, (cudnnHandle_t *h), (h)) ...
//   DYNAMIC_LIBRARY(CUDNN_FUNCTIONS, cudnn_library_open, "cuDNN", "libcudnn.so.9", ...)
//
// The forwarders are not exported (the program is not linked with
// -rdynamic), so the library's own calls never reach them.
#ifndef LTC_UTIL_DYNAMIC_LIBRARY_H
#define LTC_UTIL_DYNAMIC_LIBRARY_H

#include <stddef.h>

#include "util/error.h"

typedef struct DynamicSymbol {
    const char *name;
    void **address;  // where the resolved address goes
} DynamicSymbol;

// The hint for CUDA's libraries (cuDNN, cuBLAS, NCCL) when one is missing.
#define CUDA_LIBRARIES_HINT                                                             \
    "CUDA's libraries come from `pip install lightly-train-c[cuda]` (or PyTorch's CUDA " \
    "13 build) in the Python environment, or from a folder on LD_LIBRARY_PATH"

// Defines, for the X-macro LIST of (type, name, (parameters), (arguments)):
// the file's table of function pointers, a forwarder per function, and
// `int open_function(ErrorMessage *err)`, which opens `file` once with
// dlopen `flags` and resolves the table and any further DynamicSymbols
// given after `hint` (data such as OpenMPI's handles). 0, or -1 with the
// reason.
#define DYNAMIC_LIBRARY(LIST, open_function, what, file, flags, hint, ...)                  \
    static struct {                                                                        \
        LIST(DYNAMIC_FIELD)                                                                \
    } loaded;                                                                              \
    LIST(DYNAMIC_FORWARD)                                                                  \
    int open_function(ErrorMessage *err) {                                                 \
        static void *library;                                                              \
        static const DynamicSymbol symbols[] = {LIST(DYNAMIC_SYMBOL) __VA_ARGS__};         \
        if (!library)                                                                      \
            library = dynamic_library_open(what, file, flags, hint, symbols,               \
                                           sizeof symbols / sizeof symbols[0], err);       \
        return library ? 0 : -1;                                                           \
    }
#define DYNAMIC_FIELD(type, name, parameters, arguments) type(*name) parameters;
#define DYNAMIC_FORWARD(type, name, parameters, arguments) \
    type name parameters { return loaded.name arguments; }
#define DYNAMIC_SYMBOL(type, name, parameters, arguments) {#name, (void **)&loaded.name},

// Opens the library `file` (a soname such as "libcudnn.so.9") with dlopen
// flags `flags` and resolves every symbol. Returns the handle, or NULL with
// "cannot load <what>: <dlerror, which names the file>; <hint>" (hint may
// be NULL). The library is closed again when a symbol is missing.
void *dynamic_library_open(const char *what, const char *file, int flags, const char *hint,
                           const DynamicSymbol *symbols, size_t count, ErrorMessage *err);

// Where the loader finds `file` now (LD_LIBRARY_PATH, run path, system),
// without keeping it loaded: its path into `path`, 0; or -1 with the
// loader's reason in `path`. For `--version`.
int dynamic_library_locate(const char *file, char *path, size_t size);

// The file that holds `address` (a function of a loaded library, or of the
// program itself when it is linked in) into `path`; "" when unknown.
void dynamic_library_file_of(const void *address, char *path, size_t size);

#endif
