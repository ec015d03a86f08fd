// What the CRC-32 of checkpoints costs (docs/training.md, "Integrity"):
//   bench_checkpoint_crc FILE.ckpt [REPEATS]
// times, best of REPEATS (default 5), in the same run:
//   read  checkpoint_read of FILE (the CRC-32 verified) and of a copy whose
//         CRC-32 entry is blanked with spaces (nothing verified; the same
//         bytes otherwise): the difference is the verification;
//   write checkpoint_write of FILE's tensors;
//   crc32 the CRC-32 of the same bytes alone, which is what the writer adds:
//         zlib's crc32_z on one thread, and data_crc32 (the writer's and
//         the reader's, on as many threads as there are usable cores).
//   fused read() of FILE in 1 MiB chunks with each chunk's CRC-32 computed
//         as it arrives: the alternative to the pass after the read.
// The copies go to FILE.bench-*, removed at the end. The page cache holds
// FILE after the first read, so the reads measure memory, not the disk.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "train/checkpoint.h"
#include "util/cpu.h"
#include "util/data_crc32.h"
#include "util/file.h"

static double seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

// Best time of checkpoint_read(path) over repeats; -1 on a read error.
static double time_read(const char *path, int repeats) {
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        Checkpoint ckpt;
        ErrorMessage err;
        const double start = seconds();
        if (checkpoint_read(path, &ckpt, &err)) {
            fprintf(stderr, "bench_checkpoint_crc: %s\n", err.text);
            return -1;
        }
        const double took = seconds() - start;
        checkpoint_free(&ckpt);
        if (took < best) best = took;
    }
    return best;
}

// The alternative to a pass after the read: read() in 1 MiB chunks into
// one buffer, each chunk's CRC-32 folded in as it arrives (while it is in
// cache). Best time over repeats; -1 on an error.
static double time_fused_read(const char *path, int repeats) {
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        const double start = seconds();
        off_t size = 0;
        ErrorMessage err;
        const int fd = file_open_regular(path, &size, &err);
        uint8_t *bytes = fd >= 0 ? malloc((size_t)size + 1) : NULL;
        if (!bytes) {
            if (fd >= 0) close(fd);
            return -1;
        }
        size_t total = 0;
        uLong crc = 0;
        ssize_t got;
        while ((got = read(fd, bytes + total, (size_t)size - total < (1u << 20)
                                                  ? (size_t)size - total
                                                  : (1u << 20))) > 0) {
            crc = crc32_z(crc, bytes + total, (size_t)got);
            total += (size_t)got;
        }
        close(fd);
        free(bytes);
        const double took = seconds() - start;
        if (crc == 1) fprintf(stderr, " ");  // keeps the CRC-32 from being optimised away
        if (took < best) best = took;
    }
    return best;
}

// FILE with its CRC-32 entry blanked (JSON whitespace: same length).
static int write_unverified_copy(const char *path, const char *copy) {
    ByteBuffer bytes = {0};
    ErrorMessage err;
    if (file_read_all(path, &bytes, SIZE_MAX / 2, &err)) {
        fprintf(stderr, "bench_checkpoint_crc: %s: %s\n", path, err.text);
        return -1;
    }
    static const char entry[] = ",\"" SAFETENSORS_CRC32_KEY "\":\"";
    uint8_t *found = memmem(bytes.data, bytes.size < 1 << 20 ? bytes.size : 1 << 20, entry,
                            sizeof entry - 1);
    if (found) memset(found, ' ', sizeof entry - 1 + 9);  // the entry, 8 digits and '"'
    // Format 2 records the CRC-32 of the blob's header (the u64 length and
    // the JSON) in bytes 12..15: recorded anew for the blanked header.
    if (found && bytes.size > CHECKPOINT_HEADER_SIZE + 8) {
        uint64_t length = 0;
        for (int i = 7; i >= 0; i--) length = length << 8 | bytes.data[CHECKPOINT_HEADER_SIZE + i];
        const FileChunk table = {bytes.data + CHECKPOINT_HEADER_SIZE, 8 + (size_t)length};
        const uint32_t crc = data_crc32(&table, 1);
        for (int i = 0; i < 4; i++) bytes.data[12 + i] = (uint8_t)(crc >> (8 * i));
    }
    const FileChunk chunk = {bytes.data, bytes.size};
    const int status = found ? file_write_atomic(copy, &chunk, 1, &err) : -1;
    if (status) fprintf(stderr, "bench_checkpoint_crc: %s: no CRC-32 recorded, or %s\n", path,
                        found ? err.text : "not written");
    byte_buffer_free(&bytes);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: bench_checkpoint_crc FILE.ckpt [REPEATS]\n");
        return 2;
    }
    const char *path = argv[1];
    const int repeats = argc == 3 ? atoi(argv[2]) : 5;
    char unverified[4096], rewritten[4096];
    snprintf(unverified, sizeof unverified, "%s.bench-unverified", path);
    snprintf(rewritten, sizeof rewritten, "%s.bench-rewritten", path);
    if (repeats < 1 || write_unverified_copy(path, unverified)) return 1;
    const double read_verified = time_read(path, repeats);
    const double read_unverified = time_read(unverified, repeats);
    remove(unverified);
    const double read_fused = time_fused_read(path, repeats);
    if (read_verified < 0 || read_unverified < 0 || read_fused < 0) return 1;

    Checkpoint ckpt;
    ErrorMessage err;
    if (checkpoint_read(path, &ckpt, &err)) {
        fprintf(stderr, "bench_checkpoint_crc: %s\n", err.text);
        return 1;
    }
    CheckpointWriter *writer = checkpoint_writer_create();
    const SafeTensors *file = &ckpt.tensors;
    int status = writer ? 0 : -1;
    size_t data_bytes = 0;
    for (int i = 0; i < file->count && !status; i++) {
        const SafeTensor *t = &file->tensors[i];
        status = checkpoint_add_tensor(writer, t->name, t->dtype, t->rank, t->shape,
                                       safetensors_data(file, t), &err);
        data_bytes += t->size;
    }
    for (int i = 0; i < file->metadata_count && !status; i++)
        status = checkpoint_set_meta(writer, file->metadata[i].key, file->metadata[i].value, &err);
    FileChunk *pieces = calloc((size_t)file->count + 1, sizeof *pieces);
    if (!pieces) status = -1;
    for (int i = 0; i < file->count && !status; i++)
        pieces[i] = (FileChunk){safetensors_data(file, &file->tensors[i]), file->tensors[i].size};
    double write_best = 1e30, serial_best = 1e30, parallel_best = 1e30;
    uint32_t serial = 0, parallel = 0;
    for (int r = 0; r < repeats && !status; r++) {
        double start = seconds();
        status = checkpoint_write(writer, rewritten, &err);
        const double write_took = seconds() - start;
        start = seconds();
        uLong crc = 0;
        for (int i = 0; i < file->count; i++) crc = crc32_z(crc, pieces[i].data, pieces[i].size);
        serial = (uint32_t)crc;
        const double serial_took = seconds() - start;
        start = seconds();
        parallel = data_crc32(pieces, file->count);
        const double parallel_took = seconds() - start;
        if (write_took < write_best) write_best = write_took;
        if (serial_took < serial_best) serial_best = serial_took;
        if (parallel_took < parallel_best) parallel_best = parallel_took;
    }
    free(pieces);
    if (!status && serial != parallel) {
        fprintf(stderr, "bench_checkpoint_crc: data_crc32 %08x, crc32_z %08x\n", parallel, serial);
        status = -1;
    }
    remove(rewritten);
    checkpoint_writer_free(writer);
    checkpoint_free(&ckpt);
    if (status) {
        fprintf(stderr, "bench_checkpoint_crc: %s\n", err.text);
        return 1;
    }
    const double mb = (double)data_bytes / 1e6;
    printf("%s: %.1f MB of tensor data, best of %d\n", path, mb, repeats);
    printf("read:  %.1f ms verified, %.1f ms with the CRC-32 entry blanked: +%.1f ms\n",
           read_verified * 1e3, read_unverified * 1e3, (read_verified - read_unverified) * 1e3);
    printf("read:  %.1f ms for the file's bytes alone, read() in 1 MiB chunks with crc32_z "
           "folded in (one thread)\n",
           read_fused * 1e3);
    printf("write: %.1f ms (checkpoint_write: temporary file, fsync, rename)\n", write_best * 1e3);
    printf("crc32: %.1f ms on one thread (%.2f GB/s), %.1f ms by data_crc32 on %d usable cores "
           "(%.2f GB/s)\n",
           serial_best * 1e3, mb / 1e3 / serial_best, parallel_best * 1e3, cpu_usable_cores(),
           mb / 1e3 / parallel_best);
    return 0;
}
