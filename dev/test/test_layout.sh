#!/usr/bin/env bash
# run_tests: cores 0.7, 3 s
# The house rules of the layout, read from the sources (README "How it works"):
#   - folders depend one way: every "#include "DIR/..."" outside dev/ names a folder its own
#     folder may use (the table below); nothing outside dev/ includes dev/;
#   - one device interface: the only "#if... __CUDACC__" of the training program is in
#     train/device.cuh, the constructor that builds a device (the kernel tables and the
#     backends themselves are CUDA-only headers, included there);
#   - each folder's first file (in name order) opens with a comment saying what it is for.
# A rule broken prints the file, the line and the rule.
set -u
source dev/test/lib.sh

# Which folders each folder's files may include (besides system headers and their own).
# util/ (the atomic file write) is below them all: every folder may include it, it includes
# nothing of ours.
declare -A may=(
    [util]=""
    [comm]="util"
    [kernels]="util"
    [dataloader]="util"
    [fsdp]="util comm kernels"
    [checkpoint]="util comm"
    [model]="util comm fsdp checkpoint"
    [checkpoint/tool]="util checkpoint model comm fsdp"
    [data]="util dataloader"
    [train]="util comm fsdp kernels model checkpoint dataloader"
    [.]="util comm fsdp kernels model checkpoint dataloader train"
)

bad=0; files=0; includes=0
while IFS= read -r f; do
    files=$((files + 1))
    dir=$(dirname "$f")
    [ -n "${may[$dir]+x}" ] || { not_ok "layout: $f is in a folder the rules do not know ($dir): add it to dev/test/test_layout.sh"; bad=1; continue; }
    while IFS=: read -r line inc; do
        includes=$((includes + 1))
        target=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$inc")
        tdir=$(dirname "$target")
        [ "$tdir" = "$dir" ] && continue
        case " ${may[$dir]} " in
            *" $tdir "*) ;;
            *) not_ok "layout: $f:$line includes $target, but $dir/ may include only: ${may[$dir]:-nothing of ours}"; bad=1 ;;
        esac
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed -E 's/^([0-9]+):/\1:/')
done < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^dev/')
[ "$bad" = 0 ] && ok "layout: $includes includes of $files files outside dev/ follow the folder rules (util <- comm, kernels, dataloader <- fsdp, checkpoint <- model <- train <- train_gpt.cu)"

# One device interface: no __CUDACC__ in the training program outside the constructor.
hits=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^dev/' | grep -v '^train/device.cuh$' |
       xargs grep -n '__CUDACC__' 2>/dev/null)
if [ -z "$hits" ] && grep -q '__CUDACC__' train/device.cuh; then
    ok "layout: the only #ifdef __CUDACC__ outside dev/ is train/device.cuh's (the device constructor)"
else
    not_ok "layout: __CUDACC__ outside train/device.cuh: $(head -n 3 <<<"$hits" | tr '\n' ' ')"
fi
# kernels/ knows nothing of the engine (the cuda table's host waits come in as a callback).
if ! grep -rn 'Fsdp' kernels/ > /dev/null; then
    ok "layout: kernels/ never names the FSDP engine or its backend"
else
    not_ok "layout: kernels/ names the FSDP engine: $(grep -rn 'Fsdp' kernels/ | head -n 2 | tr '\n' ' ')"
fi

# Each folder's first file opens with a comment saying what the folder is for (naming it).
missing=""
for dir in util comm fsdp kernels model checkpoint dataloader train data; do
    first=$(git ls-files "$dir" | grep -E '^[^/]+/[^/]+\.(c|h|cu|cuh|sh)$' | sort | head -n 1)
    head -n 4 "$first" | grep -E '^(//|#|/\*| \*)' | grep -q "$dir/:" || missing="$missing $first"
done
if [ -z "$missing" ]; then ok "layout: each folder's first file opens with a comment saying what the folder is for"
else not_ok "layout: first files without an opening 'DIR/: what it is for' comment:$missing"; fi

# The shape issue #31 gave the code (README "How it works"):
#   - the families are model/'s: one file and one tensor table each (model/gpt2.c, model/llama3.c),
#     ModelConfig for all of them (no GPT2Config left), and no family named outside model/ and dev/
#     (the schedule, the options and the tools read the family's table and kinds instead);
#   - the story reads in about 1,000 lines: train_gpt.cu at most 1,050;
#   - kernels/ by op: no file over 900 lines; checkpoint/tool/ckpt.c, the command line, under 900;
#   - one atomic file write, util/atomic_file.c's: no other file renames a file into place
#     (checkpoint/checkpoint.c's two renames move step directories: the commit, and moving a
#     checkpoint aside).
src=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.sh' '*.py' '*.md' Makefile)
hits=$(grep -ln 'GPT2Config' $src 2>/dev/null | grep -v '^dev/test/test_layout.sh$')
if [ -z "$hits" ] && [ -f model/gpt2.c ] && [ -f model/llama3.c ]; then
    ok "layout: one file per family (model/gpt2.c, model/llama3.c) and ModelConfig for all (no GPT2Config)"
else
    not_ok "layout: GPT2Config in: $hits; or model/gpt2.c or model/llama3.c missing"
fi
hits=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^dev/\|^model/' | xargs grep -ln 'ARCH_GPT2\|ARCH_LLAMA3' 2>/dev/null)
if [ -z "$hits" ]; then ok "layout: no family is named outside model/ (ARCH_GPT2, ARCH_LLAMA3)"
else not_ok "layout: a family named outside model/ in: $hits"; fi
lines=$(wc -l < train_gpt.cu)
if [ "$lines" -le 1050 ]; then ok "layout: train_gpt.cu is $lines lines (at most 1,050)"
else not_ok "layout: train_gpt.cu is $lines lines (at most 1,050)"; fi
lines=$(wc -l < checkpoint/tool/ckpt.c)
if [ "$lines" -lt 900 ]; then ok "layout: checkpoint/tool/ckpt.c is $lines lines (under 900: the command line only)"
else not_ok "layout: checkpoint/tool/ckpt.c is $lines lines (under 900: the command line only)"; fi
big=$(git ls-files kernels | xargs wc -l | awk '$2 != "total" && $1 > 900 {print $2 " (" $1 ")"}')
if [ -z "$big" ]; then ok "layout: no file in kernels/ over 900 lines (one header per op)"
else not_ok "layout: kernels/ files over 900 lines: $big"; fi
renamers=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^dev/' | xargs grep -l '\brename(' | tr '\n' ' ')
dir_renames=$(grep -c '\brename(' checkpoint/checkpoint.c)
if [ "$renamers" = "checkpoint/checkpoint.c util/atomic_file.c " ] && [ "$dir_renames" = 2 ]; then
    ok "layout: one atomic file write (util/atomic_file.c renames files; checkpoint.c's 2 renames move step directories)"
else
    not_ok "layout: files outside util/ rename into place: $renamers (checkpoint.c: $dir_renames renames, 2 expected)"
fi
