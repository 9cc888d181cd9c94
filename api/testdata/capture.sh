#!/usr/bin/env bash
# capture.sh records the JSON a real daemon answers into api/testdata/*.json,
# for wire_test.go. Run from the repository root: bash api/testdata/capture.sh
set -euo pipefail
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$dir"' EXIT
out=$PWD/api/testdata
go build -o "$dir/km" ./cmd/kmaterialize
go build -o "$dir/produce" ./api/testdata/produce
km=$dir/km

"$km" dev broker --topic plain:2 --topic followed:1 --topic kept:1 --topic asof:2 >"$dir/broker.out" 2>&1 &
for _ in $(seq 100); do grep -q '^export KMATERIALIZE_BROKERS=' "$dir/broker.out" && break; sleep 0.1; done
brokers=$(sed -n 's/^export KMATERIALIZE_BROKERS=//p' "$dir/broker.out")
printf 'a:1\nb:2\nc:3\na:4\n' | "$dir/produce" "$brokers" plain
printf 'x:1\ny:2\n' | "$dir/produce" "$brokers" followed
printf 'k1:1\nk2:2\n' | "$dir/produce" "$brokers" kept
printf 'p:1\nq:2\nr:3\ns:4\n' | "$dir/produce" "$brokers" asof

# The as-of table is built by the CLI before the daemon starts: the daemon
# serves it from the file without its config naming it.
"$km" rebuild --brokers "$brokers" --topic asof --db "$dir/t.db" --to-offsets 0=1,1=1 >/dev/null

cat >"$dir/k.yaml" <<YAML
db: $dir/t.db
socket: $dir/t.sock
kafka:
  brokers: $brokers
tables:
  - name: plain
    topic: plain
    schedule: "@every 1h"
  - name: followed
    topic: followed
    follow: true
  - name: kept
    topic: kept
    keep: 2
  - name: failed
    topic: no-such-topic
YAML
"$km" serve --config "$dir/k.yaml" >"$dir/serve.out" 2>&1 &
sock=$dir/t.sock
get() { curl -sS --unix-socket "$sock" "http://d$1"; }
post() { curl -sS --unix-socket "$sock" -X POST "http://d$1"; }
for _ in $(seq 300); do
	[ "$(get /v1/tables/kept 2>/dev/null | jq -r .state 2>/dev/null)" = ready ] &&
		[ "$(get /v1/tables/plain 2>/dev/null | jq -r .state 2>/dev/null)" = ready ] &&
		[ "$(get /v1/tables/followed 2>/dev/null | jq -r .follow.lag 2>/dev/null)" = 0 ] &&
		[ "$(get /v1/tables/failed 2>/dev/null | jq -r .state 2>/dev/null)" = failed ] && break
	sleep 0.1
done
printf 'k3:3\n' | "$dir/produce" "$brokers" kept
post '/v1/tables/kept/rebuild?wait=1' >"$out/rebuild-wait.json"
printf 'k1:9\n' | "$dir/produce" "$brokers" kept
post '/v1/tables/kept/rebuild?wait=1' >/dev/null
post '/v1/tables/plain/rebuild' >"$out/rebuild-started.json"
get /v1/tables/plain >"$out/table-plain-running.json"
post /v1/tables/plain/update >"$out/error-run-in-progress.json"
sleep 1
post '/v1/tables/plain/update' >"$out/update.json"
post '/v1/tables/failed/rebuild?wait=1' >"$out/rebuild-failed.json"
printf 'z:3\n' | "$dir/produce" "$brokers" followed
for _ in $(seq 100); do
	[ "$(get /v1/tables/followed | jq -r .follow.records_applied)" = 1 ] && break
	sleep 0.1
done
for t in plain followed kept failed asof; do get "/v1/tables/$t" >"$out/table-$t.json"; done
get /v1/tables >"$out/tables.json"

get /v1/tables/nope >"$out/error-table-not-found.json"
get /v1/tables/failed/keys/a >"$out/error-table-build-failed.json"
post /v1/tables/asof/rebuild >"$out/error-table-not-configured.json"
post /v1/tables/followed/update >"$out/error-table-followed.json"
get /v1/nope >"$out/error-route-not-found.json"
post /v1/tables/kept/rollback >"$out/rollback.json"
curl -sS --unix-socket "$sock" -X DELETE http://d/v1/tables/asof >"$out/drop.json"
