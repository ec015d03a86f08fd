// The optimised CPU backend: multi-threaded, heavy ops on an optimised
// library (see backend.h; the choice and its measurements are in
// docs/performance.md).
#ifndef LTC_BACKEND_CPU_H
#define LTC_BACKEND_CPU_H

#include "backend/backend.h"

// threads <= 0: all usable cores.
Backend *cpu_backend_create(int threads, ErrorMessage *err);

#endif
