// The convolution algorithms cuDNN's timed search chose, kept in a file so
// that every later process on the machine uses the same ones.
//
// Why: the search times each algorithm, and timings vary from process to
// process, so two runs of the same seed could run different (each
// deterministic) algorithms, round differently and drift apart; a resume
// in another process then no longer equals the uninterrupted run (seen on
// an H200 in 32-true, docs/gpu.md). With the file, the first process that
// meets a shape searches and appends its choice, and every process after
// it reads that choice instead of searching (PyTorch's cudnn.benchmark
// searches again in every process).
//
// The file: $LTC_CUDNN_ALGORITHMS ("off": no file, search every time), else
// cudnn-algorithms.txt in our cache folder (weights/cache.h). One line per
// choice, "KEY<TAB>forward bytes data bytes filter bytes nondeterministic";
// KEY names the GPU, its compute capability, the cuDNN version, the dtype
// and the shape. Lines are appended with one write each (O_APPEND), so
// processes appending at once do not mix their lines; where a key appears
// twice, the first line counts, the one every reader sees first.
#ifndef LTC_CONV_ALGORITHMS_H
#define LTC_CONV_ALGORITHMS_H

#include <stddef.h>

typedef struct ConvAlgorithms {
    int forward, backward_data, backward_filter;  // cuDNN's algorithm numbers
    size_t forward_bytes, data_bytes, filter_bytes;  // their workspaces
    int nondeterministic;  // one of them is not deterministic (none was for the shape)
} ConvAlgorithms;

// The file's path; 0 when there is none ("off", or no cache folder).
int conv_algorithms_path(char *out, size_t size);

// 1 and *found when the file holds key, else 0 (no file, no line, a line
// that does not parse).
int conv_algorithms_lookup(const char *key, ConvAlgorithms *found);

// Appends key's choice; a file that cannot be written is left as it is (the
// search then runs again in the next process).
void conv_algorithms_store(const char *key, const ConvAlgorithms *chosen);

#endif
