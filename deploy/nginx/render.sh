#!/bin/sh
# Renders deploy/nginx/nginx.conf.in into a complete nginx.conf on stdout.
#
#   render.sh --prefix DIR --listen [HOST:]PORT --replica HOST:PORT [--replica HOST:PORT ...]
#             [--tries N] [--max-fails N] [--fail-timeout 5s] [--max-body 8m] [--workers auto]
#
# DIR holds the pid file, logs and temporary files (created here). Run the result with
#   nginx -p DIR -c DIR/nginx.conf -e stderr
# (nginx stays in the foreground: `daemon off`). See docs/deploy.md.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=""; listen=""; replicas=""; tries=3; max_fails=2; fail_timeout=5s; max_body=8m; workers=auto
die() { echo "render.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value"
    case "$1" in
    --prefix) prefix=$2 ;;
    --listen) listen=$2 ;;
    --replica) replicas="$replicas $2" ;;
    --tries) tries=$2 ;;
    --max-fails) max_fails=$2 ;;
    --fail-timeout) fail_timeout=$2 ;;
    --max-body) max_body=$2 ;;
    --workers) workers=$2 ;;
    *) die "unknown option $1" ;;
    esac
    shift 2
done
[ -n "$prefix" ] || die "--prefix DIR is required"
[ -n "$listen" ] || die "--listen [HOST:]PORT is required"
[ -n "$replicas" ] || die "at least one --replica HOST:PORT is required"
for v in "$tries" "$max_fails"; do
    case "$v" in '' | *[!0-9]*) die "--tries and --max-fails take a number" ;; esac
done
for r in $replicas; do
    case "$r" in *:[0-9]*) ;; *) die "replica '$r' is not HOST:PORT" ;; esac
done
mkdir -p "$prefix/tmp"
prefix=$(cd "$prefix" && pwd)
servers=""
for r in $replicas; do
    servers="$servers        server $r max_fails=$max_fails fail_timeout=$fail_timeout;
"
done
# awk, not sed: the server lines span several lines.
awk -v prefix="$prefix" -v listen="$listen" -v tries="$tries" -v ft="$fail_timeout" \
    -v mb="$max_body" -v workers="$workers" -v servers="$servers" '
    $0 == "@SERVERS@" { printf "%s", servers; next }
    {
        gsub(/@PREFIX@/, prefix); gsub(/@LISTEN@/, listen); gsub(/@TRIES@/, tries)
        gsub(/@FAIL_TIMEOUT@/, ft); gsub(/@MAX_BODY@/, mb); gsub(/@WORKERS@/, workers)
        print
    }' "$here/nginx.conf.in"
