#!/usr/bin/env bash
# Documentation checks (run by scripts/test.sh before cargo test; runs standalone, in
# well under a second, with nothing but bash and coreutils/sed/awk):
#   1. every relative link in README.md, docs/*.md and infra/README.md resolves to a file or directory
#      of the repository, and a link to a heading (`page.md#anchor`, `#anchor`) names
#      a heading of that page (GitHub's anchors: lowercase, punctuation dropped,
#      spaces as hyphens, `-1`, `-2` for repeated headings);
#   2. no page points outside the repository: the design is docs/design.md, so a
#      mention of `DESIGN.md`, `../shared` or an absolute `/work/` path is an error;
#   3. no tracked source file (.rs, .sh, .toml, .yaml, .py) mentions `DESIGN.md` or
#      `../shared/` either.
# Links inside fenced code blocks and inline code are not links and are skipped.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export LC_ALL=C.UTF-8

pages=(README.md docs/*.md infra/README.md)
problems=0
problem() {
  echo "check-docs: $*" >&2
  problems=$((problems + 1))
}

# The text of a page with fenced code blocks blanked (line numbers kept).
unfenced() {
  awk '/^[[:space:]]*```/ { fenced = !fenced; print ""; next } { print (fenced ? "" : $0) }' "$1"
}

# The same without inline code spans: what may hold links.
prose() {
  unfenced "$1" | sed -E 's/`[^`]*`//g'
}

# The anchors of a page's headings, one per line (inline code keeps its text).
anchors() {
  unfenced "$1" |
    sed -nE 's/^#{1,6}[[:space:]]+(.*[^[:space:]#])[[:space:]#]*$/\1/p' |
    sed -E 's/\[([^]]*)\]\([^)]*\)/\1/g; s/.*/\L&/; s/[^[:alnum:] _-]//g; s/ /-/g' |
    awk '{ n = seen[$0]++; print (n ? $0 "-" n : $0) }'
}

declare -A anchor_cache
has_anchor() { # page anchor
  local page="$1" anchor="$2"
  if [[ -z "${anchor_cache[$page]+set}" ]]; then
    anchor_cache[$page]=$'\n'"$(anchors "$page")"$'\n'
  fi
  [[ "${anchor_cache[$page]}" == *$'\n'"$anchor"$'\n'* ]]
}

for page in "${pages[@]}"; do
  dir="$(dirname "$page")"
  # 1. Links: `](target)` or `](target "title")`, one per output line as line:target.
  while IFS=: read -r line target; do
    case "$target" in
      http://* | https://* | mailto:*) continue ;;
    esac
    path="${target%%#*}"
    anchor=""
    [[ "$target" == *"#"* ]] && anchor="${target#*#}"
    if [[ -z "$path" ]]; then
      resolved="$page"
    elif [[ "$path" == /* ]]; then
      resolved="${path#/}"
    else
      resolved="$(realpath -m --relative-to="$root" "$dir/$path")"
    fi
    if [[ "$resolved" == ../* || "$resolved" == ".." ]]; then
      problem "$page:$line: link \`$target\` leaves the repository"
      continue
    fi
    if [[ ! -e "$resolved" ]]; then
      problem "$page:$line: link \`$target\`: no such file ($resolved)"
      continue
    fi
    if [[ -n "$anchor" && "$resolved" == *.md ]] && ! has_anchor "$resolved" "$anchor"; then
      problem "$page:$line: link \`$target\`: $resolved has no heading with anchor #$anchor"
    fi
  done < <(prose "$page" | awk '{
      rest = $0
      while (match(rest, /\]\([^) ]+( "[^"]*")?\)/)) {
        link = substr(rest, RSTART + 2, RLENGTH - 3)
        sub(/ ".*$/, "", link)
        print NR ":" link
        rest = substr(rest, RSTART + RLENGTH)
      }
    }')

  # 2. Pointers outside the repository.
  while IFS= read -r hit; do
    problem "$page:${hit%%:*}: points outside the repository: ${hit#*:}"
  done < <(grep -nE 'DESIGN\.md|\.\./shared|/work/|deferred-retry-article' "$page" || true)
done

# 3. The same in the code, comments and scripts: a comment points inside the repository.
while IFS= read -r hit; do
  problem "${hit%%:*}: points outside the repository: ${hit#*:}"
done < <(git ls-files -z -- '*.rs' '*.sh' '*.toml' '*.yaml' '*.py' ':!scripts/check-docs.sh' 2>/dev/null \
  | xargs -0 -r grep -nE 'DESIGN\.md|\.\./shared/|deferred-retry-article' || true)

if ((problems > 0)); then
  echo "check-docs: FAILED: $problems problem(s) in the pages (README.md, docs/*.md, infra/README.md) or the sources" >&2
  exit 1
fi
echo "check-docs: ${#pages[@]} pages, every relative link resolves, nothing points outside the repository" >&2
