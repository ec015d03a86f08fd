// The file of cuDNN's convolution algorithm choices (see conv_algorithms.h).
#include "backend/conv_algorithms.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weights/cache.h"

int conv_algorithms_path(char *out, size_t size) {
    const char *asked = getenv("LTC_CUDNN_ALGORITHMS");
    if (asked && strcmp(asked, "off") == 0) return 0;
    if (asked && *asked) return snprintf(out, size, "%s", asked) < (int)size;
    char root[3072];
    if (weights_cache_root(root, sizeof root, NULL)) return 0;
    return snprintf(out, size, "%s/cudnn-algorithms.txt", root) < (int)size;
}

int conv_algorithms_lookup(const char *key, ConvAlgorithms *found) {
    char path[3200];
    if (!conv_algorithms_path(path, sizeof path)) return 0;
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    const size_t key_length = strlen(key);
    char line[1024];
    int hit = 0;
    while (!hit && fgets(line, sizeof line, file)) {
        if (strncmp(line, key, key_length) != 0 || line[key_length] != '\t') continue;
        ConvAlgorithms read;
        if (sscanf(line + key_length + 1, "%d %zu %d %zu %d %zu %d", &read.forward,
                   &read.forward_bytes, &read.backward_data, &read.data_bytes,
                   &read.backward_filter, &read.filter_bytes, &read.nondeterministic) == 7 &&
            read.forward >= 0 && read.backward_data >= 0 && read.backward_filter >= 0) {
            *found = read;
            hit = 1;
        }
    }
    fclose(file);
    return hit;
}

// mkdir -p of path's folder.
static void make_folders(char *path) {
    for (char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            *slash = '/';
            return;
        }
        *slash = '/';
    }
}

void conv_algorithms_store(const char *key, const ConvAlgorithms *chosen) {
    char path[3200], line[1024];
    if (!conv_algorithms_path(path, sizeof path)) return;
    const int length = snprintf(line, sizeof line, "%s\t%d %zu %d %zu %d %zu %d\n", key,
                                chosen->forward, chosen->forward_bytes, chosen->backward_data,
                                chosen->data_bytes, chosen->backward_filter, chosen->filter_bytes,
                                chosen->nondeterministic);
    if (length <= 0 || length >= (int)sizeof line) return;
    make_folders(path);
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    // One write: appends of whole lines do not interleave. A short write
    // (a full disk) leaves a torn line, which lookups skip: it does not parse.
    const ssize_t written = write(fd, line, (size_t)length);
    (void)written;
    close(fd);
}
