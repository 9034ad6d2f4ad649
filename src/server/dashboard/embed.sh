#!/bin/sh
# Turns a file into a C header holding its bytes, for embedding the dashboard page in the
# binary at build time (the Makefile runs it; the output lives in $(BUILD)/gen, never committed).
#   sh embed.sh NAME INPUT OUTPUT
# defines `static const unsigned char NAME[]` (the bytes plus a NUL, so it is also a C string)
# and `static const size_t NAME_len` (without the NUL). Only POSIX od, tr and sed: no xxd
# (vim) or Python needed on a build machine.
set -eu
name=$1 in=$2 out=$3
tmp=$out.tmp.$$
trap 'rm -f "$tmp"' EXIT
{
    echo "/* Generated from $in by src/server/dashboard/embed.sh: do not edit. */"
    echo "#include <stddef.h>"
    echo "static const unsigned char ${name}[] = {"
    od -An -v -tu1 "$in" | tr -s ' \n' '\n\n' | sed '/^$/d' | sed 's/$/,/' | paste -d' ' - - - - - - - - - - - - - - - -
    echo "0};"
    echo "static const size_t ${name}_len = sizeof(${name}) - 1;"
} >"$tmp"
mv "$tmp" "$out"
