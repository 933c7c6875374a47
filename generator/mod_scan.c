/* mod_scan.c: the text check a mod's Lua chunk passes before any of it runs (mod_scan.h).
 *
 * mod_trace calls score_mod and mask_mod once, on symbolic values. Control flow on such a value cannot mean
 * what it says: a symbolic value is a userdata, always true, so `if q > 0` or `a and b or c` would pick one
 * side for every position of every call; Lua's == and ~= compare objects, so `q == 0` is plainly false; and
 * a tracer never sees any of it happen. So the text is scanned instead, with a small Lua-aware lexer (strings,
 * long strings and comments skipped; lines counted as Lua counts them, so the line is the one Lua would
 * name), and the first such keyword or operator is refused with its line and what to write instead.
 *
 * The whole chunk is scanned, not only the lines of score_mod and mask_mod: a helper they call may be
 * defined anywhere in the chunk (a local function above them), and a mod's chunk has no use for control
 * flow outside the functions either: it declares its aux arrays and the two functions, nothing else.
 * The scan is a guard against honest mistakes, not a proof: the tracer's own checks (a Lua boolean is never
 * an expression; comparison metamethods raise) stand behind it. */
#include <string.h>

#include "generator/mod_scan.h"

/* A refused keyword and the sentence that says what to use instead. */
typedef struct scan_rule {
    const char *word; /* the keyword or operator, as written */
    const char *why;  /* the sentence mod_scan returns */
} scan_rule;

static const scan_rule scan_keywords[] = {
    {"if", "'if' is refused in a mod: each function runs once, on symbolic values, so a branch would go the same "
           "way for every position; choose between values with fg.where(cond, a, b)"},
    {"elseif", "'elseif' is refused in a mod: each function runs once, on symbolic values, so a branch would go "
               "the same way for every position; nest fg.where(cond, a, fg.where(cond2, b, c)) instead"},
    {"while", "'while' is refused in a mod: its condition would be tested once, on symbolic values; loop with a "
              "numeric for over constant bounds (for i = 1, 8 do ... end)"},
    {"repeat", "'repeat' is refused in a mod: its condition would be tested once, on symbolic values; loop with "
               "a numeric for over constant bounds (for i = 1, 8 do ... end)"},
    {"and", "'and' is refused in a mod: Lua's and tests a value's truth, and a symbolic value is always true; use "
            "fg.and_(a, b), and fg.where(c, a, b) for Lua's `c and a or b`"},
    {"or", "'or' is refused in a mod: Lua's or tests a value's truth, and a symbolic value is always true; use "
           "fg.or_(a, b), and fg.where(c, a, b) for Lua's `c and a or b`"},
    {"not", "'not' is refused in a mod: Lua's not tests a value's truth, and a symbolic value is always true; use "
            "fg.not_(x)"},
    {NULL, NULL}};

static const char scan_eq[] = "'==' is refused in a mod: on symbolic values Lua's == compares objects, not values "
                              "(q == 0 is plainly false); use fg.eq(a, b)";
static const char scan_ne[] = "'~=' is refused in a mod: on symbolic values Lua's ~= compares objects, not values "
                              "(q ~= 0 is plainly true); use fg.ne(a, b)";
static const char scan_lt[] = "'<' is refused in a mod: Lua's comparisons give a plain boolean, not an "
                              "expression; use fg.lt(a, b)";
static const char scan_le[] = "'<=' is refused in a mod: Lua's comparisons give a plain boolean, not an "
                              "expression; use fg.le(a, b)";
static const char scan_gt[] = "'>' is refused in a mod: Lua's comparisons give a plain boolean, not an "
                              "expression; use fg.gt(a, b)";
static const char scan_ge[] = "'>=' is refused in a mod: Lua's comparisons give a plain boolean, not an "
                              "expression; use fg.ge(a, b)";

/* Where the lexer is: the text, the position and the line there. */
typedef struct scan_state {
    const char *t; /* the chunk */
    size_t n;      /* its length */
    size_t i;      /* the next byte to read */
    int line;      /* the line of byte i, from 1 */
} scan_state;

static int scan_is_name_start(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int scan_is_name_char(unsigned char c) { return scan_is_name_start(c) || (c >= '0' && c <= '9'); }
static int scan_is_newline(unsigned char c) { return c == '\n' || c == '\r'; }
static int scan_is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; }

/* At a newline byte: steps over it, and over its partner of a "\r\n" or "\n\r" pair (one line, as Lua's
 * inclinenumber counts it), and counts the line. */
static void scan_newline(scan_state *s) {
    char first = s->t[s->i++];
    if (s->i < s->n && scan_is_newline((unsigned char)s->t[s->i]) && s->t[s->i] != first)
        s->i++;
    s->line++;
}

/* At '[': the level of the long bracket that opens here ("[[" is 0, "[==[" is 2), or -1 if none does. */
static int scan_long_open(const scan_state *s) {
    size_t j = s->i + 1;
    int level = 0;
    while (j < s->n && s->t[j] == '=') {
        j++;
        level++;
    }
    return j < s->n && s->t[j] == '[' ? level : -1;
}

/* At the '[' of a long bracket of `level`: steps past its closing bracket (or to the end of an unclosed
 * one), counting the lines inside. */
static void scan_skip_long(scan_state *s, int level) {
    s->i += (size_t)level + 2;
    while (s->i < s->n) {
        unsigned char c = (unsigned char)s->t[s->i];
        if (scan_is_newline(c)) {
            scan_newline(s);
            continue;
        }
        s->i++;
        if (c != ']')
            continue;
        size_t j = s->i;
        int eq = 0;
        while (j < s->n && s->t[j] == '=') {
            j++;
            eq++;
        }
        if (eq == level && j < s->n && s->t[j] == ']') {
            s->i = j + 1;
            return;
        }
    }
}

/* At an opening quote: steps past the string. A backslash escapes the next byte (an escaped newline
 * counts its line); a raw newline ends an unfinished string, where Lua's parser stops with an error. */
static void scan_skip_string(scan_state *s) {
    char quote = s->t[s->i++];
    while (s->i < s->n) {
        unsigned char c = (unsigned char)s->t[s->i];
        if (c == (unsigned char)quote) {
            s->i++;
            return;
        }
        if (scan_is_newline(c))
            return;
        if (c == '\\' && s->i + 1 < s->n) {
            s->i++;
            if (scan_is_newline((unsigned char)s->t[s->i])) {
                scan_newline(s);
                continue;
            }
            if (s->t[s->i] == 'z') { /* \z skips the whitespace that follows, newlines included */
                s->i++;
                while (s->i < s->n && (scan_is_space((unsigned char)s->t[s->i]) ||
                                       scan_is_newline((unsigned char)s->t[s->i]))) {
                    if (scan_is_newline((unsigned char)s->t[s->i]))
                        scan_newline(s);
                    else
                        s->i++;
                }
                continue;
            }
        }
        s->i++;
    }
}

/* At a digit (or a '.' before one): steps past the numeral, its exponent's sign included ("1e-3", "0x1p+4"). */
static void scan_skip_number(scan_state *s) {
    int hex = s->t[s->i] == '0' && s->i + 1 < s->n && (s->t[s->i + 1] == 'x' || s->t[s->i + 1] == 'X');
    while (s->i < s->n) {
        char c = s->t[s->i];
        int expo = hex ? (c == 'p' || c == 'P') : (c == 'e' || c == 'E');
        if (expo && s->i + 1 < s->n && (s->t[s->i + 1] == '+' || s->t[s->i + 1] == '-'))
            s->i += 2;
        else if (scan_is_name_char((unsigned char)c) || c == '.')
            s->i++;
        else
            return;
    }
}

/* At '<' after a name: whether an attribute <const> or <close> starts here (then steps past it). */
static int scan_attribute(scan_state *s) {
    scan_state look = *s;
    look.i++;
    for (int part = 0; part < 3; part++) { /* blanks, the attribute's name, blanks */
        if (part == 1) {
            size_t start = look.i;
            while (look.i < look.n && scan_is_name_char((unsigned char)look.t[look.i]))
                look.i++;
            size_t len = look.i - start;
            if (len != 5 || (memcmp(look.t + start, "const", 5) != 0 && memcmp(look.t + start, "close", 5) != 0))
                return 0;
            continue;
        }
        while (look.i < look.n && (scan_is_space((unsigned char)look.t[look.i]) ||
                                   scan_is_newline((unsigned char)look.t[look.i]))) {
            if (scan_is_newline((unsigned char)look.t[look.i]))
                scan_newline(&look);
            else
                look.i++;
        }
    }
    if (look.i >= look.n || look.t[look.i] != '>')
        return 0;
    look.i++;
    *s = look;
    return 1;
}

int mod_scan(const char *text, size_t len, const char **why) {
    scan_state s = {text, len, 0, 1};
    int after_name = 0; /* the last token was a name: a '<' may open an attribute (local x <const>) */
    *why = NULL;
    while (s.i < s.n) {
        unsigned char c = (unsigned char)s.t[s.i];
        unsigned char next = s.i + 1 < s.n ? (unsigned char)s.t[s.i + 1] : 0;
        if (scan_is_newline(c)) {
            scan_newline(&s);
            continue;
        }
        if (scan_is_space(c)) {
            s.i++;
            continue;
        }
        if (c == '-' && next == '-') { /* a comment: long if a long bracket follows, else to the line's end */
            s.i += 2;
            int level = s.i < s.n && s.t[s.i] == '[' ? scan_long_open(&s) : -1;
            if (level >= 0)
                scan_skip_long(&s, level);
            else
                while (s.i < s.n && !scan_is_newline((unsigned char)s.t[s.i]))
                    s.i++;
            continue;
        }
        int was_name = after_name;
        after_name = 0;
        if (c == '[' && scan_long_open(&s) >= 0) {
            scan_skip_long(&s, scan_long_open(&s));
        } else if (c == '"' || c == '\'') {
            scan_skip_string(&s);
        } else if (scan_is_name_start(c)) {
            size_t start = s.i;
            while (s.i < s.n && scan_is_name_char((unsigned char)s.t[s.i]))
                s.i++;
            after_name = 1;
            for (const scan_rule *k = scan_keywords; k->word; k++)
                if (strlen(k->word) == s.i - start && memcmp(k->word, s.t + start, s.i - start) == 0) {
                    *why = k->why;
                    return s.line;
                }
        } else if ((c >= '0' && c <= '9') || (c == '.' && next >= '0' && next <= '9')) {
            scan_skip_number(&s);
        } else if (c == '=' && next == '=') {
            *why = scan_eq;
            return s.line;
        } else if (c == '~' && next == '=') {
            *why = scan_ne;
            return s.line;
        } else if (c == '<' && next == '<') { /* a shift, not a comparison */
            s.i += 2;
        } else if (c == '>' && next == '>') {
            s.i += 2;
        } else if (c == '<' && next == '=') {
            *why = scan_le;
            return s.line;
        } else if (c == '>' && next == '=') {
            *why = scan_ge;
            return s.line;
        } else if (c == '<') {
            if (!(was_name && scan_attribute(&s))) {
                *why = scan_lt;
                return s.line;
            }
        } else if (c == '>') {
            *why = scan_gt;
            return s.line;
        } else {
            s.i++;
        }
    }
    return 0;
}
