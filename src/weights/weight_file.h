// The one front door for weight files: what a file is, told by its first
// bytes (never by its name), and its tensors read into nn/safetensors.h's
// SafeTensors whatever the kind, so that every consumer of weights (initial
// weights, teachers, embed, export) takes them all:
//
//   safetensors       nn/safetensors.h
//   PyTorch           a .pt/.pth (zip, legacy or tar: weights/pt_reader.h):
//                     a state dict, a training checkpoint holding one, or a
//                     whole pickled model (Ultralytics)
//
// Layering: weights/ sits above nn/ (nn/ parses safetensors only and knows
// nothing of PyTorch's files); train/, embed/ and ssl_methods/ come here.
#ifndef LTC_WEIGHTS_WEIGHT_FILE_H
#define LTC_WEIGHTS_WEIGHT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "nn/safetensors.h"
#include "nn/state_dict_backbone.h"
#include "util/error.h"

typedef enum WeightFileKind {
    WEIGHT_FILE_UNKNOWN = 0,  // neither below: damaged, or another program's file
    WEIGHT_FILE_SAFETENSORS,  // a u64 header length within the file, then the JSON's '{'
    WEIGHT_FILE_PYTORCH,      // a .pt/.pth: zip, legacy or tar (weights/pt_reader.h)
} WeightFileKind;
#define WEIGHT_FILE_SNIFF_BYTES 512  // what the sniff reads (the tar magic is at 257)

// Reads the first bytes of path (at most WEIGHT_FILE_SNIFF_BYTES into head,
// *size of them) and tells its kind, so that a caller with more kinds of
// its own (train/checkpoint.h) reads the file's start once. -1 with err
// (not naming the path) when it cannot be opened or is not a regular file.
int weight_file_sniff(const char *path, uint8_t head[WEIGHT_FILE_SNIFF_BYTES], size_t *size,
                      WeightFileKind *kind, ErrorMessage *err);

// Reads the tensors of the file at path, of any kind (a file that is
// neither is left to the safetensors parser, which says what is wrong);
// errors name the path. Values as stored (test fixtures keep their F64).
int weight_file_read(const char *path, SafeTensors *out, ErrorMessage *err);
// weight_file_read for a model's weights: F64 narrowed to F32
// (safetensors_narrow_f64).
int weight_file_read_weights(const char *path, SafeTensors *out, ErrorMessage *err);
// The same for a file sniffed already: WEIGHT_FILE_PYTORCH is read as
// PyTorch, any other kind as safetensors.
int weight_file_read_weights_as(const char *path, WeightFileKind kind, SafeTensors *out,
                                ErrorMessage *err);

// Reads the state dict at path (kind from weight_file_sniff or
// train/checkpoint.h's checkpoint_sniff; F64 narrowed to F32), finds its
// backbone's prefix (nn/state_dict_backbone.h, copied to prefix) and hands
// both to load. Errors name the path and, where the load failed under a
// prefix, the prefix.
int weight_file_load_backbone(const char *path, WeightFileKind kind, StateDictBackboneLoader load,
                              void *context, char *prefix, size_t size, ErrorMessage *err);

#endif
