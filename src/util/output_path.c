// Output path checks and folder creation (see output_path.h).
#include "util/output_path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"

int output_parent_folder(const char *path, char *out, size_t size, ErrorMessage *err) {
    if (snprintf(out, size, "%s", path) >= (int)size)
        return error_set(err, "'%s': path too long", path);
    size_t length = strlen(out);
    while (length > 1 && out[length - 1] == '/') out[--length] = '\0';  // "a/b/" is "a/b"
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, size, ".");
    else if (slash == out) out[1] = '\0';  // "/x": the root
    else *slash = '\0';
    return 0;
}

static int writable_folder(const char *folder, ErrorMessage *err) {
    struct stat info;
    if (stat(folder, &info) != 0)
        return error_set(err, "folder '%s' does not exist", folder);
    if (!S_ISDIR(info.st_mode)) return error_set(err, "'%s' is not a folder", folder);
    if (access(folder, W_OK | X_OK) != 0)
        return error_set(err, "folder '%s' is not writable: %s", folder, strerror(errno));
    return 0;
}

int output_entry_check(const char *path, ErrorMessage *err) {
    struct stat info;
    if (lstat(path, &info) != 0) return 0;
    if (S_ISLNK(info.st_mode) && stat(path, &info) != 0) return 0;  // a dangling link is replaced
    if (S_ISDIR(info.st_mode)) return error_set(err, "'%s' is a folder", path);
    if (!S_ISREG(info.st_mode)) return error_set(err, "'%s' is not a regular file", path);
    return 0;
}

int output_file_check(const char *path, int overwrite, ErrorMessage *err) {
    // "dir/" names a folder: without this the check ran on the folder's
    // parent and the write failed after all the work.
    const size_t length = strlen(path);
    if (length > 0 && path[length - 1] == '/')
        return error_set(err, "'%s' ends with '/': a file name is needed", path);
    if (output_entry_check(path, err)) return -1;
    if (!overwrite && access(path, F_OK) == 0)
        return error_set(err, "'%s' exists (pass --overwrite to replace it)", path);
    char folder[PATH_MAX];
    if (output_parent_folder(path, folder, sizeof folder, err)) return -1;
    return writable_folder(folder, err);
}

// path, which stat could not follow (errno), is a symbolic link: mkdir
// there fails with EEXIST, so it is bad input, named before any work.
static int unfollowable_link(const char *path, const char *entry, ErrorMessage *err) {
    const int reason = errno;
    struct stat info;
    if (lstat(entry, &info) != 0 || !S_ISLNK(info.st_mode)) return 0;
    if (reason == ENOENT)
        return error_set(err, "cannot create '%s': '%s' is a symbolic link to a missing target",
                         path, entry);
    return error_set(err, "cannot create '%s': '%s' is a symbolic link that cannot be followed: %s",
                     path, entry, strerror(reason));
}

int output_folder_check(const char *path, ErrorMessage *err) {
    char current[PATH_MAX];
    if (snprintf(current, sizeof current, "%s", path) >= (int)sizeof current)
        return error_set(err, "'%s': path too long", path);
    struct stat info;
    if (stat(current, &info) == 0) {
        if (!S_ISDIR(info.st_mode)) return error_set(err, "'%s' exists and is not a folder", path);
        return writable_folder(current, err);
    }
    if (unfollowable_link(path, current, err)) return -1;
    // Climb to the nearest existing ancestor: the folders below it are created.
    for (;;) {
        char parent[PATH_MAX];
        if (output_parent_folder(current, parent, sizeof parent, err)) return -1;
        if (stat(parent, &info) == 0) {
            if (!S_ISDIR(info.st_mode))
                return error_set(err, "cannot create '%s': '%s' is not a folder", path, parent);
            if (access(parent, W_OK | X_OK) != 0)
                return error_set(err, "cannot create '%s': folder '%s' is not writable", path,
                                 parent);
            return 0;
        }
        if (unfollowable_link(path, parent, err)) return -1;
        if (strcmp(parent, current) == 0) return error_set(err, "cannot create '%s'", path);
        memcpy(current, parent, sizeof current);
    }
}

void output_files_tidy(const char *const *paths, int count, char *note, size_t size) {
    char names[1024] = "";
    int removed = 0;
    for (int i = 0; i < count; i++)
        removed += file_remove_stale_temporaries_of(paths[i], names, sizeof names);
    if (!removed) snprintf(note, size, "%s", "");
    else snprintf(note, size, "removed %d temporary file(s) left by a run killed while writing: %s",
                  removed, names);
}

int output_folder_lock(const char *path, int *fd, ErrorMessage *err) {
    *fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0) return error_set(err, "cannot open folder '%s': %s", path, strerror(errno));
    int status;
    while ((status = flock(*fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) continue;
    if (status == 0) return 0;
    const int reason = errno;
    close(*fd);
    *fd = -1;
    if (reason == EWOULDBLOCK)
        return error_set(err, "'%s' is in use by another run (a process holds its lock): wait "
                              "for that run to end, or choose another folder", path);
    return 0;  // no locks here (ENOLCK, or NFS refusing flock on a folder)
}

int output_folder_is_locked_one(const char *path, int fd) {
    if (fd < 0) return 1;
    struct stat now, locked;
    return stat(path, &now) == 0 && fstat(fd, &locked) == 0 && now.st_dev == locked.st_dev &&
           now.st_ino == locked.st_ino;
}

// folder/name removed: a file, or an empty folder.
static void remove_entry(const char *folder, const char *name) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", folder, name) >= (int)sizeof path) return;
    if (unlink(path) != 0 && errno == EISDIR) rmdir(path);
}

void output_folder_remove_entries(const char *folder, const char *const *names, int count,
                                  int remove_folder) {
    for (int i = 0; i < count; i++) {
        const size_t length = strlen(names[i]);
        if (length == 0 || names[i][length - 1] != '*') {
            remove_entry(folder, names[i]);
            continue;
        }
        DIR *handle = opendir(folder);
        if (!handle) continue;
        struct dirent *entry;
        while ((entry = readdir(handle)))
            if (strncmp(entry->d_name, names[i], length - 1) == 0)
                remove_entry(folder, entry->d_name);
        closedir(handle);
    }
    if (remove_folder) rmdir(folder);
}

int output_folder_create(const char *path, ErrorMessage *err) {
    char partial[PATH_MAX];
    if (snprintf(partial, sizeof partial, "%s", path) >= (int)sizeof partial)
        return error_set(err, "'%s': path too long", path);
    // Each prefix ending before a '/', then the whole path.
    for (char *p = partial + 1;; p++) {
        const int end = *p == '\0';
        if (*p != '/' && !end) continue;
        *p = '\0';
        if (mkdir(partial, 0755) != 0 && errno != EEXIST)
            return error_set(err, "cannot create folder '%s': %s", partial, strerror(errno));
        if (end) break;
        *p = '/';
    }
    struct stat info;
    if (stat(path, &info) != 0 || !S_ISDIR(info.st_mode))
        return error_set(err, "cannot create folder '%s': a file is in the way", path);
    return 0;
}
