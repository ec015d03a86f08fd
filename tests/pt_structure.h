// Test helper: the structure of a pickled module tree, one line per module
// in named_modules() order, against a fixture of the lines PyTorch gives for
// the real model (tools/make_ultralytics_structure.py,
// tools/make_torchvision_structure.py). Our file is read back with the
// restricted reader (weights/pt_pickle.h).
#ifndef LTC_TESTS_PT_STRUCTURE_H
#define LTC_TESTS_PT_STRUCTURE_H

#include "weights/pt_pickle.h"

#define PT_STRUCTURE_LINE_BYTES 2048

typedef struct Lines {
    char **items;
    int count, capacity;
} Lines;

void lines_add(Lines *lines, const char *text);
void lines_free(Lines *lines);

// The lines of fixture after "# name" up to the next "#" line; fails the
// test when there are none.
void fixture_section(const char *fixture, const char *name, Lines *out);

// qsort's comparison of const char * items.
int compare_strings(const void *a, const void *b);

// One line per module of the tree under module, pre-order, each object once
// (a module referenced twice is listed at its first path):
//   <path> <module>.<class> <attributes> params=<a|b> buffers=<a|b>
// with_values 0: the __dict__ keys not starting with '_', sorted; 1: every
// key that is not nn.Module's bookkeeping (its tensor, module and hook
// dicts), sorted, as key=value (pt_structure_value).
void pt_structure_describe(const PtValue *module, const char *path, int with_values, Lines *out);

// Fails the test at the first line that differs, naming model.
void pt_structure_expect(const char *model, const Lines *expected, const Lines *ours);

#endif
