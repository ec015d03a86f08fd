// `embed --format tensorboard`: the files of TensorBoard's embedding
// projector in one folder, so that `tensorboard --logdir DIR` shows the
// dataset as a point cloud (PCA, t-SNE, UMAP) with a thumbnail per point.
// What the projector plugin reads (tensorboard/plugins/projector/
// projector_plugin.py, checked by tools/check_projector.py):
//
//   projector_config.pbtxt  the ProjectorConfig as protobuf text: one
//                           embedding "embeddings" with the three files
//                           below, paths relative to the folder
//   tensors.tsv             N lines of D tab-separated floats (%.7g)
//   metadata.tsv            a header "filename<TAB>folder", then one line per
//                           row: the file name (relative to --data) and its
//                           folder ("." for files at the top), the projector's
//                           labels to colour and search by; tabs and line
//                           breaks inside names become spaces
//   sprite.png              the thumbnails in rows of ceil(sqrt(N)), row-major
//                           in row order, each image fitted into a cell x
//                           cell square (aspect kept, centred on white);
//                           cell = 64 px, less when the sprite would pass the
//                           projector's 8192 x 8192 limit (no sprite below
//                           PROJECTOR_MIN_CELL px: more than 4 million images)
//
// The plugin parses tensors.tsv as text (its binary fallback triggers only
// on undecodable bytes), so the tensor is text: about 11 bytes per value.
// Written to RUN/plugins/org_tensorflow_tensorboard_projector (the plugin's
// asset folder) of a training run's folder, the projector shows in that
// run's TensorBoard next to its scalars: `tensorboard --logdir RUN`.
//
// Each file is written atomically (util/file.h), the config last, so a
// projector never points at a missing file. A thumbnail that cannot be read
// (the file changed since it was embedded) stays grey and is counted.
#ifndef LTC_EMBED_PROJECTOR_H
#define LTC_EMBED_PROJECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "embed/embedding_writers.h"
#include "util/error.h"

#define PROJECTOR_CONFIG "projector_config.pbtxt"
#define PROJECTOR_TENSORS "tensors.tsv"
#define PROJECTOR_METADATA "metadata.tsv"
#define PROJECTOR_SPRITE "sprite.png"
#define PROJECTOR_ASSETS "plugins/org_tensorflow_tensorboard_projector"
#define PROJECTOR_CELL 64
#define PROJECTOR_SPRITE_MAX 8192  // the projector's largest sprite side
#define PROJECTOR_MIN_CELL 4
#define PROJECTOR_GREY 128         // a thumbnail that could not be read
#define PROJECTOR_BACKGROUND 255   // around thumbnails that are not square

typedef struct ProjectorOptions {
    // The images are image_root/filename (table->filenames); "" when the
    // file names carry their folder (several --data folders).
    const char *image_root;
    uint64_t max_pixels;  // decoder limit for the thumbnails; 0 = the default
} ProjectorOptions;

typedef struct ProjectorSummary {
    int cell;           // thumbnail side in the sprite; 0 when there is no sprite
    int columns;        // thumbnails per sprite row
    size_t unreadable;  // thumbnails left grey
} ProjectorSummary;

// The sprite's layout for `count` images: thumbnails per row and the cell
// side (0: no sprite, the cells would be below PROJECTOR_MIN_CELL).
void projector_sprite_layout(size_t count, int *columns, int *cell);

// Before any work: dir must be a folder that can be created or written, and
// one that already holds a projector (its config) needs overwrite.
int projector_check_output(const char *dir, int overwrite, ErrorMessage *err);

// The folder to give `tensorboard --logdir` for projector folder dir: dir,
// or the run folder when dir is a run's PROJECTOR_ASSETS.
void projector_logdir(const char *dir, char *out, size_t capacity);

// Creates dir when missing and writes the four files.
int projector_write(const char *dir, const EmbeddingTable *table,
                    const ProjectorOptions *options, ProjectorSummary *summary,
                    ErrorMessage *err);

#endif
