#!/usr/bin/env bash
# Benchmark 2: `shipper once` to S3 against `rclone copy` of the same log
# dir to the same server, interleaved, the server emptied and the bucket
# recreated before every run. 1 GiB of segments (the mixed layout of
# benchmark 1 at half size; BENCH_MIB). Warm page cache for the source
# (read before every run). The S3 server is BENCH_S3:
# - s3s-fs (default): a Rust server keeping objects in files under
#   target/bench-tmp, installed on first use (see lib.sh, ~5 min once);
# - moto: the Python server of the correctness tests, objects in memory
#   (its CPU is about the wall time of either client: it measures moto).
# Beside each run: the server process's CPU time (utime + stime from
# /proc/PID/stat) over that run; the machine has 2 cores, shared by client
# and server.
#   bash bench/ship_vs_rclone.sh                   # BENCH_RUNS=3 runs of each
#   BENCH_S3=moto bash bench/ship_vs_rclone.sh
#   BENCH_UNSIGNED=1 bash bench/ship_vs_rclone.sh  # also the shipper with AWS_UNSIGNED_PAYLOAD=true
# Needs rclone (apt-get install -y rclone). rclone 1.60 fails when
# AWS_CA_BUNDLE is set, so it runs under `env -u AWS_CA_BUNDLE`.
source "$(dirname "$0")/lib.sh"
command -v rclone >/dev/null || { echo "rclone is not installed: apt-get install -y rclone" >&2; exit 2; }
build
mib=${BENCH_MIB:-1024}
src=$DATA/mixed-1g; [ "$mib" = 1024 ] || src=$DATA/mixed-$mib
"$BIN/segmirror-bench" gen --out "$src" --layout mixed --total-mib "$mib"
WORK=$ROOT/target/bench-tmp/ship-vs-rclone
rm -rf "$WORK"; mkdir -p "$WORK"
TIMES=$WORK/times
s3=${BENCH_S3:-s3s-fs}
s3_start "$s3" "$WORK/s3"
variants="rclone shipper"; [ -n "${BENCH_UNSIGNED:-}" ] && variants="$variants shipper_unsigned"
bytes=$(log_bytes "$src")
allbytes=$(find "$src" -type f -printf '%s\n' | awk '{s+=$1} END{printf "%.0f", s}')
load_start=$(loadavg)
wait_quiet
for i in $(seq 1 "$RUNS"); do
  # Rotate the order run to run, so that drift falls on every variant.
  set -- $variants
  for _ in $(seq 2 "$i"); do set -- "${@:2}" "$1"; done
  for v in "$@"; do
    s3_reset bench; sync; warm "$src"
    c0=$(s3_cpu)
    case $v in
      rclone) timed rclone env -u AWS_CA_BUNDLE rclone copy "$src" s3bench:bench/rclone ;;
      shipper) timed shipper "$BIN/shipper" once --log-dir "$src" --bucket s3://bench/ship --create-bucket --cluster-id bench ;;
      shipper_unsigned) timed shipper_unsigned env AWS_UNSIGNED_PAYLOAD=true "$BIN/shipper" once --log-dir "$src" --bucket s3://bench/ship --create-bucket --cluster-id bench ;;
    esac
    echo "$v $(awk -v a="$c0" -v b="$(s3_cpu)" 'BEGIN{printf "%.2f", b-a}')" >>"$WORK/server_cpu"
    tail -n1 "$WORK/server_cpu" | awk '{printf "  %-28s server CPU %ss\n", $1, $2}' >&2
  done
done
s3_reset bench
tr=$(median rclone 2)
echo
echo "## ship to S3 ($S3_VERSION_LINE) vs rclone copy: $(awk -v b="$bytes" 'BEGIN{printf "%.0f", b/1048576}') MiB of segments (7 partitions; rclone copies every file of the dir, $(awk -v b="$allbytes" 'BEGIN{printf "%.0f", b/1048576}') MiB), $RUNS runs each, median"
echo
echo "| variant | wall s | MiB/s | user s | sys s | server CPU s | peak RSS MiB | vs rclone | runs: wall s (server CPU s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
for v in $variants; do
  w=$(median $v 2)
  sc=$(awk -v n="$v" '$1==n{print $2}' "$WORK/server_cpu" | sort -g | awk '{a[NR]=$1} END{if(NR%2)print a[(NR+1)/2]; else printf "%.2f\n",(a[NR/2]+a[NR/2+1])/2}')
  runs=$(paste -d' ' <(awk -v n="$v" '$1==n{print $2}' "$TIMES") <(awk -v n="$v" '$1==n{print $2}' "$WORK/server_cpu") | awk '{printf "%s%s (%s)", s, $1, $2; s=", "}')
  case $v in
    rclone) label='`rclone copy` [baseline]' ;;
    shipper) label='`shipper once` to s3://' ;;
    shipper_unsigned) label='`AWS_UNSIGNED_PAYLOAD=true shipper once` to s3://' ;;
  esac
  printf '| %s | %s | %s | %s | %s | %s | %.0f | %s | %s |\n' "$label" \
    "$w" "$(mibs "$bytes" "$w")" "$(median $v 3)" "$(median $v 4)" "$sc" \
    "$(awk -v k="$(median $v 5)" 'BEGIN{print k/1024}')" "$(ratio "$tr" "$w")" "$runs"
done
echo
echo "ratio rclone_time/shipper_time: $(ratio "$tr" "$(median shipper 2)") (goal >= 1.5); rclone $(rclone version | head -n1 | awk '{print $2}'), $S3_VERSION_LINE"
echo "load average: at start $load_start, at end $(loadavg)"
machine
