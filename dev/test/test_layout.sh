#!/usr/bin/env bash
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
