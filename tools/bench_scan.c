// Benchmark for the dataset scan: builds an ImageNet-shaped tree of empty
// files (1000 class folders, nXXXXXXXX_N.JPEG) and times dataset_scan() on it.
//
//   bench_scan [--files N (default 1000000)] [--dir PATH] [--runs R (default 3)] [--keep]
//
// The tree goes under a new /tmp/bench_scan_XXXXXX folder, or under PATH
// (reused when an earlier --keep run left one of the same size there). The
// page cache is not dropped: timings are warm-cache listings, the case of a
// training run that starts again on the same data. What this run created is
// deleted at the end unless --keep.
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/scan.h"

#define BENCH_CLASSES 1000
#define BENCH_MARKER ".bench_scan_files"  // hidden, so the scan skips it
#define BENCH_MAX_RUNS 64

typedef struct BenchOptions {
    unsigned long files;
    const char *dir;
    int runs;
    bool keep;
} BenchOptions;

static double bench_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static int bench_usage(const char *message) {
    fprintf(stderr, "bench_scan: %s\nusage: bench_scan [--files N] [--dir PATH] [--runs R] [--keep]\n",
            message);
    return 2;
}

static int bench_parse(int argc, char **argv, BenchOptions *options) {
    *options = (BenchOptions){.files = 1000000, .runs = 3};
    for (int i = 1; i < argc; i++) {
        const bool has_value = i + 1 < argc;
        if (strcmp(argv[i], "--files") == 0 && has_value) {
            char *end;
            options->files = strtoul(argv[++i], &end, 10);
            if (*end || options->files == 0) return bench_usage("--files wants a positive number");
        } else if (strcmp(argv[i], "--runs") == 0 && has_value) {
            options->runs = atoi(argv[++i]);
            if (options->runs < 1 || options->runs > BENCH_MAX_RUNS)
                return bench_usage("--runs wants 1..64");
        } else if (strcmp(argv[i], "--dir") == 0 && has_value) {
            options->dir = argv[++i];
        } else if (strcmp(argv[i], "--keep") == 0) {
            options->keep = true;
        } else {
            return bench_usage("unknown or incomplete option");
        }
    }
    return 0;
}

// Class c's folder (an ImageNet-like WordNet id) and the name of its i-th file.
static void bench_class_name(int class_index, char *out, size_t size) {
    snprintf(out, size, "n%08u", 1440764u + (unsigned)class_index * 7919u);
}

static unsigned long bench_files_in_class(const BenchOptions *options, int class_index) {
    return options->files / BENCH_CLASSES + ((unsigned long)class_index < options->files % BENCH_CLASSES);
}

static bool bench_tree_present(const char *root, unsigned long files) {
    char path[4096 + sizeof BENCH_MARKER];
    snprintf(path, sizeof path, "%s/%s", root, BENCH_MARKER);
    FILE *marker = fopen(path, "r");
    if (!marker) return false;
    unsigned long recorded = 0;
    const bool same = fscanf(marker, "%lu", &recorded) == 1 && recorded == files;
    fclose(marker);
    return same;
}

// Creates (remove=false) or deletes (remove=true) the class folders and files.
static int bench_walk_tree(const char *root, const BenchOptions *options, bool remove) {
    int root_fd = open(root, O_RDONLY | O_DIRECTORY);
    if (root_fd < 0) {
        fprintf(stderr, "bench_scan: cannot open '%s': %s\n", root, strerror(errno));
        return -1;
    }
    int status = 0;
    for (int c = 0; c < BENCH_CLASSES && status == 0; c++) {
        const unsigned long count = bench_files_in_class(options, c);
        if (count == 0) continue;
        char class_name[32], file_name[64];
        bench_class_name(c, class_name, sizeof class_name);
        if (!remove && mkdirat(root_fd, class_name, 0755) != 0 && errno != EEXIST) status = -1;
        int class_fd = status == 0 ? openat(root_fd, class_name, O_RDONLY | O_DIRECTORY) : -1;
        if (class_fd < 0) {
            fprintf(stderr, "bench_scan: cannot open '%s/%s': %s\n", root, class_name, strerror(errno));
            status = -1;
            break;
        }
        for (unsigned long i = 0; i < count && status == 0; i++) {
            snprintf(file_name, sizeof file_name, "%s_%lu.JPEG", class_name, i + 1);
            if (remove) {
                unlinkat(class_fd, file_name, 0);
                continue;
            }
            int fd = openat(class_fd, file_name, O_WRONLY | O_CREAT, 0644);
            if (fd < 0) {
                fprintf(stderr, "bench_scan: cannot create '%s/%s/%s': %s\n", root, class_name,
                        file_name, strerror(errno));
                status = -1;
            } else {
                close(fd);
            }
        }
        close(class_fd);
        if (remove) unlinkat(root_fd, class_name, AT_REMOVEDIR);
    }
    if (remove) unlinkat(root_fd, BENCH_MARKER, 0);
    if (!remove && status == 0) {
        int fd = openat(root_fd, BENCH_MARKER, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dprintf(fd, "%lu\n", options->files);
            close(fd);
        }
    }
    close(root_fd);
    return status;
}

static int bench_compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    BenchOptions options;
    int status = bench_parse(argc, argv, &options);
    if (status != 0) return status;

    char root[4096];
    bool made_root = false;
    if (options.dir) {
        snprintf(root, sizeof root, "%s", options.dir);
        if (mkdir(root, 0755) == 0) made_root = true;
        else if (errno != EEXIST) {
            fprintf(stderr, "bench_scan: cannot create '%s': %s\n", root, strerror(errno));
            return 1;
        }
    } else {
        snprintf(root, sizeof root, "/tmp/bench_scan_XXXXXX");
        if (!mkdtemp(root)) {
            fprintf(stderr, "bench_scan: cannot create a folder under /tmp: %s\n", strerror(errno));
            return 1;
        }
        made_root = true;
    }

    const bool reused = bench_tree_present(root, options.files);
    if (reused) {
        printf("reusing %lu files under %s\n", options.files, root);
    } else {
        printf("creating %lu empty files in %d class folders under %s ...\n", options.files,
               BENCH_CLASSES, root);
        fflush(stdout);
        const double start = bench_now();
        if (bench_walk_tree(root, &options, false) != 0) return 1;
        printf("created in %.1f s\n", bench_now() - start);
    }
    printf("page cache: not dropped (warm-cache timings)\n\n");

    double seconds[BENCH_MAX_RUNS];
    size_t listed = 0;
    printf("%-5s %10s %14s\n", "run", "seconds", "files/s");
    for (int run = 0; run < options.runs; run++) {
        Dataset dataset;
        ErrorMessage err;
        const double start = bench_now();
        if (dataset_scan(root, &dataset, &err) != 0) {
            fprintf(stderr, "bench_scan: %s\n", err.text);
            return 1;
        }
        seconds[run] = bench_now() - start;
        listed = dataset.count;
        for (size_t i = 1; i < dataset.count; i++)  // untimed: the order must be bytewise
            if (strcmp(dataset_path(&dataset, i - 1), dataset_path(&dataset, i)) >= 0) {
                fprintf(stderr, "bench_scan: not sorted at %zu\n", i);
                status = 1;
                break;
            }
        dataset_free(&dataset);
        printf("%-5d %10.3f %14.0f\n", run + 1, seconds[run], (double)listed / seconds[run]);
    }
    if (listed != options.files) {
        fprintf(stderr, "bench_scan: listed %zu images, expected %lu\n", listed, options.files);
        status = 1;
    }
    qsort(seconds, (size_t)options.runs, sizeof seconds[0], bench_compare_doubles);
    const double best = seconds[0], median = seconds[options.runs / 2];
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("\n%-8s %10s %14s\n", "", "seconds", "files/s");
    printf("%-8s %10.3f %14.0f\n", "best", best, (double)listed / best);
    printf("%-8s %10.3f %14.0f\n", "median", median, (double)listed / median);
    printf("images listed: %zu; peak RSS %.0f MiB\n", listed, (double)usage.ru_maxrss / 1024.0);

    if (options.keep) {
        printf("kept %s (--keep)\n", root);
    } else if (!reused) {
        const double start = bench_now();
        bench_walk_tree(root, &options, true);
        if (made_root) rmdir(root);
        printf("deleted what this run created (%.1f s)\n", bench_now() - start);
    }
    return status;
}
