#!/usr/bin/env bash
# The tests, on a fresh machine: installs or starts what they need, then
# runs `cargo test --workspace "$@"`.
#
#   kcat               apt-get install kcat when it is not on PATH
#   Python clients     tests/fixtures/setup.sh (tests/.venv: kafka-python,
#                      confluent-kafka, aiokafka, pyarrow, duckdb)
#   S3 test server     tests/s3-server.sh (moto on 127.0.0.1), stopped on exit
#
# A test whose dependency is missing fails. To run without one, set its
# skip variable to 1 (then this script does not set it up, and the tests
# that need it say "skipped"): SEGMIRROR_SKIP_KCAT, SEGMIRROR_SKIP_PYTHON,
# SEGMIRROR_SKIP_S3. The run ends with the list of what was skipped.
#
# Examples:
#   bash scripts/test.sh                              # everything
#   bash scripts/test.sh -p applier --test once_cli   # arguments go to cargo test
#   SEGMIRROR_SKIP_S3=1 bash scripts/test.sh          # no S3 server
set -euo pipefail
cd "$(dirname "$0")/.."

skipping() { [ "${!1:-}" = 1 ]; }

echo "== skip variables =="
any=0
for v in SEGMIRROR_SKIP_KCAT SEGMIRROR_SKIP_PYTHON SEGMIRROR_SKIP_S3; do
  if skipping "$v"; then echo "$v=1: its tests are skipped"; any=1; fi
done
[ "$any" = 1 ] || echo "none set: every test runs"

if ! skipping SEGMIRROR_SKIP_KCAT; then
  echo "== kcat (librdkafka), a Kafka client the gateway is tested with =="
  if ! command -v kcat >/dev/null; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    ($sudo apt-get install -y -q kcat >/dev/null 2>&1 \
      || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q kcat >/dev/null; }) \
      || { echo "test.sh: cannot install kcat: run 'apt-get install -y kcat', or set SEGMIRROR_SKIP_KCAT=1" >&2; exit 2; }
  fi
  # All of kcat's output is read (no `head`: a closed pipe would fail the run).
  echo "kcat: $(kcat -V 2>&1 | tr '\n' ' ' | cut -c1-100)"
fi

if ! skipping SEGMIRROR_SKIP_PYTHON; then
  echo "== Python clients (kafka-python, confluent-kafka, aiokafka, pyarrow, duckdb) =="
  bash tests/fixtures/setup.sh \
    || { echo "test.sh: tests/fixtures/setup.sh failed; or set SEGMIRROR_SKIP_PYTHON=1" >&2; exit 2; }
  echo "tests/.venv ready"
fi

if ! skipping SEGMIRROR_SKIP_S3; then
  echo "== S3-compatible server (moto) on 127.0.0.1 =="
  # Assigned first: `eval "$(...)"` alone would swallow a failed start.
  s3_env=$(bash tests/s3-server.sh start) \
    || { echo "test.sh: the S3 test server did not start; or set SEGMIRROR_SKIP_S3=1" >&2; exit 2; }
  trap 'bash tests/s3-server.sh stop' EXIT
  eval "$s3_env"
  echo "endpoint $AWS_ENDPOINT_URL, bucket $SEGMIRROR_TEST_S3_BUCKET"
fi

# Each skipped test appends a line here (segmirror_testkit::needs).
skip_log=$(mktemp)
export SEGMIRROR_SKIP_LOG="$skip_log"
trap 'rm -f "$skip_log"; if ! skipping SEGMIRROR_SKIP_S3; then bash tests/s3-server.sh stop; fi' EXIT

echo "== cargo test --workspace $* =="
set +e
cargo test --workspace "$@"
status=$?
set -e

echo
if [ -s "$skip_log" ]; then
  echo "== skipped: $(sort -u "$skip_log" | wc -l) tests (or their S3 backend) =="
  sort -u "$skip_log"
else
  echo "== skipped: nothing =="
fi
exit "$status"
