#!/usr/bin/env bash
# check-spills.sh - the sm_120a register-spill check of CI (api-conventions.md §6).
#
# Compiles every src/backend/cuda/*.cu for sm_120a with `ptxas -v`, prints the
# report of each kernel (registers, stack, spills), and fails when a kernel
# whose name contains "sparse_mla" spills (any non-zero "bytes spill stores"
# or "bytes spill loads"): on SM120 (64K registers per SM, ~99 KB shared
# memory) a spilling decode kernel is a performance bug that Hopper tests
# would not show.
#
# Usage: tools/check-spills.sh [ARCH]     (ARCH default sm_120a)
# nvcc is looked for on PATH, then in /usr/local/cuda/bin. Without nvcc or
# without .cu files it prints a notice and passes.
set -euo pipefail

arch="${1:-sm_120a}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

nvcc="$(command -v nvcc || true)"
if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [[ -z "$nvcc" ]]; then
  echo "check-spills: NOTICE: nvcc not found (PATH, /usr/local/cuda/bin); spill check skipped"
  exit 0
fi

shopt -s nullglob
sources=(src/backend/cuda/*.cu)
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "check-spills: NOTICE: no src/backend/cuda/*.cu files; spill check skipped"
  exit 0
fi

demangle=cat
command -v c++filt >/dev/null 2>&1 && demangle=c++filt

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "check-spills: $("$nvcc" --version | tail -n 1); arch $arch; ${#sources[@]} file(s)"
status=0
checked=0
for src in "${sources[@]}"; do
  log="$tmp/$(basename "$src").log"
  if ! "$nvcc" -arch="$arch" -Xptxas -v -c -std=c++17 --expt-relaxed-constexpr -lineinfo -DDSK_HAVE_CUDA=1 \
      -Iinclude -Isrc "$src" -o "$tmp/out.o" >"$log" 2>&1; then
    echo "check-spills: FAIL: $src does not compile for $arch:"
    cat "$log"
    status=1
    continue
  fi
  # One row per kernel/function: name, registers, stack, spill stores, spill loads.
  # ptxas prints "Function properties for NAME" followed by the line with the
  # stack frame and spill counts; "Used N registers" follows the entry line.
  awk -v src="$src" '
    /Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); cur = substr($0, RSTART + 1, RLENGTH - 2) }
    /Function properties for/ { name = $NF }
    /bytes spill stores/ {
      for (i = 1; i <= NF; i++) {
        if ($(i + 1) == "bytes" && $(i + 2) == "stack") stack = $i
        if ($(i + 2) == "spill" && $(i + 3) == "stores,") st = $i
        if ($(i + 2) == "spill" && $(i + 3) == "loads") ld = $i
      }
      fn[name] = 1; sst[name] = st; sld[name] = ld; stk[name] = stack
    }
    /Used [0-9]+ registers/ {
      for (i = 1; i <= NF; i++) if ($(i + 1) == "registers,") regs[cur] = $i
    }
    END { for (n in fn) printf "%s\t%s\t%s\t%s\t%s\t%s\n", src, n, (n in regs) ? regs[n] : "-", stk[n], sst[n], sld[n] }
  ' "$log" >"$tmp/rows"
  while IFS=$'\t' read -r file name regs stack st ld; do
    pretty="$(printf '%s\n' "$name" | $demangle)"
    mark=""
    if [[ "$name" == *sparse_mla* ]]; then
      checked=$((checked + 1))
      if [[ "$st" != "0" || "$ld" != "0" ]]; then
        mark="  <-- SPILLS"
        status=1
      fi
    fi
    printf '  %-28s regs %-4s stack %-5s spill st %-5s ld %-5s %s%s\n' "$(basename "$file")" "$regs" "$stack" "$st" \
      "$ld" "$pretty" "$mark"
  done <"$tmp/rows"
done

if [[ $status -ne 0 ]]; then
  echo "check-spills: FAIL: a sparse_mla kernel spills registers on $arch, or a file did not compile (see above)"
  exit 1
fi
if [[ $checked -eq 0 ]]; then
  echo "check-spills: ok (no sparse_mla kernel in the sources yet; nothing to hold to zero spills)"
else
  echo "check-spills: ok ($checked sparse_mla function(s) without spills on $arch)"
fi
