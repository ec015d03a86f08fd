#!/usr/bin/env bash
# The documentation against the program: every relative link of README.md
# and docs/*.md reaches a file (and its heading, for a #anchor), and
# docs/commands.md, the options reference, names every option each
# command's --help lists and no option that --help lacks (`weights` has
# no options, only subcommands and the environment variables its section
# lists). A renamed option or a moved section fails here instead of
# misleading a user.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init docs

links=$(python3 - README.md docs/*.md <<'EOF'
import os, re, sys

def anchors(path):
    # GitHub's anchors: the heading lower-cased, punctuation dropped, spaces as '-'.
    found = set()
    for line in open(path, encoding="utf-8"):
        heading = re.match(r"#+\s+(.*)", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(text.replace(" ", "-"))
    return found

for source in sys.argv[1:]:
    text = open(source, encoding="utf-8").read()
    for link in re.finditer(r"\]\(([^)#\s]*)(#[^)\s]*)?\)", text):
        target, anchor = link.group(1), link.group(2)
        if re.match(r"[a-z]+:", target):
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(source), target)) if target else source
        if not os.path.exists(path):
            print(f"{source}: link to a missing file: {target}")
        elif anchor and path.endswith(".md") and anchor[1:] not in anchors(path):
            print(f"{source}: link to a missing heading: {target}{anchor}")
EOF
)
[ -z "$links" ] || fail "broken links: $links"

# section COMMAND: the text of docs/commands.md's "## COMMAND" section.
section() { awk -v name="## $1" '$0 == name { on = 1; next } /^## / { on = 0 } on' docs/commands.md; }

for command in train embed export bench-data; do
  text=$(section "$command")
  [ -n "$text" ] || { fail "docs/commands.md has no '## $command' section"; continue; }
  help=$("$bin" "$command" --help) || { fail "$command --help failed"; continue; }
  for option in $(printf '%s\n' "$help" | sed -n 's/^  \(--[a-z][a-z0-9-]*\).*/\1/p' | grep -v '^--help$'); do
    printf '%s\n' "$text" | grep -q -E -- "$option([^a-z0-9-]|$)" ||
      fail "docs/commands.md, $command: $option (in --help) is not documented"
  done
  for option in $(printf '%s\n' "$text" | grep -o -E -- '(^|[^a-z0-9-])--[a-z][a-z0-9-]*' | grep -o -E -- '--[a-z][a-z0-9-]*' | sort -u); do
    printf '%s\n' "$help" | grep -q -E -- "$option([^a-z0-9-]|$)" ||
      fail "docs/commands.md, $command: $option is not an option of $command (--help)"
  done
done

e2e_finish
