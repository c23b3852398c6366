#!/usr/bin/env bash
# Starts moto (an S3-compatible server that honours conditional writes) on
# 127.0.0.1 for the tests, creates the test bucket, and prints the
# environment the tests read. Usage:
#   eval "$(bash tests/s3-server.sh start)"   # exports AWS_* and SEGMIRROR_TEST_S3_BUCKET
#   bash tests/s3-server.sh stop
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.moto-venv"
state="$here/.moto"
case "${1:-start}" in
  start)
    if ! "$venv/bin/python" -c 'import moto' 2>/dev/null; then
      python3 -m venv "$venv" >&2
      "$venv/bin/pip" install --disable-pip-version-check -q -r "$here/fixtures/moto-requirements.txt" >&2
    fi
    mkdir -p "$state"
    port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$state/moto.log" 2>&1 &
    echo $! >"$state/pid"
    for _ in $(seq 1 200); do
      curl -sf -o /dev/null "http://127.0.0.1:$port/moto-api/" && break
      sleep 0.1
    done
    curl -sf -o /dev/null "http://127.0.0.1:$port/moto-api/" || { echo "moto did not start; log:" >&2; cat "$state/moto.log" >&2; exit 1; }
    curl -sf -o /dev/null -X PUT "http://127.0.0.1:$port/segmirror-test"
    cat <<ENV
export AWS_ACCESS_KEY_ID=segmirror-test
export AWS_SECRET_ACCESS_KEY=segmirror-test-secret
export AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export SEGMIRROR_TEST_S3_BUCKET=segmirror-test
ENV
    ;;
  stop)
    if [ -f "$state/pid" ]; then kill "$(cat "$state/pid")" 2>/dev/null || true; rm -f "$state/pid"; fi
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
