// The weight files' front door (weight_file.h): the sniff that tells the
// kinds apart and the read that sends each to its parser.
#include "weights/weight_file.h"

#include <string.h>
#include <unistd.h>

#include "util/file.h"
#include "weights/pt_reader.h"

_Static_assert(WEIGHT_FILE_SNIFF_BYTES >= PT_SNIFF_BYTES, "pt_sniff sees what it needs");

// The kind of a file of file_size bytes from its first size bytes: PyTorch's
// signatures (pt_sniff), else safetensors' u64 header length within the file
// followed by the JSON's '{'.
static WeightFileKind sniff_head(const uint8_t *head, size_t size, uint64_t file_size) {
    if (pt_sniff(head, size < PT_SNIFF_BYTES ? size : PT_SNIFF_BYTES) != PT_FORMAT_NONE)
        return WEIGHT_FILE_PYTORCH;
    uint64_t header = 0;
    for (int i = 0; i < 8 && (size_t)i < size; i++) header |= (uint64_t)head[i] << (8 * i);
    return size > 8 && head[8] == '{' && header <= file_size - 8 ? WEIGHT_FILE_SAFETENSORS
                                                                 : WEIGHT_FILE_UNKNOWN;
}

int weight_file_sniff(const char *path, uint8_t head[WEIGHT_FILE_SNIFF_BYTES], size_t *size,
                      WeightFileKind *kind, ErrorMessage *err) {
    off_t file_size = 0;
    const int fd = file_open_regular(path, &file_size, err);
    if (fd < 0) return -1;
    const ssize_t got = read(fd, head, WEIGHT_FILE_SNIFF_BYTES);
    close(fd);
    *size = got > 0 ? (size_t)got : 0;
    *kind = sniff_head(head, *size, (uint64_t)file_size);
    return 0;
}

// A file that is neither safetensors nor PyTorch, said in one line worded
// for what it is; 0 for one that may be a damaged safetensors file (a
// header length, then '{') or cannot be opened: the parser says why.
static int refuse_unknown(const char *path, ErrorMessage *err) {
    uint8_t head[WEIGHT_FILE_SNIFF_BYTES];
    size_t size = 0;
    WeightFileKind kind;
    ErrorMessage ignored;
    if (weight_file_sniff(path, head, &size, &kind, &ignored) != 0) return 0;
    if (size == 0)
        return error_set(err, "%s: an empty file (0 bytes), not weights (safetensors or "
                              "PyTorch)", path);
    if (size > 8 && head[8] == '{') return 0;
    if (pt_is_bare_pickle(head, size))
        return error_set(err, "%s: a bare pickle (pickle.dump), not a PyTorch file (torch.save "
                              "writes a zip archive): not read; save the weights with "
                              "torch.save(model.state_dict(), PATH) or as safetensors", path);
    return error_set(err, "%s: not weights: neither a safetensors file (a header length, then "
                          "'{') nor a PyTorch one (zip, legacy or tar signature)", path);
}

// weight_file_read of a file of a known kind.
static int read_kind(const char *path, WeightFileKind kind, SafeTensors *out, ErrorMessage *err) {
    memset(out, 0, sizeof *out);
    if (kind == WEIGHT_FILE_PYTORCH)
        return pt_read(path, out, err) ? error_prefix(err, "%s", path) : 0;
    if (kind == WEIGHT_FILE_UNKNOWN && refuse_unknown(path, err) != 0) return -1;
    return safetensors_read(path, out, err);  // names the path
}

// The kind of the file at path; a file that cannot be opened is left to the
// safetensors path, whose error names it.
static WeightFileKind kind_of(const char *path) {
    uint8_t head[WEIGHT_FILE_SNIFF_BYTES];
    size_t size;
    WeightFileKind kind;
    ErrorMessage ignored;
    return weight_file_sniff(path, head, &size, &kind, &ignored) ? WEIGHT_FILE_UNKNOWN : kind;
}

int weight_file_read(const char *path, SafeTensors *out, ErrorMessage *err) {
    return read_kind(path, kind_of(path), out, err);
}

int weight_file_read_weights_as(const char *path, WeightFileKind kind, SafeTensors *out,
                                ErrorMessage *err) {
    if (read_kind(path, kind, out, err)) return -1;
    safetensors_narrow_f64(out);
    return 0;
}

int weight_file_read_weights(const char *path, SafeTensors *out, ErrorMessage *err) {
    return weight_file_read_weights_as(path, kind_of(path), out, err);
}

int weight_file_load_backbone(const char *path, WeightFileKind kind, StateDictBackboneLoader load,
                              void *context, char *prefix, size_t size, ErrorMessage *err) {
    SafeTensors file;
    prefix[0] = '\0';
    if (weight_file_read_weights_as(path, kind, &file, err)) return -1;  // names the path
    const int found = state_dict_backbone_prefix(&file, prefix, size, err);
    const int status = found < 0 ? -1 : load(context, &file, prefix, found == 0, err);
    if (status != 0 && found == 0 && prefix[0]) error_prefix(err, "under \"%s\"", prefix);
    safetensors_free(&file);
    return status ? error_prefix(err, "%s", path) : 0;
}
