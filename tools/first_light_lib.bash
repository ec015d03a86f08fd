# The recording helpers of the GPU script (tools/first_light.sh): every
# check appends one JSON line to $FL_RESULTS and one readable line to
# $FL_SUMMARY as soon as it is known, so a command cut off at its limit
# still returns everything before the cut. Plain bash (no Python), so the
# record survives a node whose Python is broken.
#
# shellcheck disable=SC2154  # FL_*: exported by tools/first_light.sh

# $1 as a JSON string (quotes, backslashes and control characters escaped).
json_string() {
    local text=$1
    text=${text//\\/\\\\}
    text=${text//\"/\\\"}
    text=${text//$'\n'/\\n}
    text=${text//$'\t'/\\t}
    text=${text//$'\r'/}
    printf '"%s"' "$(printf '%s' "$text" | tr -d '\000-\010\013\014\016-\037')"
}

# Seconds since the script started, one decimal.
elapsed() {
    awk -v start="$FL_START" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - start }'
}

# record PART CHECK STATUS MESSAGE [KEY=VALUE ...]
# STATUS: pass, fail, skip (could not run here, with the reason), cut (its
# time budget ran out), info (a reading, no verdict). Values that look like
# numbers are written as JSON numbers.
record() {
    local part=$1 check=$2 status=$3 message=$4 values="" pair key value
    shift 4
    for pair in "$@"; do
        key=${pair%%=*}
        value=${pair#*=}
        [ -n "$values" ] && values+=", "
        if [[ $value =~ ^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then
            values+="$(json_string "$key"): $value"
        else
            values+="$(json_string "$key"): $(json_string "$value")"
        fi
    done
    printf '{"t": %s, "part": %s, "check": %s, "status": %s, "message": %s, "values": {%s}}\n' \
        "$(elapsed)" "$(json_string "$part")" "$(json_string "$check")" \
        "$(json_string "$status")" "$(json_string "$message")" "$values" >>"$FL_RESULTS"
    local line
    line="$(printf '%-5s %s/%s: %s' "$(tr '[:lower:]' '[:upper:]' <<<"$status")" "$part" "$check" \
            "$message")${*:+ ($*)}"
    printf '%s\n' "$line" >>"$FL_SUMMARY"
    # fd 3: the driver's own output (the device tool shows its end).
    { printf '%s\n' "$line" >&3; } 2>/dev/null || printf '%s\n' "$line"
}

# The value of KEY in a line of KEY=VALUE words ($2), or "n/a".
word_value() {
    local value
    value=$(tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p" | head -n 1)
    echo "${value:-n/a}"
}

# record_check PART CHECK MESSAGE COMMAND...: runs a first_light_check.py
# command and records its line ("STATUS key=value ...").
record_check() {
    local part=$1 check=$2 message=$3 output status
    shift 3
    output=$("$@" 2>&1 | tail -n 1)
    status=${output%% *}
    case $status in pass | fail | skip | info) ;; *) status=fail; output="fail error=$output" ;; esac
    # shellcheck disable=SC2086  # the key=value words
    record "$part" "$check" "$status" "$message" ${output#* }
}

# The cmocka counts of a test log: "passed failed skipped".
cmocka_counts() {
    local kind sum counts=""
    for kind in PASSED FAILED SKIPPED; do
        sum=$(sed -n "s/^\[  $kind \{0,2\}\] \([0-9]*\) test.*/\1/p" "$1" | awk '{ s += $1 } END { print s + 0 }')
        counts+="$sum "
    done
    echo "${counts% }"
}
