// The TensorBoard `augmentations` image: the augmented views of the first
// few samples of a batch laid out as a grid (one row per sample, one column
// per view), so a user can see what the model is trained on. The result is
// the packed RGB buffer tb_add_image takes.
#ifndef LTC_LOGGING_IMAGE_GRID_H
#define LTC_LOGGING_IMAGE_GRID_H

#include <stdint.h>

#include "util/error.h"

#define IMAGE_GRID_MAX_ROWS 8
#define IMAGE_GRID_GAP 2            // pixels between cells
#define IMAGE_GRID_GAP_VALUE 255    // gaps are white
#define IMAGE_GRID_BACKGROUND 128   // grey around views smaller than the cell

// views[v]: (batch, view_sizes[v], view_sizes[v], 3) uint8 NHWC, v < view_count.
// Rows: the first min(images, batch, IMAGE_GRID_MAX_ROWS) samples; columns:
// the views. Every cell is as large as the largest view; smaller views are
// centred (offset (cell - size) / 2, rounded down) on grey. Cells are
// IMAGE_GRID_GAP pixels apart, no outer border.
// *rgb: (height, width, 3) malloc'ed, freed by the caller.
int image_grid_make(const uint8_t *const *views, const int *view_sizes, int view_count, int batch,
                    int images, uint8_t **rgb, int *width, int *height, ErrorMessage *err);

#endif
