#!/usr/bin/env bash
# Benchmark 2: `shipper once` to S3 (moto on 127.0.0.1, objects in memory)
# against `rclone copy` of the same log dir to the same server, interleaved,
# moto reset and the bucket recreated before every run. 1 GiB of segments
# (the mixed layout of benchmark 1 at half size) so that moto holds it.
# Warm page cache for the source (read before every run).
#   bash bench/ship_vs_rclone.sh        # BENCH_RUNS=3 runs of each
# Needs rclone (apt-get install -y rclone); moto comes from the venv that
# tests/s3-server.sh uses (created here when missing).
source "$(dirname "$0")/lib.sh"
command -v rclone >/dev/null || { echo "rclone is not installed: apt-get install -y rclone" >&2; exit 2; }
build
src=$DATA/mixed-1g
"$BIN/segmirror-bench" gen --out "$src" --layout mixed --total-mib "${BENCH_MIB:-1024}"
WORK=$ROOT/target/bench-tmp/ship-vs-rclone
rm -rf "$WORK"; mkdir -p "$WORK"
TIMES=$WORK/times
# Our own moto, not tests/s3-server.sh's: that script keeps one pid file
# for every user of the work tree, and another session's `stop` would end
# this one mid-run. Its venv is reused (created by the script on first use).
venv=$ROOT/tests/.moto-venv
if ! "$venv/bin/python" -c 'import moto' 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --disable-pip-version-check -q -r tests/fixtures/moto-requirements.txt >&2
fi
port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$WORK/moto.log" 2>&1 &
moto_pid=$!
trap 'kill $moto_pid 2>/dev/null || true' EXIT
endpoint=http://127.0.0.1:$port
for _ in $(seq 1 200); do curl -sf -o /dev/null "$endpoint/moto-api/" && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_ENDPOINT_URL=$endpoint
unset AWS_CA_BUNDLE AWS_PROFILE AWS_SESSION_TOKEN
export RCLONE_CONFIG_MOTO_TYPE=s3 RCLONE_CONFIG_MOTO_PROVIDER=Other RCLONE_CONFIG_MOTO_ENDPOINT=$endpoint \
  RCLONE_CONFIG_MOTO_FORCE_PATH_STYLE=true RCLONE_CONFIG_MOTO_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \
  RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY RCLONE_CONFIG_MOTO_REGION=us-east-1
reset_moto() {
  curl -sf -o /dev/null -X POST "$endpoint/moto-api/reset"
  curl -sf -o /dev/null -X PUT "$endpoint/bench"
}
bytes=$(log_bytes "$src")
allbytes=$(find "$src" -type f -printf '%s\n' | awk '{s+=$1} END{printf "%.0f", s}')
load_start=$(loadavg)
wait_quiet
for i in $(seq 1 "$RUNS"); do
  order="rclone shipper"; [ $((i % 2)) -eq 0 ] && order="shipper rclone"
  for v in $order; do
    reset_moto; sync; warm "$src"
    m0=$(awk '{print $14+$15}' /proc/$moto_pid/stat)
    case $v in
      rclone) timed rclone env -u AWS_CA_BUNDLE rclone copy "$src" moto:bench/rclone ;;
      shipper) timed shipper "$BIN/shipper" once --log-dir "$src" --bucket s3://bench/ship --cluster-id bench ;;
    esac
    echo "moto_$v $(awk -v m0="$m0" '{printf "%.2f", ($14+$15-m0)/100}' /proc/$moto_pid/stat)" >>"$WORK/moto_cpu"
  done
done
reset_moto
tr=$(median rclone 2)
echo
echo "## ship to S3 (moto) vs rclone copy: $(awk -v b="$bytes" 'BEGIN{printf "%.0f", b/1048576}') MiB of segments (7 partitions; rclone copies every file of the dir, $(awk -v b="$allbytes" 'BEGIN{printf "%.0f", b/1048576}') MiB), $RUNS runs each, median"
echo
echo "| variant | wall s | MiB/s | user s | sys s | moto CPU s | peak RSS MiB | vs rclone | runs (wall s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
for v in rclone shipper; do
  w=$(median $v 2)
  mc=$(awk -v n="moto_$v" '$1==n{print $2}' "$WORK/moto_cpu" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  printf '| %s | %s | %s | %s | %s | %s | %.0f | %s | %s |\n' \
    "$([ $v = rclone ] && echo '`rclone copy` [baseline]' || echo '`shipper once` to s3://')" \
    "$w" "$(mibs "$bytes" "$w")" "$(median $v 3)" "$(median $v 4)" "$mc" \
    "$(awk -v k="$(median $v 5)" 'BEGIN{print k/1024}')" "$(ratio "$tr" "$w")" "$(runs_of $v)"
done
echo
echo "ratio shipper/rclone throughput: $(ratio "$tr" "$(median shipper 2)") (goal >= 1.5); rclone $(rclone version | head -n1 | awk '{print $2}'), moto $(tests/.moto-venv/bin/python -c 'import moto; print(moto.__version__)')"
echo "load average: at start $load_start, at end $(loadavg)"
machine
