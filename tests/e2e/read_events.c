// Reads a TensorBoard event file with our own reader (logging/tb_reader.h)
// for the end-to-end tests:
//   read_events FILE        one line per tag: "scalar TAG COUNT" and
//                           "image TAG COUNT STEP(S)" (steps comma-separated)
//   read_events FILE TAG    one line per scalar event of TAG: "STEP VALUE",
//                           the value printed as metrics.jsonl prints it
//                           (%.17g of the float widened to double), so the
//                           two files compare as text.
// Exits 1 when a record is corrupt or truncated (the message says which).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logging/tb_reader.h"

#define MAX_TAGS 64

typedef struct TagCount {
    char name[128];
    TbValueKind kind;
    long count;
    char steps[256];  // image tags: the steps, comma-separated
} TagCount;

static TagCount *tag_find(TagCount *tags, int *tag_count, const char *name, TbValueKind kind) {
    for (int i = 0; i < *tag_count; i++)
        if (tags[i].kind == kind && strcmp(tags[i].name, name) == 0) return &tags[i];
    if (*tag_count == MAX_TAGS) return NULL;
    TagCount *tag = &tags[(*tag_count)++];
    memset(tag, 0, sizeof *tag);
    snprintf(tag->name, sizeof tag->name, "%s", name);
    tag->kind = kind;
    return tag;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: read_events FILE [TAG]\n");
        return 2;
    }
    const char *only_tag = argc == 3 ? argv[2] : NULL;
    ErrorMessage err = {{0}};
    TbReader *reader = NULL;
    if (tb_reader_open(&reader, argv[1], &err)) {
        fprintf(stderr, "read_events: %s\n", err.text);
        return 1;
    }
    static TagCount tags[MAX_TAGS];
    int tag_count = 0, status;
    TbEvent event;
    while ((status = tb_reader_next(reader, &event, &err)) == 1) {
        for (size_t v = 0; v < event.value_count; v++) {
            const TbValue *value = &event.values[v];
            if (only_tag) {
                if (value->kind == TB_VALUE_SCALAR && strcmp(value->tag, only_tag) == 0)
                    printf("%lld %.17g\n", (long long)event.step, (double)value->scalar);
                continue;
            }
            TagCount *tag = tag_find(tags, &tag_count, value->tag, value->kind);
            if (!tag) {
                fprintf(stderr, "read_events: more than %d tags\n", MAX_TAGS);
                tb_reader_close(reader);
                return 1;
            }
            tag->count++;
            if (value->kind == TB_VALUE_IMAGE) {
                const size_t used = strlen(tag->steps);
                snprintf(tag->steps + used, sizeof tag->steps - used, "%s%lld", used ? "," : "",
                         (long long)event.step);
            }
        }
    }
    tb_reader_close(reader);
    if (status < 0) {
        fprintf(stderr, "read_events: %s\n", err.text);
        return 1;
    }
    for (int i = 0; i < tag_count; i++) {
        if (tags[i].kind == TB_VALUE_SCALAR)
            printf("scalar %s %ld\n", tags[i].name, tags[i].count);
        else if (tags[i].kind == TB_VALUE_IMAGE)
            printf("image %s %ld %s\n", tags[i].name, tags[i].count, tags[i].steps);
    }
    return 0;
}
