// Grid of augmented views for TensorBoard (see image_grid.h).
#include "logging/image_grid.h"

#include <stdlib.h>
#include <string.h>

// Large enough for any real view (DINO uses 224 and 96), small enough that
// the grid's byte count cannot overflow.
#define IMAGE_GRID_MAX_VIEW_SIZE 4096
#define IMAGE_GRID_MAX_VIEWS 64

int image_grid_make(const uint8_t *const *views, const int *view_sizes, int view_count, int batch,
                    int images, uint8_t **rgb, int *width, int *height, ErrorMessage *err) {
    *rgb = NULL;
    *width = *height = 0;
    if (!views || !view_sizes)
        return error_set(err, "augmentation grid: no views given");
    if (view_count < 1 || view_count > IMAGE_GRID_MAX_VIEWS)
        return error_set(err, "augmentation grid: view count %d is not in 1..%d", view_count,
                         IMAGE_GRID_MAX_VIEWS);
    if (batch < 1 || images < 1)
        return error_set(err, "augmentation grid: batch %d and images %d must be at least 1", batch,
                         images);
    int cell = 0;
    for (int v = 0; v < view_count; v++) {
        if (!views[v]) return error_set(err, "augmentation grid: view %d has no pixels", v);
        if (view_sizes[v] < 1 || view_sizes[v] > IMAGE_GRID_MAX_VIEW_SIZE)
            return error_set(err, "augmentation grid: view %d size %d is not in 1..%d", v,
                             view_sizes[v], IMAGE_GRID_MAX_VIEW_SIZE);
        if (view_sizes[v] > cell) cell = view_sizes[v];
    }
    int rows = images < batch ? images : batch;
    if (rows > IMAGE_GRID_MAX_ROWS) rows = IMAGE_GRID_MAX_ROWS;
    const int grid_width = view_count * cell + (view_count - 1) * IMAGE_GRID_GAP;
    const int grid_height = rows * cell + (rows - 1) * IMAGE_GRID_GAP;
    const size_t row_bytes = (size_t)grid_width * 3;
    uint8_t *grid = malloc(row_bytes * (size_t)grid_height);
    if (!grid)
        return error_set(err, "augmentation grid: out of memory for %dx%d pixels", grid_width,
                         grid_height);
    memset(grid, IMAGE_GRID_GAP_VALUE, row_bytes * (size_t)grid_height);

    for (int row = 0; row < rows; row++) {
        for (int v = 0; v < view_count; v++) {
            const int size = view_sizes[v];
            const int cell_x = v * (cell + IMAGE_GRID_GAP);
            const int cell_y = row * (cell + IMAGE_GRID_GAP);
            for (int y = 0; y < cell; y++)
                memset(grid + (size_t)(cell_y + y) * row_bytes + (size_t)cell_x * 3,
                       IMAGE_GRID_BACKGROUND, (size_t)cell * 3);
            const int offset = (cell - size) / 2;
            const uint8_t *sample = views[v] + (size_t)row * size * size * 3;  // (size, size, 3)
            for (int y = 0; y < size; y++)
                memcpy(grid + (size_t)(cell_y + offset + y) * row_bytes +
                           (size_t)(cell_x + offset) * 3,
                       sample + (size_t)y * size * 3, (size_t)size * 3);
        }
    }
    *rgb = grid;
    *width = grid_width;
    *height = grid_height;
    return 0;
}
