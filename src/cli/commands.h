// Sub-command entry points: each parses its own options and returns the exit
// status (0 success, 1 failure while running, 2 bad usage or bad input).
#ifndef LTC_CLI_COMMANDS_H
#define LTC_CLI_COMMANDS_H

int command_train(int argc, char **argv);
int command_bench_data(int argc, char **argv);
int command_export(int argc, char **argv);
int command_embed(int argc, char **argv);

#endif
