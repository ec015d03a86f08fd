// Initial weights of another channel count: a 3-channel first convolution
// (a ResNet's conv1, a ViT's patch embedding) made into one for N input
// channels by timm's rule (timm.models._manipulate.adapt_input_conv), so
// that ImageNet weights start an N-channel run (--num-channels with
// --checkpoint; docs/input-pipeline.md "Depth and channels"):
//   N = 1: the sum over the 3 input channels;
//   N > 3 (and N = 2): the 3 channels repeated ceil(N / 3) times, the first
//     N kept, scaled by 3 / N.
#ifndef LTC_NN_INPUT_ADAPT_H
#define LTC_NN_INPUT_ADAPT_H

#include <stddef.h>

#include "nn/safetensors.h"
#include "util/error.h"

// weight (out, 3, kernel) floats -> adapted (out, channels, kernel), OIHW
// with `kernel` = kh * kw values per (out, in) pair.
void input_adapt_conv(const float *weight, int out, size_t kernel, int channels, float *adapted);

// In a loaded file: every rank-4 tensor of shape (out, 3, kh, kw) is
// replaced by its input_adapt_conv to `channels` (F32; F16 and BF16 sources
// are widened first). The new values are appended to the file's memory and
// the tensor's entry points at them. *count: how many were adapted (0 when
// channels is 3 or none matched). -1 with err when out of memory.
int input_adapt_file(SafeTensors *file, int out, int kernel_height, int kernel_width,
                     int channels, int *count, ErrorMessage *err);

#endif
