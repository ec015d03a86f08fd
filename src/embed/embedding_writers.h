// Embedding files: (N, D) float32 features plus the filename of each row, in
// the formats users load them with. Every file is written atomically
// (temporary name, fsync, rename: util/file.h); floats as text use %.9g,
// which reads back to the identical float. The names are in the same file
// as the rows, except for npy, whose pair is written as one unit.
//
//   npy          NumPy .npy v1.0, '<f4', shape (N, D), C order; the filenames
//                go to "<path>.filenames.txt", one per line ('\n'), same order.
//                The pair is one unit (file_write_atomic_group): the .npy is
//                removed before the names are replaced and renamed into place
//                last, so a .npy always sits beside its own names (after a
//                crash there may be no .npy; its row count is the number of
//                lines, a check for readers)
//   csv          LightlyTrain's: header filename,embedding_0,...,embedding_{D-1}
//   lightly_csv  lightly's: header filenames,embedding_0,...,embedding_{D-1},labels
//                with label 0 on every row
//   safetensors  tensor "embeddings" F32 (N, D); metadata "filenames" = a JSON
//                array of the filenames as a string
//   torch        LightlyTrain's default: what torch.save writes of
//                {"filenames": [str, ...], "embeddings": float32 tensor (N, D)}
//                (torch.load reads it, weights_only too)
//   tensorboard  a folder of TensorBoard projector files, written by
//                projector_write (embed/projector.h), not by embedding_write
// CSV fields are quoted per RFC 4180 when they hold a comma, a quote, CR or
// LF (quotes doubled); lines end in '\n'.
#ifndef LTC_EMBED_EMBEDDING_WRITERS_H
#define LTC_EMBED_EMBEDDING_WRITERS_H

#include <stddef.h>

#include "util/error.h"

typedef enum EmbedFormat {
    EMBED_FORMAT_NPY = 0,
    EMBED_FORMAT_CSV,
    EMBED_FORMAT_LIGHTLY_CSV,
    EMBED_FORMAT_SAFETENSORS,
    EMBED_FORMAT_TENSORBOARD,
    EMBED_FORMAT_TORCH,
} EmbedFormat;

// NULL-terminated, indexed by EmbedFormat: "npy", "csv", "lightly_csv", "safetensors",
// "tensorboard", "torch".
extern const char *const embed_format_names[];

// From the extension of path (any case): .csv -> csv, .safetensors ->
// safetensors, .pt and .pth -> torch, anything else -> npy. lightly_csv is
// only chosen explicitly.
EmbedFormat embed_format_from_path(const char *path);

typedef struct EmbeddingTable {
    const float *features;         // (count, dim) row-major host memory
    size_t count;
    int dim;
    const char *const *filenames;  // (count) relative paths, in row order
} EmbeddingTable;

// Whether every filename can be stored in `format` (npy: no newline in a
// name; safetensors and torch: valid UTF-8); the message names the first
// that cannot.
int embedding_check_filenames(EmbedFormat format, const char *const *filenames, size_t count,
                              ErrorMessage *err);

// Writes path (and the npy sidecar) in `format`.
int embedding_write(const char *path, EmbedFormat format, const EmbeddingTable *table,
                    ErrorMessage *err);

// The sidecar name of the npy format: "<npy_path>.filenames.txt".
int embedding_npy_filenames_path(const char *npy_path, char *out, size_t capacity);

#endif
