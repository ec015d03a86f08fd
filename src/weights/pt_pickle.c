// The restricted pickle machine of PyTorch state dicts (see pt_pickle.h).
// Opcode semantics follow CPython's Lib/pickletools.py; everything is
// bounds-checked against the input, and memory is capped: every byte the
// machine allocates is counted against PT_MAX_PICKLE_MEMORY (pt_pickle.h).
#include "weights/pt_pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PT_MAX_GLOBAL_NAME 128  // module or name of a GLOBAL (torch's are < 40)

static const struct {
    uint8_t code;
    const char *name;
} OPCODE_NAMES[] = {
    {'(', "MARK"},          {'.', "STOP"},          {'0', "POP"},
    {'1', "POP_MARK"},      {'2', "DUP"},           {'F', "FLOAT"},
    {'I', "INT"},           {'J', "BININT"},        {'K', "BININT1"},
    {'L', "LONG"},          {'M', "BININT2"},       {'N', "NONE"},
    {'P', "PERSID"},        {'Q', "BINPERSID"},     {'R', "REDUCE"},
    {'S', "STRING"},        {'T', "BINSTRING"},     {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"},       {'X', "BINUNICODE"},    {'a', "APPEND"},
    {'b', "BUILD"},         {'c', "GLOBAL"},        {'d', "DICT"},
    {'}', "EMPTY_DICT"},    {'e', "APPENDS"},       {'g', "GET"},
    {'h', "BINGET"},        {'i', "INST"},          {'j', "LONG_BINGET"},
    {'l', "LIST"},          {']', "EMPTY_LIST"},    {'o', "OBJ"},
    {'p', "PUT"},           {'q', "BINPUT"},        {'r', "LONG_BINPUT"},
    {'s', "SETITEM"},       {'t', "TUPLE"},         {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"},      {'G', "BINFLOAT"},      {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"}, {0x80, "PROTO"},       {0x81, "NEWOBJ"},
    {0x82, "EXT1"},         {0x83, "EXT2"},         {0x84, "EXT4"},
    {0x85, "TUPLE1"},       {0x86, "TUPLE2"},       {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"},      {0x89, "NEWFALSE"},     {0x8a, "LONG1"},
    {0x8b, "LONG4"},        {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"},    {0x8f, "EMPTY_SET"},    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},    {0x92, "NEWOBJ_EX"},    {0x93, "STACK_GLOBAL"},
    {0x94, "MEMOIZE"},      {0x95, "FRAME"},        {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"},  {0x98, "READONLY_BUFFER"},
};

static const char *opcode_name(uint8_t code) {
    for (size_t i = 0; i < sizeof OPCODE_NAMES / sizeof OPCODE_NAMES[0]; i++)
        if (OPCODE_NAMES[i].code == code) return OPCODE_NAMES[i].name;
    return "unknown";
}

static const struct {
    const char *module, *name;
    PtGlobal which;
    SafeDType dtype;
} ALLOWED_GLOBALS[] = {
    {"collections", "OrderedDict", PT_GLOBAL_ORDERED_DICT, SAFE_F32},
    {"torch._utils", "_rebuild_tensor_v2", PT_GLOBAL_REBUILD_TENSOR, SAFE_F32},
    {"torch._utils", "_rebuild_parameter", PT_GLOBAL_REBUILD_PARAMETER, SAFE_F32},
    {"torch", "Size", PT_GLOBAL_SIZE, SAFE_F32},
    {"torch", "FloatStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_F32},
    {"torch", "HalfStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_F16},
    {"torch", "BFloat16Storage", PT_GLOBAL_STORAGE_TYPE, SAFE_BF16},
    {"torch", "DoubleStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_F64},
    {"torch", "LongStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_I64},
    {"torch", "IntStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_I32},
    {"torch", "ShortStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_I16},
    {"torch", "CharStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_I8},
    {"torch", "ByteStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_U8},
    {"torch", "BoolStorage", PT_GLOBAL_STORAGE_TYPE, SAFE_BOOL},
};

const char *pt_kind_name(PtKind kind) {
    static const char *const names[] = {"None",  "bool", "int",  "float",  "str",     "bytes",
                                        "tuple", "list", "dict", "global", "storage", "tensor",
                                        "object"};
    return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

// ---- the machine's state -------------------------------------------------------------------

typedef struct Machine {
    const uint8_t *bytes;
    size_t size, pos;
    size_t base_offset;
    size_t op_offset;  // where the current opcode starts (for messages)
    uint8_t op;
    PtPickle *pickle;
    PtValue **stack;
    size_t depth, stack_capacity;
    size_t *marks;  // stack depths at MARK
    size_t mark_count, mark_capacity;
    PtValue **memo;
    size_t memo_capacity;
    size_t memo_count;  // entries set (MEMOIZE stores at this index)
    ErrorMessage *err;
} Machine;

static int fail(Machine *m, const char *format, const char *detail) {
    char text[400];
    snprintf(text, sizeof text, format, detail);
    return error_set(m->err, "pickle offset %zu, %s (0x%02x): %s", m->base_offset + m->op_offset,
                     opcode_name(m->op), m->op, text);
}

// Counts `bytes` more against PT_MAX_PICKLE_MEMORY; fails past it.
static int reserve(Machine *m, size_t bytes) {
    if (bytes > PT_MAX_PICKLE_MEMORY - m->pickle->memory) {
        char text[200];
        snprintf(text, sizeof text,
                 "the pickle needs more than %llu MiB of values (a ViT-g training checkpoint "
                 "needs ~3): not a state dict",
                 PT_MAX_PICKLE_MEMORY >> 20);
        return fail(m, "%s", text);
    }
    m->pickle->memory += bytes;
    return 0;
}

// Grows *array (of `item` bytes) so that index `needed` - 1 fits; fails
// (message set) past the memory cap or out of memory.
static int grow(Machine *m, void **array, size_t *capacity, size_t needed, size_t item) {
    if (needed <= *capacity) return 0;
    size_t grown = *capacity ? *capacity : 16;
    while (grown < needed) grown *= 2;
    if (reserve(m, (grown - *capacity) * item)) return -1;
    void *resized = realloc(*array, grown * item);
    if (!resized) return fail(m, "%s", "out of memory");
    memset((char *)resized + *capacity * item, 0, (grown - *capacity) * item);
    *array = resized;
    *capacity = grown;
    return 0;
}

// A zeroed allocation counted against the cap (message set on failure).
static void *counted_calloc(Machine *m, size_t bytes) {
    if (reserve(m, bytes)) return NULL;
    void *memory = calloc(1, bytes);
    if (!memory) fail(m, "%s", "out of memory");
    return memory;
}

// A new value (message set on failure). Values live in blocks so that
// each costs its 32 bytes, not a malloc of its own.
static PtValue *new_value(Machine *m, PtKind kind) {
    PtPickle *p = m->pickle;
    const size_t slot = p->value_count % PT_VALUE_BLOCK;
    if (slot == 0) {
        if (grow(m, (void **)&p->blocks, &p->block_capacity, p->block_count + 1,
                 sizeof *p->blocks))
            return NULL;
        p->blocks[p->block_count] = counted_calloc(m, PT_VALUE_BLOCK * sizeof(PtValue));
        if (!p->blocks[p->block_count]) return NULL;
        p->block_count++;
    }
    PtValue *value = &p->blocks[p->value_count / PT_VALUE_BLOCK][slot];
    value->kind = kind;
    p->value_count++;
    return value;
}

// Pushes value; NULL (a failed new_value, message set) passes the failure on.
static int push(Machine *m, PtValue *value) {
    if (!value) return -1;
    if (grow(m, (void **)&m->stack, &m->stack_capacity, m->depth + 1, sizeof *m->stack))
        return -1;
    m->stack[m->depth++] = value;
    return 0;
}

// Values above the last MARK: the mark's depth, or (size_t)-1 when no mark.
static size_t mark_depth(const Machine *m) {
    return m->mark_count ? m->marks[m->mark_count - 1] : (size_t)-1;
}

static PtValue *pop(Machine *m) {
    if (m->depth == 0 || m->depth == mark_depth(m)) {
        fail(m, "%s", "the stack is empty (or at a MARK)");
        return NULL;
    }
    return m->stack[--m->depth];
}

static PtValue *top(Machine *m) {
    if (m->depth == 0 || m->depth == mark_depth(m)) {
        fail(m, "%s", "the stack is empty (or at a MARK)");
        return NULL;
    }
    return m->stack[m->depth - 1];
}

static int append_item(Machine *m, PtValue *container, PtValue *item) {
    if (grow(m, (void **)&container->as.items.items, &container->as.items.capacity,
             container->as.items.count + 1, sizeof(PtValue *)))
        return -1;
    container->as.items.items[container->as.items.count++] = item;
    return 0;
}

// ---- reading operands ------------------------------------------------------------------------

static int need(Machine *m, size_t count) {
    if (count > m->size - m->pos) return fail(m, "%s", "the pickle ends inside an operand");
    return 0;
}

static uint64_t read_le(Machine *m, int count) {
    uint64_t value = 0;
    for (int i = 0; i < count; i++) value |= (uint64_t)m->bytes[m->pos + i] << (8 * i);
    m->pos += (size_t)count;
    return value;
}

// A copy of `length` bytes at the cursor as a PT_STRING or PT_BYTES value.
static int push_string(Machine *m, PtKind kind, uint64_t length) {
    if (length > m->size - m->pos) return fail(m, "%s", "a string runs past the pickle's end");
    PtValue *value = new_value(m, kind);
    char *copy = value ? counted_calloc(m, (size_t)length + 1) : NULL;
    if (!copy) return -1;
    memcpy(copy, m->bytes + m->pos, (size_t)length);
    copy[length] = '\0';
    m->pos += (size_t)length;
    value->as.string.bytes = copy;
    value->as.string.length = (size_t)length;
    return push(m, value);
}

static int push_int(Machine *m, PtKind kind, int64_t integer) {
    PtValue *value = new_value(m, kind);
    if (value) value->as.integer = integer;
    return push(m, value);
}

// LONG1: a little-endian two's complement integer of n <= 8 bytes.
static int push_long1(Machine *m) {
    if (need(m, 1)) return -1;
    const int count = m->bytes[m->pos++];
    if (count > 8) return fail(m, "%s", "an integer wider than 64 bits");
    if (need(m, (size_t)count)) return -1;
    uint64_t bits = read_le(m, count);
    if (count > 0 && count < 8 && (bits >> (8 * count - 1)) & 1) bits |= ~0ull << (8 * count);
    return push_int(m, PT_INT, (int64_t)bits);
}

static int push_float(Machine *m) {
    if (need(m, 8)) return -1;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++) bits = bits << 8 | m->bytes[m->pos++];  // big-endian
    PtValue *value = new_value(m, PT_FLOAT);
    if (value) memcpy(&value->as.real, &bits, sizeof bits);
    return push(m, value);
}

// ---- memo ------------------------------------------------------------------------------------

static int memo_put(Machine *m, uint64_t index) {
    PtValue *value = top(m);
    if (!value) return -1;
    if (index > m->size) return fail(m, "%s", "memo index larger than the pickle");
    const size_t slot = (size_t)index;
    if (grow(m, (void **)&m->memo, &m->memo_capacity, slot + 1, sizeof *m->memo)) return -1;
    if (!m->memo[slot]) m->memo_count++;
    m->memo[slot] = value;
    return 0;
}

static int memo_get(Machine *m, uint64_t index) {
    if (index >= m->memo_capacity || !m->memo[index])
        return fail(m, "%s", "memo index never stored");
    return push(m, m->memo[index]);
}

// ---- containers ------------------------------------------------------------------------------

// Pops everything above the last MARK into a new `kind` value.
static int collect_to_mark(Machine *m, PtKind kind) {
    if (m->mark_count == 0) return fail(m, "%s", "no MARK before it");
    const size_t start = m->marks[--m->mark_count];
    PtValue *value = new_value(m, kind);
    if (!value) return -1;
    for (size_t i = start; i < m->depth; i++)
        if (append_item(m, value, m->stack[i])) return -1;
    m->depth = start;
    return push(m, value);
}

static int push_tuple_of(Machine *m, int count) {
    if (m->depth < (size_t)count || (m->mark_count && m->depth - (size_t)count < mark_depth(m)))
        return fail(m, "%s", "too few values on the stack");
    PtValue *value = new_value(m, PT_TUPLE);
    if (!value) return -1;
    for (size_t i = m->depth - (size_t)count; i < m->depth; i++)
        if (append_item(m, value, m->stack[i])) return -1;
    m->depth -= (size_t)count;
    return push(m, value);
}

// APPENDS / SETITEMS: the values above the mark go into the container below it.
static int extend_from_mark(Machine *m, PtKind expected) {
    if (m->mark_count == 0) return fail(m, "%s", "no MARK before it");
    const size_t start = m->marks[--m->mark_count];
    if (start == 0 || m->stack[start - 1]->kind != expected)
        return fail(m, "target is not a %s", pt_kind_name(expected));
    if (expected == PT_DICT && (m->depth - start) % 2 != 0)
        return fail(m, "%s", "a key without a value");
    PtValue *container = m->stack[start - 1];
    for (size_t i = start; i < m->depth; i++)
        if (append_item(m, container, m->stack[i])) return -1;
    m->depth = start;
    return 0;
}

static int append_one(Machine *m, PtKind expected, int count) {
    if (m->depth < (size_t)count + 1 ||
        (m->mark_count && m->depth - (size_t)count - 1 < mark_depth(m)))
        return fail(m, "%s", "too few values on the stack");
    PtValue *container = m->stack[m->depth - (size_t)count - 1];
    if (container->kind != expected) return fail(m, "target is not a %s", pt_kind_name(expected));
    for (size_t i = m->depth - (size_t)count; i < m->depth; i++)
        if (append_item(m, container, m->stack[i])) return -1;
    m->depth -= (size_t)count;
    return 0;
}

// ---- globals and persistent ids --------------------------------------------------------------

void pt_printable(const char *text, size_t length, char *out, size_t capacity) {
    size_t n = 0;
    for (size_t i = 0; i < length && n + 4 < capacity && i < PT_PRINTABLE_MAX; i++)
        out[n++] = (text[i] >= 0x20 && text[i] < 0x7f) ? text[i] : '?';
    if (length > PT_PRINTABLE_MAX && n + 4 < capacity) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

PtShown pt_shown(const PtValue *value) {
    PtShown out = {"(not a str)"};
    if (value->kind == PT_STRING)
        pt_printable(value->as.string.bytes, value->as.string.length, out.text, sizeof out.text);
    return out;
}

// The modules whose classes a whole pickled model may name (never call):
// torchvision's transforms are a classification model's (Ultralytics keeps
// its inference transforms in the checkpoint a -cls fine-tuning writes);
// torchvision's models and ops a torchvision model's (LightlyTrain's
// torch_model export, and ours: weights/torch_module_export.h).
#define TRANSFORMS_MODULE "torchvision.transforms."
static const char *const CLASS_MODULES[] = {"torch.nn.modules.", "ultralytics.", TRANSFORMS_MODULE,
                                            "torchvision.models.", "torchvision.ops."};

static int has_prefix(const char *text, size_t length, const char *prefix) {
    return length > strlen(prefix) && memcmp(text, prefix, strlen(prefix)) == 0;
}

// A class of CLASS_MODULES or builtins.set as a PT_GLOBAL; 1 when it is
// neither (nothing pushed).
static int push_class(Machine *m, const char *module, size_t module_length, const char *name,
                      size_t name_length) {
    const int is_set = name_length == 3 && memcmp(name, "set", 3) == 0 &&
                       ((module_length == 8 && memcmp(module, "builtins", 8) == 0) ||
                        (module_length == 11 && memcmp(module, "__builtin__", 11) == 0));
    int allowed = is_set;
    for (size_t i = 0; i < sizeof CLASS_MODULES / sizeof *CLASS_MODULES; i++)
        allowed |= has_prefix(module, module_length, CLASS_MODULES[i]);
    if (!allowed || memchr(module, 0, module_length) || memchr(name, 0, name_length)) return 1;
    PtValue *value = new_value(m, PT_GLOBAL);
    char *full = value ? counted_calloc(m, module_length + name_length + 2) : NULL;
    if (!full) return -1;
    memcpy(full, module, module_length);
    full[module_length] = '.';
    memcpy(full + module_length + 1, name, name_length);
    value->as.global.which = is_set ? PT_GLOBAL_SET : PT_GLOBAL_CLASS;
    value->as.global.name = full;
    return push(m, value);
}

static int push_global(Machine *m, const char *module, size_t module_length, const char *name,
                       size_t name_length) {
    for (size_t i = 0; i < sizeof ALLOWED_GLOBALS / sizeof ALLOWED_GLOBALS[0]; i++) {
        if (strlen(ALLOWED_GLOBALS[i].module) != module_length ||
            strlen(ALLOWED_GLOBALS[i].name) != name_length ||
            memcmp(ALLOWED_GLOBALS[i].module, module, module_length) != 0 ||
            memcmp(ALLOWED_GLOBALS[i].name, name, name_length) != 0)
            continue;
        PtValue *value = new_value(m, PT_GLOBAL);
        if (value) {
            value->as.global.which = ALLOWED_GLOBALS[i].which;
            value->as.global.dtype = ALLOWED_GLOBALS[i].dtype;
        }
        return push(m, value);
    }
    const int pushed = push_class(m, module, module_length, name, name_length);
    if (pushed <= 0) return pushed;
    char shown_module[PT_PRINTABLE_SIZE], shown_name[PT_PRINTABLE_SIZE], text[200];
    pt_printable(module, module_length, shown_module, sizeof shown_module);
    pt_printable(name, name_length, shown_name, sizeof shown_name);
    snprintf(text, sizeof text, "%s.%s", shown_module, shown_name);
    return fail(m,
                "global %s is not allowed: a state dict holds only OrderedDicts, tensors "
                "(torch._utils._rebuild_tensor_v2) and torch.*Storage, a whole pickled model "
                "only modules of torch.nn, ultralytics and torchvision (save "
                "model.state_dict() instead)",
                text);
}

// GLOBAL: "module\nname\n".
static int read_line(Machine *m, const char **text, size_t *length) {
    const size_t limit = m->size - m->pos < PT_MAX_GLOBAL_NAME ? m->size - m->pos
                                                                : PT_MAX_GLOBAL_NAME;
    const uint8_t *newline = memchr(m->bytes + m->pos, '\n', limit);
    if (!newline) return fail(m, "%s", "a global's name is unterminated or too long");
    *text = (const char *)m->bytes + m->pos;
    *length = (size_t)(newline - (m->bytes + m->pos));
    m->pos += *length + 1;
    return 0;
}

static int op_global(Machine *m) {
    const char *module, *name;
    size_t module_length, name_length;
    if (read_line(m, &module, &module_length) || read_line(m, &name, &name_length)) return -1;
    return push_global(m, module, module_length, name, name_length);
}

static int op_stack_global(Machine *m) {
    PtValue *name = pop(m);
    PtValue *module = name ? pop(m) : NULL;
    if (!module) return -1;
    if (module->kind != PT_STRING || name->kind != PT_STRING)
        return fail(m, "%s", "module and name must be strings");
    return push_global(m, module->as.string.bytes, module->as.string.length,
                       name->as.string.bytes, name->as.string.length);
}

static int is_storage_key(const PtValue *value) {
    if (value->kind != PT_STRING || value->as.string.length == 0 ||
        value->as.string.length >= PT_MAX_STORAGE_KEY)
        return 0;
    for (size_t i = 0; i < value->as.string.length; i++) {
        const char c = value->as.string.bytes[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '_'))
            return 0;
    }
    return 1;
}

// BINPERSID: ('storage', <torch.*Storage>, key, location, numel) from the zip
// format, with a sixth item None (no view) in the legacy format.
static int op_persistent_id(Machine *m) {
    PtValue *pid = pop(m);
    if (!pid) return -1;
    PtValue **items = pid->as.items.items;
    const size_t count = pid->kind == PT_TUPLE ? pid->as.items.count : 0;
    if (count != 5 && count != 6)
        return fail(m, "%s", "a persistent id that is not a 5- or 6-tuple ('storage', ...)");
    if (items[0]->kind != PT_STRING || strcmp(items[0]->as.string.bytes, "storage") != 0)
        return fail(m, "%s", "a persistent id that is not a storage");
    if (items[1]->kind != PT_GLOBAL || items[1]->as.global.which != PT_GLOBAL_STORAGE_TYPE)
        return fail(m, "%s", "a storage whose type is not a torch.*Storage");
    if (!is_storage_key(items[2]))
        return fail(m, "%s", "a storage key that is not a short [A-Za-z0-9_] name");
    if (items[3]->kind != PT_STRING) return fail(m, "%s", "a storage location that is not a str");
    if (items[4]->kind != PT_INT || items[4]->as.integer < 0)
        return fail(m, "%s", "a storage size that is not a non-negative int");
    if (count == 6 && items[5]->kind != PT_NONE)
        return fail(m, "%s", "a storage view (legacy format before PyTorch 1.0)");
    const SafeDType dtype = items[1]->as.global.dtype;
    if (items[4]->as.integer > INT64_MAX / (int64_t)safe_dtype_size(dtype))
        return fail(m, "%s", "a storage size that overflows");
    PtValue *storage = new_value(m, PT_STORAGE);
    PtStorage *s = storage ? counted_calloc(m, sizeof *s) : NULL;
    if (!s) return -1;
    storage->as.storage = s;
    s->dtype = dtype;
    memcpy(s->key, items[2]->as.string.bytes, items[2]->as.string.length + 1);
    s->numel = items[4]->as.integer;
    return push(m, storage);
}

// ---- tensors ---------------------------------------------------------------------------------

static int int_tuple(const PtValue *value, int64_t *out, int *rank) {
    if (value->kind != PT_TUPLE || value->as.items.count > PT_MAX_RANK) return -1;
    for (size_t i = 0; i < value->as.items.count; i++) {
        if (value->as.items.items[i]->kind != PT_INT) return -1;
        out[i] = value->as.items.items[i]->as.integer;
    }
    *rank = (int)value->as.items.count;
    return 0;
}

static int is_empty_dict(const PtValue *value) {
    return value->kind == PT_DICT && value->as.items.count == 0;
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
// backward_hooks[, metadata]): shape and strides checked, and the view's
// last element inside the storage.
static int rebuild_tensor(Machine *m, const PtValue *args) {
    const size_t count = args->as.items.count;
    PtValue **a = args->as.items.items;
    if (count != 6 && count != 7)
        return fail(m, "%s", "_rebuild_tensor_v2 with other than 6 or 7 arguments");
    if (a[0]->kind != PT_STORAGE) return fail(m, "%s", "a tensor whose storage is not one");
    if (a[1]->kind != PT_INT || a[1]->as.integer < 0)
        return fail(m, "%s", "a tensor whose storage offset is not a non-negative int");
    PtTensor t = {.storage = a[0], .offset = a[1]->as.integer};
    int stride_rank = -1;
    if (int_tuple(a[2], t.shape, &t.rank) || int_tuple(a[3], t.stride, &stride_rank) ||
        stride_rank != t.rank)
        return fail(m, "%s", "a tensor whose size and stride are not int tuples of one rank <= 8");
    if (a[4]->kind != PT_BOOL) return fail(m, "%s", "requires_grad is not a bool");
    if (!is_empty_dict(a[5]) || (count == 7 && !is_empty_dict(a[6]) && a[6]->kind != PT_NONE))
        return fail(m, "%s", "a tensor with backward hooks or metadata (conjugate/negative bits)");
    // Elements, and the furthest element the view reaches (offset + sum
    // (size - 1) * stride), without overflow.
    int64_t elements = 1, last = t.offset;
    for (int d = 0; d < t.rank; d++) {
        if (t.shape[d] < 0 || t.stride[d] < 0)
            return fail(m, "%s", "a negative size or stride");
        if (t.shape[d] == 0) elements = 0;
        else if (elements > INT64_MAX / t.shape[d])
            return fail(m, "%s", "a tensor size that overflows");
        else elements *= t.shape[d];
    }
    const PtStorage *storage = t.storage->as.storage;
    if (elements > 0) {
        for (int d = 0; d < t.rank; d++) {
            int64_t reach;
            if (__builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &reach) ||
                __builtin_add_overflow(last, reach, &last))
                return fail(m, "%s", "a tensor view that overflows");
        }
        if (last >= storage->numel) {
            char text[200];
            snprintf(text, sizeof text,
                     "a tensor view reaching element %lld of storage \"%s\", which holds %lld",
                     (long long)last, storage->key, (long long)storage->numel);
            return fail(m, "%s", text);
        }
    }
    t.elements = elements;
    PtValue *value = new_value(m, PT_TENSOR);
    PtTensor *copy = value ? counted_calloc(m, sizeof *copy) : NULL;
    if (!copy) return -1;
    *copy = t;
    value->as.tensor = copy;
    return push(m, value);
}

// (tuple of ints,): torch.Size's one argument.
static int is_int_tuple_argument(const PtValue *args) {
    if (args->as.items.count != 1 || args->as.items.items[0]->kind != PT_TUPLE) return 0;
    const PtValue *tuple = args->as.items.items[0];
    for (size_t i = 0; i < tuple->as.items.count; i++)
        if (tuple->as.items.items[i]->kind != PT_INT) return 0;
    return 1;
}

// An enum member of torchvision's transforms, as pickled: its class REDUCEd
// on (value,), a str or an int (InterpolationMode("bilinear")).
static int is_transforms_enum(const PtValue *callable, const PtValue *args) {
    if (callable->kind != PT_GLOBAL || callable->as.global.which != PT_GLOBAL_CLASS ||
        strncmp(callable->as.global.name, TRANSFORMS_MODULE, strlen(TRANSFORMS_MODULE)) != 0 ||
        args->kind != PT_TUPLE || args->as.items.count != 1)
        return 0;
    const PtKind kind = args->as.items.items[0]->kind;
    return kind == PT_STRING || kind == PT_INT;
}

static int op_reduce(Machine *m) {
    PtValue *args = pop(m);
    PtValue *callable = args ? pop(m) : NULL;
    if (!callable) return -1;
    if (is_transforms_enum(callable, args)) {  // an opaque object of the enum's class, not called
        PtValue *object = new_value(m, PT_OBJECT);
        if (object) object->as.object.cls = callable;
        return push(m, object);
    }
    if (callable->kind != PT_GLOBAL || callable->as.global.which == PT_GLOBAL_STORAGE_TYPE ||
        callable->as.global.which == PT_GLOBAL_CLASS)
        return fail(m, "REDUCE of a %s: only OrderedDict, set, torch.Size, _rebuild_tensor_v2, "
                       "_rebuild_parameter and torchvision's transforms enums may be called",
                    callable->kind != PT_GLOBAL ? pt_kind_name(callable->kind)
                    : callable->as.global.which == PT_GLOBAL_CLASS ? callable->as.global.name
                                                                   : "storage type");
    if (args->kind != PT_TUPLE) return fail(m, "%s", "arguments that are not a tuple");
    switch (callable->as.global.which) {
        case PT_GLOBAL_ORDERED_DICT:
            if (args->as.items.count != 0)
                return fail(m, "%s", "OrderedDict called with arguments");
            return push(m, new_value(m, PT_DICT));
        case PT_GLOBAL_REBUILD_TENSOR:
            return rebuild_tensor(m, args);
        case PT_GLOBAL_REBUILD_PARAMETER:
            // (tensor, requires_grad, backward_hooks): the tensor is the value.
            if (args->as.items.count != 3 || args->as.items.items[0]->kind != PT_TENSOR ||
                args->as.items.items[1]->kind != PT_BOOL || !is_empty_dict(args->as.items.items[2]))
                return fail(m, "%s", "_rebuild_parameter with other than (tensor, bool, {})");
            return push(m, args->as.items.items[0]);
        case PT_GLOBAL_SET:  // set(list): the list stands for it
            if (args->as.items.count != 1 || args->as.items.items[0]->kind != PT_LIST)
                return fail(m, "%s", "set called with other than one list");
            return push(m, args->as.items.items[0]);
        case PT_GLOBAL_SIZE:  // torch.Size(tuple of ints): the tuple stands for it
            if (!is_int_tuple_argument(args))
                return fail(m, "%s", "torch.Size called with other than one tuple of ints");
            return push(m, args->as.items.items[0]);
        case PT_GLOBAL_STORAGE_TYPE:
        case PT_GLOBAL_CLASS:
            break;
    }
    return fail(m, "%s", "unreachable");
}

// NEWOBJ: cls.__new__(cls) of a module's class, no arguments: an opaque object.
static int op_newobj(Machine *m) {
    PtValue *args = pop(m);
    PtValue *cls = args ? pop(m) : NULL;
    if (!cls) return -1;
    if (cls->kind != PT_GLOBAL || cls->as.global.which != PT_GLOBAL_CLASS)
        return fail(m, "NEWOBJ of a %s: only a module's class", pt_kind_name(cls->kind));
    if (args->kind != PT_TUPLE || args->as.items.count != 0)
        return fail(m, "%s", "NEWOBJ with arguments");
    PtValue *object = new_value(m, PT_OBJECT);
    if (object) object->as.object.cls = cls;
    return push(m, object);
}

// BUILD sets an object's state; a state dict's only one is the `_metadata`
// of its OrderedDicts (module versions), which is dropped.
static int op_build(Machine *m) {
    PtValue *state = pop(m);
    PtValue *target = state ? top(m) : NULL;
    if (!target) return -1;
    if (target->kind == PT_OBJECT) {
        if (state->kind != PT_DICT || target->as.object.state)
            return fail(m, "%s", "BUILD of an object with other than one dict (its __dict__)");
        target->as.object.state = state;
        return 0;
    }
    if (target->kind != PT_DICT)
        return fail(m, "BUILD on a %s (only an OrderedDict's _metadata or a module's __dict__ "
                       "is accepted)",
                    pt_kind_name(target->kind));
    return 0;
}

// ---- the loop --------------------------------------------------------------------------------

static int step(Machine *m, int *stopped) {
    m->op_offset = m->pos;
    m->op = m->bytes[m->pos++];
    switch (m->op) {
        case 0x80:  // PROTO
            if (need(m, 1)) return -1;
            if (m->bytes[m->pos] > 5) return fail(m, "%s", "protocol above 5");
            m->pos++;
            return 0;
        case 0x95:  // FRAME: a length hint only
            if (need(m, 8)) return -1;
            m->pos += 8;
            return 0;
        case '.': *stopped = 1; return 0;
        case '(':
            if (grow(m, (void **)&m->marks, &m->mark_capacity, m->mark_count + 1,
                     sizeof *m->marks))
                return -1;
            m->marks[m->mark_count++] = m->depth;
            return 0;
        case '0': return pop(m) ? 0 : -1;
        case '1':
            if (m->mark_count == 0) return fail(m, "%s", "no MARK before it");
            m->depth = m->marks[--m->mark_count];
            return 0;
        case '2': { PtValue *value = top(m); return value ? push(m, value) : -1; }
        case 'N': return push(m, new_value(m, PT_NONE));
        case 0x88: return push_int(m, PT_BOOL, 1);
        case 0x89: return push_int(m, PT_BOOL, 0);
        case 'K': return need(m, 1) ? -1 : push_int(m, PT_INT, (int64_t)read_le(m, 1));
        case 'M': return need(m, 2) ? -1 : push_int(m, PT_INT, (int64_t)read_le(m, 2));
        case 'J': return need(m, 4) ? -1 : push_int(m, PT_INT, (int32_t)(uint32_t)read_le(m, 4));
        case 0x8a: return push_long1(m);
        case 'G': return push_float(m);
        case 'X': case 'T': return need(m, 4) ? -1 : push_string(m, PT_STRING, read_le(m, 4));
        case 0x8c: case 'U': return need(m, 1) ? -1 : push_string(m, PT_STRING, read_le(m, 1));
        case 0x8d: return need(m, 8) ? -1 : push_string(m, PT_STRING, read_le(m, 8));
        case 'B': return need(m, 4) ? -1 : push_string(m, PT_BYTES, read_le(m, 4));
        case 'C': return need(m, 1) ? -1 : push_string(m, PT_BYTES, read_le(m, 1));
        case 0x8e: return need(m, 8) ? -1 : push_string(m, PT_BYTES, read_le(m, 8));
        case ')': return push(m, new_value(m, PT_TUPLE));
        case ']': return push(m, new_value(m, PT_LIST));
        case '}': return push(m, new_value(m, PT_DICT));
        case 't': return collect_to_mark(m, PT_TUPLE);
        case 'l': return collect_to_mark(m, PT_LIST);
        case 'd': {
            if (m->mark_count && (m->depth - mark_depth(m)) % 2 != 0)
                return fail(m, "%s", "a key without a value");
            return collect_to_mark(m, PT_DICT);
        }
        case 0x85: return push_tuple_of(m, 1);
        case 0x86: return push_tuple_of(m, 2);
        case 0x87: return push_tuple_of(m, 3);
        case 'a': return append_one(m, PT_LIST, 1);
        case 'e': return extend_from_mark(m, PT_LIST);
        case 's': return append_one(m, PT_DICT, 2);
        case 'u': return extend_from_mark(m, PT_DICT);
        case 'q': return need(m, 1) ? -1 : memo_put(m, read_le(m, 1));
        case 'r': return need(m, 4) ? -1 : memo_put(m, read_le(m, 4));
        case 0x94: return memo_put(m, m->memo_count);
        case 'h': return need(m, 1) ? -1 : memo_get(m, read_le(m, 1));
        case 'j': return need(m, 4) ? -1 : memo_get(m, read_le(m, 4));
        case 'c': return op_global(m);
        case 0x93: return op_stack_global(m);
        case 'Q': return op_persistent_id(m);
        case 'R': return op_reduce(m);
        case 'b': return op_build(m);
        case 0x81: return op_newobj(m);
        default:
            return fail(m, "%s",
                        "opcode not allowed in a state dict or a pickled model (torch.save's "
                        "protocol 2 data opcodes, OrderedDict, tensors, storages and modules "
                        "only)");
    }
}

int pt_pickle_load(const uint8_t *bytes, size_t size, size_t base_offset, PtPickle *out,
                   size_t *consumed, ErrorMessage *err) {
    memset(out, 0, sizeof *out);
    Machine m = {.bytes = bytes, .size = size, .base_offset = base_offset, .pickle = out,
                 .err = err};
    int stopped = 0, status = 0;
    while (!stopped && status == 0) {
        if (m.pos >= m.size) {
            m.op_offset = m.pos;
            status = error_set(err, "pickle offset %zu: the pickle ends before its STOP",
                               base_offset + m.pos);
            break;
        }
        status = step(&m, &stopped);
    }
    if (status == 0) {
        out->root = pop(&m);
        if (!out->root) status = -1;
    }
    free(m.stack);
    free(m.marks);
    free(m.memo);
    if (status != 0) {
        pt_pickle_free(out);
        return -1;
    }
    *consumed = m.pos;
    return 0;
}

const PtValue *pt_pickle_value(const PtPickle *pickle, size_t index) {
    return &pickle->blocks[index / PT_VALUE_BLOCK][index % PT_VALUE_BLOCK];
}

void pt_pickle_free(PtPickle *pickle) {
    for (size_t i = 0; i < pickle->value_count; i++) {
        PtValue *value = (PtValue *)pt_pickle_value(pickle, i);
        if (value->kind == PT_STRING || value->kind == PT_BYTES) free(value->as.string.bytes);
        if (value->kind == PT_TUPLE || value->kind == PT_LIST || value->kind == PT_DICT)
            free(value->as.items.items);
        if (value->kind == PT_STORAGE) free(value->as.storage);
        if (value->kind == PT_TENSOR) free(value->as.tensor);
        if (value->kind == PT_GLOBAL) free(value->as.global.name);
    }
    for (size_t b = 0; b < pickle->block_count; b++) free(pickle->blocks[b]);
    free(pickle->blocks);
    memset(pickle, 0, sizeof *pickle);
}

const PtValue *pt_dict_get(const PtValue *dict, const char *key) {
    if (!dict || dict->kind != PT_DICT) return NULL;
    for (size_t i = 0; i + 1 < dict->as.items.count; i += 2) {
        const PtValue *k = dict->as.items.items[i];
        if (k->kind == PT_STRING && strcmp(k->as.string.bytes, key) == 0)
            return dict->as.items.items[i + 1];
    }
    return NULL;
}
