// The download record beside a cached weights file, and the checks of the
// file against it (see record.h).
#include "weights/record.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/file.h"

#define RECORD_HEADER "lightly-train-c download record"
#define RECORD_VERSION 1
#define RECORD_PATH_BYTES 4352

static int record_path(const char *path, char *out, ErrorMessage *err) {
    if (snprintf(out, RECORD_PATH_BYTES, "%s" WEIGHTS_RECORD_SUFFIX, path) >= RECORD_PATH_BYTES)
        return error_set(err, "path too long: %s", path);
    return 0;
}

int weights_record_write(const char *path, const WeightsRecord *record, ErrorMessage *err) {
    char record_file[RECORD_PATH_BYTES], text[sizeof record->url + 512];
    if (record_path(path, record_file, err)) return -1;
    const int n = snprintf(text, sizeof text,
                           RECORD_HEADER " %d\nsha256 %s\nsha256_from %s\nsize %" PRId64
                                         "\nsize_from %s\nurl %s\n",
                           RECORD_VERSION, record->sha256, record->sha256_from, record->size,
                           record->size_from, record->url);
    const FileChunk chunk = {text, (size_t)n};
    return file_write_atomic(record_file, &chunk, 1, err);
}

// Copies a value into out (size bytes) when it fits: 1, else 0.
static int copy_value(const char *value, char *out, size_t size) {
    const size_t length = strlen(value);
    if (length == 0 || length >= size) return 0;
    memcpy(out, value, length + 1);
    return 1;
}

static int is_sha256(const char *text) {
    if (strlen(text) != 64) return 0;
    for (const char *c = text; *c; c++)
        if (!isxdigit((unsigned char)*c) || isupper((unsigned char)*c)) return 0;
    return 1;
}

int weights_record_read(const char *path, WeightsRecord *record, ErrorMessage *err) {
    char record_file[RECORD_PATH_BYTES];
    if (record_path(path, record_file, err)) return -1;
    *record = (WeightsRecord){.size = -1};
    FILE *file = fopen(record_file, "r");
    if (!file) {
        if (errno == ENOENT) return 0;
        return error_set(err, "cannot read %s: %s", record_file, strerror(errno));
    }
    const struct {
        const char *key;
        char *value;
        size_t size;
    } texts[] = {{"sha256", record->sha256, sizeof record->sha256},
                 {"sha256_from", record->sha256_from, sizeof record->sha256_from},
                 {"size_from", record->size_from, sizeof record->size_from},
                 {"url", record->url, sizeof record->url}};
    char line[sizeof record->url + 64];
    int version = 0, status = 1;
    if (!fgets(line, sizeof line, file) ||
        sscanf(line, RECORD_HEADER " %d", &version) != 1 || version < 1)
        status = error_set(err, "%s: not a download record", record_file);
    else if (version > RECORD_VERSION)
        status = 0;  // a later version's: its sha256 and size mean something else
    while (status == 1 && fgets(line, sizeof line, file)) {
        line[strcspn(line, "\n")] = '\0';
        char *value = strchr(line, ' ');
        if (!value) continue;
        *value++ = '\0';
        int ok = 1;  // keys not known here: a later version's additions
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
            if (strcmp(line, texts[i].key) == 0)
                ok = copy_value(value, texts[i].value, texts[i].size);
        if (strcmp(line, "size") == 0) {
            char *end = NULL;
            record->size = strtoll(value, &end, 10);
            ok = end != value && *end == '\0' && record->size >= 0;
        }
        if (!ok) status = error_set(err, "%s: bad %s '%s'", record_file, line, value);
    }
    fclose(file);
    if (status == 1 && (!is_sha256(record->sha256) || record->size < 0))
        status = error_set(err, "%s: no sha256 or size", record_file);
    return status;
}

int weights_hash_file(EVP_MD_CTX *hash, const char *path, int64_t limit, int64_t *hashed,
                      ErrorMessage *err) {
    FILE *file = fopen(path, "rb");
    if (!file) return error_set(err, "cannot read %s: %s", path, strerror(errno));
    unsigned char buffer[1 << 16];
    *hashed = 0;
    for (;;) {
        size_t want = sizeof buffer, n;
        if (limit >= 0 && limit - *hashed < (int64_t)want) want = (size_t)(limit - *hashed);
        if (want == 0 || (n = fread(buffer, 1, want, file)) == 0) break;
        EVP_DigestUpdate(hash, buffer, n);
        *hashed += (int64_t)n;
    }
    const int failed = ferror(file);
    fclose(file);
    return failed ? error_set(err, "cannot read %s", path) : 0;
}

void weights_hash_hex(EVP_MD_CTX *hash, char out[WEIGHTS_SHA256_HEX]) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned length = 0;
    EVP_DigestFinal_ex(hash, digest, &length);
    for (unsigned i = 0; i < length && i < 32; i++) snprintf(out + 2 * i, 3, "%02x", digest[i]);
}

static int file_sha256(const char *path, char out[WEIGHTS_SHA256_HEX], ErrorMessage *err) {
    EVP_MD_CTX *hash = EVP_MD_CTX_new();
    int64_t hashed;
    int status = hash && EVP_DigestInit_ex(hash, EVP_sha256(), NULL) == 1
                     ? weights_hash_file(hash, path, -1, &hashed, err)
                     : error_set(err, "SHA-256 unavailable");
    if (status == 0) weights_hash_hex(hash, out);
    EVP_MD_CTX_free(hash);
    return status;
}

int weights_record_check(const char *path, int hash, WeightsCheck *check, char *why,
                         size_t why_size, ErrorMessage *err) {
    WeightsRecord record;
    ErrorMessage record_err = {{0}};
    const int found = weights_record_read(path, &record, &record_err);
    *check = found == 0 ? WEIGHTS_CHECK_UNRECORDED : WEIGHTS_CHECK_DAMAGED;
    if (found == 0) return 0;
    if (found < 0) {
        snprintf(why, why_size, "has a damaged download record (%s)", record_err.text);
        return 0;
    }
    struct stat info;
    if (stat(path, &info) != 0) return error_set(err, "cannot read %s: %s", path, strerror(errno));
    if ((int64_t)info.st_size != record.size) {
        snprintf(why, why_size, "has %lld bytes, not the %" PRId64 " its download verified",
                 (long long)info.st_size, record.size);
        return 0;
    }
    if (hash) {
        char sha256[WEIGHTS_SHA256_HEX];
        if (file_sha256(path, sha256, err)) return -1;
        if (strcmp(sha256, record.sha256) != 0) {
            snprintf(why, why_size, "has SHA-256 %.12s..., not the %.12s... its download verified",
                     sha256, record.sha256);
            return 0;
        }
    }
    *check = WEIGHTS_CHECK_MATCHES;
    return 0;
}
