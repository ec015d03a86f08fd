// TensorBoard event-file writer: scalars (simple_value) and RGB images (PNG)
// appended as length-prefixed, CRC-checked records to
// <dir>/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>, readable by
// `tensorboard --logdir <dir>` and tensorboard's EventAccumulator.
//
// Records are buffered by stdio and flushed by tb_flush, by tb_writer_close,
// and automatically once TB_FLUSH_SECONDS have passed since the last flush
// or TB_FLUSH_RECORDS records are pending, so a live TensorBoard sees a run
// at most a few seconds late. Every function returns 0 or -1 with a message
// (unwritable directory, disk full, ...); after a failed write the writer
// refuses further records, since the file's framing can no longer be
// trusted. Not thread-safe: one writer, used by rank 0's main loop.
#ifndef LTC_LOGGING_TB_WRITER_H
#define LTC_LOGGING_TB_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define TB_FLUSH_SECONDS 2.0
#define TB_FLUSH_RECORDS 100

typedef struct TbWriter TbWriter;

// Creates dir when it does not exist (its parent must), opens a new event
// file there and writes the first record, Event{wall_time, file_version
// "brain.Event:2"}. An existing file is never overwritten: <n> counts up
// from 0 until a free name is found.
int tb_writer_open(TbWriter **writer, const char *dir, ErrorMessage *err);

// The full path of the event file being written (owned by the writer).
const char *tb_writer_path(const TbWriter *writer);

int tb_add_scalar(TbWriter *writer, const char *tag, int64_t step, float value, ErrorMessage *err);

// rgb: (height, width, 3) bytes, rows packed; encoded as an 8-bit RGB PNG.
int tb_add_image(TbWriter *writer, const char *tag, int64_t step, int width, int height,
                 const uint8_t *rgb, ErrorMessage *err);

// The same PNG encoding on its own (an 8-bit RGB PNG in memory, *png
// malloc'ed) at zlib compression level `level` (0..9, -1: zlib's default):
// the embedding projector's sprite (embed/projector.h).
int tb_encode_png(const uint8_t *rgb, int width, int height, int level, uint8_t **png,
                  size_t *size, ErrorMessage *err);

// Pushes everything written so far to the file (fflush).
int tb_flush(TbWriter *writer, ErrorMessage *err);

// Flushes, closes and frees; writer may be NULL. Returns -1 when the final
// flush or close failed (the writer is freed either way).
int tb_writer_close(TbWriter *writer, ErrorMessage *err);

#endif
