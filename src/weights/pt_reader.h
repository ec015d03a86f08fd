// PyTorch .pt / .pth state dicts read into the same SafeTensors that
// safetensors files give (nn/safetensors.h), so every consumer of weights
// (initial weights, teachers, embed, export) reads both; the front door
// (weights/weight_file.h) sends a file here when its first bytes say
// PyTorch (never by extension).
//
// Containers:
//   zip     torch.save since PyTorch 1.6: <archive>/data.pkl (the pickle),
//           <archive>/data/<key> (one entry per storage, raw little-endian
//           bytes), <archive>/byteorder ("little"; absent in old files),
//           read through libzip (entries stored or deflated, zip64).
//   legacy  _use_new_zipfile_serialization=False and PyTorch < 1.6: five
//           pickles back to back (magic number, protocol 1001, sys_info,
//           the object, the storage keys), then each storage as its int64
//           element count and raw bytes.
// The tar format of PyTorch < 0.4 and TorchScript archives are refused with
// a message saying what they are.
//
// The pickle is read by pt_pickle.h's restricted machine (no code runs). The
// tensors are those of the top-level dict; when it holds none, those of the
// first of its entries "state_dict", "model_state_dict", "model", "teacher"
// that holds tensors (Lightning / timm training checkpoints, DINOv2's
// teacher checkpoints); when none does, an Ultralytics checkpoint's
// pickled model (the "ema" entry when it holds one, else "model"), its
// tensors by module path as its state_dict() names them
// (weights/pt_modules.h). Non-tensor entries of that dict are skipped; keys
// must be UTF-8 strings without NUL, shorter than SAFETENSORS_MAX_NAME, and
// unique. Tensors keep the dict's order.
//
// Every tensor is copied out of its storage into one buffer (64-byte
// aligned each): contiguous views with memcpy, strided ones (transposed,
// expanded with stride 0, sliced with an offset) element by element, so the
// result is always contiguous in PyTorch's row-major layout. A storage must
// be exactly its element count x dtype size bytes long; the total copied may
// be at most PT_MAX_EXPANSION x the storage bytes read + PT_EXPANSION_SLACK
// (views that repeat a storage many times are refused before allocating).
// Storages not used by a chosen tensor are never read.
//
// Memory: a zip entry may be deflated, and deflate turns 1 MB into 1 GB of
// zeros. The storages read may hold at most PT_MAX_INFLATION x the file's
// size + PT_INFLATION_SLACK, checked from the declared sizes before anything
// is allocated or inflated (torch.save stores entries as they are, 1x; a zip
// tool's deflate of weights gains ~10%). A tensor that is its whole storage
// in row-major order (what torch.save writes for a state dict) is inflated
// straight into its place in the output and never past its size; only
// storages shared by several tensors or viewed in part go through a scratch
// buffer of the storage's size.
#ifndef LTC_WEIGHTS_PT_READER_H
#define LTC_WEIGHTS_PT_READER_H

#include <stddef.h>
#include <stdint.h>

#include "nn/safetensors.h"
#include "util/error.h"

// data.pkl of a ViT-g state dict is 59 kB, of its Lightning checkpoint with
// student, teacher and AdamW state 224 kB (see PT_MAX_PICKLE_MEMORY).
#define PT_MAX_PICKLE_BYTES (16ull << 20)
#define PT_MAX_EXPANSION 4
#define PT_EXPANSION_SLACK (64ull << 20)
#define PT_MAX_INFLATION 16
#define PT_INFLATION_SLACK (64ull << 20)
#define PT_SNIFF_BYTES 512  // what pt_sniff needs to see (the tar magic is at 257)

typedef enum PtFormat {
    PT_FORMAT_NONE = 0,  // not a PyTorch file
    PT_FORMAT_ZIP,       // a zip archive (torch.save; checked for data.pkl when read)
    PT_FORMAT_LEGACY,    // the pickled magic number of torch's legacy format
    PT_FORMAT_TAR,       // a tar archive (PyTorch < 0.4)
} PtFormat;

// From the first bytes of a file (size of them given, up to PT_SNIFF_BYTES).
PtFormat pt_sniff(const uint8_t *head, size_t size);
// 1 when the bytes start as a pickle of protocol 2 to 5 does (PROTO) but
// not as torch.save's legacy format: pickle.dump's output, which no torch
// file is. Ask only of a file that is no safetensors file: a safetensors
// header length may start with the same two bytes.
int pt_is_bare_pickle(const uint8_t *head, size_t size);

// Reads the file at path; errors name what is wrong (not the path: the
// caller adds it, as weight_file_read does).
int pt_read(const char *path, SafeTensors *out, ErrorMessage *err);
// The same on a whole file held in memory; takes ownership of bytes
// (malloc'ed) on success and on failure.
int pt_parse(uint8_t *bytes, size_t size, SafeTensors *out, ErrorMessage *err);

#endif
