#!/bin/bash
# Quick A/B of a variant build against the default on a device machine,
# with both binaries built beforehand on the build machine and carried, and
# every step under a deadline, so that a short or late lease still returns
# the most useful numbers first. Usage:
#
#   here:   DSK_AB_FLAGS="-DDSK_MOE_PF_BCOOP=1 -DDSK_INDEXER_QSMEM=1" tools/gpu-quick-ab.sh prep
#           (builds build-qab0 with DSK_AB_FLAGS and build-qab1 without,
#           CUDA archs DSK_GPU_ARCHS (default 90-real), and copies the two
#           dsk binaries to .dev/qab/b0 and .dev/qab/b1; cJSON is unpacked
#           into .dev/root when it is not there. With DSK_AB_FLAGS2 set it
#           also builds build-qab2 with those flags, a second variant
#           carried as .dev/qab/b2, which `run` treats as it treats b0:
#           benched in each round, checked, sanitized, profiled)
#   device: carry .dev/root and .dev/qab, then
#           DSK_QAB_DEADLINE=300 tools/gpu-quick-ab.sh run
#
# `run` packs its logs into $OUT/qab.tgz (OUT default /tmp/dsk-qab) after
# every step and keeps the step list in $OUT/progress.txt. Order: round 1
# of the benchmarks (b0, b1 alternated), `dsk check --quick` of b0 for each
# op in DSK_QAB_CHECK on cuda-sm90, then on DSK_TEST_AS_SM120=1, memcheck
# and racecheck of b0, b1's checks and `dsk demo`, round 2 of the
# benchmarks, then Nsight Compute (DSK_QAB_NCU). A step starts only if the time it may take
# (its timeout) fits before the deadline.
#   DSK_QAB_BENCH  `dsk bench` argument sets separated by '|', each the
#                  bench's name and its arguments (default: "moe --model
#                  dsv4-flash --t 4096 --op fc1|...": the MoE FC1 / FC2 of
#                  DSv4-Flash at T 4096, GLM-5.1 FC1, the indexer logits at
#                  128K, T 64)
#   DSK_QAB_CHECK  ops for `dsk check --only` (default: moe indexer)
#   DSK_QAB_DEMO   empty: skip `dsk demo` of b1 (run after the checks)
#   DSK_QAB_SAN    empty: skip compute-sanitizer of b0
#   DSK_QAB_NCU    "REGEX@SET[+N]" entries: ncu of the first kernel matching
#                  REGEX in bench set SET after N such launches (default:
#                  the prefill GEMM on FC1, and on FC2 with N 1)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
case $cmd in
  prep)
    root=$here/.dev/root
    if [ ! -f "$root/usr/include/cjson/cJSON.h" ]; then
      mkdir -p "$root" && tmp=$(mktemp -d) &&
        (cd "$tmp" && apt-get download libcjson1 libcjson-dev) &&
        for f in "$tmp"/libcjson*.deb; do dpkg -x "$f" "$root"; done || { echo "cJSON unpack failed" >&2; exit 1; }
    fi
    cf=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=${DSK_GPU_ARCHS:-90-real}" -DDSK_BUILD_TESTS=OFF
        "-DDSK_CJSON_INCLUDE_DIR=$root/usr/include/cjson"
        "-DDSK_CJSON_LIBRARY=$root/usr/lib/x86_64-linux-gnu/libcjson.so")
    cmake -S "$here" -B "$here/build-qab0" "${cf[@]}" "-DCMAKE_CUDA_FLAGS=${DSK_AB_FLAGS:?set DSK_AB_FLAGS}" \
      "-DCMAKE_C_FLAGS=$DSK_AB_FLAGS" > /dev/null 2>&1 || exit 1
    cmake -S "$here" -B "$here/build-qab1" "${cf[@]}" -DCMAKE_CUDA_FLAGS= -DCMAKE_C_FLAGS= > /dev/null 2>&1 || exit 1
    bs="0 1"
    rm -rf "$here/.dev/qab/b2"
    if [ -n "${DSK_AB_FLAGS2:-}" ]; then
      cmake -S "$here" -B "$here/build-qab2" "${cf[@]}" "-DCMAKE_CUDA_FLAGS=$DSK_AB_FLAGS2" \
        "-DCMAKE_C_FLAGS=$DSK_AB_FLAGS2" > /dev/null 2>&1 || exit 1
      bs="0 1 2"
    fi
    for b in $bs; do
      cmake --build "$here/build-qab$b" -j "$(nproc)" --target dsk_cli > "$here/build-qab$b/qab-build.log" 2>&1 ||
        { tail -n 30 "$here/build-qab$b/qab-build.log" >&2; exit 1; }
      mkdir -p "$here/.dev/qab/b$b" && cp "$here/build-qab$b/dsk" "$here/.dev/qab/b$b/dsk" || exit 1
    done
    echo "ready: carry .dev/root and .dev/qab (b0 = $DSK_AB_FLAGS, b1 = default${DSK_AB_FLAGS2:+, b2 = $DSK_AB_FLAGS2})" ;;
  run)
    # the logs stay outside $OUT (a device call returns at most 8 files):
    # $OUT gets the tarball and the progress list
    out=${OUT:-/tmp/dsk-qab}
    work=$(mktemp -d)
    log=$work/qab
    mkdir -p "$log" "$out"
    export LD_LIBRARY_PATH=$here/.dev/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=/usr/local/cuda/bin:$PATH
    dl=${DSK_QAB_DEADLINE:-300}
    t0=$SECONDS
    b0=$here/.dev/qab/b0/dsk b1=$here/.dev/qab/b1/dsk
    [ -x "$b0" ] && [ -x "$b1" ] || { echo "no carried binaries: run 'prep' here and carry .dev/qab" >&2; exit 1; }
    # the variants: b0, and b2 when prep built one
    vs="0"
    [ -x "$here/.dev/qab/b2/dsk" ] && vs="0 2"
    bin_of() { echo "$here/.dev/qab/b$1/dsk"; }
    nvidia-smi -L > "$log/gpu.txt" 2>&1
    # step NAME TIMEOUT COMMAND...: run it if TIMEOUT seconds fit before the deadline
    step() {
      local name=$1 lim=$2
      shift 2
      if [ $((SECONDS - t0 + lim)) -gt "$dl" ]; then
        echo "skipped $name (deadline)" >> "$log/progress.txt"
        return 0
      fi
      local s=$SECONDS
      timeout "$lim" "$@" > "$log/$name.txt" 2>&1
      echo "$name rc=$? $((SECONDS - s)) s (at +$((SECONDS - t0)) s)" >> "$log/progress.txt"
      tar czf "$out/qab.tgz" -C "$work" qab
      cp "$log/progress.txt" "$out/progress.txt"
    }
    IFS='|' read -ra sets <<< "${DSK_QAB_BENCH:-moe --model dsv4-flash --t 4096 --op fc1|moe --model dsv4-flash --t 4096 --op fc2|moe --model glm-5.1 --t 4096 --op fc1|indexer --context 131072 --t 64 --op logits}"
    bench_round() {
      for k in "${!sets[@]}"; do
        # the first word of a set is the bench (moe, indexer, ...), the rest its arguments
        read -ra w <<< "${sets[$k]}"
        for b in $vs 1; do
          local bin
          bin=$(bin_of "$b")
          step "bench_${k}_b${b}_r$1" 60 env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off "$bin" bench "${w[0]}" --device cuda:0 "${w[@]:1}"
        done
      done
    }
    ops=${DSK_QAB_CHECK:-moe indexer}
    bench_round 1
    for v in $vs; do
      for op in $ops; do step "check_${op}_b$v" 90 "$(bin_of "$v")" check --device cuda:0 --only "$op" --quick; done
      for op in $ops; do
        step "check_${op}_b${v}_sm120" 90 env DSK_TEST_AS_SM120=1 "$(bin_of "$v")" check --device cuda:0 --only "$op" --quick
      done
    done
    # the variant's kernels under compute-sanitizer before anything of b1:
    # a default flips only with these clean
    [ -n "${DSK_QAB_SAN-1}" ] && for v in $vs; do
      for op in $ops; do
        step "memcheck_${op}_b$v" 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$(bin_of "$v")" check \
          --device cuda:0 --only "$op" --quick
        step "racecheck_${op}_b$v" 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$(bin_of "$v")" check \
          --device cuda:0 --only "$op" --quick
      done
    done
    for op in $ops; do step "check_${op}_b1" 90 "$b1" check --device cuda:0 --only "$op" --quick; done
    # the default build's `dsk demo` (every row checked against the cpu-ref)
    [ -n "${DSK_QAB_DEMO-1}" ] && step demo_b1 150 "$b1" demo --device cuda:0
    bench_round 2
    # then Nsight Compute of each DSK_QAB_NCU kernel regex on its bench set
    # (entries "REGEX@SET", SET an index into DSK_QAB_BENCH; default: the
    # prefill GEMM on FC1 and on FC2), both binaries
    # (an entry REGEX@SET+N skips the first N matching launches: the FC2
    # bench runs the whole chain once before its timing, so its first
    # prefill GEMM is the chain's FC1 and FC2 is the second)
    for e in ${DSK_QAB_NCU:-moe_gemm_prefill_kernel@0 moe_gemm_prefill_kernel@1+1}; do
      rx=${e%@*} at=${e#*@}
      set_i=${at%+*} skip=0
      [ "$at" != "$set_i" ] && skip=${at#*+}
      read -ra w <<< "${sets[$set_i]}"
      for b in $vs 1; do
        bin=$(bin_of "$b")
        step "ncu_${set_i}_b$b" 150 env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off ncu --clock-control none --set full \
          -k "regex:$rx" --launch-skip "$skip" -c 1 "$bin" bench "${w[0]}" --device cuda:0 "${w[@]:1}" --reps 1
      done
    done
    cat "$log/progress.txt" ;;
  *)
    echo "usage: DSK_AB_FLAGS=... $0 prep   |   DSK_QAB_DEADLINE=S $0 run" >&2
    exit 2 ;;
esac
