# Shared helpers of the bench/ scripts (sourced, not run).
# Builds the release binaries, generates data under target/bench-data,
# times commands with /usr/bin/time, prints medians and ratios.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# BENCH_BIN=DIR: time the binaries in DIR (say, of an older commit) instead
# of building target/release.
BIN=${BENCH_BIN:-$ROOT/target/release}
DATA=$ROOT/target/bench-data
RUNS=${BENCH_RUNS:-3}
MIB=1048576

build() {
  [ -n "${BENCH_BIN:-}" ] && return 0
  cargo build --release -q -p shipper -p applier -p kafkalog -p segmirror-bench
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# Waits (up to BENCH_QUIET_WAIT seconds, default 120) for the 1-minute load
# average to drop under BENCH_QUIET_LOAD (default 1.5): the machine is shared.
wait_quiet() {
  local max=${BENCH_QUIET_WAIT:-120} limit=${BENCH_QUIET_LOAD:-1.5} i=0
  while awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v m="$limit" 'BEGIN{exit !(l>m)}'; do
    [ "$i" -ge "$max" ] && { echo "  (load still $(loadavg) after ${max}s; going on)" >&2; return 0; }
    sleep 5; i=$((i + 5))
  done
}

# Reads every file under the given dirs once, so that each timed run starts
# with the source in the page cache (dropping caches is not possible here).
warm() { find "$@" -type f -exec cat {} + >/dev/null; }

# timed NAME CMD...: runs CMD under /usr/bin/time, appends
# "NAME wall user sys maxrss_kib" to $TIMES, prints a progress line.
timed() {
  local name=$1; shift
  local out; out=$(mktemp)
  /usr/bin/time -f '%e %U %S %M' -o "$out" "$@" >/dev/null 2>"$WORK/$name.stderr" || {
    echo "FAILED: $name: $*" >&2; cat "$WORK/$name.stderr" >&2; rm -f "$out"; return 1; }
  local t; t=$(tail -n1 "$out"); rm -f "$out"
  echo "$name $t" >>"$TIMES"
  printf '  %-28s wall %6ss  user %6ss  sys %6ss  maxrss %6s KiB  (load %s)\n' "$name" $t "$(loadavg)" >&2
}

# median NAME FIELD: median of field (2 wall, 3 user, 4 sys, 5 maxrss) over
# the runs of NAME in $TIMES.
median() {
  awk -v n="$1" -v f="$2" '$1==n{print $f}' "$TIMES" | sort -g | awk '{a[NR]=$1} END{if(NR%2)print a[(NR+1)/2]; else printf "%.3f\n",(a[NR/2]+a[NR/2+1])/2}'
}

# runs_of NAME: the wall times of every run, comma-separated.
runs_of() { awk -v n="$1" '$1==n{printf "%s%s", s, $2; s=", "}' "$TIMES"; }

# mibs BYTES SECONDS
mibs() { awk -v b="$1" -v s="$2" 'BEGIN{printf "%.0f", b/1048576/s}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

# Sum of the .log segment bytes under a log dir (the payload every variant moves).
log_bytes() { find "$1" -name '*.log' -printf '%s\n' | awk '{s+=$1} END{printf "%.0f\n", s}'; }

machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(df -T "$ROOT/target" | awk 'NR==2{print $2" on "$1}'); $(date -u '+%Y-%m-%d %H:%M UTC')"
}

# --- An S3 server of the benchmark's own ----------------------------------
# s3_start KIND DIR: starts KIND (moto: Python, objects in memory, the
# server of the correctness tests; s3s-fs: Rust, objects in files under
# DIR, fast enough not to bound a client on this machine) on a free port
# of 127.0.0.1, exports the AWS_* variables the shipper reads and an rclone
# remote `s3bench:`, and sets S3_PID. Never tests/s3-server.sh's server:
# that script keeps one pid file for every user of the work tree.
# s3_reset BUCKET: an empty server with an empty BUCKET.
# s3_cpu: the server's CPU seconds so far (utime + stime of its process).
# s3s-fs is installed on first use with `cargo install` into S3S_ROOT
# (default: .tools/s3s beside the work tree, never inside it), from its
# crates.io source with one patch: s3s-fs 0.14.1 names a multipart
# upload's metadata file after the base64 of the whole key, which for our
# data keys (~150 characters) is longer than the 255 bytes ext4 allows
# (CreateMultipartUpload answers 500, "File name too long"); the patch names
# it after a prefix of that base64 and a 64-bit hash of the key instead.
S3S_VERSION=0.14.1
S3S_ROOT=${S3S_ROOT:-$(dirname "$ROOT")/.tools/s3s}
s3_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
s3s_fs_bin() {
  local bin=$S3S_ROOT/bin/s3s-fs
  if [ ! -x "$bin" ] || [ "$(cat "$S3S_ROOT/VERSION" 2>/dev/null)" != "$S3S_VERSION long-keys" ]; then
    echo "installing s3s-fs $S3S_VERSION (patched for long keys) into $S3S_ROOT (~5 min, once)" >&2
    local tmp; tmp=$(mktemp -d)
    mkdir -p "$tmp/fetch/src"; : >"$tmp/fetch/src/lib.rs"
    printf '[package]\nname = "fetch-s3s-fs"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\ns3s-fs = "=%s"\n' "$S3S_VERSION" >"$tmp/fetch/Cargo.toml"
    cargo fetch -q --manifest-path "$tmp/fetch/Cargo.toml" >&2
    local srcdir
    srcdir=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"s3s-fs-$S3S_VERSION" | head -n1)
    cp -r "$srcdir" "$tmp/s3s-fs"
    sed -i 's|let encode = \|s: &str\| base64_simd::URL_SAFE_NO_PAD.encode_to_string(s);|let encode = \|s: \&str\| { let e = base64_simd::URL_SAFE_NO_PAD.encode_to_string(s); if e.len() <= 120 { e } else { use std::hash::{Hash, Hasher}; let mut h = std::collections::hash_map::DefaultHasher::new(); s.hash(\&mut h); format!("{}~{:016x}", \&e[..60], h.finish()) } };|' \
      "$tmp/s3s-fs/src/fs.rs"
    [ "$(grep -c 'DefaultHasher' "$tmp/s3s-fs/src/fs.rs")" = 2 ] || { echo "the s3s-fs patch did not apply" >&2; return 1; }
    CARGO_TARGET_DIR=${CARGO_BUILD_BUILD_DIR:-$ROOT/target}/s3s-install \
      cargo install --path "$tmp/s3s-fs" --locked --features binary --root "$S3S_ROOT" >&2
    rm -rf "${CARGO_BUILD_BUILD_DIR:-$ROOT/target}/s3s-install" "$tmp"
    echo "$S3S_VERSION long-keys" >"$S3S_ROOT/VERSION"
  fi
  echo "$bin"
}
s3_start() {
  S3_KIND=$1; S3_DIR=$2
  local port; port=$(s3_free_port)
  S3_ENDPOINT=http://127.0.0.1:$port
  export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_ENDPOINT_URL=$S3_ENDPOINT
  unset AWS_CA_BUNDLE AWS_PROFILE AWS_SESSION_TOKEN
  mkdir -p "$S3_DIR"
  case $S3_KIND in
    moto)
      local venv=$ROOT/tests/.moto-venv
      if ! "$venv/bin/python" -c 'import moto' 2>/dev/null; then
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install --disable-pip-version-check -q -r "$ROOT/tests/fixtures/moto-requirements.txt" >&2
      fi
      "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$S3_DIR/server.log" 2>&1 &
      S3_PID=$!
      S3_VERSION_LINE="moto $("$venv/bin/python" -c 'import moto; print(moto.__version__)')"
      ;;
    s3s-fs)
      local bin; bin=$(s3s_fs_bin)
      mkdir -p "$S3_DIR/root"
      "$bin" --host 127.0.0.1 --port "$port" --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" \
        "$S3_DIR/root" >"$S3_DIR/server.log" 2>&1 &
      S3_PID=$!
      S3_VERSION_LINE="s3s-fs $S3S_VERSION"
      ;;
    *) echo "s3_start: moto or s3s-fs, not $S3_KIND" >&2; return 2 ;;
  esac
  trap 's3_stop' EXIT
  for _ in $(seq 1 200); do curl -s -o /dev/null "$S3_ENDPOINT/" && break; sleep 0.1; done
  curl -s -o /dev/null "$S3_ENDPOINT/" || { echo "$S3_KIND did not start:" >&2; cat "$S3_DIR/server.log" >&2; return 1; }
  export RCLONE_CONFIG_S3BENCH_TYPE=s3 RCLONE_CONFIG_S3BENCH_PROVIDER=Other RCLONE_CONFIG_S3BENCH_ENDPOINT=$S3_ENDPOINT \
    RCLONE_CONFIG_S3BENCH_FORCE_PATH_STYLE=true RCLONE_CONFIG_S3BENCH_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \
    RCLONE_CONFIG_S3BENCH_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY RCLONE_CONFIG_S3BENCH_REGION=us-east-1
}
s3_stop() { [ -n "${S3_PID:-}" ] && kill "$S3_PID" 2>/dev/null; S3_PID=; }
s3_reset() {
  case $S3_KIND in
    moto)
      curl -sf -o /dev/null -X POST "$S3_ENDPOINT/moto-api/reset"
      curl -sf -o /dev/null -X PUT "$S3_ENDPOINT/$1" ;;
    s3s-fs)
      # A bucket is a directory of the server's root; it keeps no other state.
      rm -rf "$S3_DIR/root"; mkdir -p "$S3_DIR/root/$1" ;;
  esac
}
s3_cpu() { awk -v t="$(getconf CLK_TCK)" '{printf "%.2f\n", ($14+$15)/t}' "/proc/$S3_PID/stat"; }
