// Tests of the MLflow client's parts that need no MLflow server (the server
// itself: tests/e2e/mlflow.sh): JSON bodies (escaping, malformed UTF-8, the
// doubles protobuf reads), reading answers (json_skip_value,
// json_find_member), --loggers entries and the dotted option spelling, and
// the client's queue against a port nothing listens on (values dropped
// oldest first, the one-line report) and a server that never answers (the
// training thread never waits; the end waits no longer than it is given).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/loggers.h"
#include "cli/options.h"
#include "logging/json_text.h"
#include "logging/mlflow_client.h"
#include "nn/json_scan.h"
#include "util/cpu.h"

// ---- JSON bodies --------------------------------------------------------------------------

static void test_json_text_strings(void **state) {
    (void)state;
    JsonText text = {0};
    json_text_string(&text, "a\"b\\c\n\x01", 0);
    assert_string_equal(text.text, "\"a\\\"b\\\\c\\u000a\\u0001\"");
    json_text_clear(&text);
    // Well-formed UTF-8 stays; a stray byte, an overlong form and a cut
    // sequence each become U+FFFD.
    json_text_string(&text, "\xc3\xbc|\xff|\xc0\xaf|\xe2\x82", 0);
    assert_string_equal(text.text, "\"\xc3\xbc|\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd|"
                                   "\xef\xbf\xbd\xef\xbf\xbd\"");
    json_text_clear(&text);
    json_text_string(&text, "ab\xc3\xbc", 3);  // never inside a character
    assert_string_equal(text.text, "\"ab\"");
    json_text_clear(&text);
    json_text_raw(&text, "{");
    json_text_member_string(&text, "k", "v");
    json_text_member_string(&text, "x", "y");
    json_text_raw(&text, "}");
    assert_string_equal(text.text, "{\"k\": \"v\", \"x\": \"y\"}");
    assert_false(json_text_failed(&text));
    json_text_free(&text);
}

static void test_json_text_numbers(void **state) {
    (void)state;
    JsonText text = {0};
    json_text_double(&text, 0.1);
    json_text_raw(&text, " ");
    json_text_double(&text, 0.0 / 0.0);
    json_text_raw(&text, " ");
    json_text_double(&text, -1.0 / 0.0);
    json_text_raw(&text, " ");
    json_text_int(&text, -1234567890123LL);
    assert_string_equal(text.text, "0.10000000000000001 \"NaN\" \"-Infinity\" -1234567890123");
    assert_true(strtod("0.10000000000000001", NULL) == 0.1);  // every bit back
    json_text_free(&text);
}

// ---- reading answers ----------------------------------------------------------------------

static const char *const run_answer =
    "{\"run\": {\"info\": {\"start_time\": 1.5e3, \"end_time\": null, \"deleted\": false, "
    "\"tags\": [[], {}, {\"a\": [1, -2.25E-3, true]}], \"run_id\": \"ab\\u00fc12\"}, "
    "\"data\": {\"params\": [{\"key\": \"lr\", \"value\": \"0.1\"}]}}}";

static void test_json_find_member(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    JsonScanner scanner;
    json_scanner_init(&scanner, run_answer, strlen(run_answer));
    assert_int_equal(json_find_member(&scanner, "run", &err), 1);
    assert_int_equal(json_find_member(&scanner, "info", &err), 1);
    assert_int_equal(json_find_member(&scanner, "run_id", &err), 1);
    char id[16];
    assert_int_equal(json_read_string(&scanner, id, sizeof id, &err), 0);
    assert_string_equal(id, "ab\xc3\xbc" "12");
    json_scanner_init(&scanner, run_answer, strlen(run_answer));
    assert_int_equal(json_find_member(&scanner, "missing", &err), 0);
    assert_int_equal(json_expect_end(&scanner, &err), 0);  // the whole answer was skipped
}

static void test_json_skip_value_errors(void **state) {
    (void)state;
    const char *const bad[] = {"{\"a\": 01}", "[1,]", "{\"a\" 1}", "[1.]", "[1e]", "[tru]",
                               "{\"a\": [1, 2}", "[\"x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ErrorMessage err = {{0}};
        JsonScanner scanner;
        json_scanner_init(&scanner, bad[i], strlen(bad[i]));
        if (json_skip_value(&scanner, &err) == 0) fail_msg("accepted %s", bad[i]);
        assert_true(err.text[0] != '\0');
    }
    char deep[2 * JSON_SKIP_MAX_DEPTH + 3];
    memset(deep, '[', JSON_SKIP_MAX_DEPTH + 1);
    memset(deep + JSON_SKIP_MAX_DEPTH + 1, ']', JSON_SKIP_MAX_DEPTH + 1);
    deep[2 * JSON_SKIP_MAX_DEPTH + 2] = '\0';
    ErrorMessage err = {{0}};
    JsonScanner scanner;
    json_scanner_init(&scanner, deep, strlen(deep));
    assert_int_equal(json_skip_value(&scanner, &err), -1);
    assert_non_null(strstr(err.text, "nested deeper"));
    json_scanner_init(&scanner, deep + 1, strlen(deep) - 2);  // exactly the limit
    assert_int_equal(json_skip_value(&scanner, &err), 0);
}

// ---- --loggers ------------------------------------------------------------------------------

static int parse_entries(LoggerSettings *settings, ErrorMessage *err, int count, ...) {
    StringList list = {.count = count};
    va_list args;
    va_start(args, count);
    for (int i = 0; i < count; i++) list.items[i] = va_arg(args, const char *);
    va_end(args);
    return loggers_parse(&list, settings, err);
}

static void test_loggers_entries(void **state) {
    (void)state;
    LoggerSettings settings;
    ErrorMessage err = {{0}};
    assert_int_equal(parse_entries(&settings, &err, 0), 0);
    assert_true(settings.tensorboard && settings.jsonl && !settings.mlflow);
    assert_int_equal(parse_entries(&settings, &err, 5, "mlflow.experiment_name=e",
                                   "mlflow.run_name=r", "mlflow.tags.team/x=a=b",
                                   "mlflow.tracking_uri=https://h:5000/", "tensorboard=null"),
                     0);
    assert_true(settings.mlflow && !settings.tensorboard);
    assert_string_equal(settings.experiment_name, "e");
    assert_string_equal(settings.run_name, "r");
    assert_string_equal(settings.tracking_uri, "https://h:5000/");
    assert_int_equal(settings.tag_count, 1);
    assert_string_equal(settings.tags[0].key, "team/x");
    assert_string_equal(settings.tags[0].value, "a=b");
    assert_int_equal(parse_entries(&settings, &err, 2, "mlflow={}", "tensorboard"), 0);
    assert_true(settings.mlflow && settings.tensorboard && !settings.tracking_uri);
    // LightlyTrain's jsonl logger: metrics.jsonl, off with null.
    assert_int_equal(parse_entries(&settings, &err, 1, "jsonl=null"), 0);
    assert_true(!settings.jsonl && settings.tensorboard);
    assert_int_equal(
        parse_entries(&settings, &err, 2, "jsonl", "jsonl.flush_logs_every_n_steps=10"), 0);
    assert_true(settings.jsonl);
    // LightlyTrain's TensorBoardLoggerArgs: folders under --out, the prefix.
    assert_int_equal(parse_entries(&settings, &err, 5, "tensorboard.name=exp",
                                   "tensorboard.version=", "tensorboard.sub_dir=a/b",
                                   "tensorboard.prefix=p", "tensorboard.log_graph=False"),
                     0);
    assert_string_equal(settings.tensorboard_name, "exp");
    assert_null(settings.tensorboard_version);  // "": LightlyTrain's default, no folder
    assert_string_equal(settings.tensorboard_sub_dir, "a/b");
    assert_string_equal(settings.tensorboard_prefix, "p");
    const char *const refused[][2] = {
        {"wandb", "the loggers are mlflow, tensorboard and jsonl (no Weights & Biases"},
        {"csv", "the loggers are mlflow, tensorboard and jsonl"},
        {"jsonl.flush_logs_every_n_steps=0", "N >= 1"},
        {"jsonl.flush_logs_every_n_steps", "N >= 1"},
        {"jsonl.save_dir=x", "jsonl's setting is flush_logs_every_n_steps"},
        {"jsonl=yes", "expected jsonl, jsonl=null"},
        {"mlflow.log_model=true", "MLflow's settings here are experiment_name"},
        {"mlflow.run_name", "expected mlflow.KEY=VALUE with a value"},
        {"mlflow.tracking_uri=file:./mlruns", "http:// or https://"},
        {"mlflow.tracking_uri=http://", "http:// or https://"},
        {"mlflow.tags.a/../b=x", "MLflow takes tag names"},
        {"mlflow.tags.a|b=x", "MLflow takes tag names"},
        {"tensorboard.log_dir=x", "tensorboard's settings here are name, version, sub_dir"},
        {"tensorboard.name=/abs", "a folder under --out"},
        {"tensorboard.sub_dir=a/../b", "a folder under --out"},
        {"tensorboard.log_graph=true", "log_graph false only"},
        {"mlflow=yes", "expected mlflow, mlflow=null"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        err.text[0] = '\0';
        assert_int_equal(parse_entries(&settings, &err, 1, refused[i][0]), -1);
        if (!strstr(err.text, refused[i][1])) fail_msg("%s: %s", refused[i][0], err.text);
    }
    assert_int_equal(parse_entries(&settings, &err, 2, "mlflow=null", "mlflow.run_name=r"), -1);
}

static void test_loggers_tracking_uri_variable(void **state) {
    (void)state;
    LoggerSettings settings;
    ErrorMessage err = {{0}};
    assert_int_equal(parse_entries(&settings, &err, 1, "mlflow"), 0);
    unsetenv("MLFLOW_TRACKING_URI");
    assert_int_equal(loggers_resolve_tracking_uri(&settings, &err), -1);
    assert_non_null(strstr(err.text, "set MLFLOW_TRACKING_URI"));
    setenv("MLFLOW_TRACKING_URI", "databricks", 1);
    assert_int_equal(loggers_resolve_tracking_uri(&settings, &err), -1);
    assert_non_null(strstr(err.text, "MLFLOW_TRACKING_URI=databricks"));
    setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000", 1);
    assert_int_equal(loggers_resolve_tracking_uri(&settings, &err), 0);
    assert_string_equal(settings.tracking_uri, "http://127.0.0.1:5000");
    // Given on the command line, it wins over the variable.
    assert_int_equal(parse_entries(&settings, &err, 1, "mlflow.tracking_uri=http://h:1"), 0);
    assert_int_equal(loggers_resolve_tracking_uri(&settings, &err), 0);
    assert_string_equal(settings.tracking_uri, "http://h:1");
    unsetenv("MLFLOW_TRACKING_URI");
}

// The dotted spelling of LightlyTrain's nested arguments, and the values as text.
static void test_dotted_option(void **state) {
    (void)state;
    StringList loggers = {0};
    const char *out = NULL;
    int steps = -1;
    const OptionSpec specs[] = {
        {.name = "loggers", .type = OPTION_STRING, .value = &loggers, .repeatable = 1,
         .dotted = 1},
        {.name = "out", .type = OPTION_STRING, .value = &out},
        {.name = "max-steps", .type = OPTION_INT, .value = &steps, .allow_auto = 1, .min = 0,
         .max = 10},
    };
    const OptionParser parser = {.program = "p", .specs = specs, .count = 3};
    char *argv[] = {"train", "loggers.mlflow.run_name=r", "--loggers", "mlflow",
                    "--loggers.mlflow.tags.a=b=c", "out=o"};
    ErrorMessage err = {{0}};
    assert_int_equal(options_parse(&parser, 6, argv, NULL, &err), 0);
    assert_int_equal(loggers.count, 3);
    assert_string_equal(loggers.items[0], "mlflow.run_name=r");
    assert_string_equal(loggers.items[1], "mlflow");
    assert_string_equal(loggers.items[2], "mlflow.tags.a=b=c");
    char text[128];
    options_format_value(&specs[0], text, sizeof text);
    assert_string_equal(text, "mlflow.run_name=r mlflow mlflow.tags.a=b=c");
    options_format_value(&specs[2], text, sizeof text);
    assert_string_equal(text, "auto");
    char *no_value[] = {"train", "--loggers.mlflow.run_name", "r"};
    assert_int_equal(options_parse(&parser, 3, no_value, NULL, &err), -1);
    assert_non_null(strstr(err.text, "write it loggers.mlflow.run_name=VALUE"));
    char *not_dotted[] = {"train", "out.x=1"};
    assert_int_equal(options_parse(&parser, 2, not_dotted, NULL, &err), -1);
    assert_non_null(strstr(err.text, "unknown option 'out.x'"));
}

// ---- the client without a server ---------------------------------------------------------------

// A port on 127.0.0.1 that refuses connections (bound, closed again).
static int closed_port(void) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    assert_int_equal(bind(fd, (struct sockaddr *)&address, sizeof address), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&address, &length), 0);
    close(fd);
    return ntohs(address.sin_port);
}

static void log_steps(MlflowClient *client, int first, int count) {
    for (int step = first; step < first + count; step++) {
        const char *key = "train_loss";
        const double value = step;
        mlflow_client_log(client, step, &key, &value, 1);
    }
}

// A server never reached: its first failure is a notice, the queue keeps the
// newest values, the end makes one more attempt and reports in one line.
static void test_client_unreachable(void **state) {
    (void)state;
    char uri[64], line[1200];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d", closed_port());
    const MlflowPair params[] = {{"lr", "0.1"}};
    const MlflowSettings settings = {.tracking_uri = uri, .params = params, .param_count = 1,
                                     .queue_values = 10};
    MlflowClient *client = NULL;
    ErrorMessage err = {{0}};
    assert_int_equal(mlflow_client_start(&client, &settings, &err), 0);
    log_steps(client, 0, 30);
    for (int i = 0; i < 200 && !mlflow_client_notice(client, line, sizeof line); i++)
        usleep(10000);
    assert_non_null(strstr(line, "warning: MLflow at http://127.0.0.1:"));
    assert_non_null(strstr(line, "training goes on"));
    char report[1200];
    const double start = time_now();
    mlflow_client_finish(client, "FINISHED", NULL, 0, 60.0, report, sizeof report);
    assert_true(time_now() - start < 30.0);  // one more attempt, not the 60 s
    assert_non_null(strstr(report, "MLflow: nothing was logged to http://127.0.0.1:"));
    assert_non_null(strstr(report, "30 metric values (they are in metrics.jsonl), 1 parameters"));
    assert_non_null(
        strstr(report, "20 values of steps 0..19 were pushed out of the full queue of 10"));
    assert_null(strchr(report, '\n'));
    mlflow_client_free(client);
}

// A server that takes the connection and never answers: handing values
// over does not wait for it, and the end gives up at its deadline.
static void test_client_silent_server(void **state) {
    (void)state;
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    assert_int_equal(bind(listener, (struct sockaddr *)&address, sizeof address), 0);
    assert_int_equal(listen(listener, 8), 0);  // connections complete; nothing reads them
    assert_int_equal(getsockname(listener, (struct sockaddr *)&address, &length), 0);
    char uri[64];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d", ntohs(address.sin_port));
    const MlflowSettings settings = {.tracking_uri = uri};
    MlflowClient *client = NULL;
    ErrorMessage err = {{0}};
    assert_int_equal(mlflow_client_start(&client, &settings, &err), 0);
    usleep(100000);  // the sender is waiting for an answer by now
    double start = time_now();
    log_steps(client, 0, 1000);
    // A request waits up to 60 s for its answer; the hand-over never does.
    assert_true(time_now() - start < 10.0);
    char report[1200];
    start = time_now();
    mlflow_client_finish(client, "FINISHED", NULL, 0, 1.0, report, sizeof report);
    assert_true(time_now() - start < 20.0);
    assert_non_null(strstr(report, "MLflow: nothing was logged to"));
    assert_non_null(strstr(report, "1000 metric values"));
    mlflow_client_free(client);
    close(listener);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_text_strings),
        cmocka_unit_test(test_json_text_numbers),
        cmocka_unit_test(test_json_find_member),
        cmocka_unit_test(test_json_skip_value_errors),
        cmocka_unit_test(test_loggers_entries),
        cmocka_unit_test(test_loggers_tracking_uri_variable),
        cmocka_unit_test(test_dotted_option),
        cmocka_unit_test(test_client_unreachable),
        cmocka_unit_test(test_client_silent_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
