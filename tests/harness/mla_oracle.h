/* mla_oracle.h - the independent fp64 oracle of sparse MLA decode and the
 * comparison against it (sparse-decode.md §7), shared by check_sparse_mla.c
 * (which implements them) and demo.c. Internal to the test harness.
 *
 * Every function takes a "host mirror" of the descriptor: a
 * dsk_sparse_mla_desc whose pointers (q, slots, lens, sink, cache bases, and
 * out / lse for the comparison) point to host copies of the device data. */
#ifndef DSK_MLA_ORACLE_H
#define DSK_MLA_ORACLE_H

#include <stdint.h>

#include "dsk.h"

/* Fills ref_out[(t*H + h)*512 + e] (fp64, before bf16 rounding),
 * ref_lse[t*H + h] (natural log, sink excluded, -inf for empty rows) and
 * nvalid[t] (valid candidates of row t over both segments, duplicates
 * counted). Straightforward per (t, h): gather candidates, decode the record
 * bytes, two-pass softmax. Returns 0, or -1 if host memory ran out. */
int mla_oracle_run(const dsk_sparse_mla_desc *hd, double *ref_out, double *ref_lse, int64_t *nvalid);

/* Counts of sparse-decode.md §8 and the expected bad-data counters:
 * n_att = valid entries (duplicates counted), distinct = distinct valid
 * (segment, slot) pairs, counters[0] = slots >= num_pages*pbs at k < L,
 * counters[1] = clamped lens values. */
void mla_count_work(const dsk_sparse_mla_desc *hd, int64_t *n_att, int64_t *distinct, int64_t counters[2]);

/* FLOP and bytes of sparse-decode.md §8 (lse counted when hd->lse). */
double mla_flops(const dsk_sparse_mla_desc *hd, int64_t n_att);
double mla_bytes(const dsk_sparse_mla_desc *hd, int64_t distinct);

typedef struct mla_metrics {
  double rel_l2, max_abs, max_ref, lse_abs;
  int64_t rows_compared; /* (t, h) rows with a valid entry and no +inf sink */
  int64_t nonfinite;     /* non-finite outputs (or lse) where finite ones are required */
  int64_t bad_empty;     /* empty rows whose out != 0 or lse != -inf */
  int64_t bad_sink;      /* +inf-sink rows whose out != 0 */
} mla_metrics;

/* Compares hd->out / hd->lse (host copies of the results) with the oracle. */
void mla_compare(const dsk_sparse_mla_desc *hd, const double *ref_out, const double *ref_lse, const int64_t *nvalid,
                 mla_metrics *m);

/* 1 iff the metrics meet the bound of `p` (sparse-decode.md §7) and the exact
 * checks (no bad empty / sink rows, no non-finite values) hold. */
int mla_within_bound(const mla_metrics *m, dsk_precision p);

#define MLA_ACCURATE_REL_L2 4e-3
#define MLA_ACCURATE_LSE_ABS 1e-3
#define MLA_ACCURATE_MAX_ABS_REL 2e-2
#define MLA_FAST_REL_L2 2e-2
#define MLA_FAST_LSE_ABS 1e-2
#define MLA_FAST_MAX_ABS_REL 1e-1

#endif
