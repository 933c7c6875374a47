/* cmd_mod.c: custom mods on the command line (docs/mods.md): `flashgen mod FILE`, which traces a mod file and
 * shows what the generator makes of it, and the --mod FILE option of gen and compile (mod_option_apply). Part of
 * the `flashgen` program; cli.h lists its files. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "generator/mod.h"
#include "tools/cli.h"

static const char usage_mod[] =
    "usage: flashgen mod FILE [--cuda | --id]\n"
    "\n"
    "Traces the custom mod in FILE (a Lua file setting score_mod and/or mask_mod, and aux: docs/mods.md) and\n"
    "prints what the generator makes of it: its id (the mod=ID its variants' names carry), the functions it\n"
    "has, its aux arrays in the order a call passes them (name, dtype, rank, and \"trainable\" where declared),\n"
    "then its canonical text (the expression tree, one node a line, that the id is the hash of). A refused\n"
    "mod prints the file:line and the sentence, and exits 1. Needs no GPU.\n"
    "\n"
    "      --cuda          print the device code emitted for the mod in place of the canonical text\n"
    "      --id            print the id alone, for scripts (to find the mod's variants in `bundle ls`)\n"
    "\n"
    "gen and compile take the same file as --mod FILE; a config names it in variants{} as mod = \"FILE\".\n";

/* Traces path into *m and registers it (its id into id); 0, or EXIT_FAIL after printing the sentence. */
static int mod_load(const char *cmd, const char *path, fg_mod *m, char id[MOD_ID_LEN + 1]) {
    fg_error err;
    fg_error_clear(&err);
    if (mod_trace_file(path, m, &err) != FG_OK || mod_register(m, id, &err) != FG_OK) {
        say(cmd, "%s", err.msg);
        return EXIT_FAIL;
    }
    return 0;
}

int mod_option_apply(const char *cmd, const char *path, fg_spec *spec) {
    fg_mod *m = fg_malloc(sizeof *m); /* a tree is several KiB */
    if (!m) {
        say(cmd, "out of memory tracing the mod in %s", path);
        return EXIT_FAIL;
    }
    char id[MOD_ID_LEN + 1];
    int rc = mod_load(cmd, path, m, id);
    free(m);
    if (rc) return rc;
    if (spec->mod[0] && strcmp(spec->mod, id) != 0) {
        say(cmd, "SPEC names mod=%s, but %s is the mod %s: leave mod= out of SPEC (--mod sets it), or give the file "
            "of that mod", spec->mod, path, id);
        return EXIT_FAIL;
    }
    memcpy(spec->mod, id, sizeof id);
    return 0;
}

/* Prints what `flashgen mod` shows of m (traced from path, registered as id): the id, the functions, the aux
 * arrays, then the canonical text or with cuda the device code. 0, or EXIT_FAIL after printing why. */
static int mod_show(const char *path, const fg_mod *m, const char *id, int cuda) {
    printf("id %s\n", id);
    printf("functions%s%s\n", m->score >= 0 ? " score_mod" : "", m->mask >= 0 ? " mask_mod" : "");
    for (int i = 0; i < m->n_aux; i++)
        printf("aux %s %s rank %d%s\n", m->aux[i].name, m->aux[i].is_int ? "i32" : "f32", m->aux[i].rank,
               m->aux[i].trainable ? " trainable" : "");
    if (m->n_aux == 0) printf("aux none\n");
    printf("nodes %d\n\n", m->n_nodes);
    /* canonical text: at most 96 bytes a node and 48 an aux (mod_id's bound); the device code MOD_EMIT_MAX */
    const size_t cap = cuda ? MOD_EMIT_MAX : MOD_MAX_NODES * 96 + MOD_MAX_AUX * 48 + 64;
    char *text = fg_malloc(cap);
    if (!text) {
        say("mod", "out of memory printing the mod in %s", path);
        return EXIT_FAIL;
    }
    const int len = cuda ? mod_emit(m, text, cap) : mod_canonical(m, text, cap);
    if (len < 0) {
        free(text);
        say("mod", "the %s of the mod in %s did not fit its buffer (a flashgen bug)", cuda ? "device code" : "canonical text",
            path);
        return EXIT_FAIL;
    }
    size_t wrote = fwrite(text, 1, (size_t)len, stdout);
    free(text);
    if (wrote != (size_t)len) {
        say("mod", "could not write to stdout (%s)", strerror(errno));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* `flashgen mod FILE [--cuda | --id]`. */
int cmd_mod(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"cuda", no_argument, NULL, 'c'},
                                         {"id", no_argument, NULL, 'i'},
                                         {NULL, 0, NULL, 0}};
    int cuda = 0, id_only = 0, c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fputs(usage_mod, stdout); return EXIT_OK;
        case 'c': cuda = 1; break;
        case 'i': id_only = 1; break;
        default: return bad_option("mod", argv, c);
        }
    }
    if (optind >= argc) return usage_error("mod", "a mod FILE is required");
    if (optind + 1 < argc) return usage_error("mod", "one mod FILE is expected, got also '%s'", argv[optind + 1]);
    if (cuda && id_only) return usage_error("mod", "--cuda and --id ask for different output: give one");
    const char *path = argv[optind];
    fg_mod *m = fg_malloc(sizeof *m);
    if (!m) {
        say("mod", "out of memory tracing the mod in %s", path);
        return EXIT_FAIL;
    }
    char id[MOD_ID_LEN + 1];
    int rc = mod_load("mod", path, m, id);
    if (rc == 0) {
        if (id_only) printf("%s\n", id);
        else rc = mod_show(path, m, id, cuda);
    }
    free(m);
    return rc;
}
