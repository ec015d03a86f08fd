#!/usr/bin/env python3
"""Reads `train` runs back from a real MLflow tracking server through MLflow's
own client (MlflowClient), for tests/e2e/mlflow.sh. Run by the test
environment's Python (LTC_TEST_PYTHON, tools/test_venv.sh).

    mlflow_check.py TRACKING_URI OPTIONS_FILE

reads checks from stdin, a line each, and answers each line with the
failures it found ("FAIL: ...", one a line) and then "end ok" or "end
failed"; it imports MLflow at once, so the test starts it beside the
server. OPTIONS_FILE lists the options of `lightly-train-c train --help`,
one name a line (with underscores): every one must be a parameter of each
run checked with "params". A check is comma-separated KEY=VALUE words about
the run whose id is in OUT/mlflow_run.txt:
  out=DIR            the run's --out (required)
  status=S           its status (FINISHED, FAILED, KILLED)
  experiment=NAME    its experiment's name, with one run in it when runs=1
  runs=N             the number of runs in that experiment
  run_name=NAME      its name
  tag.KEY=VALUE      a tag
  param.KEY=VALUE    a parameter
  params=1           every option is a parameter, and resolved.lr is the lr
                     train.log reports
  metrics=all        every value of metrics.jsonl at every step is the run's,
                     each once, and it has no other
  metrics=lossy      the run's values are metrics.jsonl's, each at most once;
                     the ones missing lie in the step range train.log's
                     MLflow line gives as NOT SENT, and the last step's are all there
  artifacts=A+B      exactly these artifacts, downloaded and compared with
                     the files in OUT (train.log: the upload is a prefix of it)
  keys=K1+K2         these metric names are among the run's
"""
import json
import math
import os
import re
import sys
import tempfile

from mlflow.tracking import MlflowClient

URI, OPTIONS_FILE = sys.argv[1], sys.argv[2]
client = MlflowClient(tracking_uri=URI)
failures = []


def fail(message):
    failures.append(message)
    print("FAIL:", message.replace("\n", " "), flush=True)


def jsonl_values(out):
    """{key: [(step, repr(value))]} of OUT/metrics.jsonl (null: NaN); repr gives
    a double back exactly and makes NaN equal to itself."""
    values = {}
    with open(os.path.join(out, "metrics.jsonl")) as lines:
        for line in lines:
            record = json.loads(line)
            for key, value in record.items():
                if key != "step":
                    values.setdefault(key, []).append(
                        (record["step"], repr(math.nan if value is None else float(value))))
    return values


def history(run_id, key):
    return [(m.step, repr(float(m.value))) for m in client.get_metric_history(run_id, key)]


def same(a, b):
    return sorted(a) == sorted(b)


def check_metrics(run, out, mode):
    expected = jsonl_values(out)
    run_keys = set(run.data.metrics)
    if run_keys != set(expected):
        fail(f"{out}: metric names {sorted(run_keys)} != metrics.jsonl's {sorted(expected)}")
    if mode == "all":
        for key, values in expected.items():
            got = history(run.info.run_id, key)
            if not same(got, values):
                fail(f"{out}: {key}: MLflow has {sorted(got)}, metrics.jsonl {sorted(values)}")
        return
    # lossy: what was sent is right; the rest lies where the report says.
    with open(os.path.join(out, "train.log")) as log:
        report = [line for line in log if "MLflow: run " in line]
    match = re.search(r"NOT SENT \(they are in metrics.jsonl\): (\d+) metric values of steps "
                      r"(\d+)\.\.(\d+): (\d+) pushed out of the full queue", "".join(report))
    if len(report) != 1 or not match:
        fail(f"{out}: expected one MLflow line naming values pushed out of the queue: {report}")
        return
    count, first, last, pushed = map(int, match.groups())
    missing = 0
    last_step = max(step for values in expected.values() for step, _ in values)
    for key, values in expected.items():
        got = history(run.info.run_id, key)
        if len(set(got)) != len(got) or any(value not in values for value in got):
            fail(f"{out}: {key}: MLflow has values metrics.jsonl lacks, or twice: {got}")
        lost = [value for value in values if value not in got]
        missing += len(lost)
        if any(step < first or step > last for step, _ in lost):
            fail(f"{out}: {key}: values lost outside steps {first}..{last}: {lost}")
        if any(step == last_step for step, _ in lost):
            fail(f"{out}: {key}: the last step's value was dropped (the oldest go first)")
    if missing != count or pushed != count or missing == 0:
        fail(f"{out}: {missing} values missing, the report says {count} ({pushed} pushed out)")


def check_artifacts(run, out, names):
    listed = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    if listed != sorted(names):
        fail(f"{out}: artifacts {listed}, expected {sorted(names)}")
        return
    local = {"train.log": "train.log",
             "exported_last.safetensors": "exported_models/exported_last.safetensors"}
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            with open(client.download_artifacts(run.info.run_id, name, folder), "rb") as f:
                uploaded = f.read()
            with open(os.path.join(out, local[name]), "rb") as f:
                mine = f.read()
            # train.log goes on after the upload (the MLflow line itself).
            if not (uploaded == mine or (name == "train.log" and mine.startswith(uploaded)
                                          and len(uploaded) > 0)):
                fail(f"{out}: artifact {name} ({len(uploaded)} bytes) differs from {local[name]} "
                     f"({len(mine)} bytes)")


def check_params(run, out):
    params = run.data.params
    with open(OPTIONS_FILE) as names:
        options = [name.strip() for name in names if name.strip()]
    missing = [name for name in options if name not in params]
    if missing or not options:
        fail(f"{out}: options missing from the parameters: {missing}")
    with open(os.path.join(out, "train.log")) as log:
        lr = re.search(r"config: lr ([0-9.e+-]+) ", log.read())
    resolved = float(params.get("resolved.lr", "nan"))
    if not lr or not math.isclose(resolved, float(lr.group(1)), rel_tol=1e-5):
        fail(f"{out}: resolved.lr {resolved} is not train.log's lr {lr and lr.group(1)}")


def check_run(check):
    words = dict(word.split("=", 1) for word in check.split(","))
    out = words["out"]
    with open(os.path.join(out, "mlflow_run.txt")) as run_file:
        run_id = run_file.readline().strip().split("=", 1)[1]
    run = client.get_run(run_id)
    experiment = client.get_experiment(run.info.experiment_id)
    for key, value in words.items():
        if key == "status" and run.info.status != value:
            fail(f"{out}: status {run.info.status}, expected {value}")
        elif key == "experiment" and experiment.name != value:
            fail(f"{out}: experiment {experiment.name!r}, expected {value!r}")
        elif key == "runs":
            runs = client.search_runs([experiment.experiment_id])
            if len(runs) != int(value):
                fail(f"{out}: {len(runs)} runs in {experiment.name!r}, expected {value}")
        elif key == "run_name" and run.info.run_name != value:
            fail(f"{out}: run name {run.info.run_name!r}, expected {value!r}")
        elif key.startswith("tag.") and run.data.tags.get(key[4:]) != value:
            fail(f"{out}: tag {key[4:]} = {run.data.tags.get(key[4:])!r}, expected {value!r}")
        elif key.startswith("param.") and run.data.params.get(key[6:]) != value:
            fail(f"{out}: param {key[6:]} = {run.data.params.get(key[6:])!r}, expected {value!r}")
        elif key == "params":
            check_params(run, out)
        elif key == "metrics":
            check_metrics(run, out, value)
        elif key == "artifacts":
            check_artifacts(run, out, value.split("+"))
        elif key == "keys":
            absent = [k for k in value.split("+") if k not in run.data.metrics]
            if absent:
                fail(f"{out}: metrics {absent} not logged (has {sorted(run.data.metrics)})")


for line in sys.stdin:
    failures.clear()
    try:
        check_run(line.rstrip("\n"))
    except Exception as error:  # a missing file, a run not there: the check fails
        fail(f"{line.strip()}: {type(error).__name__}: {error}")
    print("end failed" if failures else "end ok", flush=True)
