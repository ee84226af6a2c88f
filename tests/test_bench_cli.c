/* test_bench_cli.c - `dsk bench mhc`, `sparse-mla`, `indexer` and `moe` run end to end
 * in quick mode (the harness functions behind the CLI): every call
 * succeeds, prints its comment lines, the CSV header and one row per (case,
 * op) with the header's column count. Timing is never asserted. The
 * context comes from DSK_TEST_DEVICE (default the CPU). Also: filters that
 * select no case return DSK_BENCH_NO_CASE and write nothing (`dsk bench`
 * exits 2), unknown op names fail. And the
 * benches' repeated-normal fill at the sizes around its period (an exact
 * -size buffer, so ASan catches any write past the end). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static tu_counts counts;

typedef struct csv_stats {
  int comments, header, rows, bad_cols, goals;
  char first_row[256];
} csv_stats;

static int count_commas(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == ',';
  return n;
}

/* Reads back what a bench wrote to f. */
static csv_stats scan(FILE *f, const char *header_start) {
  csv_stats st;
  memset(&st, 0, sizeof st);
  char line[1024];
  int cols = -1;
  rewind(f);
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') {
      st.comments++;
    } else if (strncmp(line, header_start, strlen(header_start)) == 0) {
      st.header++;
      cols = count_commas(line);
    } else if (line[0] != '\n') {
      if (!st.rows) {
        strncpy(st.first_row, line, sizeof st.first_row - 1);
        st.first_row[sizeof st.first_row - 1] = 0;
      }
      st.rows++;
      if (count_commas(line) != cols) st.bad_cols++;
      st.goals += strstr(line, ":yes") != NULL || strstr(line, ":no") != NULL;
    }
  }
  return st;
}

static void test_mhc(dsk_ctx *ctx) {
  FILE *f = tmpfile();
  TU_CHECK(&counts, f != NULL, "tmpfile");
  if (!f) return;
  dsk_bench_mhc_opts o;
  memset(&o, 0, sizeof o);
  o.quick = 1;
  o.reps = 2;
  o.warm = 1;
  const double t0 = tu_now_us();
  int rc = dsk_bench_mhc(ctx, &o, f);
  TU_CHECK(&counts, rc == 0, "dsk_bench_mhc quick returned %d: %s", rc, dsk_last_error());
  csv_stats s = scan(f, "model,D,T,S,op,");
  /* 2 models x T {1, 4} x 10 ops (the two stream rows too: T <= 64) */
  TU_CHECK(&counts, s.header == 1 && s.comments >= 2, "mhc: header %d, comments %d", s.header, s.comments);
  TU_CHECK(&counts, s.rows == 40, "mhc: %d rows, expected 40", s.rows);
  TU_CHECK(&counts, s.bad_cols == 0, "mhc: %d rows with the wrong column count", s.bad_cols);
  TU_CHECK(&counts, s.goals == 8,
           "mhc: %d goal cells, expected 8 (T=1 prenorm+pre+post and post_prenorm+pre, lone and stream, per model)",
           s.goals);
  printf("bench mhc quick: %d rows in %.1f s; first: %s", s.rows, (tu_now_us() - t0) * 1e-6, s.first_row);
  fclose(f);

  /* filters: one row; nothing selected; a pinned split count; a bad op */
  f = tmpfile();
  if (!f) return;
  o.model = "pro";
  o.only_T = 4;
  o.warm = 0; /* one row with the L2 flush between samples */
  o.op = "post";
  o.fixed_splits = 1;
  rc = dsk_bench_mhc(ctx, &o, f);
  s = scan(f, "model,D,T,S,op,");
  TU_CHECK(&counts, rc == 0 && s.rows == 1, "mhc filtered: rc %d, %d rows (expected 1)", rc, s.rows);
  TU_CHECK(&counts, strncmp(s.first_row, "dsv4-pro,7168,4,1,post,", 23) == 0, "mhc filtered row: %s", s.first_row);
  fclose(f);
  f = tmpfile();
  if (!f) return;
  o.only_T = 3;
  rc = dsk_bench_mhc(ctx, &o, f);
  s = scan(f, "model,D,T,S,op,");
  TU_CHECK(&counts, rc == DSK_BENCH_NO_CASE && s.rows == 0 && s.header == 0 && s.comments == 0,
           "mhc T 3: rc %d (want %d), %d rows, %d header, %d comments", rc, DSK_BENCH_NO_CASE, s.rows, s.header,
           s.comments);
  /* a stream row above T 64, and a pinned S above both models' S_max: no case either */
  fclose(f);
  f = tmpfile();
  if (!f) return;
  o.only_T = 256;
  o.op = "prenorm+pre+post/stream16";
  o.quick = 0;
  rc = dsk_bench_mhc(ctx, &o, f);
  TU_CHECK(&counts, rc == DSK_BENCH_NO_CASE, "mhc stream row at T 256: rc %d (want %d)", rc, DSK_BENCH_NO_CASE);
  o.only_T = 0;
  o.op = NULL;
  o.model = NULL;
  o.fixed_splits = 1000;
  rc = dsk_bench_mhc(ctx, &o, f);
  s = scan(f, "model,D,T,S,op,");
  TU_CHECK(&counts, rc == DSK_BENCH_NO_CASE && s.rows == 0 && s.header == 0,
           "mhc --splits 1000: rc %d (want %d), %d rows", rc, DSK_BENCH_NO_CASE, s.rows);
  o.quick = 1;
  o.model = "pro";
  o.fixed_splits = 1;
  o.op = "post";
  /* the stream row alone */
  fclose(f);
  f = tmpfile();
  if (!f) return;
  o.only_T = 1;
  o.op = "prenorm+pre+post/stream16";
  rc = dsk_bench_mhc(ctx, &o, f);
  s = scan(f, "model,D,T,S,op,");
  TU_CHECK(&counts, rc == 0 && s.rows == 1 && s.goals == 1, "mhc stream row: rc %d, %d rows, %d goals", rc, s.rows,
           s.goals);
  TU_CHECK(&counts, strncmp(s.first_row, "dsv4-pro,7168,1,1,prenorm+pre+post/stream16,", 44) == 0,
           "mhc stream row: %s", s.first_row);
  fclose(f);
  f = tmpfile();
  if (!f) return;
  o.op = "post_prenorm+pre/stream16";
  rc = dsk_bench_mhc(ctx, &o, f);
  s = scan(f, "model,D,T,S,op,");
  TU_CHECK(&counts, rc == 0 && s.rows == 1 && s.goals == 1, "mhc fused stream row: rc %d, %d rows, %d goals", rc,
           s.rows, s.goals);
  TU_CHECK(&counts, strncmp(s.first_row, "dsv4-pro,7168,1,1,post_prenorm+pre/stream16,", 44) == 0,
           "mhc fused stream row: %s", s.first_row);
  o.only_T = 0;
  o.op = "sinkhorn";
  rc = dsk_bench_mhc(ctx, &o, f);
  TU_CHECK(&counts, rc != 0, "mhc: unknown op accepted");
  fclose(f);
}

static void test_indexer(dsk_ctx *ctx) {
  FILE *f = tmpfile();
  TU_CHECK(&counts, f != NULL, "tmpfile");
  if (!f) return;
  dsk_bench_indexer_opts o;
  memset(&o, 0, sizeof o);
  o.quick = 1;
  o.reps = 2;
  o.warm = 1;
  const double t0 = tu_now_us();
  int rc = dsk_bench_indexer(ctx, &o, f);
  TU_CHECK(&counts, rc == 0, "dsk_bench_indexer quick returned %d: %s", rc, dsk_last_error());
  csv_stats s = scan(f, "model,ratio,H,K,");
  /* 3 models x 1 context x T {1, 4} x 4 ops */
  TU_CHECK(&counts, s.header == 1 && s.comments >= 2, "indexer: header %d, comments %d", s.header, s.comments);
  TU_CHECK(&counts, s.rows == 24, "indexer: %d rows, expected 24", s.rows);
  TU_CHECK(&counts, s.bad_cols == 0, "indexer: %d rows with the wrong column count", s.bad_cols);
  printf("bench indexer quick: %d rows in %.1f s; first: %s", s.rows, (tu_now_us() - t0) * 1e-6, s.first_row);
  fclose(f);

  /* MTP layout (4 rows per request) on one model and op */
  f = tmpfile();
  if (!f) return;
  o.model = "glm";
  o.only_T = 4;
  o.per_req = 4;
  o.op = "fused";
  rc = dsk_bench_indexer(ctx, &o, f);
  s = scan(f, "model,ratio,H,K,");
  TU_CHECK(&counts, rc == 0 && s.rows == 1, "indexer filtered: rc %d, %d rows (expected 1)", rc, s.rows);
  TU_CHECK(&counts, strncmp(s.first_row, "glm-5.1,1,32,2048,4096,4096,4,1,fused,", 38) == 0, "indexer filtered row: %s",
           s.first_row);
  fclose(f);
  /* the slot-list stage alone (DSv4-Flash: the C4A kind) */
  f = tmpfile();
  if (!f) return;
  o.model = "flash";
  o.op = "slots";
  rc = dsk_bench_indexer(ctx, &o, f);
  s = scan(f, "model,ratio,H,K,");
  TU_CHECK(&counts, rc == 0 && s.rows == 1, "indexer slots: rc %d, %d rows (expected 1)", rc, s.rows);
  TU_CHECK(&counts, strncmp(s.first_row, "dsv4-flash,4,64,512,4096,1024,4,1,slots,", 40) == 0,
           "indexer slots row: %s", s.first_row);
  fclose(f);
  o.op = "fused";
  f = tmpfile();
  if (!f) return;
  o.model = "no-such-model";
  rc = dsk_bench_indexer(ctx, &o, f);
  s = scan(f, "model,ratio,H,K,");
  TU_CHECK(&counts, rc == DSK_BENCH_NO_CASE && s.rows == 0 && s.header == 0 && s.comments == 0,
           "indexer no model: rc %d (want %d), %d rows, %d header", rc, DSK_BENCH_NO_CASE, s.rows, s.header);
  o.model = NULL;
  o.only_ctx = 5000;
  rc = dsk_bench_indexer(ctx, &o, f);
  TU_CHECK(&counts, rc == DSK_BENCH_NO_CASE, "indexer context 5000: rc %d (want %d)", rc, DSK_BENCH_NO_CASE);
  o.only_ctx = 0;
  o.model = NULL;
  o.op = "softmax";
  rc = dsk_bench_indexer(ctx, &o, f);
  TU_CHECK(&counts, rc != 0, "indexer: unknown op accepted");
  fclose(f);
}

static void test_moe(dsk_ctx *ctx) {
  FILE *f = tmpfile();
  TU_CHECK(&counts, f != NULL, "tmpfile");
  if (!f) return;
  dsk_bench_moe_opts o;
  memset(&o, 0, sizeof o);
  o.quick = 1;
  o.reps = 2;
  o.warm = 1;
  const double t0 = tu_now_us();
  int rc = dsk_bench_moe(ctx, &o, f);
  TU_CHECK(&counts, rc == 0, "dsk_bench_moe quick returned %d: %s", rc, dsk_last_error());
  csv_stats s = scan(f, "model,H,I,E,topk,T,op,");
  /* 3 models x T {1, 16} x 10 ops */
  TU_CHECK(&counts, s.header == 1 && s.comments >= 2, "moe: header %d, comments %d", s.header, s.comments);
  TU_CHECK(&counts, s.rows == 60, "moe: %d rows, expected 60", s.rows);
  TU_CHECK(&counts, s.bad_cols == 0, "moe: %d rows with the wrong column count", s.bad_cols);
  printf("bench moe quick: %d rows in %.1f s; first: %s", s.rows, (tu_now_us() - t0) * 1e-6, s.first_row);
  fclose(f);
  /* filters: one row; nothing selected; a bad op */
  f = tmpfile();
  if (!f) return;
  o.model = "glm";
  o.only_T = 16;
  o.op = "fc1";
  rc = dsk_bench_moe(ctx, &o, f);
  s = scan(f, "model,H,I,E,topk,T,op,");
  TU_CHECK(&counts, rc == 0 && s.rows == 1, "moe filtered: rc %d, %d rows (expected 1)", rc, s.rows);
  TU_CHECK(&counts, strncmp(s.first_row, "glm-5.1,384,256,16,8,16,fc1,", 28) == 0, "moe filtered row: %s", s.first_row);
  fclose(f);
  f = tmpfile();
  if (!f) return;
  o.only_T = 3;
  rc = dsk_bench_moe(ctx, &o, f);
  s = scan(f, "model,H,I,E,topk,T,op,");
  TU_CHECK(&counts, rc == DSK_BENCH_NO_CASE && s.rows == 0 && s.header == 0 && s.comments == 0,
           "moe T 3: rc %d (want %d), %d rows, %d header", rc, DSK_BENCH_NO_CASE, s.rows, s.header);
  o.only_T = 0;
  o.op = "softmax";
  rc = dsk_bench_moe(ctx, &o, f);
  TU_CHECK(&counts, rc != 0, "moe: unknown op accepted");
  fclose(f);
}

/* `dsk bench sparse-mla` in quick mode (16 MiB pools), one case: DSv4-Flash
 * H 8, its three layer kinds at T 1, 4, 16 and 64; rows of T <= 16 also fill
 * the stream16_us column (16 calls on distinct inputs in one timed call),
 * the T 64 rows leave it empty. */
static void test_sparse_mla(dsk_ctx *ctx) {
  FILE *f = tmpfile();
  TU_CHECK(&counts, f != NULL, "tmpfile");
  if (!f) return;
  dsk_bench_mla_opts o;
  memset(&o, 0, sizeof o);
  o.quick = 1;
  o.reps = 2;
  o.warm = 1;
  o.model = "flash";
  o.only_H = 8;
  o.max_T = 64;
  const double t0 = tu_now_us();
  int rc = dsk_bench_sparse_mla(ctx, &o, f);
  TU_CHECK(&counts, rc == 0, "dsk_bench_sparse_mla quick returned %d: %s", rc, dsk_last_error());
  rewind(f);
  char line[1024];
  int rows = 0, header = 0, with_stream = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    if (strncmp(line, "model,layer,", 12) == 0) {
      header += count_commas(line) == 18 && strstr(line, ",stream16_us\n") != NULL;
      continue;
    }
    rows++;
    const char *tcol = strstr(line, ",B,");
    if (strncmp(line, "dsv4-flash,swa+c", 16) != 0 || !tcol || count_commas(line) != 18) {
      bad++;
      continue;
    }
    const char *last = strrchr(line, ',');
    const int T = atoi(tcol + 3);
    const double su = last ? atof(last + 1) : 0;
    if (T <= 16) with_stream += last && last[1] != '\n' && su > 0;
    else bad += last && last[1] != '\n';
  }
  /* rows: swa+c4a, swa+c128a 256 and 1024 at H 8, T 1, 4, 16, 64 */
  TU_CHECK(&counts, header == 1 && rows == 12 && bad == 0, "sparse-mla: header %d, %d rows (expected 12), %d bad", header,
           rows, bad);
  TU_CHECK(&counts, with_stream == 9, "sparse-mla: %d rows of T <= 16 with a stream time (expected 9)", with_stream);
  printf("bench sparse-mla quick: %d rows in %.1f s\n", rows, (tu_now_us() - t0) * 1e-6);
  fclose(f);
  /* filters that select no case: H 7; the 32-head kernel forced on H 8; T 5 */
  const int only_H[3] = {7, 8, 0}, hpc[3] = {0, 32, 0}, only_T[3] = {0, 0, 5};
  for (int i = 0; i < 3; i++) {
    f = tmpfile();
    if (!f) return;
    o.only_H = only_H[i];
    o.hpc = hpc[i];
    o.only_T = only_T[i];
    rc = dsk_bench_sparse_mla(ctx, &o, f);
    const long written = ftell(f);
    TU_CHECK(&counts, rc == DSK_BENCH_NO_CASE && written == 0, "sparse-mla H %d hpc %d T %d: rc %d (want %d), %ld bytes",
             only_H[i], hpc[i], only_T[i], rc, DSK_BENCH_NO_CASE, written);
    fclose(f);
  }
}

/* tu_fill_bf16_normal_rep: n values, a block of min(n, 2^20 + 13) normals
 * repeated; sizes around the period (a fill at exactly 2^20 elements once
 * wrote 13 elements past the buffer: dsk bench mhc at T 64). */
static void test_fill_rep(void) {
  const size_t rep = ((size_t)1 << 20) + 13;
  const size_t sizes[] = {1, 1000, (size_t)1 << 20, rep - 1, rep, rep + 1, 2 * rep + 7};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    const size_t n = sizes[si];
    dsk_bf16 *p = malloc(sizeof *p * n);
    TU_CHECK(&counts, p != NULL, "malloc");
    if (!p) return;
    tu_rng r = tu_rng_make(17 + si);
    tu_fill_bf16_normal_rep(&r, p, n, 1.0);
    size_t bad = 0, zeros = 0;
    for (size_t i = 0; i < n; i++) {
      bad += i >= rep && memcmp(&p[i], &p[i - rep], sizeof *p) != 0;
      zeros += dsk_bf16_to_f32(p[i]) == 0.0f;
    }
    TU_CHECK(&counts, bad == 0, "n %zu: %zu values break the period", n, bad);
    TU_CHECK(&counts, zeros * 100 < n + 100, "n %zu: %zu zeros", n, zeros);
    free(p);
  }
}

int main(void) {
  test_fill_rep();
  dsk_ctx *ctx = tu_ctx(NULL);
  TU_CHECK(&counts, ctx != NULL, "context");
  if (!ctx) return tu_finish("test_bench_cli", &counts);
  test_mhc(ctx);
  test_sparse_mla(ctx);
  test_indexer(ctx);
  test_moe(ctx);
  dsk_ctx_destroy(ctx);
  return tu_finish("test_bench_cli", &counts);
}
