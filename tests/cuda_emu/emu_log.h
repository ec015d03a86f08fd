// The CUDA emulation's operation log: with LTC_EMU_LAUNCH_LOG=FILE every
// operation queued on the emulated device (kernel launch, cuDNN
// convolution, cuBLAS product, copy, memset) appends one line "KIND SITE"
// to FILE, so a census of a step's launches needs no GPU
// (tools/launch_census.sh); so does every call that can make the host wait
// for the device (kind "host-wait": synchronisations, blocking copies,
// allocations and frees). Without the variable nothing is written.
#ifndef LTC_TESTS_CUDA_EMU_LOG_H
#define LTC_TESTS_CUDA_EMU_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

// kind: "kernel", "cudnn", "cublas", "copy", "memset" or "host-wait"; site: the launch
// site (file:line) or the library call's name.
void ltc_emu_log(const char *kind, const char *site, int line);

#ifdef __cplusplus
}
#endif

#endif
