#!/usr/bin/env bash
# tokenize_text's own JSONL reader against cJSON (issue #31: one JSON reader, cJSON, unless
# cJSON costs tokenize_text more than 5% of its JSONL throughput). Builds tokenize_text twice
# with the Makefile's own link line: as it is, and with every JSONL line parsed by cJSON
# instead (dev/bench/jsonl_line_cjson.c, #included into a copy of data/tokenize_text.c); checks
# that both write the same shards; then times both on the same FineWeb-shaped corpus (Tiny
# Shakespeare in ~4 KB documents, each line with FineWeb's other fields: id, dump, url, date,
# file_path, language, language_score, token_count), rounds alternating so both see the same
# machine load, the best round of each counting. Printed:
#   - end to end, as a user runs it (reading, parsing, encoding on BENCH_THREADS threads,
#     writing and fsyncing shards): MB/s of JSONL once running (the whole corpus minus its
#     first eighth, so that loading the vocabulary does not count), each, and their ratio;
#   - the reading thread alone (tokenize_text --bench's read_MB/s, MB/s of document text: JSON
#     and batching on one thread), which bounds a run once there are more than a few cores'
#     worth of encoders (README, Data).
#
#   bash dev/bench/bench_jsonl_reader.sh                     # 256 MB of JSONL, 5 rounds, all cores
#   BENCH_MB=64 BENCH_ROUNDS=3 BENCH_THREADS=1 bash dev/bench/bench_jsonl_reader.sh
#
# Environment: BENCH_MB (JSONL size, default 256), BENCH_ROUNDS (5), BENCH_THREADS (encoder
# threads, default all cores), FSDP_DATA (default ../shared/data: Tiny Shakespeare, GPT-2's
# vocabulary). Needs the library objects (it runs make tokenize_text first).
set -euo pipefail
cd "$(dirname "$0")/../.."
export FSDP_DATA=${FSDP_DATA:-../shared/data}
MB=${BENCH_MB:-256}
ROUNDS=${BENCH_ROUNDS:-5}
THREADS=${BENCH_THREADS:-$(nproc)}
[[ -f $FSDP_DATA/tinyshakespeare/input.txt && -f $FSDP_DATA/gpt2/encoder.json ]] ||
    { echo "bench_jsonl_reader: no Tiny Shakespeare or GPT-2 vocabulary under $FSDP_DATA (set FSDP_DATA)" >&2; exit 1; }
V=(--encoder "$FSDP_DATA/gpt2/encoder.json" --vocab "$FSDP_DATA/gpt2/vocab.bpe")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench_jsonl_reader.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# ---- the two builds: the same link line, the same flags (-Wno-unused-function: the cJSON
# build no longer calls json_line)
make -s tokenize_text
link=$(make -n -B tokenize_text | grep -E -- ' -o tokenize_text( |$)' | tail -n 1)
[[ $link == *data/tokenize_text.c* ]] || { echo "bench_jsonl_reader: cannot find tokenize_text's link line in make -n" >&2; exit 1; }
cp data/tokenize_text.c "$TMP/fast.c"
sed -e 's|^static void read_jsonl(|#include "dev/bench/jsonl_line_cjson.c"\n\nstatic void read_jsonl(|' \
    -e 's|^\( *\)json_line(&j);|\1json_line_cjson(\&j);|' data/tokenize_text.c > "$TMP/cjson.c"
if [[ $(grep -c 'json_line_cjson(&j);' "$TMP/cjson.c") != 1 || $(grep -c 'jsonl_line_cjson.c"' "$TMP/cjson.c") != 1 ]]; then
    echo "bench_jsonl_reader: data/tokenize_text.c no longer has read_jsonl calling json_line(&j): update this script" >&2; exit 1
fi
for v in fast cjson; do
    cmd=${link/data\/tokenize_text.c/$TMP/$v.c}
    eval "${cmd/ -o tokenize_text/ -Wno-unused-function -o $TMP/$v}"
done

# ---- the corpus
python3 - "$FSDP_DATA/tinyshakespeare/input.txt" "$TMP/corpus.jsonl" "$MB" <<'PY'
import json, sys
paras = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
docs, cur, size = [], [], 0
for p in paras:
    cur.append(p)
    size += len(p) + 2
    if size >= 4000:
        docs.append("\n\n".join(cur))
        cur, size = [], 0
want, n = float(sys.argv[3]) * 1e6, 0
with open(sys.argv[2], "w", encoding="utf-8") as f:
    while n < want:
        for i, d in enumerate(docs):
            k = n // 4096 + i
            line = json.dumps({"text": d, "id": f"<urn:uuid:{k:08x}-5b1e-4c9a-9f3e-{k * 7919 % 16**12:012x}>",
                               "dump": "CC-MAIN-2013-20", "url": f"http://example.com/plays/{k}/act-{i % 5 + 1}.html",
                               "date": "2013-05-18T05:48:54Z",
                               "file_path": "s3://commoncrawl/crawl-data/CC-MAIN-2013-20/segments/1368696381249/warc/"
                                            f"CC-MAIN-20130516092621-{k % 1000:05d}-ip-10-60-113-184.ec2.internal.warc.gz",
                               "language": "en", "language_score": 0.9724, "token_count": len(d) // 4}) + "\n"
            f.write(line)
            n += len(line.encode())
PY
lines=$(wc -l < "$TMP/corpus.jsonl")
small=$((lines / 8))
bytes_all=$(stat -c %s "$TMP/corpus.jsonl")
bytes_small=$(head -n "$small" "$TMP/corpus.jsonl" | wc -c)

# ---- the same shards from both
for v in fast cjson; do
    mkdir -p "$TMP/check_$v"
    "$TMP/$v" "${V[@]}" -q --jsonl-field text --val-tokens 1000000 --shard-tokens 10000000 -o "$TMP/check_$v/c" "$TMP/corpus.jsonl"
done
if ! diff -r "$TMP/check_fast" "$TMP/check_cjson" > /dev/null; then
    echo "bench_jsonl_reader: the two builds write different shards" >&2; exit 1
fi
rm -rf "$TMP"/check_*

# ---- the timings (python: wait4 gives each run's CPU time too)
python3 - "$TMP" "$THREADS" "$ROUNDS" "$small" "$bytes_all" "$bytes_small" "${V[@]}" <<'PY'
import os, re, shutil, subprocess, sys, time
tmp, threads, rounds, small, bytes_all, bytes_small = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
vocab = sys.argv[7:]
corpus = os.path.join(tmp, "corpus.jsonl")

def run(tool, max_docs=None):
    """One end-to-end run: (wall seconds, CPU seconds of user + system)."""
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cmd = [tool, *vocab, "-q", "--jsonl-field", "text", "--threads", threads, "--val-tokens", "100000000", "-o", os.path.join(out, "c")]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd + (["--max-docs", max_docs] if max_docs else []) + [corpus])
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"bench_jsonl_reader: {tool} failed (status {status})")
    return wall, ru.ru_utime + ru.ru_stime

best = {v: {"wall": 1e30, "cpu": 1e30, "wall_s": 1e30, "cpu_s": 1e30, "read": 0.0} for v in ("fast", "cjson")}
for _ in range(rounds):
    for v in ("fast", "cjson"):
        tool, b = os.path.join(tmp, v), best[v]
        w, c = run(tool)
        b["wall"], b["cpu"] = min(b["wall"], w), min(b["cpu"], c)
        w, c = run(tool, small)
        b["wall_s"], b["cpu_s"] = min(b["wall_s"], w), min(b["cpu_s"], c)
        out = subprocess.run([tool, *vocab, "--bench", "--jsonl-field", "text", "--threads", "1", "--repeat", "1", corpus],
                             capture_output=True, text=True, check=True).stdout
        b["read"] = max(b["read"], float(re.search(r"read_MB/s ([0-9.]+)", out).group(1)))
mb = (bytes_all - bytes_small) / 1e6
for b in best.values():
    b["rate"] = mb / (b["wall"] - b["wall_s"])        # MB/s of JSONL once running
    b["cpu_mb"] = (b["cpu"] - b["cpu_s"]) / mb * 1e3  # CPU ms per MB of JSONL once running
f, c = best["fast"], best["cjson"]
lines = sum(1 for _ in open(corpus, "rb"))
print(f"tokenize_text JSONL reader vs cJSON: {lines} lines, {bytes_all / 1e6:.1f} MB of JSONL (FineWeb-shaped, ~4 KB of text each), "
      f"--threads {threads}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, best of {rounds}")
print(f"  end to end, wall (once running): own reader {f['rate']:.1f} MB/s, cJSON {c['rate']:.1f} MB/s of JSONL: "
      f"cJSON/own {c['rate'] / f['rate']:.3f} (cJSON costs {100 * (1 - c['rate'] / f['rate']):.1f}%)")
print(f"  end to end, CPU time (user + system, once running): own reader {f['cpu_mb']:.2f} ms/MB, cJSON {c['cpu_mb']:.2f} ms/MB: "
      f"cJSON {100 * (c['cpu_mb'] / f['cpu_mb'] - 1):+.1f}% (on cores the run saturates, throughput {f['cpu_mb'] / c['cpu_mb']:.3f}x)")
print(f"  reading thread alone (--bench read_MB/s, text): own reader {f['read']:.0f} MB/s, cJSON {c['read']:.0f} MB/s: "
      f"cJSON/own {c['read'] / f['read']:.3f}")
PY
