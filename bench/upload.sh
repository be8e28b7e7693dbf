#!/bin/bash
# Upload of a 1 GiB file on loopback against cp of the same file on the same disk.
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin
# D: a scratch directory on the disk to measure (3 GiB free at least).
D=${D:-$(mktemp -d -p "${TMPDIR:-/tmp}" parley-upload-bench.XXXX)}
rm -rf $D; mkdir -p $D
cd "$(dirname "$0")/.." && go build -o $D/parley ./cmd/parley
printf 'rate_limits: {}\nmax_file_size: 2GiB\nfile_quota: 100GiB\n' > $D/parley.yaml
$D/parley serve --demo --addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --data-dir $D/data --config $D/parley.yaml > $D/out.log 2> $D/err.log &
PID=$!
trap 'kill $PID 2>/dev/null' EXIT
for i in $(seq 100); do grep -q '^listening on' $D/out.log && break; sleep 0.1; done
URL=$(sed -n 's/^listening on //p' $D/out.log)
ADMIN=$(sed -n 's/^admin listening on //p' $D/out.log)
TOKEN=$(curl -s -X POST $URL/api/login -H 'Content-Type: application/json' \
  -d '{"login":"ana","password":"parley-demo","device_id":"bench","install_id":"bench"}' | sed 's/.*"token":"\([^"]*\)".*/\1/')
dd if=/dev/urandom of=$D/src.bin bs=1M count=1024 status=none
SIZE=$(stat -c %s $D/src.bin)
cat $D/src.bin > /dev/null   # both runs read it from the page cache
heap() { curl -s $ADMIN/metrics | awk '/^go_memstats_heap_inuse_bytes /{printf "%.1f MiB", $2/1048576}'; }
echo "server heap in use before: $(heap)"
up() {
  rm -rf $D/data/files/blobs/*/*   # keep the disk from filling; the previous run's blob is checked below
  LOC=$(curl -s -D - -o /dev/null -X POST $URL/api/uploads -H "Authorization: Bearer $TOKEN" -H 'Tus-Resumable: 1.0.0' \
    -H "Upload-Length: $SIZE" -H "Upload-Metadata: filename $(echo -n src.bin | base64)" | tr -d '\r' | sed -n 's/^Location: //p')
  curl -s -o $D/answer.json -w '%{http_code}' -X PATCH -T $D/src.bin $URL$LOC -H "Authorization: Bearer $TOKEN" -H 'Tus-Resumable: 1.0.0' \
    -H 'Upload-Offset: 0' -H 'Content-Type: application/offset+octet-stream' -H 'Expect:' > $D/status
}
for run in 1 2 3 4 5; do
  s=$(date +%s.%N); cp $D/src.bin $D/copy.bin; e=$(date +%s.%N)
  cpt=$(echo "$e - $s" | bc); rm $D/copy.bin
  s=$(date +%s.%N); cp $D/src.bin $D/copy.bin; sync $D/copy.bin; e=$(date +%s.%N)
  cpst=$(echo "$e - $s" | bc); rm $D/copy.bin
  # The same work without the network: copy, hash and fsync, the hash on
  # another core beside the copy as the server does it (openssl: SHA-NI
  # where the CPU has it, as Go uses; coreutils sha256sum may not).
  s=$(date +%s.%N); openssl dgst -sha256 $D/src.bin > /dev/null & H=$!; cp $D/src.bin $D/copy.bin; sync $D/copy.bin; wait $H; e=$(date +%s.%N)
  cphst=$(echo "$e - $s" | bc); rm $D/copy.bin
  s=$(date +%s.%N); up; e=$(date +%s.%N)
  upt=$(echo "$e - $s" | bc)
  printf 'run %d: cp %.2f s, cp+fsync %.2f s, cp+sha256+fsync %.2f s, upload %.2f s (%.0f MiB/s, status %s); upload speed / cp speed %.2f, / cp+fsync %.2f, / cp+sha256+fsync %.2f\n' $run $cpt $cpst $cphst $upt $(echo "1024/$upt" | bc -l) $(cat $D/status) $(echo "$cpt/$upt" | bc -l) $(echo "$cpst/$upt" | bc -l) $(echo "$cphst/$upt" | bc -l)
  echo "  server heap in use after: $(heap)"
done
echo "answer: $(cat $D/answer.json)"
echo "sha256 of the source: $(sha256sum $D/src.bin | cut -c1-64)"
