// Test helper: .pt fixtures whose floating tensors are stride-0 expands of
// per-channel bases, the bases beside them as a safetensors twin
// (tools/make_pt_fixtures.py's resnet18_expanded, tools/
// make_ultralytics_pt_fixture.py): element [c, ...] of such a tensor is
// base[c], so a large model's layout costs kilobytes.
#ifndef LTC_TESTS_PT_BASES_H
#define LTC_TESTS_PT_BASES_H

#include "nn/safetensors.h"

// Fails the test unless every floating tensor of pt has a base of its name
// and dtype in bases and equals it channel by channel, byte for byte, and
// every base is used; returns how many integer tensors (BatchNorms'
// num_batches_tracked) there were.
int assert_channel_bases(const SafeTensors *pt, const SafeTensors *bases);

#endif
