// Opening libraries at run time (see dynamic_library.h).
#include "util/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

#if defined(__SANITIZE_ADDRESS__)
#define LTC_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LTC_ADDRESS_SANITIZER 1
#endif
#endif
#ifndef LTC_ADDRESS_SANITIZER
#define LTC_ADDRESS_SANITIZER 0
#endif

void *dynamic_library_open(const char *what, const char *file, int flags, const char *hint,
                           const DynamicSymbol *symbols, size_t count, ErrorMessage *err) {
    void *library = dlopen(file, flags);
    if (!library) {
        error_set(err, "cannot load %s: %s%s%s", what, dlerror(), hint ? "; " : "",
                  hint ? hint : "");
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        *symbols[i].address = dlsym(library, symbols[i].name);
        if (!*symbols[i].address) {
            error_set(err, "%s (%s) lacks %s: a different version than this program was built "
                           "for", what, file, symbols[i].name);
            dlclose(library);
            return NULL;
        }
    }
    return library;
}

void dynamic_library_file_of(const void *address, char *path, size_t size) {
    Dl_info info;
    path[0] = '\0';
    if (address && dladdr(address, &info) && info.dli_fname)
        snprintf(path, size, "%s", info.dli_fname);
}

int dynamic_library_locate(const char *file, char *path, size_t size) {
    // RTLD_LAZY: nothing is bound, only the file and its dependencies mapped.
    void *library = dlopen(file, RTLD_LAZY | RTLD_LOCAL);
    if (!library) {
        snprintf(path, size, "%s", dlerror());
        return -1;
    }
    struct link_map *map = NULL;
    if (dlinfo(library, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name[0])
        snprintf(path, size, "%s (loaded; its path is unknown)", file);
    else
        snprintf(path, size, "%s", map->l_name);
#if !LTC_ADDRESS_SANITIZER
    dlclose(library);
#else
    // Kept mapped under AddressSanitizer: the C++ runtime linked into cuBLAS
    // and cuDNN allocates a pool at load that only the library's own data
    // points to; once the library is unloaded LeakSanitizer reports it (72 KB
    // a library, once a process) and `--version` exits 1 under make asan.
    (void)library;
#endif
    return 0;
}
