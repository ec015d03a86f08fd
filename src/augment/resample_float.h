// Separable resampling of float images with any number of channels: the
// deep path's counterpart of resample.h (16-bit and float images, channel
// counts other than RGB's; docs/input-pipeline.md "Depth and channels").
// The weights are the 8-bit path's real-valued ones (resize.h area /
// bilinear, blur.h Gaussian) kept in float, normalised to sum 1, so values
// keep their precision (no fixed point, no clamping: floats outside [0, 1]
// stay outside).
//
// One pass horizontally over the source rows the row table reads, into a
// float intermediate, then one vertically into the output. A channel map
// picks which source channel each output channel reads (ChannelDrop).
#ifndef LTC_AUGMENT_RESAMPLE_FLOAT_H
#define LTC_AUGMENT_RESAMPLE_FLOAT_H

#include <stddef.h>
#include <stdint.h>

// Per output position: the first source position and `taps` weights.
typedef struct FloatTable {
    int count;       // output positions
    int stride;      // weights per output in `weights`
    int32_t *start;  // (count)
    int32_t *taps;   // (count)
    float *weights;  // (count, stride)
    double *row_scratch;  // (stride) building space for one row
    size_t capacity_count, capacity_weights, capacity_row;
    int allocations;  // times an array above was (re)allocated
} FloatTable;

typedef struct FloatBuffer {
    float *data;
    size_t capacity;  // elements
    int allocations;
} FloatBuffer;

// Room for `count` outputs of up to max_taps weights. -1 when out of memory.
int float_table_reserve(FloatTable *table, int count, int max_taps);
// Output `index` from real-valued weights over [start, start + taps):
// normalised to sum 1 (all zero: the first source position alone).
void float_table_set_row(FloatTable *table, int index, int start, int taps,
                         const double *weights);
void float_table_free(FloatTable *table);
void float_buffer_free(FloatBuffer *buffer);

// dst (rows->count, columns->count, out_channels), rows dst_stride floats
// apart = the tables applied to src (rows src_stride floats apart, pixels
// of src_channels floats), output channel k reading source channel map[k].
// dst may be src (blur in place; then out_channels == src_channels and map
// is the identity): every source row is read before dst is written.
// -1 when the intermediate cannot grow.
int resample_float(const float *src, size_t src_stride, int src_channels, const uint8_t *map,
                   int out_channels, const FloatTable *columns, const FloatTable *rows,
                   FloatBuffer *buffer, float *dst, size_t dst_stride);

#endif
