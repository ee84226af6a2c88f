/* models.c - model descriptions for warmup: the built-in four of
 * spec/models.md and the parser of a checkpoint's config.json (cJSON). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "tuner.h"

static void model_init(dsk_model_desc *m) {
  memset(m, 0, sizeof *m);
  m->struct_size = sizeof *m;
}

static const char *const k_builtin[] = {"deepseek-v4-flash", "deepseek-v4-pro", "glm-5.1", "deepseek-v3.2"};

const char *dsk_model_builtin_name(int index) {
  if (index < 0 || index >= (int)(sizeof k_builtin / sizeof k_builtin[0])) return NULL;
  return k_builtin[index];
}

static dsk_status check_out(const char *fn, dsk_model_desc *m) {
  if (!m) return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model is NULL", fn);
  if (m->struct_size < sizeof *m)
    return dsk__fail(DSK_STATUS_INVALID_ARG, "%s: model->struct_size %zu < sizeof(dsk_model_desc) %zu", fn,
                     m->struct_size, sizeof *m);
  return DSK_STATUS_OK;
}

/* spec/models.md §1-§2. */
dsk_status dsk_model_desc_builtin(const char *name, dsk_model_desc *m) {
  dsk_status st = check_out("dsk_model_desc_builtin", m);
  if (st != DSK_STATUS_OK) return st;
  if (!name) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_model_desc_builtin: name is NULL");
  model_init(m);
  snprintf(m->name, sizeof m->name, "%s", name);
  if (strcmp(name, "deepseek-v4-flash") == 0) {
    snprintf(m->model_type, sizeof m->model_type, "deepseek_v4");
    m->kv_format = DSK_KV_FORMAT_B584;
    m->hidden_size = 4096;
    m->num_heads = 64;
    m->num_layers = 43;
    m->num_mtp_layers = 1;
    m->sliding_window = 128;
    m->index_topk = 512;
    m->max_positions = 1048576;
    /* L0-1 SWA only; L2-41 alternate C4A, C128A; L42 C4A */
    for (int l = 0; l < 43; l++) m->compress_ratio[l] = l < 2 ? 0 : l == 42 ? 4 : (l % 2 == 0 ? 4 : 128);
    m->hc_mult = 4;
    m->n_routed_experts = 256;
    m->num_experts_per_tok = 6;
    m->moe_intermediate_size = 2048;
    m->n_shared_experts = 1;
  } else if (strcmp(name, "deepseek-v4-pro") == 0) {
    snprintf(m->model_type, sizeof m->model_type, "deepseek_v4");
    m->kv_format = DSK_KV_FORMAT_B584;
    m->hidden_size = 7168;
    m->num_heads = 128;
    m->num_layers = 61;
    m->num_mtp_layers = 1;
    m->sliding_window = 128;
    m->index_topk = 1024;
    m->max_positions = 1048576;
    /* L0-1 C128A; L2-60 alternate C4A, C128A */
    for (int l = 0; l < 61; l++) m->compress_ratio[l] = l < 2 ? 128 : (l % 2 == 0 ? 4 : 128);
    m->hc_mult = 4;
    m->n_routed_experts = 384;
    m->num_experts_per_tok = 6;
    m->moe_intermediate_size = 3072;
    m->n_shared_experts = 1;
  } else if (strcmp(name, "glm-5.1") == 0) {
    snprintf(m->model_type, sizeof m->model_type, "glm_moe_dsa");
    m->kv_format = DSK_KV_FORMAT_A656;
    m->hidden_size = 6144;
    m->num_heads = 64;
    m->num_layers = 78;
    m->num_mtp_layers = 1;
    m->index_topk = 2048;
    m->max_positions = 202752;
    m->n_routed_experts = 256;
    m->num_experts_per_tok = 8;
    m->moe_intermediate_size = 2048;
    m->n_shared_experts = 1;
    m->first_k_dense = 3;
    m->dense_intermediate_size = 12288;
  } else if (strcmp(name, "deepseek-v3.2") == 0) {
    snprintf(m->model_type, sizeof m->model_type, "deepseek_v32");
    m->kv_format = DSK_KV_FORMAT_A656;
    m->hidden_size = 7168;
    m->num_heads = 128;
    m->num_layers = 61;
    m->num_mtp_layers = 1;
    m->index_topk = 2048;
    m->max_positions = 163840;
    m->n_routed_experts = 256;
    m->num_experts_per_tok = 8;
    m->moe_intermediate_size = 2048;
    m->n_shared_experts = 1;
    m->first_k_dense = 3;
    m->dense_intermediate_size = 18432;
  } else {
    return dsk__fail(DSK_STATUS_INVALID_ARG,
                     "dsk_model_desc_builtin: unknown model '%.64s' (deepseek-v4-flash, deepseek-v4-pro, glm-5.1, "
                     "deepseek-v3.2)",
                     name);
  }
  return DSK_STATUS_OK;
}

/* ------------------------------------------------------- config.json */
/* An integer field: 1 found, 0 absent, -1 present but not an integer in
 * [lo, hi] (error set). */
static int get_int(const char *what, const cJSON *root, const char *name, int64_t lo, int64_t hi, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble || v->valuedouble < (double)lo ||
      v->valuedouble > (double)hi) {
    dsk__fail(DSK_STATUS_PARSE, "%s: %s is not an integer in %lld..%lld", what, name, (long long)lo, (long long)hi);
    return -1;
  }
  *out = (int64_t)v->valuedouble;
  return 1;
}

static dsk_status need_int(const char *what, const cJSON *root, const char *name, int64_t lo, int64_t hi,
                           int64_t *out) {
  int r = get_int(what, root, name, lo, hi, out);
  if (r < 0) return DSK_STATUS_PARSE;
  if (r == 0) return dsk__fail(DSK_STATUS_PARSE, "%s: %s is missing", what, name);
  return DSK_STATUS_OK;
}

static dsk_status opt_int(const char *what, const cJSON *root, const char *name, int64_t lo, int64_t hi,
                          int64_t *out, int64_t dflt) {
  *out = dflt;
  return get_int(what, root, name, lo, hi, out) < 0 ? DSK_STATUS_PARSE : DSK_STATUS_OK;
}

dsk_status dsk__model_desc_from_json(const char *buf, size_t len, const char *what, dsk_model_desc *m) {
  model_init(m);
  if (!buf || len == 0) return dsk__fail(DSK_STATUS_PARSE, "%s: empty", what);
  cJSON *root = cJSON_ParseWithLength(buf, len);
  if (!root) return dsk__fail(DSK_STATUS_PARSE, "%s: not valid JSON", what);
  dsk_status st = DSK_STATUS_OK;
  if (!cJSON_IsObject(root)) {
    st = dsk__fail(DSK_STATUS_PARSE, "%s: not a JSON object", what);
    goto done;
  }
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  if (!cJSON_IsString(mt) || !mt->valuestring) {
    st = dsk__fail(DSK_STATUS_PARSE, "%s: model_type is missing or not a string", what);
    goto done;
  }
  const char *t = mt->valuestring;
  int dsv4 = strcmp(t, "deepseek_v4") == 0;
  int dsa = strcmp(t, "glm_moe_dsa") == 0 || strcmp(t, "deepseek_v32") == 0;
  if (!dsv4 && !dsa) {
    st = dsk__fail(DSK_STATUS_PARSE, "%s: model_type '%.40s' is not supported (deepseek_v4, glm_moe_dsa, deepseek_v32)",
                   what, t);
    goto done;
  }
  snprintf(m->model_type, sizeof m->model_type, "%s", t);
  snprintf(m->name, sizeof m->name, "%s", t);
  m->kv_format = dsv4 ? DSK_KV_FORMAT_B584 : DSK_KV_FORMAT_A656;
  if ((st = need_int(what, root, "hidden_size", 8, 1 << 20, &m->hidden_size)) != DSK_STATUS_OK) goto done;
  if ((st = need_int(what, root, "num_hidden_layers", 1, DSK_MODEL_MAX_LAYERS, &m->num_layers)) != DSK_STATUS_OK)
    goto done;
  if ((st = need_int(what, root, "num_attention_heads", 1, 1 << 16, &m->num_heads)) != DSK_STATUS_OK) goto done;
  if ((st = need_int(what, root, "max_position_embeddings", 1, (int64_t)1 << 40, &m->max_positions)) !=
      DSK_STATUS_OK)
    goto done;
  if ((st = need_int(what, root, "index_topk", 1, 1 << 20, &m->index_topk)) != DSK_STATUS_OK) goto done;
  if ((st = opt_int(what, root, "num_nextn_predict_layers", 0, 64, &m->num_mtp_layers, 0)) != DSK_STATUS_OK)
    goto done;
  if (dsv4) {
    if ((st = need_int(what, root, "sliding_window", 1, 1 << 20, &m->sliding_window)) != DSK_STATUS_OK) goto done;
    /* hc_mult: the mHC stream count; DeepSeek-V4 configs carry 4. */
    if ((st = opt_int(what, root, "hc_mult", 0, 64, &m->hc_mult, 4)) != DSK_STATUS_OK) goto done;
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(root, "compress_ratios");
    if (!cJSON_IsArray(cr)) {
      st = dsk__fail(DSK_STATUS_PARSE, "%s: compress_ratios is missing or not an array", what);
      goto done;
    }
    int n = cJSON_GetArraySize(cr);
    if (n < m->num_layers) {
      st = dsk__fail(DSK_STATUS_PARSE, "%s: compress_ratios has %d entries < num_hidden_layers %lld", what, n,
                     (long long)m->num_layers);
      goto done;
    }
    /* Entries past num_hidden_layers describe the MTP layers (SWA only). */
    int i = 0;
    for (const cJSON *v = cr->child; v && i < n; v = v->next, i++) {
      double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
      if (x != 0 && x != 4 && x != 128) {
        st = dsk__fail(DSK_STATUS_PARSE, "%s: compress_ratios[%d] is not 0, 4 or 128", what, i);
        goto done;
      }
      if (i < m->num_layers) m->compress_ratio[i] = (int32_t)x;
    }
  }
  if ((st = opt_int(what, root, "n_routed_experts", 0, 1 << 20, &m->n_routed_experts, 0)) != DSK_STATUS_OK) goto done;
  if ((st = opt_int(what, root, "num_experts_per_tok", 0, 1 << 10, &m->num_experts_per_tok, 0)) != DSK_STATUS_OK)
    goto done;
  if ((st = opt_int(what, root, "moe_intermediate_size", 0, 1 << 24, &m->moe_intermediate_size, 0)) != DSK_STATUS_OK)
    goto done;
  if ((st = opt_int(what, root, "n_shared_experts", 0, 1 << 10, &m->n_shared_experts, 0)) != DSK_STATUS_OK) goto done;
  if ((st = opt_int(what, root, "first_k_dense_replace", 0, DSK_MODEL_MAX_LAYERS, &m->first_k_dense, 0)) !=
      DSK_STATUS_OK)
    goto done;
  if ((st = opt_int(what, root, "intermediate_size", 0, 1 << 24, &m->dense_intermediate_size, 0)) != DSK_STATUS_OK)
    goto done;
done:
  cJSON_Delete(root);
  return st;
}

dsk_status dsk_model_desc_from_config(const char *path, dsk_model_desc *m) {
  dsk_status st = check_out("dsk_model_desc_from_config", m);
  if (st != DSK_STATUS_OK) return st;
  if (!path) return dsk__fail(DSK_STATUS_INVALID_ARG, "dsk_model_desc_from_config: path is NULL");
  FILE *f = fopen(path, "rb");
  if (!f) return dsk__fail(DSK_STATUS_IO, "dsk_model_desc_from_config: cannot open %s", path);
  size_t cap = 1 << 16, len = 0;
  char *buf = (char *)malloc(cap);
  while (buf) {
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (len < cap) break;
    if (cap >= ((size_t)16 << 20)) { /* config.json files are a few KB */
      free(buf);
      fclose(f);
      return dsk__fail(DSK_STATUS_PARSE, "dsk_model_desc_from_config: %s is larger than 16 MiB", path);
    }
    char *nb = (char *)realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf) return dsk__fail(DSK_STATUS_OUT_OF_MEMORY, "dsk_model_desc_from_config: out of host memory");
  if (err) {
    free(buf);
    return dsk__fail(DSK_STATUS_IO, "dsk_model_desc_from_config: cannot read %s", path);
  }
  char what[300];
  snprintf(what, sizeof what, "config %.280s", path);
  st = dsk__model_desc_from_json(buf, len, what, m);
  free(buf);
  return st;
}
