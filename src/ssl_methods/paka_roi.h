// The PaKA loss's view alignment on the host (LightlyTrain's DINOv31:
// _align_cross_view_pair and _roi_align_view over lightly's
// roi_resample_to_grid, i.e. torchvision's roi_align with aligned=True,
// sampling_ratio -1 and spatial_scale 1). A student local view and its
// parent global view are resampled over the region they share onto one
// out_h x out_w grid, so that token i of both describes the same place.
//
// Each output cell of roi_align is a fixed weighted sum of a few grid cells
// (its samples' bilinear taps, divided by the sample count): the geometry
// is known on the host, so the method builds those sums as sparse rows
// (the backend's combine_rows) and their transpose for the backward,
// instead of a resampling kernel of its own.
#ifndef LTC_SSL_METHODS_PAKA_ROI_H
#define LTC_SSL_METHODS_PAKA_ROI_H

#include <stdint.h>

#include "augment/augment.h"

// A box in image pixels or grid cells: x0 <= x1, y0 <= y1.
typedef struct PakaBox {
    double x0, y0, x1, y1;
} PakaBox;

// The crop of a view as a box in image pixels.
PakaBox paka_crop_box(const ViewGeometry *view);

// The region the student's crop shares with the teacher's, in image pixels,
// and whether it counts (returns 1): it must span at least one output cell
// of the student's crop each way; otherwise the student's own crop (returns
// 0, the pair is left out of the loss).
int paka_shared_region(PakaBox student, PakaBox teacher, int out_h, int out_w, PakaBox *region);

// region (image pixels) in the grid coordinates of a (height, width) grid
// over crop, clamped to the grid.
PakaBox paka_grid_box(PakaBox crop, PakaBox region, int height, int width);

// The most taps paka_roi_cell returns for any box on such a grid; at most
// PAKA_ROI_MAX_TAPS is supported (a 98 x 98 grid onto 7 x 7 cells).
int paka_roi_cell_bound(int height, int width, int out_h, int out_w);
#define PAKA_ROI_MAX_TAPS 256

// Output cell (cell_y, cell_x) of roi_align(aligned=True) of box (grid
// coordinates) on a (height, width) grid resampled to out_h x out_w: its
// distinct grid cells (index y * width + x, in the network's order: with
// flip the grid is the mirror image of the crop, which roi_align sees
// unflipped) and their weights. Returns the count (at most
// paka_roi_cell_bound; 0 when every sample falls outside), or -1 when the
// bound exceeds PAKA_ROI_MAX_TAPS.
int paka_roi_cell(PakaBox box, int height, int width, int out_h, int out_w, int cell_y,
                  int cell_x, int flip, int32_t *index, float *weight);

#endif
