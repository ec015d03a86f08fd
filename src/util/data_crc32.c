// CRC-32 of data in memory (see data_crc32.h): libdeflate's crc32 on
// blocks (carry-less multiplication on x86: 3x Debian 12's zlib 1.2.13 on
// one thread, the same values), by as many threads as the process may use
// cores, joined with zlib's crc32_combine.
#include "util/data_crc32.h"

#include <libdeflate.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "util/cpu.h"

// Small enough to share out a ResNet-18 checkpoint's ~90 MB among 16
// threads, large enough that a block's combine costs nothing beside it.
#define BLOCK_BYTES ((size_t)4 << 20)
#define MAX_THREADS 16  // memory bandwidth, not cores, bounds it beyond

typedef struct CrcBlock {
    const uint8_t *data;
    size_t size;
    uint32_t crc;
} CrcBlock;

typedef struct CrcWork {
    CrcBlock *blocks;
    size_t first, end;  // this thread's blocks
} CrcWork;

static void *crc_blocks(void *argument) {
    const CrcWork *work = argument;
    for (size_t b = work->first; b < work->end; b++)
        work->blocks[b].crc = libdeflate_crc32(0, work->blocks[b].data, work->blocks[b].size);
    return NULL;
}

static uint32_t crc32_serial(const FileChunk *pieces, int count) {
    uint32_t crc = 0;
    for (int i = 0; i < count; i++)
        if (pieces[i].size) crc = libdeflate_crc32(crc, pieces[i].data, pieces[i].size);
    return crc;
}

uint32_t data_crc32(const FileChunk *pieces, int count) {
    size_t blocks = 0;
    for (int i = 0; i < count; i++) blocks += (pieces[i].size + BLOCK_BYTES - 1) / BLOCK_BYTES;
    int threads = cpu_usable_cores();
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if ((size_t)threads > blocks) threads = (int)blocks;
    CrcBlock *list = threads > 1 ? malloc(blocks * sizeof *list) : NULL;
    if (!list) return crc32_serial(pieces, count);  // one thread, or no memory for the list
    size_t filled = 0;
    for (int i = 0; i < count; i++)
        for (size_t offset = 0; offset < pieces[i].size; offset += BLOCK_BYTES) {
            const size_t left = pieces[i].size - offset;
            list[filled++] = (CrcBlock){(const uint8_t *)pieces[i].data + offset,
                                        left < BLOCK_BYTES ? left : BLOCK_BYTES, 0};
        }
    CrcWork work[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 0; t < threads; t++)
        work[t] = (CrcWork){list, blocks * (size_t)t / (size_t)threads,
                            blocks * (size_t)(t + 1) / (size_t)threads};
    for (int t = 1; t < threads; t++)
        started[t] = pthread_create(&ids[t], NULL, crc_blocks, &work[t]) == 0;
    crc_blocks(&work[0]);
    for (int t = 1; t < threads; t++)  // a thread that did not start: its blocks here
        started[t] ? (void)pthread_join(ids[t], NULL) : (void)crc_blocks(&work[t]);
    uLong crc = list[0].crc;
    for (size_t b = 1; b < blocks; b++)
        crc = crc32_combine(crc, list[b].crc, (z_off_t)list[b].size);
    free(list);
    return (uint32_t)crc;
}

void data_crc32_format(uint32_t crc, char text[DATA_CRC32_TEXT]) {
    snprintf(text, DATA_CRC32_TEXT, "%08x", (unsigned)crc);
}

int data_crc32_parse(const char *text, uint32_t *crc) {
    uint32_t parsed = 0;
    for (int i = 0; i < 8; i++) {
        const char c = text[i];
        const int digit = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (digit < 0) return -1;
        parsed = parsed << 4 | (uint32_t)digit;
    }
    if (text[8]) return -1;
    *crc = parsed;
    return 0;
}
