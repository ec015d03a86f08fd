// Force-included (gcc -include) into the cuda backend's C files in the
// CUDA emulation build: cuda_gemm.c dlopens cuBLAS by name, and here that
// name gives the emulation's cuBLAS (emu_cublas.c) instead of the library,
// which would need a GPU. Every other name goes to the real dlopen.
#ifndef LTC_TESTS_CUDA_EMU_DLOPEN_H
#define LTC_TESTS_CUDA_EMU_DLOPEN_H

#include <dlfcn.h>

void *emu_dlopen(const char *name, int flags);
void *emu_dlsym(void *library, const char *symbol);
int emu_dlclose(void *library);

#define dlopen emu_dlopen
#define dlsym emu_dlsym
#define dlclose emu_dlclose

#endif
