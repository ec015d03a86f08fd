// The --data entries of a command: the folders and image files given one by
// one (--data, at most OPTIONS_MAX_REPEATS) followed by those of a list file
// (--data-list FILE: one entry per line, blank lines skipped; for the long
// lists of image files that LightlyTrain's `data` takes, which no command
// line holds). A --data value that names no file and is a JSON list of
// strings, LightlyTrain's command line spelling data='["a.jpg", "dir"]',
// gives its strings as entries. What each entry may be: data/scan.h,
// dataset_scan_many.
#ifndef LTC_DATA_DATA_LIST_H
#define LTC_DATA_DATA_LIST_H

#include "util/error.h"

typedef struct DataList {
    const char **items;  // the entries in order (into the caller's strings and `text`)
    int count;
    char *text;          // the list file's contents, its lines cut into entries
    char *listed;        // the strings of JSON lists given as --data, one after another
} DataList;

// list_file may be NULL (no list file). Fails on an unreadable list file, a
// line with a NUL byte or a carriage return, a list file with no entry, a
// JSON list that is not one of strings, and no entry at all, naming what is
// wrong.
int data_list_build(const char *const *given, int given_count, const char *list_file,
                    DataList *list, ErrorMessage *err);
void data_list_free(DataList *list);

#endif
