// A restricted pickle reader for PyTorch state dicts: the subset of the
// pickle machine that torch.save emits for a dict of tensors (protocol 2,
// and the data opcodes of protocols 3-5), turned into a tree of plain
// values. It never executes anything: the only globals it accepts are
//
//   collections.OrderedDict              (REDUCE with no arguments: a dict)
//   torch._utils._rebuild_tensor_v2      (REDUCE: a tensor view of a storage)
//   torch._utils._rebuild_parameter      (REDUCE: the tensor it wraps)
//   torch.{Float,Half,BFloat16,Double,Long,Int,Short,Char,Byte,Bool}Storage
//                                        (only inside a persistent id)
//
// and, for a whole pickled model (Ultralytics' checkpoints: torch.save of
// a dict holding a DetectionModel), the classes of the modules
// `torch.nn.modules.*` and `ultralytics.*`, `builtins.set` and
// `torch.Size`: a class is never called, only named: NEWOBJ with no
// arguments makes an opaque object (PT_OBJECT, its class named) and BUILD
// gives it its __dict__ (a dict); REDUCE of set on a list gives the list,
// of torch.Size on a tuple of ints the tuple (Ultralytics' released
// checkpoints keep the Detect head's last input shape, a torch.Size, in
// its __dict__). Every other global, every
// REDUCE of something else, BUILD on anything but such an object or a dict
// (an OrderedDict's `_metadata`, dropped), and every opcode outside the list
// in pt_pickle.c are refused with one line naming the opcode or the global
// and its byte offset. Persistent ids (BINPERSID) must
// be torch's storage tuples ('storage', type, key, location, numel[, None]).
// A tensor's shape, strides and storage offset are checked here against the
// storage's element count from its persistent id (sizes that overflow, a
// negative stride, a view past the storage's end).
//
// Why our own: no maintained C library reads torch's pickle, and a general
// pickle VM (CPython's) executes arbitrary code by design; the format is
// specified by CPython's Lib/pickletools.py and torch/serialization.py.
#ifndef LTC_WEIGHTS_PT_PICKLE_H
#define LTC_WEIGHTS_PT_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "nn/safetensors.h"
#include "util/error.h"

#define PT_MAX_RANK SAFETENSORS_MAX_RANK
#define PT_MAX_STORAGE_KEY 64  // torch's keys are decimal numbers ("0", "1", ...)

typedef enum PtKind {
    PT_NONE = 0,
    PT_BOOL,
    PT_INT,
    PT_FLOAT,
    PT_STRING,   // str (UTF-8 as stored) or a Python 2 str
    PT_BYTES,
    PT_TUPLE,
    PT_LIST,
    PT_DICT,     // dict or OrderedDict: items are key, value, key, value, ...
    PT_GLOBAL,   // one of the allowed globals (PtGlobal)
    PT_STORAGE,  // a persistent id of a storage
    PT_TENSOR,
    PT_OBJECT,   // an instance of an allowed class (a module): its class and its __dict__
} PtKind;

typedef enum PtGlobal {
    PT_GLOBAL_ORDERED_DICT = 0,
    PT_GLOBAL_REBUILD_TENSOR,
    PT_GLOBAL_REBUILD_PARAMETER,
    PT_GLOBAL_STORAGE_TYPE,  // dtype says which
    PT_GLOBAL_CLASS,         // a module's class (name says which): NEWOBJ only
    PT_GLOBAL_SET,           // builtins.set
    PT_GLOBAL_SIZE,          // torch.Size
} PtGlobal;

typedef struct PtValue PtValue;

typedef struct PtStorage {
    SafeDType dtype;
    char key[PT_MAX_STORAGE_KEY];  // [A-Za-z0-9_] only
    int64_t numel;                 // elements of dtype
} PtStorage;

typedef struct PtTensor {
    const PtValue *storage;  // kind PT_STORAGE
    int64_t offset;          // in elements
    int rank;
    int64_t shape[PT_MAX_RANK];
    int64_t stride[PT_MAX_RANK];  // in elements, >= 0
    int64_t elements;             // product of shape
} PtTensor;

struct PtValue {
    PtKind kind;
    union {
        int64_t integer;  // PT_BOOL (0/1), PT_INT
        double real;      // PT_FLOAT
        struct {
            char *bytes;  // NUL-terminated copy (may hold NULs before it)
            size_t length;
        } string;         // PT_STRING, PT_BYTES
        struct {
            PtValue **items;
            size_t count, capacity;
        } items;          // PT_TUPLE, PT_LIST, PT_DICT (count = 2 x entries)
        struct {
            PtGlobal which;
            SafeDType dtype;  // PT_GLOBAL_STORAGE_TYPE
            char *name;       // PT_GLOBAL_CLASS: "module.name"
        } global;
        struct {
            const PtValue *cls;  // PT_GLOBAL_CLASS
            const PtValue *state;  // its __dict__ (PT_DICT) once built, else NULL
        } object;
        PtStorage *storage;  // out of line: a value stays 32 bytes (a pickle makes
        PtTensor *tensor;    // one per opcode, tensors and storages are rare)
    } as;
};

// What one pickle may hold: values, their containers' item arrays, strings,
// stack, memo and marks, counted in bytes as allocated. A NONE opcode is one
// byte and a value 32, so without a cap a small deflated data.pkl of
// repeated opcodes reaches gigabytes. Real files need far less (measured
// with pt_pickle_load's PtPickle.memory on pickles torch.save wrote, each
// tensor a view of a 1-element storage so the pickle is the real one):
// torchvision-layout ResNet-50 (timm, 320 tensors, data.pkl 33 kB) 0.45 MB;
// timm's ViT-g/14 state dict (566 tensors, data.pkl 59 kB) 0.83 MB; a
// Lightning checkpoint of it with student, teacher and AdamW state (2830
// tensors, data.pkl 224 kB) 3.1 MB, ~14 bytes per pickle byte. The cap is
// ~20x the last (and PT_MAX_PICKLE_BYTES, pt_reader.h, ~70x its data.pkl).
#define PT_MAX_PICKLE_MEMORY (64ull << 20)
#define PT_VALUE_BLOCK 1024

// Every value of one pickle (and the root), freed together.
typedef struct PtPickle {
    PtValue *root;
    PtValue **blocks;  // all values, PT_VALUE_BLOCK to a block (pt_pickle_value)
    size_t block_count, block_capacity;
    size_t value_count;
    size_t memory;     // bytes the machine allocated (see PT_MAX_PICKLE_MEMORY)
} PtPickle;

// Runs the pickle starting at bytes[0] up to its STOP. *consumed = bytes
// used (several pickles may follow each other, as in torch's legacy
// format). Errors name the byte offset (plus `base_offset`, where the
// pickle starts in its file) and the opcode or global refused.
int pt_pickle_load(const uint8_t *bytes, size_t size, size_t base_offset, PtPickle *out,
                   size_t *consumed, ErrorMessage *err);
void pt_pickle_free(PtPickle *pickle);
// The index-th value made (index < value_count), in the order made.
const PtValue *pt_pickle_value(const PtPickle *pickle, size_t index);

// The value under string key `key` of a dict, or NULL.
const PtValue *pt_dict_get(const PtValue *dict, const char *key);
// A str from the file fit for a one-line message: printable ASCII ('?' for
// other bytes), at most PT_PRINTABLE_MAX of them, "..." when cut.
#define PT_PRINTABLE_MAX 60
#define PT_PRINTABLE_SIZE (PT_PRINTABLE_MAX + 8)
void pt_printable(const char *text, size_t length, char *out, size_t capacity);
// A str value shown in a message (pt_printable); "(not a str)" for others.
typedef struct PtShown {
    char text[PT_PRINTABLE_SIZE];
} PtShown;
PtShown pt_shown(const PtValue *value);
// "dict", "tensor", ... for messages.
const char *pt_kind_name(PtKind kind);

#endif
