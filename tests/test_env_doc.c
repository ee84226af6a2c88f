/* test_env_doc.c - docs/environment.md lists exactly the DSK_* variables the
 * code reads (api-conventions.md §2):
 *  - the table under "## Library variables" == the string literals passed
 *    to dsk__getenv("...") in every .c/.cu/.h/.cuh file under src/;
 *  - no file under src/ other than src/core/env.c calls getenv (or
 *    secure_getenv) itself, and dsk__getenv is only called with literals;
 *  - the table under "## Test and tool variables" == the DSK_* literals
 *    that tests/ and tools/ pass to getenv, minus the library's names.
 * A table row is a line starting with "| `DSK_NAME` |". Comments in the
 * sources are ignored. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

#ifndef DSK_SOURCE_DIR
#error "DSK_SOURCE_DIR must be defined (CMake does it for tests)"
#endif

static tu_counts counts;

/* ----------------------------------------------------------- name sets */
#define MAX_NAMES 128
typedef struct name_set {
  int n;
  char name[MAX_NAMES][64];
  char where[MAX_NAMES][256];
} name_set;

static int set_has(const name_set *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->name[i], name) == 0) return 1;
  return 0;
}

static void set_add(name_set *s, const char *name, const char *where) {
  if (set_has(s, name)) return;
  if (s->n >= MAX_NAMES) {
    TU_CHECK(&counts, 0, "more than %d names", MAX_NAMES);
    return;
  }
  snprintf(s->name[s->n], sizeof s->name[0], "%s", name);
  snprintf(s->where[s->n], sizeof s->where[0], "%s", where);
  s->n++;
}

/* ------------------------------------------------------------ file text */
static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = (char *)malloc((size_t)n + 1);
  if (!buf) {
    fclose(f);
    return NULL;
  }
  size_t got = fread(buf, 1, (size_t)n, f);
  buf[got] = 0;
  fclose(f);
  return buf;
}

/* Replaces comments with spaces (newlines kept), leaving string and
 * character literals intact. */
static void strip_comments(char *s) {
  char *p = s;
  while (*p) {
    if (p[0] == '/' && p[1] == '/') {
      while (*p && *p != '\n') *p++ = ' ';
    } else if (p[0] == '/' && p[1] == '*') {
      *p++ = ' ';
      *p++ = ' ';
      while (*p && !(p[0] == '*' && p[1] == '/')) {
        if (*p != '\n') *p = ' ';
        p++;
      }
      if (*p) {
        *p++ = ' ';
        *p++ = ' ';
      }
    } else if (*p == '"' || *p == '\'') {
      char q = *p++;
      while (*p && *p != q) {
        if (*p == '\\' && p[1]) p++;
        p++;
      }
      if (*p) p++;
    } else {
      p++;
    }
  }
}

static int is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int line_of(const char *text, const char *at) {
  int line = 1;
  for (const char *p = text; p < at; p++) line += *p == '\n';
  return line;
}

/* Scans one source file. Library mode (src/): dsk__getenv literals go to
 * `names`, a direct getenv is an error unless allow_getenv. Tool mode
 * (tests/, tools/): DSK_* literals passed to getenv or dsk__getenv go to
 * `names`. */
static void scan_source(const char *path, const char *rel, int library, int allow_getenv, name_set *names) {
  char *text = read_file(path);
  TU_CHECK(&counts, text != NULL, "cannot read %s", path);
  if (!text) return;
  strip_comments(text);
  for (char *p = text; (p = strstr(p, "getenv")) != NULL; p += 6) {
    /* the whole identifier around "getenv" */
    char *start = p;
    while (start > text && is_ident(start[-1])) start--;
    char *end = p + 6;
    if (is_ident(*end)) continue; /* getenv_foo, not a call */
    size_t len = (size_t)(end - start);
    char ident[64];
    if (len >= sizeof ident) continue;
    memcpy(ident, start, len);
    ident[len] = 0;
    char *q = end;
    while (*q == ' ' || *q == '\t' || *q == '\n') q++;
    if (*q != '(') continue; /* not a call or declaration */
    q++;
    while (*q == ' ' || *q == '\t' || *q == '\n') q++;
    int line = line_of(text, p);
    int is_dsk = strcmp(ident, "dsk__getenv") == 0;
    int is_libc = strcmp(ident, "getenv") == 0 || strcmp(ident, "secure_getenv") == 0;
    if (!is_dsk && !is_libc) continue;
    if (library && is_libc) {
      TU_CHECK(&counts, allow_getenv, "%s:%d calls %s(); only src/core/env.c may read the environment (use dsk__getenv)",
               rel, line, ident);
      continue;
    }
    if (*q != '"') {
      /* the declaration and definition take `const char *name` */
      int decl = strncmp(q, "const char", 10) == 0;
      if (library && is_dsk)
        TU_CHECK(&counts, decl, "%s:%d: dsk__getenv must be called with a string literal (the name must be visible here)",
                 rel, line);
      continue;
    }
    q++;
    char name[64];
    size_t k = 0;
    while (*q && *q != '"' && k + 1 < sizeof name) name[k++] = *q++;
    name[k] = 0;
    char where[256];
    snprintf(where, sizeof where, "%.200s:%d", rel, line);
    if (library) {
      TU_CHECK(&counts, strncmp(name, "DSK_", 4) == 0, "%s reads '%s': every variable needs the DSK_ prefix", where,
               name);
      set_add(names, name, where);
    } else if (strncmp(name, "DSK_", 4) == 0) {
      set_add(names, name, where);
    }
  }
  free(text);
}

static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Recursively scans every .c/.cu/.h/.cuh file under root/rel. */
static int scan_tree(const char *root, const char *rel, int library, name_set *names) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", root, rel);
  DIR *d = opendir(dir);
  if (!d) return 0;
  int files = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char sub[1024], path[2048];
    snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
    snprintf(path, sizeof path, "%s/%s", root, sub);
    struct stat st;
    if (stat(path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      files += scan_tree(root, sub, library, names);
    } else if (S_ISREG(st.st_mode) && (has_suffix(sub, ".c") || has_suffix(sub, ".cu") || has_suffix(sub, ".h") ||
                                       has_suffix(sub, ".cuh"))) {
      scan_source(path, sub, library, strcmp(sub, "src/core/env.c") == 0, names);
      files++;
    }
  }
  closedir(d);
  return files;
}

/* Names of the table rows ("| `DSK_X` |") in the section whose heading
 * starts with `heading`, up to the next "## " heading. */
static int parse_doc(const char *text, const char *heading, name_set *names) {
  const char *p = text;
  int found = 0, line = 1;
  while (*p) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    if (strncmp(p, "## ", 3) == 0) found = strncmp(p, heading, strlen(heading)) == 0 ? 1 : (found ? 2 : 0);
    if (found == 2) break;
    if (found == 1 && strncmp(p, "| `DSK_", 7) == 0) {
      const char *n = p + 3;
      const char *close = memchr(n, '`', len - 3);
      char name[64];
      size_t k = close ? (size_t)(close - n) : 0;
      TU_CHECK(&counts, close && k < sizeof name, "docs/environment.md:%d: malformed row", line);
      if (close && k < sizeof name) {
        memcpy(name, n, k);
        name[k] = 0;
        char where[64];
        snprintf(where, sizeof where, "docs/environment.md:%d", line);
        TU_CHECK(&counts, !set_has(names, name), "%s: %s listed twice", where, name);
        set_add(names, name, where);
      }
    }
    if (!eol) break;
    p = eol + 1;
    line++;
  }
  return found != 0;
}

static void compare(const char *what, const name_set *code, const char *code_desc, const name_set *doc) {
  for (int i = 0; i < code->n; i++)
    TU_CHECK(&counts, set_has(doc, code->name[i]), "%s is read at %s (%s) but not listed under \"%s\" in docs/environment.md",
             code->name[i], code->where[i], code_desc, what);
  for (int i = 0; i < doc->n; i++)
    TU_CHECK(&counts, set_has(code, doc->name[i]), "%s is listed under \"%s\" (%s) but %s does not read it",
             doc->name[i], what, doc->where[i], code_desc);
}

int main(void) {
  const char *root = DSK_SOURCE_DIR;
  static name_set lib_code, tool_code, lib_doc, test_doc;

  int nsrc = scan_tree(root, "src", 1, &lib_code);
  TU_CHECK(&counts, nsrc > 10, "only %d source files found under %s/src", nsrc, root);
  TU_CHECK(&counts, lib_code.n >= 1, "no dsk__getenv(\"DSK_...\") call found under src/ (scanner broken?)");
  scan_tree(root, "tests", 0, &tool_code);
  scan_tree(root, "tools", 0, &tool_code);

  char path[1024];
  snprintf(path, sizeof path, "%s/docs/environment.md", root);
  char *doc = read_file(path);
  TU_CHECK(&counts, doc != NULL, "cannot read %s", path);
  if (doc) {
    TU_CHECK(&counts, parse_doc(doc, "## Library variables", &lib_doc), "no \"## Library variables\" section");
    TU_CHECK(&counts, parse_doc(doc, "## Test and tool variables", &test_doc),
             "no \"## Test and tool variables\" section");
    free(doc);
  }
  TU_CHECK(&counts, lib_doc.n >= 1, "the library table of docs/environment.md has no rows");

  compare("Library variables", &lib_code, "the library, src/", &lib_doc);

  /* tests/ and tools/ may read library variables too; the rest are test-only */
  name_set test_only;
  memset(&test_only, 0, sizeof test_only);
  for (int i = 0; i < tool_code.n; i++)
    if (!set_has(&lib_code, tool_code.name[i])) set_add(&test_only, tool_code.name[i], tool_code.where[i]);
  compare("Test and tool variables", &test_only, "tests/ and tools/", &test_doc);
  for (int i = 0; i < test_doc.n; i++)
    TU_CHECK(&counts, !set_has(&lib_doc, test_doc.name[i]), "%s is listed in both tables", test_doc.name[i]);

  printf("test_env_doc: library reads");
  for (int i = 0; i < lib_code.n; i++) printf(" %s", lib_code.name[i]);
  printf("; tests/tools read");
  for (int i = 0; i < test_only.n; i++) printf(" %s", test_only.name[i]);
  printf("\n");
  return tu_finish("test_env_doc", &counts);
}
