#!/usr/bin/env bash
# The daemon's API with curl over its unix socket: list the tables, get a
# key, scan a table's rows page by page (Kmaterialize-More says whether a
# page follows; after= is the last key of the page before), and rebuild it.
#
# Usage: curl.sh SOCKET TABLE KEY
#   $ bash contrib/examples/curl.sh /var/lib/kmaterialize/tables.db.sock balances alice
#
# The host name in the URLs is any name: the socket is what curl talks to.
# The paging reads the last key with sed, which is enough for keys without
# '"' or '\'; use jq -r .key for any key.
set -euo pipefail
sock=$1 table=$2 key=$3
api() { curl --silent --show-error --fail-with-body --unix-socket "$sock" "$@"; }

echo "# tables"
api http://kmaterialize/v1/tables
echo "# get $key"
api "http://kmaterialize/v1/tables/$table/keys/$key"
echo
echo "# rows"
headers=$(mktemp) page=$(mktemp)
trap 'rm -f "$headers" "$page"' EXIT
after="" gen=""
while :; do
  args=(-G --data-urlencode limit=3)
  [ -n "$gen" ] && args+=(--data-urlencode "generation=$gen")
  [ -n "$after" ] && args+=(--data-urlencode "after=$after")
  api "${args[@]}" --dump-header "$headers" --output "$page" "http://kmaterialize/v1/tables/$table/rows"
  cat "$page"
  # Later pages ask for the first page's generation: 409 generation_gone
  # if a rebuild replaced it meanwhile (start again then).
  gen=$(sed -n 's/^Kmaterialize-Generation: *\([0-9]*\).*/\1/ip' "$headers")
  grep -qi '^Kmaterialize-More: *true' "$headers" || break
  after=$(tail -n 1 "$page" | sed 's/^{"key":"\([^"]*\)".*/\1/')
done
echo "# rebuild"
api -X POST "http://kmaterialize/v1/tables/$table/rebuild?wait=1"
