// What a download verified, kept beside the cached file as "FILE.verified"
// (written atomically before FILE is renamed into place), so that every
// later use can check the file against it: its size on every use (a stat),
// its SHA-256 when `weights fetch` is asked for a file already cached.
//
// The record is text, one "key value" per line after a first line naming
// the format and its version (docs/weights.md):
//   lightly-train-c download record 1
//   sha256 <64 lower-case hex digits: the file's>
//   sha256_from <X-Linked-Etag | ETag | documented | received>
//   size <the file's bytes>
//   size_from <X-Linked-Size | Content-Range | Content-Length | received>
//   url <what was asked for>
// "received": the server announced none, so the value is what arrived. A
// reader ignores keys it does not know; a later version adds keys and raises
// the version only when sha256 or size change meaning, and a record of a
// version newer than the reader's reads as no record.
#ifndef LTC_WEIGHTS_RECORD_H
#define LTC_WEIGHTS_RECORD_H

#include <openssl/evp.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define WEIGHTS_SHA256_HEX 65  // 64 hex digits and the NUL
#define WEIGHTS_RECORD_SUFFIX ".verified"

typedef struct WeightsRecord {
    char sha256[WEIGHTS_SHA256_HEX];
    char sha256_from[32];
    int64_t size;
    char size_from[32];
    char url[4096];
} WeightsRecord;

// Writes record as the record of the file at path (path + ".verified").
int weights_record_write(const char *path, const WeightsRecord *record, ErrorMessage *err);

// The record of the file at path: 1 read, 0 none (or of a newer version),
// -1 when it cannot be read or is malformed (err says how).
int weights_record_read(const char *path, WeightsRecord *record, ErrorMessage *err);

typedef enum WeightsCheck {
    WEIGHTS_CHECK_MATCHES,     // the record's size (and SHA-256, when hashed)
    WEIGHTS_CHECK_UNRECORDED,  // no record: an earlier version's download, or placed by hand
    WEIGHTS_CHECK_DAMAGED,     // differs from its record, or the record is damaged: *why
} WeightsCheck;

// Checks the file at path against its record: its size, and its SHA-256
// too when hash is 1. *why gets what differs ("has 10 bytes, not the 20 its
// download verified"). -1 only when the file cannot be read (err).
int weights_record_check(const char *path, int hash, WeightsCheck *check, char *why,
                         size_t why_size, ErrorMessage *err);

// Feeds the first `limit` bytes of the file at path (all of it when limit
// < 0) into hash (OpenSSL's EVP); *hashed gets how many there were.
int weights_hash_file(EVP_MD_CTX *hash, const char *path, int64_t limit, int64_t *hashed,
                      ErrorMessage *err);

// Finishes hash into 64 hex digits.
void weights_hash_hex(EVP_MD_CTX *hash, char out[WEIGHTS_SHA256_HEX]);

#endif
