// Command-line option parser shared by every sub-command: a table of
// OptionSpec rows describes the options, options_parse() fills the values they
// point to, options_print_help() prints the table. No global state, no
// allocation: parsed strings point into argv.
//
// Accepted spellings (a name matches with dashes or underscores alike):
//   --batch-size 64   --batch-size=64   batch-size=64   batch_size=64
//   --flag   --flag=true   flag=false   flag=1   (flags never take the next word)
//   --help or -h anywhere prints the help.
//   A dotted option (OptionSpec.dotted) also reads name.key=value as
//   --name key=value (LightlyTrain's nested arguments).
// The value is everything after the first '=', so --method-arg=temperature=0.1
// gives method-arg the value "temperature=0.1".
#ifndef LTC_CLI_OPTIONS_H
#define LTC_CLI_OPTIONS_H

#include <stdio.h>

#include "util/error.h"

typedef enum OptionType {
    OPTION_FLAG,    // value: int*, set to 1 (or 0 with =false / =0)
    OPTION_INT,     // value: int*
    OPTION_FLOAT,   // value: double*
    OPTION_STRING,  // value: const char** (or StringList* when repeatable)
    OPTION_CHOICE,  // value: int*, the index into choices
} OptionType;

// Most values a repeatable option keeps; one more is an error.
#define OPTIONS_MAX_REPEATS 32
// Most rows one OptionParser may have.
#define OPTIONS_MAX_SPECS 64

// Values of a repeatable STRING option, in the order given. Items point into
// argv. Whatever the list held before (a default) is replaced, not appended
// to, once the option appears on the command line.
typedef struct StringList {
    const char *items[OPTIONS_MAX_REPEATS];
    int count;
} StringList;

typedef struct OptionSpec {
    const char *name;     // long name with dashes, no leading "--": "batch-size"
    OptionType type;
    void *value;          // see OptionType; holds the default before parsing
    const char *metavar;  // shown in help ("N", "DIR"); NULL: a default per type
    const char *help;     // one line; the default is appended from *value
    double min, max;      // INT/FLOAT inclusive range, checked only when min < max
                          // (so a zero-initialised row has no range); use
                          // -INFINITY / INFINITY for a one-sided range
    const char *const *choices;  // CHOICE: NULL-terminated list
    const char *const *value_aliases;  // CHOICE: NULL-terminated "WORD=CHOICE" words taken
                                       // for a choice (LightlyTrain's values: "cuda=gpu")
    const char *const *value_refusals;  // CHOICE: NULL-terminated "WORD=WHY": a word refused
                                        // saying why (another tool's value with no
                                        // counterpart here), or NULL
    // CHOICE: a word that is no choice nor alias is tried once more as the
    // choice this writes into buffer (returning 1; 0: none), for spellings
    // too many to list as aliases (LightlyTrain's model names); or NULL.
    int (*value_canonical)(const char *word, char *buffer, size_t size);
    const char **given;   // CHOICE: receives the word as typed (before any alias), or NULL
    const char *alias;    // another name of the option (LightlyTrain's), or NULL
    int required;         // an error when the option is not given
    int in_usage;         // named in the usage line though not required (--data, or --data-list)
    int allow_auto;       // INT, FLOAT: the word "auto" is accepted and stored as -1
                          // (so -1 must lie outside the range: a typed -1 is refused)
    int repeatable;       // STRING: may be given several times (value: StringList*)
    int dotted;           // STRING: also LightlyTrain's nested form NAME.KEY=VALUE,
                          // which gives the value KEY=VALUE (loggers.mlflow.run_name=x)
} OptionSpec;

typedef struct OptionParser {
    const char *program;  // "lightly-train-c bench-data": the usage line
    const char *summary;  // one paragraph under the usage line; may be NULL
    const char *epilog;   // a paragraph after the options (exit statuses); may be NULL
    const OptionSpec *specs;
    int count;
} OptionParser;

// Parses argv[1..argc-1] (argv[0], the sub-command name, is skipped).
// Returns 0 when parsed; 1 when --help/-h was given and the help was printed
// to out (the caller exits 0); -1 on a usage error, with one line in err that
// names the option (the caller prints "<program>: <message>" and exits 2).
// On error some values may already have been overwritten.
int options_parse(const OptionParser *parser, int argc, char **argv, FILE *out,
                  ErrorMessage *err);

// options_parse for a sub-command's entry point: returns 1 when the command
// is over before running, with *exit_status set (0 after --help; 2 after a
// usage error, printed to stderr as "<program>: <message>"), else 0.
int options_parse_command(const OptionParser *parser, int argc, char **argv, int *exit_status);

// The current value of the option as text: a flag true / false, a number
// (or "auto"), a choice, a string ("" when unset), a repeatable string's
// values joined by spaces.
void options_format_value(const OptionSpec *spec, char *buffer, size_t size);

// Usage line, summary, then one aligned line per option: name, metavar, help
// and the default taken from the current *value.
void options_print_help(const OptionParser *parser, FILE *out);

// {"true", "false", NULL}: a CHOICE with these reads "--x false" as written
// (flags never take the next word); index 0 is true.
extern const char *const OPTION_BOOLEAN_CHOICES[];
// {"cuda=gpu", NULL}: LightlyTrain's accelerator name, for an --accelerator
// whose choices include "gpu".
extern const char *const OPTION_ACCELERATOR_ALIASES[];
// --precision: Lightning's 32, 16 and bf16 for 32-true, 16-mixed and bf16-mixed.
extern const char *const OPTION_PRECISION_ALIASES[];
// --precision: Lightning's other precisions, refused saying why.
extern const char *const OPTION_PRECISION_REFUSALS[];

#endif
