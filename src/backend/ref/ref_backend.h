// The reference backend: plain single-threaded loops written for clarity,
// the oracle every other backend is tested against (see backend.h).
#ifndef LTC_BACKEND_REF_H
#define LTC_BACKEND_REF_H

#include "backend/backend.h"

Backend *ref_backend_create(ErrorMessage *err);

#endif
