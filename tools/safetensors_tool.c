// safetensors_tool: our safetensors reader and writer from the command line,
// for the compatibility check against the reference Python package
// (tools/compare/safetensors_roundtrip.py).
//   safetensors_tool list FILE             one line per tensor, then metadata
//   safetensors_tool copy IN OUT [reverse] read IN, write OUT (same or reversed order)
//   safetensors_tool extract IN PREFIX OUT the tensors of IN named PREFIX..., written to OUT
//                                          without the prefix and without metadata (the
//                                          e2e tests take model files out of a fixture)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/safetensors.h"
#include "weights/weight_file.h"

static int list_file(const SafeTensors *file) {
    // name<TAB>dtype<TAB>d0,d1,...<TAB>offset<TAB>size (names may hold any
    // UTF-8; the compare script writes none with tabs or newlines).
    for (int i = 0; i < file->count; i++) {
        const SafeTensor *t = &file->tensors[i];
        printf("tensor\t%s\t%s\t", t->name, safe_dtype_name(t->dtype));
        for (int d = 0; d < t->rank; d++) printf(d ? ",%lld" : "%lld", (long long)t->shape[d]);
        printf("\t%zu\t%zu\n", t->offset, t->size);
    }
    for (int i = 0; i < file->metadata_count; i++)
        printf("metadata\t%s\t%s\n", file->metadata[i].key, file->metadata[i].value);
    return 0;
}

// Copies the tensors named prefix... (all for ""), the prefix cut off;
// the metadata too when the prefix is empty.
static int copy_file(const SafeTensors *file, const char *out_path, int reverse,
                     const char *prefix, ErrorMessage *err) {
    SafeTensorWrite *tensors = calloc((size_t)(file->count ? file->count : 1), sizeof *tensors);
    if (!tensors) return error_set(err, "out of memory");
    const size_t length = strlen(prefix);
    int count = 0;
    for (int i = 0; i < file->count; i++) {
        const SafeTensor *t = &file->tensors[reverse ? file->count - 1 - i : i];
        if (strncmp(t->name, prefix, length) != 0) continue;
        SafeTensorWrite *w = &tensors[count++];
        w->name = t->name + length;
        w->dtype = t->dtype;
        w->rank = t->rank;
        memcpy(w->shape, t->shape, sizeof w->shape);
        w->data = safetensors_data(file, t);
    }
    const int status = count ? safetensors_write(out_path, tensors, count,
                                                 length ? NULL : file->metadata,
                                                 length ? 0 : file->metadata_count, err)
                             : error_set(err, "no tensor named \"%s...\"", prefix);
    free(tensors);
    return status;
}

int main(int argc, char **argv) {
    const int is_list = argc == 3 && strcmp(argv[1], "list") == 0;
    const int is_copy = (argc == 4 || (argc == 5 && strcmp(argv[4], "reverse") == 0)) &&
                        strcmp(argv[1], "copy") == 0;
    const int is_extract = argc == 5 && strcmp(argv[1], "extract") == 0;
    if (!is_list && !is_copy && !is_extract) {
        fprintf(stderr, "usage: %s list FILE | copy IN OUT [reverse] | extract IN PREFIX OUT\n",
                argv[0]);
        return 2;
    }
    SafeTensors file;
    ErrorMessage err;
    if (weight_file_read(argv[2], &file, &err) != 0) {
        fprintf(stderr, "error: %s\n", err.text);
        return 1;
    }
    const int status = is_list      ? list_file(&file)
                       : is_extract ? copy_file(&file, argv[4], 0, argv[3], &err)
                                    : copy_file(&file, argv[3], argc == 5, "", &err);
    if (status != 0) fprintf(stderr, "error: %s\n", err.text);
    safetensors_free(&file);
    return status == 0 ? 0 : 1;
}
