// Test helper: .pt fixtures whose floating tensors are stride-0 expands of
// per-channel bases, the bases beside them as a safetensors twin
// (tools/make_pt_fixtures.py's resnet18_expanded, tools/
// make_ultralytics_pt_fixture.py): element [c, ...] of such a tensor is
// base[c], so a large model's layout costs kilobytes. And one entry of a
// .pt file's zip, its bytes or its pickle, for tests that read back what we
// write.
#ifndef LTC_TESTS_PT_BASES_H
#define LTC_TESTS_PT_BASES_H

#include <stddef.h>
#include <stdint.h>

#include "nn/safetensors.h"
#include "weights/pt_pickle.h"

// Fails the test unless every floating tensor of pt has a base of its name
// and dtype in bases and equals it channel by channel, byte for byte, and
// every base is used; returns how many integer tensors (BatchNorms'
// num_batches_tracked) there were.
int assert_channel_bases(const SafeTensors *pt, const SafeTensors *bases);

// The bytes of the zip entry `name` ("exported_last/data.pkl") of the file
// at path, malloc'ed, *size of them; fails the test when there is none.
uint8_t *pt_zip_entry(const char *path, const char *name, size_t *size);

// That entry loaded with the restricted unpickler (weights/pt_pickle.h),
// all of it consumed; fails the test otherwise. Free with pt_pickle_free.
void pt_zip_pickle(const char *path, const char *name, PtPickle *pickle);

#endif
