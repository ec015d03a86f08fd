// Weights by name for the commands: `lightly-train-c weights` (list, fetch,
// path) and the step train and embed take before any work, fetching what
// their options name (with a progress display on stderr).
#ifndef LTC_CLI_WEIGHTS_CLI_H
#define LTC_CLI_WEIGHTS_CLI_H

// Makes sure the weights text names (a file, a known name, a hub reference)
// are on disk, downloading them when missing. Returns 0, or 2 after printing
// one line "<program>: <what failed>[<hint>]" (hint may be NULL).
int weights_cli_prepare(const char *program, const char *text, const char *hint);

int command_weights(int argc, char **argv);

#endif
