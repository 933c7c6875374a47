/* mod.h: custom score and mask modifications ("mods"), written as Lua functions and traced once into an
 * expression tree, from which the generator emits device code (mod_emit.c) and the CPU reference evaluates
 * the same tree (mod_eval).
 *
 * The text of a mod is a Lua chunk (a file a config names, or a string passed through the C API and Python)
 * that sets up to three globals:
 *   aux = { slopes = fg.aux("f32", 1), doc = fg.aux("i32", 1), bias = fg.aux("f32", 2) }  -- optional
 *   score_mod = function(s, b, h, q, kv) return s + fg.load(slopes, h) * (kv - q) end   -- optional
 *   mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, q), fg.load(doc, kv)) end -- optional
 * and at least one of score_mod and mask_mod. The arguments: s the logit (the score q.k times the softmax
 * scale, float), b the batch (the sequence of a packed call), h the query head, kv the key's position in its
 * sequence (int, from 0) and q the query's position among those keys, bottom-right aligned as the causal mask
 * (query i of sq is at i + sk - sq; i itself when sq = sk). An aux entry is a device array the call passes, named
 * for the functions (as a global), of dtype f32 or i32 and rank 1 or 2 (its extents come with the call); an f32
 * array declared fg.aux("f32", rank, "trainable") can receive the loss's gradient from the backward (mod_aux_grad).
 *
 * The vocabulary (anything else is refused with file:line, and nothing of the text reaches the compiler
 * except through the tree):
 *   + - * / and unary -     on ints and floats (an int meets a float: the int becomes a float; / is
 *                           always float division)
 *   // and %                ints only: floor division and its modulo (the result has the divisor's sign);
 *                           a constant zero divisor is refused
 *   fg.eq ne lt le gt ge    comparisons (Lua's own give plain booleans, so they are refused), to bool
 *   fg.and_ or_ not_        logic on bools
 *   fg.where(c, a, b)       a where c, else b
 *   fg.min max abs          ints or floats
 *   fg.exp log tanh sqrt    floats (an int argument becomes a float)
 *   fg.float(x)             an int as a float
 *   fg.floor(x)             a float rounded down to an int (an int stays itself), for buckets such as T5's
 *   fg.load(aux, i [, j])   an element of an aux array, ints as indices (one per rank)
 *   numbers                 Lua integers are ints, other numbers floats (finite)
 * score_mod returns a float (or an int, made float); mask_mod returns a bool (true: the key is kept).
 *
 * Semantics the kernels and the reference share: a load whose index is outside the array the call passed
 * makes that score NaN (it reaches O and the LSE: never a silent wrong answer), as do an int division by zero
 * and fg.floor of a NaN or of a value outside int32; int arithmetic is 32-bit
 * two's complement; float arithmetic is fp32 in the kernels (fp64 in the reference, within the tolerance). */
#ifndef FG_MOD_H
#define FG_MOD_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "templates/common/fg_params.h"

#define MOD_MAX_NODES 256 /* expression nodes of one mod (both functions, shared subexpressions once) */
#define MOD_MAX_AUX FG_MOD_MAX_AUX /* aux arrays of one mod (the kernels' fg_mod_aux holds as many) */
#define MOD_NAME_MAX 32   /* an aux name's bytes, NUL included: [A-Za-z_][A-Za-z0-9_]* */
#define MOD_ID_LEN 16     /* hex digits of a mod's id (mod_id) */

typedef enum mod_type { MOD_T_INT = 0, MOD_T_FLOAT = 1, MOD_T_BOOL = 2 } mod_type;

typedef enum mod_op {
    MOD_CONST = 0, /* value (type int or float) */
    MOD_ARG,       /* arg: MOD_ARG_S .. MOD_ARG_KV */
    MOD_LOAD,      /* aux; a, and b for rank 2 (-1 otherwise): the indices */
    MOD_NEG,       /* a */
    MOD_ADD, MOD_SUB, MOD_MUL,
    MOD_DIV,       /* float division */
    MOD_IDIV,      /* int floor division */
    MOD_MOD,       /* int modulo with the divisor's sign */
    MOD_MIN, MOD_MAX,
    MOD_ABS,
    MOD_EXP, MOD_LOG, MOD_TANH, MOD_SQRT, /* floats */
    MOD_FLOAT,     /* int a as a float (the tracer inserts it where an int meets a float) */
    MOD_EQ, MOD_NE, MOD_LT, MOD_LE, MOD_GT, MOD_GE, /* a op b, to bool (operands of one type) */
    MOD_AND, MOD_OR, MOD_NOT,                       /* bools */
    MOD_WHERE,     /* a (bool) ? b : c */
    MOD_FLOOR,     /* float a rounded down to an int (a NaN, or a value outside int32, marks the node bad) */
    MOD_OP_COUNT
} mod_op;

enum { MOD_ARG_S = 0, MOD_ARG_B = 1, MOD_ARG_H = 2, MOD_ARG_Q = 3, MOD_ARG_KV = 4 };

/* One node. Operands are indices of earlier nodes (a tree's nodes are in dependency order), -1 where unused. */
typedef struct mod_node {
    uint8_t op;   /* mod_op */
    uint8_t type; /* mod_type of the result */
    int16_t a, b, c;
    int16_t arg;  /* MOD_ARG: which argument; MOD_LOAD: the aux index; -1 on other nodes */
    double value; /* MOD_CONST: the value (an int's is exact) */
} mod_node;

typedef struct mod_aux {
    char name[MOD_NAME_MAX];
    uint8_t is_int;    /* 1: i32, 0: f32 */
    uint8_t rank;      /* 1 or 2 */
    uint8_t trainable; /* 1: the backward can return the loss's gradient in it (f32 only; mod_aux_grad) */
} mod_aux;

typedef struct fg_mod {
    int n_nodes;
    mod_node nodes[MOD_MAX_NODES]; /* unique (no two nodes alike: shared subexpressions are one node) */
    int score;                     /* score_mod's result node (float), or -1 */
    int mask;                      /* mask_mod's result node (bool), or -1 */
    int n_aux;
    mod_aux aux[MOD_MAX_AUX];      /* in the order of their names (strcmp): the call passes them so */
} fg_mod;

/* ---- mod_trace.c: the text to the tree ---- */

/* Runs `text` (len bytes, named chunkname in messages) in the Lua sandbox, traces score_mod and mask_mod with
 * symbolic arguments and checks the tree against the vocabulary and its types. FG_OK with *out filled; else
 * FG_ERR_CONFIG with "chunkname:line: ..." naming what was refused (FG_ERR_NO_MEMORY for host memory), and
 * *out empty (no node, no aux, score and mask -1).
 * Before any of it runs, the whole chunk's text is scanned (mod_scan.c): the keywords if, elseif, while, repeat,
 * and, or, not and Lua's comparisons ==, ~=, <, <=, >, >= are refused with their line anywhere outside strings
 * and comments (the attributes <const> and <close> excepted). A traced function runs once, on symbolic values,
 * so such control flow could not mean what it says; the whole chunk rather than the two functions' lines,
 * because a helper they call may sit anywhere in it, and a mod's chunk needs control flow nowhere.
 * The tree holds the nodes the results reach, in post-order from score_mod's result, then mask_mod's (so
 * dead code and the order the text built things in leave it alone). A Lua number becomes a constant of the
 * type its place needs (an integer where a float is needed is the float constant of its value); an int
 * constant is 32-bit, a float constant within fp32's range. arg is -1 and value 0 where a node has no use for
 * them. The trace may build at most 4 * MOD_MAX_NODES nodes, dead ones included (mod_build.h). */
fg_status mod_trace(const char *chunkname, const char *text, size_t len, fg_mod *out, fg_error *err);
/* The same, reading the file at path (its path is the chunk name): FG_ERR_IO naming the path when it cannot be
 * read, FG_ERR_CONFIG for a file over 1 MiB. */
fg_status mod_trace_file(const char *path, fg_mod *out, fg_error *err);

/* ---- mod.c: the tree's canonical form, checks and evaluation ---- */

/* Checks a tree's structure (operand order and types, aux indices, result types, no NaN or infinite
 * constant, no constant zero divisor of // or %): what mod_trace guarantees, checked again where a tree comes
 * from elsewhere. FG_OK or FG_ERR_INVALID_ARGUMENT with a sentence. */
fg_status mod_check(const fg_mod *m, fg_error *err);
/* The canonical text of the tree (the aux declarations, then every node in order): equal trees, equal text.
 * Returns its length, or -1 if it did not fit n bytes. */
int mod_canonical(const fg_mod *m, char *buf, size_t n);
/* The mod's id: the first MOD_ID_LEN hex digits of the SHA-256 of its canonical text, NUL-terminated (buf holds
 * MOD_ID_LEN + 1 bytes). A variant's canonical name carries it (mod=ID), so caches and bundles stay exact. */
void mod_id(const fg_mod *m, char *buf);

/* The values of one evaluation: the arguments, and the aux arrays (host memory, row-major, extents per rank). */
typedef struct mod_inputs {
    double s;
    int b, h, q, kv;
    const void *aux[MOD_MAX_AUX];
    int64_t extent[MOD_MAX_AUX][2];
} mod_inputs;
/* score_mod's value at in (in->s when the mod has none), fp64; NaN after an out-of-range load. */
double mod_eval_score(const fg_mod *m, const mod_inputs *in);
/* mask_mod's value at in: 1 kept, 0 hidden (1 when the mod has none), -1 after an out-of-range load. */
int mod_eval_mask(const fg_mod *m, const mod_inputs *in);

/* Whether mask_mod's result depends on an aux load (MOD_LOAD: then intervals cannot settle its blocks, and the calls
 * that can take a block map get one, fg_params.h's fg_mod_aux.map) or on the head h (MOD_ARG_H: then that map has
 * an entry per query head). 0 without a mask_mod. */
int mod_mask_reads(const fg_mod *m, int op, int arg);
#define mod_mask_reads_aux(m) mod_mask_reads((m), MOD_LOAD, -1)
#define mod_mask_reads_head(m) mod_mask_reads((m), MOD_ARG, MOD_ARG_H)

/* Whether the mod loads from an aux array at an index that depends on q or kv (a load that moves with the score,
 * not one per head or sequence): the prefill's tile choice (serving_prefill.c). */
int mod_loads_by_position(const fg_mod *m);

/* The value of any float node at in (fp64; NaN when it is bad): what mod_grad's result node evaluates through. */
double mod_eval_node(const fg_mod *m, int node, const mod_inputs *in);

/* ---- mod_interval.c: a mask over a block of positions ---- */

/* A block of scores: one sequence b, query heads h_lo..h_hi, queries q_lo..q_hi and keys kv_lo..kv_hi (positions
 * as a mod sees them, inclusive). */
typedef struct mod_block {
    int b, h_lo, h_hi;
    int q_lo, q_hi, kv_lo, kv_hi;
} mod_block;
enum { MOD_BLOCK_HIDDEN = 0, MOD_BLOCK_KEPT = 1, MOD_BLOCK_MIXED = 2 };
/* mask_mod over a whole block, by interval arithmetic on the tree (templates/common/mod_interval.h): MOD_BLOCK_HIDDEN when it hides every position
 * and none can go bad, MOD_BLOCK_KEPT when it keeps every one and none can go bad (also without a mask_mod), else
 * MOD_BLOCK_MIXED (including whatever depends on an aux array's values). Sound, not exact: a kernel may skip a
 * HIDDEN block and evaluate no mask in a KEPT one, and evaluates MIXED ones position by position. */
int mod_mask_block(const fg_mod *m, const mod_block *blk);

/* ---- mod_grad.c: score_mod's derivative in s, for the backward ---- */

/* out = m with the nodes of d score_mod / d s appended (shared subexpressions once, mod_check holds); *grad is its
 * result node (a float: the constant 1 for a score_mod that adds a bias to s, 0 where it ignores s). min, max, abs
 * and where take the derivative of the side they pick (at a tie min and max the first, abs +); fg.floor and ints
 * are flat (0). FG_ERR_INVALID_ARGUMENT without a score_mod; FG_ERR_UNSUPPORTED, with a sentence, when the mod and
 * its derivative do not fit MOD_MAX_NODES. */
fg_status mod_grad(const fg_mod *m, fg_mod *out, int *grad, fg_error *err);

/* The places where score_mod reads a trainable aux array (mod_aux.trainable), for that array's gradient: the loss's
 * gradient in element x of the array is the sum, over every score and every load node of the array whose indices
 * give x, of dL/d(score_mod's result) times d(score_mod's result)/d(the loaded value). Loads under mask_mod only have
 * the derivative 0 (a mask is flat between its steps). */
#define MOD_MAX_GRAD_SITES 4 /* load nodes of trainable arrays under score_mod: each is an atomic add a score */
typedef struct mod_grad_site {
    int load;    /* the MOD_LOAD node (its aux in .arg, its indices in .a and .b) */
    int partial; /* the node of d score_mod / d load (a float) */
} mod_grad_site;
/* out = m with the nodes of each site's partial derivative appended (as mod_grad builds them, on the tree it is given:
 * pass mod_grad's result to share nodes); sites[0 .. *n_sites) in node order. *n_sites = 0 for a mod without
 * trainable arrays under score_mod. FG_ERR_UNSUPPORTED, with a sentence, for more than MOD_MAX_GRAD_SITES sites or
 * nodes past MOD_MAX_NODES. */
fg_status mod_aux_grad(const fg_mod *m, fg_mod *out, mod_grad_site *sites, int *n_sites, fg_error *err);
/* One site at in (fp64): 1 with *at the flat index of the element its load reads (row-major) and *partial the
 * partial derivative there; 0 when the load's indices are out of range or a node on the way is bad (the score is
 * NaN there: the kernels add nothing). */
int mod_eval_site(const fg_mod *m, const mod_grad_site *site, const mod_inputs *in, int64_t *at, double *partial);

/* ---- mod_registry.c: the trees this process knows, by id ---- */

/* Checks m (mod_check) and keeps a copy under its id (written to id, MOD_ID_LEN + 1 bytes), so that a variant
 * naming that id (fg_spec.mod) can be emitted; registering an id twice keeps the first (the same tree). The
 * registry lives as long as the process and holds at most MOD_REGISTRY_MAX trees (FG_ERR_UNSUPPORTED past
 * that, with a sentence). Thread-safe. */
#define MOD_REGISTRY_MAX 4096
fg_status mod_register(const fg_mod *m, char *id, fg_error *err);
/* The tree registered under id, or NULL. The pointer stays valid for the life of the process. */
const fg_mod *mod_lookup(const char *id);

/* ---- mod_emit.c: the tree as CUDA ---- */

/* Appends to buf (n bytes) the device code of the mod: the struct fg_mod_aux of its arrays' pointers and
 * extents, and the functions
 *   float fg_user_score(float s, int b, int h, int q, int kv, const fg_mod_aux &aux)  (NaN: an out-of-range load)
 *   float fg_user_mask(int b, int h, int q, int kv, const fg_mod_aux &aux)            (0 kept, -inf hidden, NaN)
 * each only where the mod has it (FG_USER_SCORE, FG_USER_MASK say which). Returns the bytes written, or -1 if
 * they did not fit. */
int mod_emit(const fg_mod *m, char *buf, size_t n);
/* Appends to buf the backward's function of a tree mod_grad extended, whose derivative is node grad:
 *   float fg_user_score_grad(float s, int b, int h, int q, int kv, const fg_mod_aux &aux, float &d)
 * giving score_mod's value and, in d, its derivative in s (NaN where bad). Returns the bytes written, or -1. */
int mod_emit_grad(const fg_mod *m, int grad, char *buf, size_t n);
/* Appends to buf the backward's accumulation of the trainable arrays' gradients at one score:
 *   void fg_user_aux_grad(float g, float s, int b, int h, int q, int kv, float fqr, float fk0, float fc,
 *                         const fg_mod_aux &aux)
 * with g = dL/d(score_mod's result) and s the logit score_mod took: for each site whose array has a gradient
 * (aux.grad[i] not null) and whose indices are in range, an atomic add of g times the site's partial into the element
 * it loaded; and #define FG_USER_AUX_GRAD (1 when there are sites). Returns the bytes written, or -1. */
int mod_emit_aux_grad(const fg_mod *m, const mod_grad_site *sites, int n_sites, char *buf, size_t n);
#define MOD_EMIT_MAX (MOD_MAX_NODES * 2 * 400 + 4096) /* bytes mod_emit needs at most (each function its nodes) */

#endif
