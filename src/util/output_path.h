// Checks, before a command starts working, that it will be able to write
// its outputs: a long run must never end in a refused write, and a bad
// output path is bad input (exit 2), found in the first second. Each
// function returns 0, or -1 with a message naming the path and the problem.
#ifndef LTC_UTIL_OUTPUT_PATH_H
#define LTC_UTIL_OUTPUT_PATH_H

#include "util/error.h"

// A file the command will write atomically (temporary file + rename): path
// must not be a folder or anything but a regular file; an existing file is
// only replaced with overwrite; its folder must exist and be writable.
int output_file_check(const char *path, int overwrite, ErrorMessage *err);

// A folder the command will create (with its missing parents) or write into:
// an existing path must be a writable folder; otherwise the nearest existing
// ancestor must be a writable folder, with no symbolic link on the way that
// leads nowhere (a dangling or looping link).
int output_folder_check(const char *path, ErrorMessage *err);

// A file the command appends to or replaces inside an output folder: when
// it exists it must be a regular file (not a folder, pipe or device).
int output_entry_check(const char *path, ErrorMessage *err);

// What killed writers of these files left: their "<path>.tmp.<pid>" files
// (util/file.h) are removed. note gets "removed N temporary file(s) left by a
// run killed while writing: ..." or "" when there were none.
void output_files_tidy(const char *const *paths, int count, char *note, size_t size);

// Takes an exclusive, non-blocking lock on the folder path (flock(2) on the
// folder itself, no lock file in it), held until *fd is closed or the
// process ends, so a killed run never leaves it held. Two runs writing into
// one folder interleave their logs and replace each other's checkpoints:
// the second is refused instead. Returns 0 with *fd the descriptor to close
// (-1 where the file system has no such locks: the run goes on unlocked),
// or -1 with a message when another process holds the lock.
int output_folder_lock(const char *path, int *fd, ErrorMessage *err);

// Whether path is still the folder locked as fd (same device and inode): a
// run writes by path, so a folder deleted (and made again by another run)
// under it would take its files. 1 also where fd < 0 (nothing locked).
int output_folder_is_locked_one(const char *path, int fd);

// The folder part of path ("." when there is none; "a/b/" is "a/b"), in out.
int output_parent_folder(const char *path, char *out, size_t size, ErrorMessage *err);

// mkdir -p: creates path and its missing parents (mode 0755).
int output_folder_create(const char *path, ErrorMessage *err);

// Removes the entries of folder that a command wrote there: names[i] is a
// file, an empty folder, or "PREFIX*" for every file whose name starts with
// PREFIX; then the folder itself when remove_folder and it is empty. What
// cannot be removed (a folder a user filled meanwhile) stays.
void output_folder_remove_entries(const char *folder, const char *const *names, int count,
                                  int remove_folder);

#endif
