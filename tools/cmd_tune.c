/* cmd_tune.c - `dsk tune` (spec/autotune.md A21): the warmup enumeration of
 * a model and serving envelope, tuned into the cache file, with progress,
 * time spent, entries written and the gain over the heuristic; plus the
 * cache chores (--list, --gc, --export, --import). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "dsk.h"

static const char *const k_usage =
    "usage: dsk tune --model NAME|config.json [--tp N] [--ep] [--max-tokens N]\n"
    "                [--max-context N] [--capture-sizes LIST] [--capture-batches]\n"
    "                [--spec-tokens K] [--swa-widths LIST] [--device D] [--backend B]\n"
    "                [--force] [--dry-run] [--export F] [--import F] [--quiet]\n"
    "       dsk tune --list | --gc [--device D]\n"
    "\n"
    "Enumerates every (op, key) the model emits under the serving envelope (the\n"
    "same list dsk_warmup_enumerate gives an engine), times the tactics of the keys\n"
    "the cache lacks and writes the cache file of this device\n"
    "($DSK_CACHE_DIR, else $XDG_CACHE_HOME/dsk, else ~/.cache/dsk: <dir>/autotune/).\n"
    "Prints one line per key, the time spent, the entries written and the gain of\n"
    "the tuned tactic over the heuristic's.\n"
    "\n"
    "options:\n"
    "  --model M          deepseek-v4-flash, deepseek-v4-pro, glm-5.1, deepseek-v3.2,\n"
    "                     or the path of a checkpoint's config.json\n"
    "  --tp N             tensor-parallel size (heads per rank = heads / N; default 1)\n"
    "  --ep               expert parallel (MoE keys; none are tunable yet)\n"
    "  --max-tokens N     max batched tokens per step (default 8192): prefill buckets\n"
    "                     128, 256, ... up to the first >= N\n"
    "  --max-context N    max tokens of a request (default: the model's maximum):\n"
    "                     DeepSeek-V4 C128A widths up to round_up(N / 128, 128)\n"
    "  --capture-sizes L  CUDA-graph capture sizes in tokens, e.g. 1,2,4,8 (default\n"
    "                     1,2,4,8,16,24,32,40,48,56,64 requests)\n"
    "  --capture-batches  the capture sizes count requests: T = b * (1 + spec tokens)\n"
    "  --spec-tokens K    draft tokens per request (speculative decoding)\n"
    "  --swa-widths L     DeepSeek-V4 segment-0 widths (default: the model's 128;\n"
    "                     DSpark-style engines pass 128,192,256)\n"
    "  --device D         cpu, cuda:N, N (= cuda:N) or auto (default auto)\n"
    "  --backend B        force a backend by name\n"
    "  --force            re-time keys that already have an entry; they replace the\n"
    "                     file's entries on save (as DSK_AUTOTUNE=force)\n"
    "  --dry-run          print the key list and exit\n"
    "  --import F         add the entries of an exported file first (then tune the rest)\n"
    "  --export F         write this device's entries to F at the end\n"
    "  --list             list the cache files (this device's is marked) and exit\n"
    "  --gc               delete cache files of other fingerprints and stale entries\n"
    "  --quiet            no per-key lines\n"
    "  -h, --help         this text\n"
    "\n"
    "Environment: DSK_AUTOTUNE, DSK_AUTOTUNE_CACHE, DSK_AUTOTUNE_L2,\n"
    "DSK_AUTOTUNE_MAX_MB, DSK_CACHE_DIR (docs/environment.md).\n"
    "Exit status: 0, 1 when the work failed, 2 for a usage error.\n";

#define MAX_LIST 256

static int parse_list(const char *opt, const char *s, int64_t *out, int *n) {
  *n = 0;
  const char *p = s;
  while (*p) {
    char item[32];
    size_t k = 0;
    while (*p && *p != ',' && k + 1 < sizeof item) item[k++] = *p++;
    item[k] = 0;
    if (*p && *p != ',') {
      fprintf(stderr, "dsk tune: %s: item too long in '%s'\n", opt, s);
      return -1;
    }
    if (*p == ',') p++;
    uint64_t v;
    if (dsk_cli_parse_u64("tune", opt, item, &v) != 0) return -1;
    if (v < 1 || v > 0x7fffffff || *n >= MAX_LIST) {
      fprintf(stderr, "dsk tune: %s: '%s' is not a list of at most %d integers in 1..2^31-1\n", opt, s, MAX_LIST);
      return -1;
    }
    out[(*n)++] = (int64_t)v;
  }
  if (*n == 0) {
    fprintf(stderr, "dsk tune: %s: empty list\n", opt);
    return -1;
  }
  return 0;
}

static void tactic_text(const dsk_tactic *t, char *buf, size_t n) {
  if (t->op == DSK_OP_SPARSE_MLA_DECODE)
    snprintf(buf, n, "cpb=%d heads=%d", (int)t->v[0], (int)t->v[1]);
  else if (t->op == DSK_OP_MOE_GEMM || t->op == DSK_OP_MOE_DENSE_GEMM)
    snprintf(buf, n, "BM=%d BN=%d split=%d", (int)t->v[0], (int)t->v[1], (int)t->v[2]);
  else if (t->op == DSK_OP_MHC_PRENORM)
    snprintf(buf, n, "S=%d", (int)t->v[0]);
  else
    snprintf(buf, n, "-");
}

typedef struct run_state {
  int quiet;
  int64_t tuned, cached, prerun, skipped;
  double *gains;
  int64_t ngains;
  double best_gain;
  char best_key[256];
} run_state;

static void on_progress(const dsk_warmup_progress *p, void *user) {
  run_state *rs = (run_state *)user;
  char tt[32];
  tactic_text(&p->tactic, tt, sizeof tt);
  const char *op = dsk_op_name(p->item->op);
  switch (p->action) {
    case DSK_WARMUP_TUNED: {
      rs->tuned++;
      double gain = (p->us_heuristic > 0 && p->us_best > 0) ? p->us_heuristic / p->us_best : 0;
      if (gain > 0) {
        rs->gains[rs->ngains++] = gain;
        if (gain > rs->best_gain) {
          rs->best_gain = gain;
          snprintf(rs->best_key, sizeof rs->best_key, "%s %s T=%lld", op, p->item->label, (long long)p->item->T);
        }
      }
      if (!rs->quiet) {
        if (p->us_heuristic > 0)
          printf("[%4lld/%lld] %s %s T=%lld: tuned %s (%d tactics) %.2f us; heuristic %.2f us (%.2fx)  %.1fs\n",
                 (long long)p->index + 1, (long long)p->total, op, p->item->label, (long long)p->item->T, tt,
                 p->num_tactics, p->us_best, p->us_heuristic, gain, p->elapsed_s);
        else
          printf("[%4lld/%lld] %s %s T=%lld: tuned %s (%d tactics) %.2f us; heuristic not timed  %.1fs\n",
                 (long long)p->index + 1, (long long)p->total, op, p->item->label, (long long)p->item->T, tt,
                 p->num_tactics, p->us_best, p->elapsed_s);
      }
      break;
    }
    case DSK_WARMUP_CACHED:
      rs->cached++;
      if (!rs->quiet)
        printf("[%4lld/%lld] %s %s T=%lld: cached %s  %.1fs\n", (long long)p->index + 1, (long long)p->total, op,
               p->item->label, (long long)p->item->T, tt, p->elapsed_s);
      break;
    case DSK_WARMUP_PRERUN:
      rs->prerun++;
      if (!rs->quiet)
        printf("[%4lld/%lld] %s %s T=%lld: pre-run %s (not tuned)  %.1fs\n", (long long)p->index + 1,
               (long long)p->total, op, p->item->label, (long long)p->item->T, tt, p->elapsed_s);
      break;
    default:
      rs->skipped++;
      printf("[%4lld/%lld] %s %s T=%lld: skipped: %s\n", (long long)p->index + 1, (long long)p->total, op,
             p->item->label, (long long)p->item->T, p->reason ? p->reason : "?");
      break;
  }
  fflush(stdout);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void on_file(const dsk_autotune_file *f, void *user) {
  int *n = (int *)user;
  (*n)++;
  printf("  %s%s  %lld bytes  %s", f->path, f->current ? "  [this device]" : "", (long long)f->bytes,
         f->valid ? "" : "not a valid cache file");
  if (f->valid) {
    printf("%lld entries", (long long)f->entries);
    if (f->current && f->stale) printf(" (%lld stale)", (long long)f->stale);
    printf("  dsk %s  %s", f->version, f->device);
  }
  printf("\n");
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = (char *)malloc(cap);
  while (b) {
    size_t got = fread(b + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    char *nb = (char *)realloc(b, cap * 2);
    if (!nb) {
      free(b);
      b = NULL;
      break;
    }
    b = nb;
    cap *= 2;
  }
  fclose(f);
  *len = n;
  return b;
}

static int is_config_path(const char *m) {
  struct stat st;
  size_t n = strlen(m);
  return strchr(m, '/') != NULL || (n > 5 && strcmp(m + n - 5, ".json") == 0) ||
         (stat(m, &st) == 0 && S_ISREG(st.st_mode));
}

int dsk_cmd_tune(int argc, char **argv) {
  const char *model_arg = NULL, *device = "auto", *backend = NULL, *export_path = NULL, *import_path = NULL;
  int tp = 1, ep = 0, force = 0, dry = 0, list = 0, gc = 0, quiet = 0, batches = 0, spec = 0;
  uint64_t max_tokens = 0, max_context = 0;
  int64_t capture[MAX_LIST], swa[MAX_LIST];
  int ncapture = 0, nswa = 0;
  char devbuf[32];
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    int r;
    const char *a = argv[i];
    if (dsk_cli_is_help(a)) {
      fputs(k_usage, stdout);
      return DSK_CLI_EXIT_OK;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--model", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("tune", k_usage, "--model needs a value");
      model_arg = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--tp", &v)) != 0) {
      if (r < 0 || dsk_cli_parse_int("tune", "--tp", v, 1, 128, &tp) != 0) return DSK_CLI_EXIT_USAGE;
    } else if (strcmp(a, "--ep") == 0) {
      ep = 1;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--max-tokens", &v)) != 0) {
      if (r < 0 || dsk_cli_parse_u64("tune", "--max-tokens", v, &max_tokens) != 0) return DSK_CLI_EXIT_USAGE;
      if (max_tokens < 1 || max_tokens > 0x7fffffff)
        return dsk_cli_usage_error("tune", k_usage, "--max-tokens %s is not in 1..2^31-1", v);
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--max-context", &v)) != 0) {
      if (r < 0 || dsk_cli_parse_u64("tune", "--max-context", v, &max_context) != 0) return DSK_CLI_EXIT_USAGE;
      if (max_context < 1 || max_context > ((uint64_t)1 << 40))
        return dsk_cli_usage_error("tune", k_usage, "--max-context %s is not in 1..2^40", v);
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--capture-sizes", &v)) != 0) {
      if (r < 0 || parse_list("--capture-sizes", v, capture, &ncapture) != 0) return DSK_CLI_EXIT_USAGE;
    } else if (strcmp(a, "--capture-batches") == 0) {
      batches = 1;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--spec-tokens", &v)) != 0) {
      if (r < 0 || dsk_cli_parse_int("tune", "--spec-tokens", v, 0, 64, &spec) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--swa-widths", &v)) != 0) {
      if (r < 0 || parse_list("--swa-widths", v, swa, &nswa) != 0) return DSK_CLI_EXIT_USAGE;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("tune", k_usage, "--device needs a value");
      if (v[0] >= '0' && v[0] <= '9') {
        int d;
        if (dsk_cli_parse_int("tune", "--device", v, 0, 1023, &d) != 0) return DSK_CLI_EXIT_USAGE;
        snprintf(devbuf, sizeof devbuf, "cuda:%d", d);
        device = devbuf;
      } else {
        device = v;
      }
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--backend", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("tune", k_usage, "--backend needs a value");
      backend = v;
    } else if (strcmp(a, "--force") == 0) {
      force = 1;
    } else if (strcmp(a, "--dry-run") == 0) {
      dry = 1;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--export", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("tune", k_usage, "--export needs a file");
      export_path = v;
    } else if ((r = dsk_cli_opt_value(argc, argv, &i, "--import", &v)) != 0) {
      if (r < 0) return dsk_cli_usage_error("tune", k_usage, "--import needs a file");
      import_path = v;
    } else if (strcmp(a, "--list") == 0) {
      list = 1;
    } else if (strcmp(a, "--gc") == 0) {
      gc = 1;
    } else if (strcmp(a, "--quiet") == 0) {
      quiet = 1;
    } else {
      return dsk_cli_usage_error("tune", k_usage, "unknown option '%s'", a);
    }
  }
  if (!model_arg && !list && !gc && !import_path && !export_path)
    return dsk_cli_usage_error("tune", k_usage, "--model is required (or --list, --gc, --import, --export)");

  dsk_model_desc model;
  memset(&model, 0, sizeof model);
  model.struct_size = sizeof model;
  if (model_arg) {
    dsk_status st = is_config_path(model_arg) ? dsk_model_desc_from_config(model_arg, &model)
                                              : dsk_model_desc_builtin(model_arg, &model);
    if (st != DSK_STATUS_OK) {
      char what[300];
      snprintf(what, sizeof what, "--model %s", model_arg);
      return dsk_cli_report("tune", what, st);
    }
  }

  dsk_ctx *ctx = NULL;
  if (dsk_cli_ctx_create("tune", device, backend, &ctx) != DSK_STATUS_OK) return DSK_CLI_EXIT_FAIL;
  int rc = DSK_CLI_EXIT_OK;
  dsk_cli_print_ctx(stdout, "dsk tune: ", ctx);
  dsk_tune_stats stats;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  dsk_autotune_stats(ctx, &stats);
  static const char *const modes[] = {"rw", "ro", "off (in memory only)"};
  printf("dsk tune: cache %s (%s): %lld entries loaded, %lld stale, %lld invalid; fingerprint %s\n",
         stats.cache_path[0] ? stats.cache_path : "-", modes[stats.cache_mode % 3], (long long)stats.loaded,
         (long long)stats.stale, (long long)stats.invalid, stats.fingerprint);

  if (list) {
    int n = 0;
    printf("dsk tune: cache files:\n");
    dsk_status st = dsk_autotune_list_files(ctx, on_file, &n);
    if (st != DSK_STATUS_OK) rc = dsk_cli_report("tune", "--list", st);
    if (!n) printf("  (none)\n");
  }
  if (gc && rc == DSK_CLI_EXIT_OK) {
    int64_t files = 0, entries = 0;
    dsk_status st = dsk_autotune_gc(ctx, &files, &entries);
    if (st != DSK_STATUS_OK)
      rc = dsk_cli_report("tune", "--gc", st);
    else
      printf("dsk tune: --gc removed %lld files and %lld stale or invalid entries\n", (long long)files,
             (long long)entries);
  }
  if (import_path && rc == DSK_CLI_EXIT_OK) {
    size_t len = 0;
    char *buf = read_all(import_path, &len);
    if (!buf) {
      fprintf(stderr, "dsk tune: --import: cannot read %s\n", import_path);
      rc = DSK_CLI_EXIT_FAIL;
    } else {
      dsk_tune_stats before = stats;
      dsk_autotune_stats(ctx, &before);
      dsk_status st = dsk_autotune_import(ctx, buf, len);
      free(buf);
      if (st != DSK_STATUS_OK) {
        rc = dsk_cli_report("tune", "--import", st);
      } else {
        dsk_tune_stats after = before;
        dsk_autotune_stats(ctx, &after);
        printf("dsk tune: imported %lld entries from %s (%lld stale, %lld invalid skipped)\n",
               (long long)(after.loaded - before.loaded), import_path, (long long)(after.stale - before.stale),
               (long long)(after.invalid - before.invalid));
        if (!model_arg) {
          st = dsk_autotune_save(ctx);
          if (st != DSK_STATUS_OK) rc = dsk_cli_report("tune", "saving the cache", st);
        }
      }
    }
  }

  if (model_arg && rc == DSK_CLI_EXIT_OK) {
    dsk_serving_desc sv;
    dsk_serving_desc_init(&sv);
    sv.tp = tp;
    sv.ep = ep;
    sv.capture_sizes = ncapture ? capture : NULL;
    sv.num_capture_sizes = ncapture;
    sv.capture_sizes_are_batches = batches;
    sv.max_tokens = (int64_t)max_tokens;
    sv.max_context = (int64_t)max_context;
    sv.draft_tokens = spec;
    sv.swa_widths = nswa ? swa : NULL;
    sv.num_swa_widths = nswa;
    dsk_warmup_list *wl = NULL;
    dsk_status st = dsk_warmup_enumerate(ctx, &model, &sv, &wl);
    if (st != DSK_STATUS_OK) {
      rc = dsk_cli_report("tune", "enumerating the keys", st);
    } else {
      int64_t n = dsk_warmup_list_size(wl);
      int64_t per_op[4] = {0, 0, 0, 0}; /* sparse_mla_decode, mhc_prenorm, moe_gemm, dense_fp8_gemm */
      for (int64_t i = 0; i < n; i++) {
        dsk_warmup_item it;
        memset(&it, 0, sizeof it);
        it.struct_size = sizeof it;
        dsk_warmup_list_item(wl, i, &it);
        per_op[it.op == DSK_OP_MHC_PRENORM ? 1 : it.op == DSK_OP_MOE_GEMM ? 2 : it.op == DSK_OP_MOE_DENSE_GEMM ? 3 : 0]++;
        if (dry) printf("%s\t%s\tT=%lld\t%s\n", dsk_op_name(it.op), it.label, (long long)it.T, it.key);
      }
      printf("dsk tune: model %s (%s, %lld heads), tp %d: %lld heads per rank; %lld keys (%lld sparse_mla_decode, "
             "%lld mhc_prenorm, %lld moe_gemm, %lld dense_fp8_gemm)\n",
             model.name, model.model_type, (long long)model.num_heads, tp, (long long)(model.num_heads / tp),
             (long long)n, (long long)per_op[0], (long long)per_op[1], (long long)per_op[2], (long long)per_op[3]);
      if (!dry) {
        run_state rs;
        memset(&rs, 0, sizeof rs);
        rs.quiet = quiet;
        rs.gains = (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double));
        if (!rs.gains) {
          fprintf(stderr, "dsk tune: out of memory\n");
          rc = DSK_CLI_EXIT_FAIL;
        } else {
          dsk_tune_stats s0 = stats;
          dsk_autotune_stats(ctx, &s0);
          struct timespec t0, t1;
          clock_gettime(CLOCK_MONOTONIC, &t0);
          st = dsk_warmup_run(ctx, wl, force ? DSK_WARMUP_FORCE : 0u, on_progress, &rs);
          clock_gettime(CLOCK_MONOTONIC, &t1);
          double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
          dsk_tune_stats s1 = s0;
          dsk_autotune_stats(ctx, &s1);
          if (st != DSK_STATUS_OK) rc = dsk_cli_report("tune", "warmup", st);
          printf("dsk tune: %lld keys in %.2f s: %lld tuned, %lld cached, %lld pre-run, %lld skipped\n", (long long)n,
                 secs, (long long)rs.tuned, (long long)rs.cached, (long long)rs.prerun, (long long)rs.skipped);
          /* dsk_warmup_run saved already, but only warns when that fails: saving
           * once more returns the failure, so this line never claims a file
           * that is not there */
          dsk_status ss = s1.cache_mode == DSK_AUTOTUNE_CACHE_RW && rs.tuned > 0 ? dsk_autotune_save(ctx) : DSK_STATUS_OK;
          if (ss != DSK_STATUS_OK) {
            fprintf(stderr, "dsk tune: the cache was NOT written to %s: %s; the %lld tuned entries are lost when this "
                    "process ends\n", s1.cache_path, dsk_last_error(), (long long)rs.tuned);
            rc = DSK_CLI_EXIT_FAIL;
          } else if (s1.cache_mode == DSK_AUTOTUNE_CACHE_RW)
            printf("dsk tune: %lld entries written to %s (the context holds %lld)\n", (long long)rs.tuned,
                   s1.cache_path, (long long)s1.entries);
          else
            printf("dsk tune: cache not written (DSK_AUTOTUNE_CACHE or location); %lld entries in memory\n",
                   (long long)s1.entries);
          if (rs.ngains > 0) {
            qsort(rs.gains, (size_t)rs.ngains, sizeof(double), cmp_double);
            double med = rs.ngains % 2 ? rs.gains[rs.ngains / 2]
                                       : 0.5 * (rs.gains[rs.ngains / 2 - 1] + rs.gains[rs.ngains / 2]);
            int64_t over = 0;
            for (int64_t i = 0; i < rs.ngains; i++) over += rs.gains[i] > 1.02;
            printf("dsk tune: gain over the heuristic (heuristic median / tuned median): median %.3fx, largest "
                   "%.3fx (%s); %lld of %lld keys beyond the 1.02x tie band\n",
                   med, rs.best_gain, rs.best_key, (long long)over, (long long)rs.ngains);
          }
        }
        free(rs.gains);
      }
      dsk_warmup_list_free(wl);
    }
  }

  if (export_path && rc == DSK_CLI_EXIT_OK) {
    size_t len = 0;
    dsk_status st = dsk_autotune_export(ctx, NULL, &len);
    char *buf = st == DSK_STATUS_OK ? (char *)malloc(len) : NULL;
    if (buf) st = dsk_autotune_export(ctx, buf, &len);
    if (st != DSK_STATUS_OK || !buf) {
      rc = dsk_cli_report("tune", "--export", st != DSK_STATUS_OK ? st : DSK_STATUS_OUT_OF_MEMORY);
    } else {
      FILE *f = fopen(export_path, "wb");
      int ok = f != NULL && fwrite(buf, 1, len - 1, f) == len - 1;
      if (f && fclose(f) != 0) ok = 0;
      if (!ok) {
        fprintf(stderr, "dsk tune: --export: cannot write %s\n", export_path);
        rc = DSK_CLI_EXIT_FAIL;
      } else {
        dsk_autotune_stats(ctx, &stats);
        printf("dsk tune: exported %lld entries to %s\n", (long long)stats.entries, export_path);
      }
    }
    free(buf);
  }
  dsk_ctx_destroy(ctx);
  return rc;
}
