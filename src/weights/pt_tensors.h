// The part of reading a PyTorch file that does not depend on its container
// (pt_reader.c reads zip and legacy files, weights/pt_reader.h says what is
// read): which dict of the unpickled object holds the tensors, and the copy
// of each tensor's view out of its storage into one SafeTensors buffer,
// storages fetched through a PtStorageSource the container provides.
#ifndef LTC_WEIGHTS_PT_TENSORS_H
#define LTC_WEIGHTS_PT_TENSORS_H

#include <stdint.h>

#include "nn/safetensors.h"
#include "util/error.h"
#include "weights/pt_modules.h"
#include "weights/pt_pickle.h"

// Where the storages' bytes come from: `check` confirms that a storage's
// entry exists and holds exactly `bytes` (before anything is allocated),
// `load` makes them available at *data (valid until the next load),
// `read_into` writes exactly `bytes` of them at dest and never more.
// `budget`: the most bytes all storages read may hold (a zip's deflated
// entries inflate; UINT64_MAX where they lie in the file as they are).
typedef struct PtStorageSource {
    int (*check)(void *context, const PtStorage *storage, uint64_t bytes, ErrorMessage *err);
    int (*load)(void *context, const PtStorage *storage, uint64_t bytes, const uint8_t **data,
                ErrorMessage *err);
    int (*read_into)(void *context, const PtStorage *storage, uint64_t bytes, uint8_t *dest,
                     ErrorMessage *err);
    void *context;
    uint64_t budget;
    uint64_t file_size;  // for the budget's message
} PtStorageSource;

// What is read: a dict's tensors, or those of a pickled model's module tree.
typedef struct PtChosen {
    const PtValue *dict;
    PtNamedTensor *named;  // malloc'ed; or NULL
    int named_count;
} PtChosen;

// The tensors to read (see pt_reader.h) of the unpickled root; 0 or -1
// with err. chosen->named is malloc'ed (free it, also after a failure).
int pt_choose_tensors(const PtValue *root, PtChosen *chosen, ErrorMessage *err);
// The chosen tensors -> *out: storages checked, sizes bounded, views copied.
int pt_build_tensors(const PtChosen *chosen, const PtStorageSource *source, SafeTensors *out,
                     ErrorMessage *err);

#endif
