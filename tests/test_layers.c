/* test_layers.c: the tree's include structure. Every quoted #include in the C and CUDA sources names
 * its layer (a path from the repository root, e.g. "runtime/cache.h"; templates include each other by
 * their path under templates/, as NVRTC sees them), reaches only the layers below its own, and
 * no file includes itself through a chain (no cycle). Nothing outside tests/ includes from tests/.
 *
 * A quoted include that names no file of the tree fails too, except the generated templates table.
 *
 * The layers, lowest first: core; templates (device code and the host/device shared headers); generator;
 * runtime; autotune; tools. reference/ (the CPU reference) sits on core alone; tests and bench may reach
 * everything but each other. The checker runs on two made-up trees first (one with a cycle, one with
 * an upward include), so a checker that cannot fail fails here. Runs from the repository root. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILES 512
#define MAX_INCLUDES 64
#define PATH_LEN 256

typedef struct source_file {
    char path[PATH_LEN];                  /* from the repository root */
    char inc[MAX_INCLUDES][PATH_LEN];     /* its quoted includes, resolved to repository paths */
    int ninc;                             /* how many */
} source_file;

typedef struct tree {
    source_file files[MAX_FILES]; /* every C/CUDA source and header of the checked folders */
    int n;                        /* how many */
} tree;

/* What each folder may include besides itself. */
static const struct {
    const char *folder;
    const char *may_include; /* space-separated folders */
} layers[] = {
    {"include", ""},
    {"core", "include"},
    {"templates", ""},
    {"generator", "include core templates"},
    {"runtime", "include core templates generator"},
    {"autotune", "include core templates generator runtime"},
    {"reference", "include core"},
    {"tools", "include core templates generator runtime autotune reference"},
    {"bench", "include core templates generator runtime autotune reference tools"},
    {"tests", "include core templates generator runtime autotune reference tools"},
};
#define NLAYERS ((int)(sizeof layers / sizeof layers[0]))

static void folder_of(const char *path, char *out, size_t n) {
    const char *slash = strchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : 0;
    if (len >= n) len = n - 1;
    memcpy(out, path, len);
    out[len] = '\0';
}

static int layer_index(const char *folder) {
    for (int i = 0; i < NLAYERS; i++)
        if (strcmp(layers[i].folder, folder) == 0) return i;
    return -1;
}

static int may_include(const char *from, const char *to) {
    if (strcmp(from, to) == 0) return 1;
    int i = layer_index(from);
    if (i < 0) return 0;
    char list[256];
    snprintf(list, sizeof list, " %s ", layers[i].may_include);
    char key[80];
    snprintf(key, sizeof key, " %s ", to);
    return strstr(list, key) != NULL;
}

/* Checks t: writes the first problem into why and returns 1, or returns 0 when the tree is clean. */
static int find_problem(const tree *t, char *why, size_t n) {
    for (int i = 0; i < t->n; i++) {
        const source_file *f = &t->files[i];
        char from[64], to[64];
        folder_of(f->path, from, sizeof from);
        for (int k = 0; k < f->ninc; k++) {
            folder_of(f->inc[k], to, sizeof to);
            if (!may_include(from, to)) {
                snprintf(why, n, "%s includes %s: %s/ may not include from %s/", f->path, f->inc[k], from, to);
                return 1;
            }
        }
    }
    /* Cycles: depth-first search over files, colouring 0 new, 1 on the stack, 2 done. */
    int colour[MAX_FILES] = {0}, stack[MAX_FILES], edge[MAX_FILES];
    for (int s = 0; s < t->n; s++) {
        if (colour[s]) continue;
        int depth = 0;
        stack[0] = s;
        edge[0] = 0;
        colour[s] = 1;
        while (depth >= 0) {
            const source_file *f = &t->files[stack[depth]];
            if (edge[depth] == f->ninc) {
                colour[stack[depth]] = 2;
                depth--;
                continue;
            }
            const char *target = f->inc[edge[depth]++];
            int j = -1;
            for (int x = 0; x < t->n; x++)
                if (strcmp(t->files[x].path, target) == 0) j = x;
            if (j < 0) continue; /* outside the checked tree (generated files) */
            if (colour[j] == 1) {
                snprintf(why, n, "include cycle through %s and %s", f->path, target);
                return 1;
            }
            if (colour[j] == 0) {
                colour[j] = 1;
                stack[++depth] = j;
                edge[depth] = 0;
            }
        }
    }
    return 0;
}

static int is_source(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (!strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".cuh") || !strcmp(dot, ".cu"));
}

/* Resolves a quoted include of file `from` to a repository path. Templates include each other as NVRTC
 * sees them: by their path under templates/ ("common/types.cuh"). Everything else names its layer from the
 * root ("runtime/cache.h"), except the public header, "flashgen.h" (include/). Empty when the file is not in
 * the tree (a generated file). */
static void resolve(const char *from, const char *name, char *out, size_t n) {
    struct stat st;
    char path[2 * PATH_LEN];
    if (strncmp(from, "templates/", 10) == 0) snprintf(path, sizeof path, "templates/%s", name);
    else if (strcmp(name, "flashgen.h") == 0) snprintf(path, sizeof path, "include/flashgen.h");
    else snprintf(path, sizeof path, "%s", name);
    if (stat(path, &st) == 0) snprintf(out, n, "%.*s", (int)n - 1, path);
    else out[0] = '\0';
}

static void scan_file(tree *t, const char *path) {
    cr_assert_lt(t->n, MAX_FILES, "more than %d sources: raise MAX_FILES", MAX_FILES);
    source_file *f = &t->files[t->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    FILE *in = fopen(path, "r");
    cr_assert_not_null(in, "cannot read %s", path);
    char line[1024];
    while (fgets(line, sizeof line, in)) {
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "#include", 8) != 0) continue;
        p += 8;
        while (*p == ' ') p++;
        if (*p != '"') continue;
        const char *end = strchr(p + 1, '"');
        if (!end) continue;
        char name[PATH_LEN];
        snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
        cr_assert(strchr(name, '/') || strcmp(name, "flashgen.h") == 0 || strncmp(path, "templates/", 10) == 0,
                  "%s: #include \"%s\" does not name its layer (write \"folder/%s\")", path, name, name);
        cr_assert_lt(f->ninc, MAX_INCLUDES, "%s has more than %d includes", path, MAX_INCLUDES);
        resolve(path, name, f->inc[f->ninc], PATH_LEN);
        cr_assert(f->inc[f->ninc][0] || strcmp(name, "generator/emit_templates.h") == 0,
                  "%s: #include \"%s\" names no file of the tree", path, name);
        if (f->inc[f->ninc][0]) f->ninc++;
    }
    fclose(in);
}

static void scan_dir(tree *t, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_LEN];
        if (snprintf(path, sizeof path, "%s/%.200s", dir, e->d_name) >= (int)sizeof path) continue;
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) scan_dir(t, path);
        else if (is_source(e->d_name)) scan_file(t, path);
    }
    closedir(d);
}

static tree the_tree;

Test(layers, checker_catches_a_cycle) {
    tree *t = calloc(1, sizeof *t);
    t->n = 2;
    strcpy(t->files[0].path, "runtime/a.h");
    strcpy(t->files[0].inc[t->files[0].ninc++], "runtime/b.h");
    strcpy(t->files[1].path, "runtime/b.h");
    strcpy(t->files[1].inc[t->files[1].ninc++], "runtime/a.h");
    char why[512];
    cr_assert_eq(find_problem(t, why, sizeof why), 1);
    cr_assert(strstr(why, "cycle"), "%s", why);
    free(t);
}

Test(layers, checker_catches_an_upward_include_and_tests_in_a_product) {
    tree *t = calloc(1, sizeof *t);
    t->n = 1;
    strcpy(t->files[0].path, "generator/x.c");
    strcpy(t->files[0].inc[t->files[0].ninc++], "runtime/cache.h");
    char why[512];
    cr_assert_eq(find_problem(t, why, sizeof why), 1);
    cr_assert(strstr(why, "may not include from runtime/"), "%s", why);
    strcpy(t->files[0].path, "tools/x.c");
    strcpy(t->files[0].inc[0], "tests/test_util.h");
    cr_assert_eq(find_problem(t, why, sizeof why), 1);
    cr_assert(strstr(why, "may not include from tests/"), "%s", why);
    strcpy(t->files[0].inc[0], "runtime/cache.h");
    cr_assert_eq(find_problem(t, why, sizeof why), 0, "%s", why);
    free(t);
}

Test(layers, the_tree_includes_downward_only_and_has_no_cycle) {
    struct stat st;
    cr_assert_eq(stat("build.ninja", &st), 0, "run from the repository root (tests/run.sh does)");
    for (int i = 0; i < NLAYERS; i++) scan_dir(&the_tree, layers[i].folder);
    cr_assert_gt(the_tree.n, 40, "found only %d sources: is this the repository root?", the_tree.n);
    char why[512] = "";
    cr_assert_eq(find_problem(&the_tree, why, sizeof why), 0, "%s", why);
}
