#!/bin/bash
# GPU suite: build with CUDA, then the backend-vs-reference harness on the
# GPU (both backend tables), compute-sanitizer, the demo, the benchmarks
# and the warmup timing. Logs go to $OUT (or /tmp/dsk-gpu). Usage:
#   tools/gpu-suite.sh [build|check|sanitize|demo|bench|tune|all|ab-regcvt|ab-mla16|ab-skinny|ab-moe|ab-build|ab-bench|ab-v19|check-moe|ncu-prefill]...
set -uo pipefail
OUT=${OUT:-/tmp/dsk-gpu}
mkdir -p "$OUT"
B=${BUILD:-build-gpu}
ARCHS=${DSK_GPU_ARCHS:-90-real}
rc=0
step() { echo "== $*"; }
run() { # name, command...
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" > "$OUT/$name.log" 2>&1
  local r=$?
  local t1=$(date +%s%N)
  printf '%-28s rc=%d  %d ms\n' "$name" $r $(( (t1 - t0) / 1000000 )) | tee -a "$OUT/summary.txt"
  tail -n 4 "$OUT/$name.log"
  [ $r -ne 0 ] && rc=1
  return $r
}
# ab_variant TAG FLAG MODEL...: build "$B-TAG" with -DFLAG, check its sparse
# decode on both tables, then alternate `dsk bench sparse-mla --model M` of
# the default build and the variant twice per model
ab_variant() {
  local tag=$1 flag=$2; shift 2
  run "cmake_$tag" cmake -S . -B "$B-$tag" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
    -DCMAKE_CUDA_FLAGS="$flag" ${DSK_CMAKE_FLAGS:-} || return 1
  run "build_$tag" cmake --build "$B-$tag" -j "$(nproc)" || return 1
  run "check_$tag" "$B-$tag/dsk" check --device cuda:0 --only sparse_mla
  run "check_${tag}_sm120" env DSK_TEST_AS_SM120=1 "$B-$tag/dsk" check --device cuda:0 --only sparse_mla
  for i in 1 2; do
    for m in "$@"; do
      run "bench_base_${m}_$i" "$B/dsk" bench sparse-mla --device cuda:0 --model "$m"
      run "bench_${tag}_${m}_$i" "$B-$tag/dsk" bench sparse-mla --device cuda:0 --model "$m"
    done
  done
}
for what in "${@:-all}"; do
  case $what in
    build|all)
      run cmake cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        ${DSK_CMAKE_FLAGS:-} || exit 1
      run build cmake --build "$B" -j "$(nproc)" || exit 1
      "$B/dsk" info > "$OUT/info.log" 2>&1 ;;&
    check|all)
      run ctest_gpu env DSK_TEST_DEVICE=cuda:0 ctest --test-dir "$B" --output-on-failure -j 4
      run check_sm90 "$B/dsk" check --device cuda:0
      run check_sm120 env DSK_TEST_AS_SM120=1 "$B/dsk" check --device cuda:0 ;;&
    sanitize|all)
      run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$B/dsk" check --device cuda:0 --quick
      run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$B/dsk" check --device cuda:0 --quick --only sparse_mla
      # the cuda-sm120 table: its FAST calls run the e4m3 32-head kernel
      run memcheck_sm120 env DSK_TEST_AS_SM120=1 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/dsk" check \
        --device cuda:0 --quick --only sparse_mla
      run racecheck_sm120 env DSK_TEST_AS_SM120=1 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/dsk" check \
        --device cuda:0 --quick --only sparse_mla
      # the skinny MoE GEMM's warp slices meet in shared memory
      run racecheck_moe timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/dsk" check --device cuda:0 --quick \
        --only moe ;;&
    check-moe)
      # not part of `all` (which covers it): the MoE checks alone, for MoE changes
      run ctest_moe env DSK_TEST_DEVICE=cuda:0 ctest --test-dir "$B" --output-on-failure -R 'test_moe|emu_moe'
      run check_moe_sm90 "$B/dsk" check --device cuda:0 --only moe --quick
      run check_moe_sm120 env DSK_TEST_AS_SM120=1 "$B/dsk" check --device cuda:0 --only moe --quick
      run memcheck_moe timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/dsk" check --device cuda:0 --quick \
        --only moe
      run racecheck_moe timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/dsk" check --device cuda:0 --quick \
        --only moe ;;&
    ncu-prefill)
      # not part of `all`: Nsight Compute (full set, clocks left alone) of
      # the routed FC1 and FC2 GEMMs of DSv4-Flash at T 4096 (the prefill
      # kernel, or the tiled one), in the default build and, when they
      # exist, "$B-ab" and "$B-v19"
      for bd in "$B" "$B-ab" "$B-v19"; do
        [ -x "$bd/dsk" ] || continue
        # the fc2 bench runs the whole chain once first: its second routed
        # GEMM launch is the chain's FC2
        for op in fc1 fc2; do
          skip=0
          [ $op = fc2 ] && skip=1
          run "ncu_prefill_${op}_${bd##*-}" env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off ncu --clock-control none --set full \
            -k 'regex:moe_gemm_(prefill_)?kernel' --launch-skip $skip -c 1 "$bd/dsk" bench moe --device cuda:0 \
            --model dsv4-flash --t 4096 --op $op --reps 1
        done
      done ;;&
    demo|all)
      run demo "$B/dsk" demo --device cuda:0 ;;&
    bench|all)
      run ceilings "$B/dsk-ceilings"
      run latency "$B/dsk-latency"
      run bench "$B/dsk" bench sparse-mla --device cuda:0
      run bench_fast_sm120 env DSK_TEST_AS_SM120=1 "$B/dsk" bench sparse-mla --device cuda:0 --fast --t 128
      run bench_mhc "$B/dsk" bench mhc --device cuda:0
      run bench_indexer "$B/dsk" bench indexer --device cuda:0
      run bench_moe "$B/dsk" bench moe --device cuda:0 ;;&
    ab-skinny)
      # not part of `all`: the MoE GEMMs the skinny kernel serves (grouped at
      # BLOCK_M 64, dense of <= 8 rows) on the tiled kernel (-DDSK_MOE_SKINNY=0)
      # against the default build
      run cmake_sk0 cmake -S . -B "$B-sk0" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA_FLAGS=-DDSK_MOE_SKINNY=0 ${DSK_CMAKE_FLAGS:-} &&
        run build_sk0 cmake --build "$B-sk0" -j "$(nproc)" --target dsk_cli &&
        for i in 1 2; do
          run bench_moe_base_$i env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off "$B-sk0/dsk" bench moe --device cuda:0 --max-t 128
          run bench_moe_skinny_$i env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off "$B/dsk" bench moe --device cuda:0 --max-t 128
        done ;;&
    ab-build|ab-moe)
      # not part of `all`: a variant build "$B-$DSK_AB_TAG" (tag default ab)
      # with DSK_AB_FLAGS (given to both the C and the CUDA compiler, e.g.
      # "-DDSK_MOE_FORK_EARLY=0") beside the default build "$B", and the
      # variant's quick MoE harness on both tables
      tag=${DSK_AB_TAG:-ab}
      run cmake_$tag cmake -S . -B "$B-$tag" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA_FLAGS="${DSK_AB_FLAGS:?set DSK_AB_FLAGS}" -DCMAKE_C_FLAGS="$DSK_AB_FLAGS" ${DSK_CMAKE_FLAGS:-} &&
        run build_$tag cmake --build "$B-$tag" -j "$(nproc)" --target dsk_cli &&
        run check_${tag}_moe "$B-$tag/dsk" check --device cuda:0 --only moe --quick &&
        run check_${tag}_moe_sm120 env DSK_TEST_AS_SM120=1 "$B-$tag/dsk" check --device cuda:0 --only moe --quick ;;&
    ab-bench|ab-moe)
      # not part of `all`: `dsk bench moe ARGS` of the default build and the
      # variant "$B-$DSK_AB_TAG", alternated, for each ARGS of DSK_AB_BENCH (sets separated by
      # '|'), DSK_AB_ROUNDS rounds (default 2; logs numbered from
      # DSK_AB_ROUND0, default 1); docs/benchmarks.md takes the lower median
      tag=${DSK_AB_TAG:-ab}
      IFS='|' read -ra ab_sets <<< "${DSK_AB_BENCH:-}"
      [ ${#ab_sets[@]} -eq 0 ] && ab_sets=("")
      r0=${DSK_AB_ROUND0:-1}
      for ((i = r0; i < r0 + ${DSK_AB_ROUNDS:-2}; i++)); do
        for k in "${!ab_sets[@]}"; do
          # shellcheck disable=SC2086
          run bench_moe_default_${tag}_${k}_$i env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off "$B/dsk" bench moe --device cuda:0 ${ab_sets[$k]}
          # shellcheck disable=SC2086
          run bench_moe_${tag}_${k}_$i env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off "$B-$tag/dsk" bench moe --device cuda:0 ${ab_sets[$k]}
        done
      done ;;&
    ab-mla16)
      # not part of `all`: the 16-head decode kernel's other barrier form
      # (-DDSK_MLA16_LATE_ISSUE=0: copies issued before the barrier that
      # opens a stage, three barriers a stage; the default is two), checked
      # on both tables, timed against the default build on DSv4-Flash (its
      # H <= 16 rows run this kernel), then memcheck and racecheck
      ab_variant late0 -DDSK_MLA16_LATE_ISSUE=0 dsv4-flash
      run memcheck_late0 compute-sanitizer --tool memcheck --error-exitcode 9 "$B-late0/dsk" check --device cuda:0 \
        --quick --only sparse_mla
      run racecheck_late0 compute-sanitizer --tool racecheck --error-exitcode 9 "$B-late0/dsk" check --device cuda:0 \
        --quick --only sparse_mla ;;&
    ab-regcvt)
      # not part of `all`: the earlier 32-head kernel with its f16 stage in
      # shared memory (-DDSK_MLA32_REGCVT=0) against the default build (the
      # raw-record kernel, in-register conversion), every model
      ab_variant k32 -DDSK_MLA32_REGCVT=0 dsv4-flash dsv4-pro glm-5.1 dsv3.2 ;;&
    ab-v19)
      # not part of `all` (needs `build` first): MoE v19 and Indexer v5, off
      # by default until timed (-DDSK_MOE_PF_BCOOP=1 -DDSK_INDEXER_QSMEM=1),
      # checked on both tables and under memcheck / racecheck, then timed
      # against the default build, alternated, two rounds: the DSv4-Flash
      # T 4096 MoE layer, the FC1 of GLM-5.1 and DSv4-Pro, the indexer at 128K
      v19="-DDSK_MOE_PF_BCOOP=1 -DDSK_INDEXER_QSMEM=1"
      run cmake_v19 cmake -S . -B "$B-v19" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DCMAKE_CUDA_FLAGS="$v19" ${DSK_CMAKE_FLAGS:-} &&
        run build_v19 cmake --build "$B-v19" -j "$(nproc)" --target dsk_cli &&
        for op in moe indexer; do
          run check_v19_$op "$B-v19/dsk" check --device cuda:0 --only $op --quick
          run check_v19_${op}_sm120 env DSK_TEST_AS_SM120=1 "$B-v19/dsk" check --device cuda:0 --only $op --quick
          run memcheck_v19_$op timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$B-v19/dsk" check \
            --device cuda:0 --quick --only $op
          run racecheck_v19_$op timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$B-v19/dsk" check \
            --device cuda:0 --quick --only $op
        done &&
        for i in 1 2; do
          for bd in "$B" "$B-v19"; do
            n=${bd##*-}
            run bench_flash_${n}_$i env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off "$bd/dsk" bench moe --device cuda:0 \
              --model dsv4-flash --t 4096
            for m in glm-5.1 dsv4-pro; do
              run bench_${m}_fc1_${n}_$i env DSK_AUTOTUNE=0 DSK_AUTOTUNE_CACHE=off "$bd/dsk" bench moe --device cuda:0 \
                --model $m --t 4096 --op fc1
            done
            run bench_indexer_${n}_$i "$bd/dsk" bench indexer --device cuda:0 --context 131072
          done
        done ;;&
    tune|all)
      # issue 4's warmup goals: DSv4-Flash TP 2 from an empty cache, then
      # with the cache it wrote (wall clock of the whole process)
      tdir=$(mktemp -d)
      run tune_empty env DSK_CACHE_DIR="$tdir" "$B/dsk" tune --model deepseek-v4-flash --tp 2 --max-tokens 256 \
        --max-context 131072 --device cuda:0
      run tune_full env DSK_CACHE_DIR="$tdir" "$B/dsk" tune --model deepseek-v4-flash --tp 2 --max-tokens 256 \
        --max-context 131072 --device cuda:0
      rm -rf "$tdir" ;;&
    *) ;;
  esac
done
exit $rc
