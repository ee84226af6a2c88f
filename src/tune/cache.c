/* cache.c - the persistent tactic cache (autotune.md §5, A13-A19): the
 * fingerprint, the file location, load with validation, the locked
 * merge-on-save with an atomic replace, export / import, and the listing
 * and clean-up behind `dsk tune --list / --gc`. JSON through cJSON.
 *
 * Nothing here can make a run wrong: a file that is unreadable, truncated,
 * foreign or malformed is treated as absent (one warning) and renamed to
 * <name>.bad at the next save; every entry is re-checked (kernel build id,
 * tactic version, tactic validity for its key) before it is used. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cJSON.h"
#include "tuner.h"

#define CACHE_MAX_FILE_BYTES ((int64_t)64 << 20) /* larger files are not read (A17) */
#define LOCK_TIMEOUT_S 30.0

/* ------------------------------------------------------- fingerprint */
typedef dsk__tune_fp fp_fields;

/* The NVIDIA driver version string through NVML when libnvidia-ml can be
 * loaded (A14), else "". */
static void nvml_driver(char *buf, size_t n) {
  buf[0] = 0;
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  int (*init)(void) = NULL;
  int (*ver)(char *, unsigned) = NULL;
  int (*shut)(void) = NULL;
  *(void **)(&init) = dlsym(h, "nvmlInit_v2");
  *(void **)(&ver) = dlsym(h, "nvmlSystemGetDriverVersion");
  *(void **)(&shut) = dlsym(h, "nvmlShutdown");
  if (init && ver && init() == 0) {
    char v[96] = {0};
    if (ver(v, (unsigned)sizeof v) == 0) snprintf(buf, n, "%s", v);
    if (shut) shut();
  }
  dlclose(h);
}

/* "model name" of /proc/cpuinfo (x86), else "". */
static void cpu_model(char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *c = strchr(line, ':');
      if (c) {
        c++;
        while (*c == ' ' || *c == '\t') c++;
        size_t l = strlen(c);
        while (l && (c[l - 1] == '\n' || c[l - 1] == ' ')) c[--l] = 0;
        snprintf(buf, n, "%s", c);
      }
      break;
    }
  }
  fclose(f);
}

void dsk__tune_fp_collect(const dsk_ctx *ctx, fp_fields *f) {
  memset(f, 0, sizeof *f);
  snprintf(f->version, sizeof f->version, "%d.%d", DSK_VERSION_MAJOR, DSK_VERSION_MINOR);
  const dsk_ctx_info *in = &ctx->info;
  if (in->is_cuda) {
    snprintf(f->device, sizeof f->device, "%s", in->device_name);
    snprintf(f->cc, sizeof f->cc, "%d.%d", in->cc_major, in->cc_minor);
    f->sms = in->sm_count;
    char nv[96];
    nvml_driver(nv, sizeof nv);
    if (nv[0])
      snprintf(f->driver, sizeof f->driver, "nvml %s", nv);
    else
      snprintf(f->driver, sizeof f->driver, "cuda %d", in->driver_version);
    snprintf(f->runtime, sizeof f->runtime, "cuda %d", in->runtime_version);
    if (in->test_as_sm120) snprintf(f->features, sizeof f->features, "test_as_sm120");
  } else {
    /* CPU identity: the device line (threads), the model name, features. */
    char model[192];
    cpu_model(model, sizeof model);
    if (model[0])
      snprintf(f->device, sizeof f->device, "%s (%s)", in->device_name, model);
    else
      snprintf(f->device, sizeof f->device, "%s", in->device_name);
    snprintf(f->cc, sizeof f->cc, "cpu");
    f->sms = in->num_threads;
    snprintf(f->driver, sizeof f->driver, "none");
    snprintf(f->runtime, sizeof f->runtime, "none");
    snprintf(f->features, sizeof f->features, "%s", dsk__cpu_features());
  }
}

static void fp_string(const fp_fields *f, char *str, size_t n) {
  snprintf(str, n, "dsk_autotune=%d;version=%s;device=%s;cc=%s;sms=%" PRId64 ";driver=%s;runtime=%s;features=%s;",
           DSK__TUNE_FORMAT, f->version, f->device, f->cc, f->sms, f->driver, f->runtime, f->features);
}

void dsk__tune_fingerprint(const fp_fields *f, char *str, size_t n, char hex[17]) {
  fp_string(f, str, n);
  snprintf(hex, 17, "%016" PRIx64, dsk__tune_fnv1a64(str, strlen(str)));
}

/* ------------------------------------------------------------- files */
static int mkdir_p(const char *path) {
  char tmp[1200];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
  struct stat st;
  return (stat(tmp, &st) == 0 && S_ISDIR(st.st_mode)) ? 0 : -1;
}

/* 1 if a folder can be made in dir: a probe folder is created and removed
 * again. access() alone is not enough: for root it says yes everywhere,
 * also where mkdir then fails (procfs, read-only mounts). */
static int can_mkdir_in(const char *dir) {
  if (access(dir, W_OK | X_OK) != 0) return 0;
  char probe[1300];
  if (snprintf(probe, sizeof probe, "%s/.dsk-probe-XXXXXX", strcmp(dir, "/") == 0 ? "" : dir) >= (int)sizeof probe)
    return 0;
  if (!mkdtemp(probe)) return 0;
  rmdir(probe);
  return 1;
}

/* 1 if path is a writable folder, or could be created under the nearest
 * existing ancestor folder (in which a folder can be made). */
static int creatable(const char *path) {
  char tmp[1200];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return 0;
  for (;;) {
    struct stat st;
    if (stat(tmp, &st) == 0) return S_ISDIR(st.st_mode) && can_mkdir_in(tmp);
    if (errno != ENOENT) return 0;
    char *slash = strrchr(tmp, '/');
    if (!slash || slash == tmp) return can_mkdir_in("/");
    *slash = 0;
  }
}

/* Reads a whole regular file of at most CACHE_MAX_FILE_BYTES. Returns 0 and
 * a malloc'd buffer (NUL-terminated), 1 if the file does not exist, -1 on
 * any other problem (why gets the reason). */
static int read_file(const char *path, char **out, size_t *len, char *why, size_t why_len) {
  *out = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return 1;
    snprintf(why, why_len, "cannot open: %s", strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(why, why_len, "not a regular file");
    close(fd);
    return -1;
  }
  if ((int64_t)st.st_size > CACHE_MAX_FILE_BYTES) {
    snprintf(why, why_len, "%lld bytes is over the %lld-byte limit", (long long)st.st_size,
             (long long)CACHE_MAX_FILE_BYTES);
    close(fd);
    return -1;
  }
  size_t cap = (size_t)st.st_size + 1;
  char *buf = (char *)malloc(cap);
  if (!buf) {
    snprintf(why, why_len, "out of host memory");
    close(fd);
    return -1;
  }
  size_t got = 0;
  for (;;) {
    if (got + 1 >= cap) { /* the file grew: read at most the limit */
      if ((int64_t)cap > CACHE_MAX_FILE_BYTES) {
        snprintf(why, why_len, "file grew over the %lld-byte limit", (long long)CACHE_MAX_FILE_BYTES);
        free(buf);
        close(fd);
        return -1;
      }
      char *nb = (char *)realloc(buf, cap * 2);
      if (!nb) {
        snprintf(why, why_len, "out of host memory");
        free(buf);
        close(fd);
        return -1;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + got, cap - 1 - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      snprintf(why, why_len, "read error: %s", strerror(errno));
      free(buf);
      close(fd);
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = 0;
  *out = buf;
  *len = got;
  return 0;
}

/* ---------------------------------------------------- document checks */
static const char *l2_name(int l2) { return l2 == 1 ? "cold" : l2 == 2 ? "warm" : "auto"; }

/* Checks magic, format and every fingerprint field of a parsed document.
 * Returns 0, or -1 with why set. */
static int doc_check(const dsk__tuner *t, const cJSON *root, char *why, size_t n) {
  if (!cJSON_IsObject(root)) {
    snprintf(why, n, "not a JSON object");
    return -1;
  }
  const cJSON *magic = cJSON_GetObjectItemCaseSensitive(root, "dsk_autotune");
  if (!cJSON_IsNumber(magic)) {
    snprintf(why, n, "no \"dsk_autotune\" format number (not a dsk tuning cache)");
    return -1;
  }
  if (magic->valuedouble != (double)DSK__TUNE_FORMAT) {
    snprintf(why, n, "dsk_autotune format %g is not %d", magic->valuedouble, DSK__TUNE_FORMAT);
    return -1;
  }
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
  if (!cJSON_IsObject(meta)) {
    snprintf(why, n, "no \"meta\" object");
    return -1;
  }
  const fp_fields *fp = dsk__tuner_fp(t);
  const fp_fields f = *fp;
  struct {
    const char *name;
    const char *want;
  } strs[] = {{"version", f.version}, {"device", f.device},   {"cc", f.cc},
              {"driver", f.driver},   {"runtime", f.runtime}, {"features", f.features}};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, strs[i].name);
    if (!cJSON_IsString(v) || !v->valuestring) {
      snprintf(why, n, "meta.%s is missing or not a string", strs[i].name);
      return -1;
    }
    if (strcmp(v->valuestring, strs[i].want) != 0) {
      snprintf(why, n, "meta.%s '%.120s' != '%.120s' (this build / device)", strs[i].name, v->valuestring,
               strs[i].want);
      return -1;
    }
  }
  const cJSON *sms = cJSON_GetObjectItemCaseSensitive(meta, "sms");
  if (!cJSON_IsNumber(sms) || sms->valuedouble != (double)f.sms) {
    snprintf(why, n, "meta.sms %s != %" PRId64, cJSON_IsNumber(sms) ? "differs" : "is missing", f.sms);
    return -1;
  }
  const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
  if (!cJSON_IsObject(entries)) {
    snprintf(why, n, "no \"entries\" object");
    return -1;
  }
  return 0;
}

enum { ENTRY_OK = 0, ENTRY_STALE = 1, ENTRY_INVALID = 2 };

static int int32_of(const cJSON *v, int32_t *out) {
  if (!cJSON_IsNumber(v)) return -1;
  double d = v->valuedouble;
  if (!(d >= -2147483648.0 && d <= 2147483647.0) || d != (double)(int32_t)d) return -1;
  *out = (int32_t)d;
  return 0;
}

static double num_or(const cJSON *o, const char *name, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return (cJSON_IsNumber(v) && v->valuedouble == v->valuedouble) ? v->valuedouble : dflt;
}

/* One entry of a document: OK (out filled), STALE (other kernel build or
 * tactic version) or INVALID (malformed key or value, tactic not valid for
 * its key, width not a bucket value). */
static int entry_from_json(const char *key, const cJSON *item, dsk__tune_entry *out) {
  memset(out, 0, sizeof *out);
  if (!key || strlen(key) >= DSK__TUNE_KEY_MAX) return ENTRY_INVALID;
  dsk__tune_shape s;
  char kb[17];
  if (dsk__tune_parse_key(key, &s, kb) != 0) return ENTRY_INVALID;
  if (!cJSON_IsObject(item)) return ENTRY_INVALID;
  const char *want = dsk_kernel_build_id((dsk_op)s.op);
  if (!want || strcmp(kb, want) != 0) return ENTRY_STALE;
  int32_t tv;
  if (int32_of(cJSON_GetObjectItemCaseSensitive(item, "tv"), &tv) != 0) return ENTRY_INVALID;
  const int32_t cur = dsk__tune_tactic_version(s.op);
  if (tv != cur) return ENTRY_STALE;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(item, "t");
  if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) != 6) return ENTRY_INVALID;
  dsk_tactic tac;
  memset(&tac, 0, sizeof tac);
  tac.op = s.op;
  tac.version = tv;
  for (int i = 0; i < 6; i++)
    if (int32_of(cJSON_GetArrayItem(t, i), &tac.v[i]) != 0) return ENTRY_INVALID;
  /* The key must be a keyed shape (bucketed width) and the tactic valid
   * for it exactly (no clamping for the shape it was tuned on). */
  dsk__tune_shape keyed = s;
  dsk__tune_bucket_shape(&keyed);
  if (memcmp(&keyed, &s, sizeof s) != 0) return ENTRY_INVALID;
  dsk_tactic chk = tac;
  if (!dsk__tune_tactic_fix(&s, &chk) || memcmp(&chk, &tac, sizeof tac) != 0) return ENTRY_INVALID;
  out->key = (char *)key; /* borrowed; dsk__tuner_put copies */
  out->t = tac;
  out->us = num_or(item, "us", -1);
  out->us2 = num_or(item, "us2", -1);
  out->uh = num_or(item, "uh", -1);
  return ENTRY_OK;
}

dsk_status dsk__tune_doc_load(const dsk_ctx *ctx, dsk__tuner *t, const char *buf, size_t len, int mark_dirty,
                              int replace, int64_t *loaded, int64_t *stale, int64_t *invalid) {
  int64_t nl = 0, ns = 0, ni = 0;
  if (loaded) *loaded = 0;
  if (stale) *stale = 0;
  if (invalid) *invalid = 0;
  if (!buf || len == 0) return dsk__fail(DSK_STATUS_PARSE, "autotune cache: empty document");
  cJSON *root = cJSON_ParseWithLength(buf, len);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    long off = (at && at >= buf && at <= buf + len) ? (long)(at - buf) : -1;
    return dsk__fail(DSK_STATUS_PARSE, "autotune cache: not valid JSON (error near byte %ld of %zu)", off, len);
  }
  char why[320];
  if (doc_check(t, root, why, sizeof why) != 0) {
    cJSON_Delete(root);
    return dsk__fail(DSK_STATUS_PARSE, "autotune cache: %s", why);
  }
  const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
  dsk_status st = DSK_STATUS_OK;
  for (const cJSON *it = entries->child; it; it = it->next) {
    dsk__tune_entry e;
    int r = entry_from_json(it->string, it, &e);
    if (r == ENTRY_STALE) {
      ns++;
      continue;
    }
    if (r != ENTRY_OK) {
      ni++;
      continue;
    }
    if (!replace && dsk__tuner_find(t, e.key)) continue;
    e.dirty = mark_dirty;
    st = dsk__tuner_put(t, &e);
    if (st != DSK_STATUS_OK) break;
    nl++;
  }
  cJSON_Delete(root);
  if (loaded) *loaded = nl;
  if (stale) *stale = ns;
  if (invalid) *invalid = ni;
  return st;
}

/* ------------------------------------------------------- location */
void dsk__tune_cache_open(const dsk_ctx *ctx, dsk__tuner *t) {
  const dsk__tune_settings *set = dsk__tuner_settings(t);
  if (set->cache_mode == DSK_AUTOTUNE_CACHE_OFF) {
    dsk__tuner_set_location(t, NULL, NULL, DSK_AUTOTUNE_CACHE_OFF);
    return;
  }
  const dsk_env *env = &ctx->env;
  char base[1100] = "";
  /* A13: DSK_CACHE_DIR, else $XDG_CACHE_HOME/dsk, else $HOME/.cache/dsk;
   * relative values are ignored with a warning (XDG rule). */
  if (env->cache_dir[0]) {
    if (env->cache_dir[0] == '/') {
      snprintf(base, sizeof base, "%s", env->cache_dir);
    } else {
      char k[1100];
      snprintf(k, sizeof k, "autotune-relative-cache-dir:%s", env->cache_dir);
      dsk__warn_once(ctx, k, "autotune: DSK_CACHE_DIR '%s' is not an absolute path: ignored", env->cache_dir);
    }
  }
  if (!base[0] && env->xdg_cache_home[0]) {
    if (env->xdg_cache_home[0] == '/') {
      snprintf(base, sizeof base, "%s/dsk", env->xdg_cache_home);
    } else {
      char k[1100];
      snprintf(k, sizeof k, "autotune-relative-xdg:%s", env->xdg_cache_home);
      dsk__warn_once(ctx, k, "autotune: XDG_CACHE_HOME '%s' is not an absolute path: ignored", env->xdg_cache_home);
    }
  }
  if (!base[0] && env->home[0] == '/') snprintf(base, sizeof base, "%s/.cache/dsk", env->home);
  if (!base[0]) {
    dsk__warn_once(ctx, "autotune-no-cache-dir",
                   "autotune: no usable cache location (DSK_CACHE_DIR, XDG_CACHE_HOME, HOME): tuned entries stay in "
                   "memory");
    dsk__tuner_set_location(t, NULL, NULL, DSK_AUTOTUNE_CACHE_OFF);
    return;
  }
  char dir[1024], path[1024];
  if (snprintf(dir, sizeof dir, "%s/autotune", base) >= (int)sizeof dir ||
      snprintf(path, sizeof path, "%s/%s.json", dir, dsk__tuner_fp_hex(t)) >= (int)sizeof path) {
    dsk__warn_once(ctx, "autotune-long-cache-dir", "autotune: cache location '%.200s...' is too long: in memory only",
                   base);
    dsk__tuner_set_location(t, NULL, NULL, DSK_AUTOTUNE_CACHE_OFF);
    return;
  }
  int mode = set->cache_mode;
  if (mode == DSK_AUTOTUNE_CACHE_RW) {
    /* Folders are created at the first save; here only check that they
     * could be (a context that never tunes leaves no trace). */
    if (!creatable(dir)) {
      char k[1200];
      snprintf(k, sizeof k, "autotune-unwritable:%s", dir);
      dsk__warn_once(ctx, k, "autotune: cache directory %s cannot be created or written: tuned entries stay in memory",
                     dir);
      mode = DSK_AUTOTUNE_CACHE_RO; /* still read a file that is there */
    }
  }
  dsk__tuner_set_location(t, dir, path, mode);
  char *buf = NULL;
  size_t len = 0;
  char why[256] = "";
  int r = read_file(path, &buf, &len, why, sizeof why);
  if (r == 1) {
    dsk__log(ctx, DSK_LOG_INFO, "autotune cache %s: no file yet", path);
    return;
  }
  if (r == 0) {
    int64_t nl, ns, ni;
    dsk_status st = dsk__tune_doc_load(ctx, t, buf, len, 0, 0, &nl, &ns, &ni);
    if (st == DSK_STATUS_OK) {
      dsk__tuner_count_load(t, nl, ns, ni);
      dsk__log(ctx, DSK_LOG_INFO, "autotune cache %s: %" PRId64 " loaded, %" PRId64 " stale, %" PRId64 " invalid",
               path, nl, ns, ni);
      free(buf);
      return;
    }
    snprintf(why, sizeof why, "%s", dsk_last_error());
    dsk_clear_error();
    /* Entries added before a failure (out of memory) are kept: each was valid. */
  }
  free(buf);
  dsk__tuner_set_file_bad(t, 1);
  char k[1200];
  snprintf(k, sizeof k, "autotune-bad-file:%s", path);
  dsk__warn_once(ctx, k, "autotune: cache file %s ignored (%s); it is renamed to .bad and replaced at the next save",
                 path, why);
}

/* ------------------------------------------------------- documents */
static cJSON *make_meta(const dsk_ctx *ctx, const dsk__tuner *t, const char *created) {
  const fp_fields f = *dsk__tuner_fp(t);
  cJSON *m = cJSON_CreateObject();
  if (!m) return NULL;
  char now[40];
  time_t tt = time(NULL);
  struct tm tmv;
  gmtime_r(&tt, &tmv);
  strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  cJSON_AddStringToObject(m, "version", f.version);
  cJSON_AddStringToObject(m, "device", f.device);
  cJSON_AddStringToObject(m, "cc", f.cc);
  cJSON_AddNumberToObject(m, "sms", (double)f.sms);
  cJSON_AddStringToObject(m, "driver", f.driver);
  cJSON_AddStringToObject(m, "runtime", f.runtime);
  cJSON_AddStringToObject(m, "features", f.features);
  cJSON_AddNumberToObject(m, "l2_bytes", (double)ctx->info.l2_bytes);
  cJSON_AddStringToObject(m, "fingerprint", dsk__tuner_fp_hex(t));
  cJSON_AddStringToObject(m, "created", created && *created ? created : now);
  cJSON_AddStringToObject(m, "updated", now);
  cJSON *timing = cJSON_AddObjectToObject(m, "timing");
  if (timing) {
    /* A7: 3 + 10 launches; 1 + 3 for keys estimated over 1 ms. */
    cJSON_AddStringToObject(timing, "l2", l2_name(dsk__tuner_settings(t)->l2));
    cJSON_AddNumberToObject(timing, "warmup", 3);
    cJSON_AddNumberToObject(timing, "samples", 10);
    cJSON_AddNumberToObject(timing, "warmup_heavy", 1);
    cJSON_AddNumberToObject(timing, "samples_heavy", 3);
    cJSON_AddNumberToObject(timing, "heavy_us", 1000);
  }
  return m;
}

static cJSON *entry_json(const dsk__tune_entry *e) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int v[6];
  for (int i = 0; i < 6; i++) v[i] = e->t.v[i];
  cJSON_AddItemToObject(o, "t", cJSON_CreateIntArray(v, 6));
  cJSON_AddNumberToObject(o, "tv", e->t.version);
  cJSON_AddNumberToObject(o, "us", e->us);
  cJSON_AddNumberToObject(o, "us2", e->us2);
  cJSON_AddNumberToObject(o, "uh", e->uh);
  return o;
}

static int cmp_item(const void *a, const void *b) {
  const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
  return strcmp(x->string, y->string);
}

/* Reorders the children of an object by key (stable, readable files). */
static int sort_object(cJSON *obj) {
  int n = cJSON_GetArraySize(obj);
  if (n < 2) return 0;
  cJSON **v = (cJSON **)malloc(sizeof *v * (size_t)n);
  if (!v) return -1;
  int i = 0;
  for (cJSON *c = obj->child; c; c = c->next) v[i++] = c;
  qsort(v, (size_t)n, sizeof *v, cmp_item);
  for (i = 0; i < n; i++) {
    v[i]->prev = i ? v[i - 1] : v[n - 1]; /* cJSON: child->prev is the last element */
    v[i]->next = i + 1 < n ? v[i + 1] : NULL;
  }
  obj->child = v[0];
  free(v);
  return 0;
}

/* The document of the context's entries. */
static cJSON *make_doc(const dsk_ctx *ctx, const dsk__tuner *t) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  cJSON_AddNumberToObject(root, "dsk_autotune", DSK__TUNE_FORMAT);
  cJSON *meta = make_meta(ctx, t, NULL);
  if (!meta) {
    cJSON_Delete(root);
    return NULL;
  }
  cJSON_AddItemToObject(root, "meta", meta);
  cJSON *entries = cJSON_AddObjectToObject(root, "entries");
  if (!entries) {
    cJSON_Delete(root);
    return NULL;
  }
  for (int64_t i = 0; i < dsk__tuner_count(t); i++) {
    const dsk__tune_entry *e = dsk__tuner_at(t, i);
    cJSON *o = entry_json(e);
    if (!o) {
      cJSON_Delete(root);
      return NULL;
    }
    cJSON_AddItemToObject(entries, e->key, o);
  }
  sort_object(entries);
  return root;
}

/* ------------------------------------------------------------ save */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Takes flock(LOCK_EX) on <path>.lock within LOCK_TIMEOUT_S. Returns the
 * lock fd (>= 0), -1 when locking is not possible here (go on without),
 * -2 on timeout. */
static int lock_file(const dsk_ctx *ctx, const char *path) {
  char lp[1200];
  snprintf(lp, sizeof lp, "%s.lock", path);
  int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    dsk__log(ctx, DSK_LOG_DEBUG, "autotune: cannot open %s (%s): saving without the lock", lp, strerror(errno));
    return -1;
  }
  double t0 = now_s();
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK && errno != EAGAIN) {
      dsk__log(ctx, DSK_LOG_DEBUG, "autotune: flock %s failed (%s): saving without the lock (merge still applies)", lp,
               strerror(errno));
      close(fd);
      return -1;
    }
    if (now_s() - t0 > LOCK_TIMEOUT_S) {
      close(fd);
      return -2;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Writes text to path atomically: <path>.tmp.<pid>, fsync, rename, fsync of
 * the directory. */
static dsk_status write_atomic(const char *dir, const char *path, const char *text) {
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return dsk__fail(DSK_STATUS_IO, "autotune: cannot create %s: %s", tmp, strerror(errno));
  if (write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
    int e = errno;
    close(fd);
    unlink(tmp);
    return dsk__fail(DSK_STATUS_IO, "autotune: cannot write %s: %s", tmp, strerror(e));
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(tmp);
    return dsk__fail(DSK_STATUS_IO, "autotune: cannot write %s: %s", tmp, strerror(e));
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return dsk__fail(DSK_STATUS_IO, "autotune: cannot rename %s to %s: %s", tmp, path, strerror(e));
  }
  int dfd = open(dir, O_RDONLY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return DSK_STATUS_OK;
}

/* The locked merge-on-save of A18. gc: also drop entries of other kernel
 * builds and invalid ones. Writes the number of dropped entries. */
static dsk_status save_locked(const dsk_ctx *ctx, dsk__tuner *t, int gc, int force, int64_t *dropped) {
  const char *path = dsk__tuner_path(t);
  const char *dir = dsk__tuner_dir(t);
  if (dropped) *dropped = 0;
  /* Re-read the file on disk: another process may have written it. */
  char *buf = NULL;
  size_t len = 0;
  char why[320] = "";
  cJSON *disk = NULL;
  int r = read_file(path, &buf, &len, why, sizeof why);
  if (r == 0) {
    disk = cJSON_ParseWithLength(buf, len);
    if (!disk)
      snprintf(why, sizeof why, "not valid JSON");
    else if (doc_check(t, disk, why, sizeof why) != 0) {
      cJSON_Delete(disk);
      disk = NULL;
    }
  }
  free(buf);
  if (r != 1 && !disk) {
    /* Unusable file: keep it as <name>.bad and replace it (A17). */
    char bad[1200];
    snprintf(bad, sizeof bad, "%s.bad", path);
    if (rename(path, bad) == 0)
      dsk__log(ctx, DSK_LOG_WARN, "autotune: cache file %s was unusable (%s): kept as %s and replaced", path, why, bad);
    else
      dsk__log(ctx, DSK_LOG_WARN, "autotune: cache file %s was unusable (%s) and could not be renamed (%s): replaced",
               path, why, strerror(errno));
  }
  char created[64] = "";
  cJSON *out_entries = NULL;
  if (disk) {
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(disk, "meta");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(meta, "created");
    if (cJSON_IsString(c) && c->valuestring) snprintf(created, sizeof created, "%s", c->valuestring);
    out_entries = cJSON_DetachItemFromObjectCaseSensitive(disk, "entries");
    cJSON_Delete(disk);
  } else {
    out_entries = cJSON_CreateObject();
  }
  if (!out_entries) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
  /* Disk entries: keep those of other kernel builds (another build of this
   * version may share the file) unless gc; drop invalid ones. */
  for (cJSON *it = out_entries->child; it;) {
    cJSON *next = it->next;
    dsk__tune_entry e;
    int q = entry_from_json(it->string, it, &e);
    if (q == ENTRY_INVALID || (gc && q == ENTRY_STALE)) {
      cJSON_Delete(cJSON_DetachItemViaPointer(out_entries, it));
      if (dropped) (*dropped)++;
    }
    it = next;
  }
  /* Merge: a key already on disk keeps the disk entry (first writer wins,
   * and this process adopts it) unless DSK_AUTOTUNE=force and this process
   * tuned it. */
  dsk_status st = DSK_STATUS_OK;
  for (int64_t i = 0; i < dsk__tuner_count(t) && st == DSK_STATUS_OK; i++) {
    const dsk__tune_entry *e = dsk__tuner_at(t, i);
    cJSON *it = cJSON_GetObjectItemCaseSensitive(out_entries, e->key);
    if (it && !(force && e->dirty)) {
      dsk__tune_entry de;
      if (entry_from_json(e->key, it, &de) == ENTRY_OK) {
        de.dirty = 0;
        st = dsk__tuner_put(t, &de);
      }
      continue;
    }
    cJSON *o = entry_json(e);
    if (!o) {
      st = dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
      break;
    }
    if (it)
      cJSON_ReplaceItemInObjectCaseSensitive(out_entries, e->key, o); /* sets the new item's key */
    else
      cJSON_AddItemToObject(out_entries, e->key, o);
  }
  if (st != DSK_STATUS_OK) {
    cJSON_Delete(out_entries);
    return st;
  }
  sort_object(out_entries);
  cJSON *root = cJSON_CreateObject();
  cJSON *meta = root ? make_meta(ctx, t, created) : NULL;
  if (!root || !meta) {
    cJSON_Delete(root);
    cJSON_Delete(meta);
    cJSON_Delete(out_entries);
    return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
  }
  cJSON_AddNumberToObject(root, "dsk_autotune", DSK__TUNE_FORMAT);
  cJSON_AddItemToObject(root, "meta", meta);
  cJSON_AddItemToObject(root, "entries", out_entries);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "autotune: out of host memory");
  st = write_atomic(dir, path, text);
  cJSON_free(text);
  if (st == DSK_STATUS_OK) {
    dsk__tuner_mark_clean(t);
    dsk__tuner_set_file_bad(t, 0);
  }
  return st;
}

static dsk_status save(const dsk_ctx *ctx, dsk__tuner *t, int gc, int force, int64_t *dropped) {
  if (dropped) *dropped = 0;
  if (dsk__tuner_cache_mode(t) != DSK_AUTOTUNE_CACHE_RW || !dsk__tuner_path(t)) return DSK_STATUS_OK;
  const char *path = dsk__tuner_path(t);
  if (mkdir_p(dsk__tuner_dir(t)) != 0)
    return dsk__fail(DSK_STATUS_IO, "autotune: cannot create %s: %s", dsk__tuner_dir(t), strerror(errno));
  int fd = lock_file(ctx, path);
  if (fd == -2) {
    char k[1200];
    snprintf(k, sizeof k, "autotune-lock-timeout:%s", path);
    dsk__warn_once(ctx, k, "autotune: %s.lock held for over %.0f s: not saved, tuned entries kept in memory", path,
                   LOCK_TIMEOUT_S);
    return DSK_STATUS_OK;
  }
  dsk_status st = save_locked(ctx, t, gc, force, dropped);
  if (fd >= 0) close(fd); /* releases the lock */
  if (st == DSK_STATUS_OK) dsk__log(ctx, DSK_LOG_INFO, "autotune cache %s: saved %" PRId64 " entries", path,
                                    dsk__tuner_count(t));
  return st;
}

dsk_status dsk_autotune_save(dsk_ctx *ctx) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_save: ctx is NULL");
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_save: out of host memory");
  return save(ctx, t, 0, dsk__tuner_settings(t)->mode == 2, NULL);
}

dsk_status dsk__tune_save(const dsk_ctx *ctx, dsk__tuner *t, int force) { return save(ctx, t, 0, force, NULL); }

dsk_status dsk_autotune_cache_path(dsk_ctx *ctx, char *path, size_t path_len) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_cache_path: ctx is NULL");
  if (!path || path_len == 0) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_cache_path: path is NULL");
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_cache_path: out of host memory");
  const char *p = dsk__tuner_path(t);
  if (p && strlen(p) >= path_len)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_cache_path: path_len %zu < %zu", path_len, strlen(p) + 1);
  snprintf(path, path_len, "%s", p ? p : "");
  return DSK_STATUS_OK;
}

/* ---------------------------------------------------- export / import */
dsk_status dsk_autotune_export(dsk_ctx *ctx, char *buf, size_t *len) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_export: ctx is NULL");
  if (!len) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_export: len is NULL");
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_export: out of host memory");
  cJSON *doc = make_doc(ctx, t);
  char *text = doc ? cJSON_Print(doc) : NULL;
  cJSON_Delete(doc);
  if (!text) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_export: out of host memory");
  size_t need = strlen(text) + 1;
  dsk_status st = DSK_STATUS_OK;
  if (buf) {
    if (*len < need)
      st = dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_export: buffer of %zu bytes < %zu needed", *len, need);
    else
      memcpy(buf, text, need);
  }
  *len = need;
  cJSON_free(text);
  return st;
}

dsk_status dsk_autotune_import(dsk_ctx *ctx, const char *buf, size_t len) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_import: ctx is NULL");
  if (!buf && len) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_import: buf is NULL");
  if ((int64_t)len > CACHE_MAX_FILE_BYTES)
    return dsk__fail(DSK_STATUS_PARSE, "dsk_autotune_import: %zu bytes is over the %lld-byte limit", len,
                     (long long)CACHE_MAX_FILE_BYTES);
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_import: out of host memory");
  int64_t nl = 0, ns = 0, ni = 0;
  dsk_status st = dsk__tune_doc_load(ctx, t, buf, len, 1, 1, &nl, &ns, &ni);
  dsk__tuner_count_load(t, nl, ns, ni);
  if (st == DSK_STATUS_OK)
    dsk__log(ctx, DSK_LOG_INFO, "autotune import: %" PRId64 " entries, %" PRId64 " stale, %" PRId64 " invalid", nl, ns,
             ni);
  return st;
}

/* ------------------------------------------------------ list and gc */
static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

dsk_status dsk_autotune_list_files(dsk_ctx *ctx, dsk_autotune_file_fn fn, void *user) {
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_list_files: ctx is NULL");
  if (!fn) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_list_files: fn is NULL");
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_list_files: out of host memory");
  const char *dir = dsk__tuner_dir(t);
  if (!dir) return DSK_STATUS_OK;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? DSK_STATUS_OK : dsk__fail(DSK_STATUS_IO, "autotune: cannot list %s: %s", dir,
                                                               strerror(errno));
  char cur[64];
  snprintf(cur, sizeof cur, "%s.json", dsk__tuner_fp_hex(t));
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!has_suffix(de->d_name, ".json") && !has_suffix(de->d_name, ".bad")) continue;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    dsk_autotune_file f;
    memset(&f, 0, sizeof f);
    f.struct_size = sizeof f;
    f.path = path;
    f.bytes = (int64_t)st.st_size;
    f.current = strcmp(de->d_name, cur) == 0;
    f.device = "";
    f.version = "";
    char *buf = NULL;
    size_t len = 0;
    char why[256];
    char dev[320] = "", ver[32] = "";
    if (has_suffix(de->d_name, ".json") && read_file(path, &buf, &len, why, sizeof why) == 0) {
      cJSON *root = cJSON_ParseWithLength(buf, len);
      const cJSON *magic = root ? cJSON_GetObjectItemCaseSensitive(root, "dsk_autotune") : NULL;
      const cJSON *meta = root ? cJSON_GetObjectItemCaseSensitive(root, "meta") : NULL;
      const cJSON *entries = root ? cJSON_GetObjectItemCaseSensitive(root, "entries") : NULL;
      if (cJSON_IsNumber(magic) && magic->valuedouble == DSK__TUNE_FORMAT && cJSON_IsObject(meta) &&
          cJSON_IsObject(entries)) {
        f.valid = 1;
        f.entries = cJSON_GetArraySize(entries);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, "device");
        if (cJSON_IsString(v) && v->valuestring) snprintf(dev, sizeof dev, "%s", v->valuestring);
        v = cJSON_GetObjectItemCaseSensitive(meta, "version");
        if (cJSON_IsString(v) && v->valuestring) snprintf(ver, sizeof ver, "%s", v->valuestring);
        if (f.current)
          for (const cJSON *it = entries->child; it; it = it->next) {
            dsk__tune_entry e;
            if (entry_from_json(it->string, it, &e) == ENTRY_STALE) f.stale++;
          }
      }
      cJSON_Delete(root);
    }
    free(buf);
    f.device = dev;
    f.version = ver;
    fn(&f, user);
  }
  closedir(d);
  return DSK_STATUS_OK;
}

dsk_status dsk_autotune_gc(dsk_ctx *ctx, int64_t *files_removed, int64_t *entries_removed) {
  if (files_removed) *files_removed = 0;
  if (entries_removed) *entries_removed = 0;
  if (!ctx) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_autotune_gc: ctx is NULL");
  dsk__tuner *t = dsk__tuner_get(ctx);
  if (!t) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_autotune_gc: out of host memory");
  const char *dir = dsk__tuner_dir(t);
  if (!dir || dsk__tuner_cache_mode(t) != DSK_AUTOTUNE_CACHE_RW)
    return dsk__fail(DSK_STATUS_IO, "dsk_autotune_gc: the cache is not writable here (DSK_AUTOTUNE_CACHE, location)");
  DIR *d = opendir(dir);
  if (!d && errno != ENOENT) return dsk__fail(DSK_STATUS_IO, "autotune: cannot list %s: %s", dir, strerror(errno));
  char cur[64];
  snprintf(cur, sizeof cur, "%s.json", dsk__tuner_fp_hex(t));
  struct dirent *de;
  int64_t removed = 0;
  while (d && (de = readdir(d)) != NULL) {
    const char *n = de->d_name;
    int del = 0;
    if (has_suffix(n, ".json") && strcmp(n, cur) != 0) del = 1; /* another fingerprint */
    if (has_suffix(n, ".bad")) del = 1;
    const char *tp = strstr(n, ".json.tmp.");
    if (tp) { /* a temporary file of a process that is gone */
      long pid = strtol(tp + 10, NULL, 10);
      if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) del = 1;
    }
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, n);
    /* an empty probe folder of can_mkdir_in left by a process killed between its mkdir and rmdir */
    if (strncmp(n, ".dsk-probe-", 11) == 0) {
      if (rmdir(path) == 0) removed++;
      continue;
    }
    if (!del) continue;
    if (unlink(path) == 0) removed++;
  }
  if (d) closedir(d);
  if (files_removed) *files_removed = removed;
  return save(ctx, t, 1, dsk__tuner_settings(t)->mode == 2, entries_removed);
}
