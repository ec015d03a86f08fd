// What libheif 1.15 does not check in a HEIF file's item references, checked
// before it reads the file (decode_heif_check).
//
// libheif decodes a derived image by decoding the items it references
// first: a grid's tiles, an identity or overlay image's inputs ('dimg'
// references), and an image's alpha plane ('auxl' from the alpha item to
// its master), each through the same function, recursively, with no check
// for a cycle or a depth limit. A grid listed among its own tiles made it
// recurse until the stack ran out (SIGSEGV; 1,542 bytes,
// tests/fixtures/fuzz_findings/heif_grid_of_itself.heic), whatever the stack
// size, and a long chain of distinct derived items does the same with a
// finite depth. So the references are read here and refused when they form
// a cycle or nest deeper than HEIF_MAX_DERIVATION_DEPTH.
//
// The walk reads the boxes as ISO/IEC 14496-12 defines them (size, type,
// 64-bit size when size is 1, to the end of the parent when 0; 'meta' and
// 'iref' are full boxes with version and flags): every top-level 'meta',
// every 'iref' in it, each reference box (type, from_item_ID,
// reference_count, to_item_IDs; 16-bit IDs for iref version 0, 32-bit
// otherwise). libheif reads the reference boxes one after another by their
// counts, never by their sizes (the fuzzed file's 'dimg' box of 14 bytes
// claims 417 references; a mutation of it whose size field is garbage
// still recursed), so the references are read that way here too, and a
// reference box whose size is not what its count makes is refused: then
// both readings agree. Other boxes this walk cannot parse (a size past its
// parent's end) make libheif fail the 'meta' that holds them, which it then
// does not use.
#include "decode/heif_boxes.h"

#include <stdlib.h>
#include <string.h>

// Nesting of derived images: a grid of tiles is 1, an identity-derived
// grid or a grid's alpha plane made of a grid 2.
#define HEIF_MAX_DERIVATION_DEPTH 32
// References in one 'iref' (a grid of 65536 tiles has 65536).
#define HEIF_MAX_REFERENCES (1u << 20)

int heif_next_box(const uint8_t *data, uint64_t end, uint64_t *at, HeifBox *box) {
    if (end - *at < 8) return -1;
    const uint8_t *p = data + *at;
    uint64_t size = heif_be32(p), header = 8;
    memcpy(box->type, p + 4, 4);
    box->type[4] = '\0';
    if (size == 1) {
        if (end - *at < 16) return -1;
        size = (uint64_t)heif_be32(p + 8) << 32 | heif_be32(p + 12);
        header = 16;
    } else if (size == 0) {
        size = end - *at;
    }
    if (memcmp(box->type, "uuid", 4) == 0) header += 16;
    if (size < header || size > end - *at) return -1;
    box->body = p + header;
    box->size = size - header;
    *at += size;
    return 0;
}

typedef struct Edge {
    uint32_t from, to;  // decoding `from` decodes `to` first
} Edge;

typedef struct Graph {
    Edge *edges;
    size_t count, capacity;
} Graph;

static int add_edge(Graph *graph, uint32_t from, uint32_t to, ErrorMessage *err) {
    if (graph->count == HEIF_MAX_REFERENCES)
        return error_set(err, "unsupported format: HEIF with more than %u item references",
                         HEIF_MAX_REFERENCES);
    if (graph->count == graph->capacity) {
        const size_t capacity = graph->capacity ? 2 * graph->capacity : 64;
        Edge *grown = realloc(graph->edges, capacity * sizeof *grown);
        if (!grown) return error_set(err, "out of memory for HEIF item references");
        graph->edges = grown;
        graph->capacity = capacity;
    }
    graph->edges[graph->count++] = (Edge){from, to};
    return 0;
}

static int is_type(const uint8_t *type, const char *name) { return memcmp(type, name, 4) == 0; }

// The reference box at body[*at] of an 'iref' body of `size` bytes, read as
// libheif reads it (header, from_item_ID, reference_count, then that many
// IDs, whatever the header's size says) and refused unless that size is
// exactly what was read; into the graph ('dimg': the derived item needs its
// inputs; 'auxl': the master needs its alpha item).
static int read_reference(const uint8_t *body, uint64_t size, uint64_t *at, int wide, Graph *graph,
                          ErrorMessage *err) {
    const uint8_t *p = body + *at;
    const uint64_t left = size - *at, id_bytes = wide ? 4 : 2;
    uint64_t declared = left >= 8 ? heif_be32(p) : 0, header = 8;
    if (left >= 16 && declared == 1) {
        declared = (uint64_t)heif_be32(p + 8) << 32 | heif_be32(p + 12);
        header = 16;
    }
    if (left >= 8 && is_type(p + 4, "uuid")) header += 16;
    if (left < header + id_bytes + 2)
        return error_set(err, "corrupt data: HEIF: an item reference cut off at the end of 'iref'");
    const uint8_t *entry = p + header;
    const uint32_t from = wide ? heif_be32(entry) : heif_be16(entry);
    const uint32_t count = heif_be16(entry + id_bytes);
    const uint64_t read = header + id_bytes + 2 + (uint64_t)count * id_bytes;
    char type[5] = {0};
    memcpy(type, p + 4, 4);
    if (declared != read || read > left)
        return error_set(err,
                         "corrupt data: HEIF: the '%s' references of item %u (%u items) do not "
                         "match their box's size (%llu bytes)",
                         type, from, count, (unsigned long long)declared);
    const int derived = is_type(p + 4, "dimg"), alpha = is_type(p + 4, "auxl");
    for (uint32_t i = 0; i < count && (derived || alpha); i++) {
        const uint8_t *id = entry + id_bytes + 2 + i * id_bytes;
        const uint32_t to = wide ? heif_be32(id) : heif_be16(id);
        if (add_edge(graph, derived ? from : to, derived ? to : from, err) != 0) return -1;
    }
    *at += read;
    return 0;
}

static int compare_edges(const void *a, const void *b) {
    const Edge *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    return (x->to > y->to) - (x->to < y->to);
}

// Index of the first edge from `item` (edges sorted), or count when it has
// none (a coded image).
static size_t first_edge(const Graph *graph, uint32_t item) {
    size_t low = 0, high = graph->count;
    while (low < high) {
        const size_t middle = low + (high - low) / 2;
        if (graph->edges[middle].from < item)
            low = middle + 1;
        else
            high = middle;
    }
    return low < graph->count && graph->edges[low].from == item ? low : graph->count;
}

typedef struct Visit {
    size_t first, edge;  // the item's first edge, the next one to follow
    uint32_t below;      // derivation levels below it seen so far
} Visit;

static int too_deep(ErrorMessage *err) {
    return error_set(err, "corrupt data: HEIF: images derived from images more than %d levels deep",
                     HEIF_MAX_DERIVATION_DEPTH);
}

// Depth-first from every item with references, on the heap (the depth is
// what is being checked). An item with references is known by its first
// edge: state 1 while on the current path, 2 when done, with its height
// (derivation levels from it down: a grid of coded tiles is 1). An edge to
// an item on the path is a cycle; a path or a height over the limit is
// refused.
static int check_graph(Graph *graph, ErrorMessage *err) {
    if (graph->count == 0) return 0;
    qsort(graph->edges, graph->count, sizeof *graph->edges, compare_edges);
    uint8_t *state = calloc(graph->count, 1);
    uint32_t *height = calloc(graph->count, sizeof *height);
    Visit *path = malloc(HEIF_MAX_DERIVATION_DEPTH * sizeof *path);
    int status = state && height && path ? 0 : error_set(err, "out of memory for HEIF references");
    for (size_t start = 0; start < graph->count && status == 0; start++) {
        if (state[start] || (start > 0 && graph->edges[start - 1].from == graph->edges[start].from))
            continue;
        size_t depth = 0;
        path[depth++] = (Visit){start, start, 0};
        state[start] = 1;
        while (depth > 0 && status == 0) {
            Visit *top = &path[depth - 1];
            const Edge *edge = &graph->edges[top->edge];
            if (top->edge == graph->count || edge->from != graph->edges[top->first].from) {
                state[top->first] = 2;  // finished
                height[top->first] = top->below + 1;
                if (height[top->first] > HEIF_MAX_DERIVATION_DEPTH) status = too_deep(err);
                if (--depth > 0 && path[depth - 1].below < height[top->first])
                    path[depth - 1].below = height[top->first];
                continue;
            }
            top->edge++;
            const size_t next = first_edge(graph, edge->to);
            if (next == graph->count) continue;  // a coded image
            if (state[next] == 2) {
                if (top->below < height[next]) top->below = height[next];
            } else if (state[next] == 1) {
                status = error_set(err,
                                   "corrupt data: HEIF: item %u is derived from itself (its "
                                   "'dimg'/'auxl' references form a cycle)",
                                   edge->to);
            } else if (depth == HEIF_MAX_DERIVATION_DEPTH) {
                status = too_deep(err);
            } else {
                state[next] = 1;
                path[depth++] = (Visit){next, next, 0};
            }
        }
    }
    free(state);
    free(height);
    free(path);
    return status;
}

// Every reference box of one 'iref' body (after its version and flags).
static int read_iref(const HeifBox *iref, ErrorMessage *err) {
    if (iref->size < 4) return 0;  // libheif refuses it
    const int wide = iref->body[0] != 0;
    Graph graph = {0};
    uint64_t at = 4;
    int status = 0;
    while (status == 0 && at < iref->size)
        status = read_reference(iref->body, iref->size, &at, wide, &graph, err);
    if (status == 0) status = check_graph(&graph, err);
    free(graph.edges);
    return status;
}

int decode_heif_check(const uint8_t *data, size_t size, uint64_t max_pixels, ErrorMessage *err) {
    uint64_t at = 0;
    HeifBox top;
    while (at < size && heif_next_box(data, size, &at, &top) == 0) {
        if (strcmp(top.type, "meta") != 0 || top.size < 4) continue;
        uint64_t inner = 4;  // after version and flags
        HeifBox child;
        while (inner < top.size && heif_next_box(top.body, top.size, &inner, &child) == 0)
            if (strcmp(child.type, "iref") == 0 && read_iref(&child, err) != 0) return -1;
        if (heif_check_canvases(&top, data, size, max_pixels, err) != 0) return -1;
    }
    return 0;
}
