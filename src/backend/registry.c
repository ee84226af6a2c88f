/* registry.c - the list of backends, capability queries and selection
 * (spec/backends.md §2-3). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static const dsk_backend *const g_backends[] = {
#ifdef DSK_HAVE_CUDA
    &dsk__backend_cuda_sm120,
    &dsk__backend_cuda_sm90,
#endif
    &dsk__backend_cpu_ref,
};

int dsk__backend_count(void) { return (int)(sizeof g_backends / sizeof g_backends[0]); }

const dsk_backend *dsk__backend_at(int i) {
  return (i >= 0 && i < dsk__backend_count()) ? g_backends[i] : NULL;
}

const dsk_backend *dsk__backend_find(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < dsk__backend_count(); i++)
    if (strcmp(g_backends[i]->name, name) == 0) return g_backends[i];
  return NULL;
}

int dsk_backend_count(void) { return dsk__backend_count(); }

const char *dsk_backend_name(int index) {
  const dsk_backend *b = dsk__backend_at(index);
  return b ? b->name : NULL;
}

/* "cpu" -> -1, "cuda:N" -> N, "auto" -> -2; -3 on a malformed string. */
int dsk__parse_device(const char *device) {
  if (!device || strcmp(device, "auto") == 0) return -2;
  if (strcmp(device, "cpu") == 0) return -1;
  if (strncmp(device, "cuda:", 5) == 0 && device[5]) {
    char *end = NULL;
    long n = strtol(device + 5, &end, 10);
    if (*end == 0 && n >= 0 && n < 1024) return (int)n;
  }
  if (strcmp(device, "cuda") == 0) return 0;
  return -3;
}

static void list_names(char *buf, size_t len) {
  buf[0] = 0;
  for (int i = 0; i < dsk__backend_count(); i++) {
    if (i) strncat(buf, ", ", len - strlen(buf) - 1);
    strncat(buf, g_backends[i]->name, len - strlen(buf) - 1);
  }
}

dsk_status dsk_backend_query(const char *name, const char *device, dsk_backend_info *info,
                             int *available, char *reason, size_t reason_len) {
  char local[256];
  if (!reason || reason_len == 0) {
    reason = local;
    reason_len = sizeof local;
  }
  reason[0] = 0;
  if (!available) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_backend_query: available is NULL");
  *available = 0;
  const dsk_backend *b = dsk__backend_find(name);
  if (!b) {
    char names[256];
    list_names(names, sizeof names);
    snprintf(reason, reason_len, "unknown backend '%s' (this build has: %s)", name ? name : "(null)",
             names);
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_backend_query: %s", reason);
  }
  if (info) {
    if (info->struct_size < sizeof *info)
      return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_backend_query: info->struct_size %zu < %zu",
                       info->struct_size, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", b->name);
    snprintf(info->description, sizeof info->description, "%s", b->description);
    info->is_cuda = b->is_cuda;
  }
  int dev = dsk__parse_device(device);
  if (dev == -3)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_backend_query: device '%s' is not cpu, cuda:N or auto",
                     device);
  if (dev == -2) dev = b->is_cuda ? 0 : -1;
  if ((dev >= 0) != (b->is_cuda != 0)) {
    snprintf(reason, reason_len, "%s: does not run on %s", b->name, dev >= 0 ? "a CUDA device" : "the CPU");
    return DSK_STATUS_OK;
  }
  dsk_env env;
  memset(&env, 0, sizeof env);
  *available = b->probe(dev, &env, reason, reason_len);
  return DSK_STATUS_OK;
}

/* Chooses the backend and device for a new context (backends.md §3).
 * forced: explicit name or NULL; device string as given. */
dsk_status dsk__select_backend(const char *forced, const char *forced_by, const char *device,
                               const dsk_env *env, const dsk_backend **out, int *out_device,
                               char *why, size_t why_len) {
  int dev = dsk__parse_device(device);
  if (dev == -3)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_create: device '%s' is not cpu, cuda:N or auto",
                     device);
  char reason[256];
  if (forced) {
    const dsk_backend *b = dsk__backend_find(forced);
    if (!b) {
      char names[256];
      list_names(names, sizeof names);
      return dsk__fail(DSK_STATUS_BACKEND_UNAVAILABLE,
                       "dsk_ctx_create: unknown backend '%s' (%s); this build has: %s", forced,
                       forced_by, names);
    }
    if (dev == -2) dev = b->is_cuda ? 0 : -1;
    if ((dev >= 0) != (b->is_cuda != 0))
      return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_ctx_create: backend %s does not run on %s", b->name,
                       dev >= 0 ? device : "cpu");
    if (!b->probe(dev, env, reason, sizeof reason))
      return dsk__fail(DSK_STATUS_BACKEND_UNAVAILABLE, "dsk_ctx_create: forced backend unavailable (%s): %s",
                       forced_by, reason);
    *out = b;
    *out_device = dev;
    snprintf(why, why_len, "forced by %s; %s", forced_by, reason);
    return DSK_STATUS_OK;
  }
  char tried[768];
  tried[0] = 0;
  if (dev >= 0 || dev == -2) {
    int cdev = dev >= 0 ? dev : 0;
    for (int i = 0; i < dsk__backend_count(); i++) {
      const dsk_backend *b = g_backends[i];
      if (!b->is_cuda) continue;
      if (b->probe(cdev, env, reason, sizeof reason)) {
        *out = b;
        *out_device = cdev;
        snprintf(why, why_len, "auto-selected: %s", reason);
        return DSK_STATUS_OK;
      }
      if (tried[0]) strncat(tried, "; ", sizeof tried - strlen(tried) - 1);
      strncat(tried, reason, sizeof tried - strlen(tried) - 1);
    }
    if (dev >= 0)
      return dsk__fail(DSK_STATUS_BACKEND_UNAVAILABLE, "dsk_ctx_create: no backend serves %s: %s", device,
                       tried[0] ? tried : "this build has no CUDA backend (nvcc was not found at build time)");
  }
  /* CPU: the best available CPU backend (cpu-ref is always available). */
  for (int i = 0; i < dsk__backend_count(); i++) {
    const dsk_backend *b = g_backends[i];
    if (b->is_cuda) continue;
    if (b->probe(-1, env, reason, sizeof reason)) {
      *out = b;
      *out_device = -1;
      if (dev == -2)
        snprintf(why, why_len, "auto-selected the CPU: %s; %s",
                 tried[0] ? tried : "this build has no CUDA backend", reason);
      else
        snprintf(why, why_len, "device cpu: %s", reason);
      return DSK_STATUS_OK;
    }
  }
  return dsk__fail(DSK_STATUS_BACKEND_UNAVAILABLE, "dsk_ctx_create: no CPU backend is available");
}
