#!/usr/bin/env bash
# curl_http.sh: curl downloads a 5 MB random file from `python3 -m http.server`, first with
# neither under the library, then with both under it. Both downloads must be identical to
# the source (sha256). Under the library the log must show both ends, with exactly the byte
# counts curl reports (request bytes out; header + body bytes in).
source "$(dirname "$0")/lib.sh"
init_test curl_http
require_cmd curl sha256sum
py=/usr/bin/python3
[[ -x $py ]] || skip "$py is not installed"
require_preload_prefix_ok curl --version
require_preload_prefix_ok "$py" -c pass

mkdir -p "$WORK/www"
head -c $((5 * 1024 * 1024)) /dev/urandom >"$WORK/www/random.bin"
want=$(sha256sum <"$WORK/www/random.bin" | cut -d' ' -f1)

fetch() {  # fetch plain|preload
  local tag=$1 wrap=without_fastsock port
  [[ $tag == preload ]] && wrap=under_fastsock
  port=$(free_port)
  start_bg "$tag-server" 60 $wrap "$py" -m http.server --bind 127.0.0.1 \
    --directory "$WORK/www" "$port"
  wait_for_port "$port" 20 "$BG_PID"
  run_fg "$tag-curl" 60 $wrap curl --silent --show-error --fail --noproxy '*' \
    --output "$WORK/$tag.bin" --write-out '%{size_request} %{size_header} %{size_download}\n' \
    "http://127.0.0.1:$port/random.bin"
  kill -TERM "$BG_PID" 2>/dev/null
  wait_bg "$tag-server" || true
  local got
  got=$(sha256sum <"$WORK/$tag.bin" | cut -d' ' -f1)
  [[ $got == "$want" ]] || fail "$tag download sha256 $got != source $want"
  note "$tag: downloaded $(stat -c %s "$WORK/$tag.bin") bytes, sha256 matches the source"
}

fetch plain
fetch preload
cmp -s "$WORK/plain.bin" "$WORK/preload.bin" || fail "downloads with and without the library differ"

read -r req hdr body <"$WORK/preload-curl.out"
[[ $body -eq $((5 * 1024 * 1024)) ]] || fail "curl reports a $body byte body"
log_assert_interception
log_assert_ends_match
# curl's end: sent the request, received headers + body; the server's end mirrors it.
log_assert_closed "$req" "$((hdr + body))"
log_assert_closed "$((hdr + body))" "$req"
note "log: curl's connection closed sent=$req received=$((hdr + body)), the server's mirrors it"
log_assert_no_errors
note "PASS"
