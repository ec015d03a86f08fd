// One file over HTTP(S) into the cache, done right: libcurl (redirects
// followed, at most 10, http and https only; proxies from http_proxy,
// https_proxy, no_proxy as libcurl reads them; the token sent to the hub
// only, never to the storage a redirect leads to), written as
// "<path>.<host>.partial" and renamed to path only after its SHA-256
// (OpenSSL's libcrypto) and size match and what was verified is recorded
// beside it (record.h); an interrupted transfer continues
// with a Range request, in this process or the next one; 5xx, 429, stalls
// (less than settings.min_rate for settings.stall_seconds) and connection
// resets retried with back-off, an attempt that brought less than
// min_rate x stall_seconds bytes using up a retry (a host that cannot be
// reached at all is not retried: no network fails at once); the whole
// download ends at settings.deadline_seconds. The caller holds the lock
// (lock.h) and has checked that path does not exist yet, or is a damaged
// file to replace (the rename replaces it).
//
// The expected SHA-256 is the hub's: the X-Linked-Etag header of its
// response for a file stored in LFS (also a 64-hex ETag), the expected size
// its X-Linked-Size (else the Content-Length). A server that sends neither
// gets its file checked for size only, which the result says. A documented
// SHA-256 (request->sha256) must also be the one the server announces.
#ifndef LTC_WEIGHTS_DOWNLOAD_H
#define LTC_WEIGHTS_DOWNLOAD_H

#include <stdint.h>

#include "util/error.h"
#include "weights/cache.h"

typedef enum WeightsEventKind {
    WEIGHTS_WAITING,     // another process downloads the file: waiting for its lock
    WEIGHTS_START,       // the transfer starts (resumed_from > 0: continues a partial file)
    WEIGHTS_PROGRESS,    // bytes arrived
    WEIGHTS_RETRY,       // an attempt failed (detail: why); the next starts after `wait` seconds
    WEIGHTS_DONE,        // the file is in place (detail: how it was verified)
    WEIGHTS_DAMAGED,     // the cached file differs from its record (detail: how); downloaded anew
    WEIGHTS_UNVERIFIED,  // the cached file has no record (record.h): used unchecked
} WeightsEventKind;

typedef struct WeightsEvent {
    WeightsEventKind kind;
    const char *name, *url, *path;
    int64_t done;          // bytes of the file received so far, resumed part included
    int64_t total;         // the file's size, -1 while unknown
    int64_t resumed_from;  // START: bytes already there
    double seconds;        // since this attempt started
    double wait;           // RETRY: seconds until the next attempt
    const char *detail;    // RETRY, DONE, DAMAGED
} WeightsEvent;

typedef void (*WeightsProgress)(void *user, const WeightsEvent *event);

typedef struct DownloadRequest {
    const char *name;   // what the user asked for, for messages
    const char *url;
    const char *path;   // the final file
    const char *token;  // "Authorization: Bearer" for the first host, or NULL
    const char *sha256; // the SHA-256 the file must have (documented), or NULL: the server's
    const char *sha256_prefix;  // hex digits its SHA-256 must begin with (torchvision's file
                                // names), or NULL
    const char *denied_hint;  // what to do on 401 / 403, NULL: the hub's (gated: HF_TOKEN)
    DownloadSettings settings;
    WeightsProgress progress;  // may be NULL
    void *user;
} DownloadRequest;

// Downloads request->url to request->path. Errors are one line: the name,
// the URL, what went wrong and what to do (no network, 404, 401/403, a hash
// mismatch, a disk error).
int weights_download(const DownloadRequest *request, ErrorMessage *err);

// The CA certificates HTTPS is verified with: $CURL_CA_BUNDLE, else
// $SSL_CERT_FILE, else the first readable bundle of the usual Linux places
// (Debian's, Fedora's, openSUSE's, Alpine's), else NULL (libcurl's default).
const char *weights_ca_bundle(void);

#endif
